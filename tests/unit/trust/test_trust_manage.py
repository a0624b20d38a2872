"""A host approves, revokes, locks, signs and explains a package through the public API
(``tooldir.approve`` ... ``tooldir.explain``); the CLI calls exactly these."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from toolkit import make_tool, project_tools

import tooldir
import tooldir.snapshot.loader
from tooldir import LoadConfig, PackageError, Source, Status
from tooldir.trust.keys import generate_minisign_key


def _config(tmp_path: Path, project: Path, policy: tooldir.Policy | None = None) -> LoadConfig:
    return tooldir.make_config(project=project, user_dirs=[], policy=policy, state_dir=tmp_path / "state")


def _status(config: LoadConfig, name: str) -> tuple[Status, str]:
    record = tooldir.snapshot.loader.Loader(config).load().by_name[name]
    return record.status, record.trust.method


def test_approve_by_tool_name_makes_the_next_load_active_and_revoke_takes_it_back(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = _config(tmp_path, project)
    assert _status(config, "alpha") == (Status.PENDING, "unverified")
    approval = tooldir.approve(config, "alpha")
    assert isinstance(approval, tooldir.Approval)
    assert (approval.path, approval.name) == (str(folder.resolve()), "alpha")
    assert _status(config, "alpha") == (Status.ACTIVE, "approved")
    removed = tooldir.revoke(config, "alpha")
    assert [a.digest for a in removed] == [approval.digest]
    assert _status(config, "alpha") == (Status.PENDING, "unverified")
    assert tooldir.revoke(config, "alpha") == ()


def test_approve_refuses_a_missing_an_invalid_and_a_changed_package_and_records_nothing(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    make_tool(project_tools(project), "broken", raw_manifest=b"{not json")
    folder = make_tool(project_tools(project), "alpha")
    config = _config(tmp_path, project)
    with pytest.raises(PackageError) as missing:
        tooldir.approve(config, "nope")
    assert missing.value.reason == "not-found"
    with pytest.raises(PackageError) as invalid:
        tooldir.approve(config, "broken")
    assert invalid.value.reason == "invalid"
    assert invalid.value.found
    reviewed = tooldir.review(config, folder)
    (folder / "run.py").write_text("print('swapped after the review')\n")
    with pytest.raises(PackageError) as changed:
        tooldir.approve(config, folder, digest=reviewed.digest)
    assert changed.value.reason == "changed"
    assert _status(config, "alpha")[0] is Status.PENDING


def test_a_package_the_policy_rejects_cannot_be_approved(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    make_tool(project_tools(project), "shell", risk="exec")  # above the project limit (write)
    with pytest.raises(PackageError) as refused:
        tooldir.approve(_config(tmp_path, project), "shell")
    assert refused.value.reason == "rejected"
    assert {d.code for d in refused.value.found} >= {"risk-not-allowed"}


def test_explain_gives_the_loaders_verdict_with_its_steps(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = _config(tmp_path, project)
    pending = tooldir.explain(config, folder)
    assert isinstance(pending, tooldir.Verdict)
    assert (pending.status, pending.trust.method) == _status(config, "alpha")
    assert pending.package.root.source is Source.PROJECT
    assert [s["step"] for s in pending.steps][:4] == ["source", "files", "manifest", "risk"]
    assert pending.steps[-1] == {"step": "approval", "ok": None, "detail": pending.steps[-1]["detail"]}
    assert "not-approved" in {d.code for d in pending.diagnostics}
    tooldir.approve(config, folder)
    approved = tooldir.explain(config, "alpha")
    assert (approved.status, approved.trust.method) == (Status.ACTIVE, "approved") == _status(config, "alpha")
    assert approved.steps[-1]["ok"] is True


def test_lock_sign_and_explain_a_signed_package(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    secret, secret_text, public_text = generate_minisign_key()
    key_file = tmp_path / "team.key"
    key_file.write_text(secret_text)
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(f'[keys]\nminisign = ["{public_text.splitlines()[1]}"]\n')
    config = _config(tmp_path, project, tooldir.load_policy(policy_file)[0])

    first = tooldir.lock(config, folder)
    assert (first.name, first.version, first.path) == ("alpha", 1, folder.resolve() / "tool.lock")
    assert set(first.files) == {"schema.json", "run.py"}
    assert tooldir.lock(config, folder).version == 1  # unchanged files keep the version
    with pytest.raises(PackageError) as unsigned_stale:
        (folder / "run.py").write_text("print('v2')\n")
        tooldir.sign(config, folder, key=key_file)
    assert unsigned_stale.value.reason == "stale-lock"
    assert tooldir.lock(config, folder).version == 2  # changed files: previous + 1

    signed = tooldir.sign(config, folder, key=key_file)
    assert (signed.name, signed.version, signed.key_id) == ("alpha", 2, secret.public_key().id_hex)
    verdict = tooldir.explain(config, folder)
    assert verdict.status is Status.ACTIVE
    assert verdict.trust.method.startswith("signed:")
    assert (verdict.status, verdict.trust.method) == _status(config, "alpha")
    steps = {str(s["step"]): s["ok"] for s in verdict.steps}
    assert steps["minisign key"] is True and steps["rollback"] is True  # the signature stage's own steps
    assert verdict.key == verdict.trust.signer


def test_lock_refuses_a_past_expiry_and_sign_refuses_a_package_without_a_lock(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "alpha")
    config = _config(tmp_path, project)
    with pytest.raises(ValueError, match="past"):
        tooldir.lock(config, folder, expires=datetime.now(UTC) - timedelta(days=1))
    _secret, secret_text, _public = generate_minisign_key()
    (tmp_path / "k").write_text(secret_text)
    with pytest.raises(PackageError) as no_lock:
        tooldir.sign(config, folder, key=tmp_path / "k")
    assert no_lock.value.reason == "no-lock"
    with pytest.raises(tooldir.ConfigError):
        tooldir.sign(config, folder, key=tmp_path / "missing.key")
    assert not (folder / "tool.lock").exists()
