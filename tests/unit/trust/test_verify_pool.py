"""A large signed root is verified by a helper process while it is read (tooldir._internal.
verify_pool): the verdicts are exactly those of in-process verification, a bad signature is still
refused, and a helper that fails leaves everything to the in-process path."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from toolkit import make_tool, project_tools
from toolkit import scan as scan_package_folder
from trustkit import ssh_keypair, ssh_sign, write_lock

from tooldir import signatures
from tooldir.model import Status
from tooldir.policy import KeysPolicy, Policy, ProjectSourcePolicy, SourcesPolicy
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import Snapshot
from tooldir.trust import keys, verify_pool
from tooldir.trust.lockfile import LOCK, MINISIG, render_lock

N = 6


@pytest.fixture
def signed_project(tmp_path: Path) -> tuple[Path, str]:
    """N project tools, each locked and signed by one minisign key; the key's public line."""
    project = tmp_path / "project"
    root = project_tools(project)
    key, _secret, public = keys.generate_minisign_key()
    for i in range(N):
        folder = make_tool(root, f"signed_tool_{i}")
        lock = render_lock(folder.name, 1, None, scan_package_folder(folder).files)
        (folder / LOCK).write_bytes(lock)
        (folder / MINISIG).write_bytes(keys.minisign_sign(key, lock, f"tool:{folder.name}\tversion:1"))
    return project, public.splitlines()[1]


def load(project: Path, public: str, state: Path, revoked: tuple[str, ...] = ()) -> Snapshot:
    policy = Policy(
        sources=SourcesPolicy(project=ProjectSourcePolicy(require=("signature",))),
        keys=KeysPolicy(minisign=(public,), revoked=revoked),
    )
    return Loader(make_config(project=project, user_dirs=[], policy=policy, state_dir=state, read_only=True)).load()


def verdicts(snap: Snapshot) -> list[tuple[str, Status, str, tuple[str, ...]]]:
    return [(t.name, t.status, t.trust.method, tuple(sorted(d.code for d in t.diagnostics))) for t in snap.tools]


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the verifications done in this process."""
    calls = [0]
    verify = signatures._verify_minisign

    def counted(*args: object) -> str | None:
        calls[0] += 1
        return verify(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(signatures, "_verify_minisign", counted)
    return calls


@pytest.mark.usefixtures("patient")
def test_a_large_signed_root_is_verified_by_the_helper_with_the_in_process_verdicts(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N + 1)
    alone = load(project, public, tmp_path / "s1")
    assert in_process[0] == N
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    in_process[0] = 0
    helped = load(project, public, tmp_path / "s2")
    assert in_process[0] == 0
    assert verdicts(helped) == verdicts(alone)
    assert {t.status for t in helped.tools} == {Status.ACTIVE}


@pytest.mark.usefixtures("patient")
def test_a_tampered_lock_or_comment_is_still_refused_when_the_helper_verifies(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    root = project / ".tooldir" / "tools"
    sig = root / "signed_tool_1" / MINISIG
    lines = sig.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b"version:1", b"version:9")  # the trusted comment, not its signature
    sig.write_bytes(b"\n".join(lines))
    lock = root / "signed_tool_2" / LOCK
    lock.write_bytes(lock.read_bytes() + b"\n")  # the lock no longer matches its signature
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    snap = load(project, public, tmp_path / "s")
    # the helper refuses both; only those two are verified here again, for the exact reason
    assert in_process[0] == 2
    status = {t.name: (t.status, {d.code for d in t.diagnostics}) for t in snap.tools}
    assert status.pop("signed_tool_1")[1] >= {"bad-signature"}
    assert status.pop("signed_tool_2")[1] >= {"bad-signature"}
    assert {s for s, _ in status.values()} == {Status.ACTIVE}


def test_a_helper_that_cannot_start_leaves_the_verification_to_this_process(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))  # what start_helper runs
    snap = load(project, public, tmp_path / "s")
    assert in_process[0] == N
    assert {t.status for t in snap.tools} == {Status.ACTIVE}


def test_a_helper_answer_out_of_order_is_not_trusted(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    # a helper that answers "valid" for index 1 first: the whole batch is discarded
    monkeypatch.setattr(
        verify_pool,
        "_BOOT",
        "import sys, struct; sys.stdin.buffer.read(); "
        "sys.stdout.buffer.write(b''.join(struct.pack('>IB', i, 0) for i in [1, 0, 2, 3, 4, 5]))",
    )
    snap = load(project, public, tmp_path / "s")
    assert in_process[0] == N
    assert {t.status for t in snap.tools} == {Status.ACTIVE}


def test_a_revoked_key_is_not_verified_and_stays_refused(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    snap = load(project, public, tmp_path / "s", revoked=(public,))
    assert in_process[0] == 0
    assert {t.status for t in snap.tools} == {Status.REJECTED}
    assert all("revoked-key" in {d.code for d in t.diagnostics} for t in snap.tools)


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process waits for the helper's answers instead of verifying any itself."""
    monkeypatch.setattr(verify_pool, "STEAL_ABOVE", 1 << 30)
    monkeypatch.setattr(verify_pool, "_WAIT", 60.0)


@pytest.fixture
def stolen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many verifications each prefetch's close did in this process (``SignaturePrefetch.stolen``)."""
    counts: list[int] = []
    close = verify_pool.SignaturePrefetch.close

    def spied(self: verify_pool.SignaturePrefetch) -> int:
        answered = close(self)
        counts.append(self.stolen)
        return answered

    monkeypatch.setattr(verify_pool.SignaturePrefetch, "close", spied)
    return counts


@pytest.fixture
def in_process_ssh(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the SSH verifications done in this process."""
    calls = [0]
    verify = signatures._verify_sshsig

    def counted(*args: object) -> str | None:
        calls[0] += 1
        return verify(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(signatures, "_verify_sshsig", counted)
    return calls


def ssh_signed_project(tmp_path: Path) -> tuple[Path, Path]:
    """N project tools locked and signed with ssh-keygen; the allowed_signers file trusting the key."""
    project = tmp_path / "ssh-project"
    root = project_tools(project)
    ssh = ssh_keypair(tmp_path / "ssh")
    for i in range(N):
        ssh_sign(ssh, write_lock(make_tool(root, f"ssh_tool_{i}")))
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"alice@example.com {ssh.public_line}\n")
    return project, signers


def load_ssh(project: Path, signers: Path, state: Path) -> Snapshot:
    policy = Policy(
        sources=SourcesPolicy(project=ProjectSourcePolicy(require=("signature",))),
        keys=KeysPolicy(allowed_signers=str(signers)),
    )
    return Loader(make_config(project=project, user_dirs=[], policy=policy, state_dir=state, read_only=True)).load()


@pytest.mark.usefixtures("patient")
def test_ssh_signatures_of_a_large_root_are_verified_by_the_helper_with_the_in_process_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process_ssh: list[int]
) -> None:
    project, signers = ssh_signed_project(tmp_path)
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N + 1)
    alone = load_ssh(project, signers, tmp_path / "s1")
    assert in_process_ssh[0] == N
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    in_process_ssh[0] = 0
    helped = load_ssh(project, signers, tmp_path / "s2")
    assert in_process_ssh[0] == 0
    assert verdicts(helped) == verdicts(alone)
    assert {t.status for t in helped.tools} == {Status.ACTIVE}


@pytest.mark.usefixtures("patient")
def test_a_tampered_ssh_signed_lock_is_still_refused_when_the_helper_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process_ssh: list[int]
) -> None:
    project, signers = ssh_signed_project(tmp_path)
    lock = project / ".tooldir" / "tools" / "ssh_tool_3" / LOCK
    lock.write_bytes(lock.read_bytes() + b"\n")
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    snap = load_ssh(project, signers, tmp_path / "s")
    # the helper says "not valid"; only that one is verified here again, for the exact reason
    assert in_process_ssh[0] == 1
    status = {t.name: (t.status, {d.code for d in t.diagnostics}) for t in snap.tools}
    assert status.pop("ssh_tool_3") == (Status.REJECTED, {"bad-signature"})
    assert {s for s, _ in status.values()} == {Status.ACTIVE}


def test_this_process_verifies_the_last_signatures_itself_while_the_helper_is_behind(
    signed_project: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    in_process: list[int],
    stolen: list[int],
) -> None:
    project, public = signed_project
    root = project / ".tooldir" / "tools"
    lock = root / f"signed_tool_{N - 1}" / LOCK  # the last one offered: verified here
    lock.write_bytes(lock.read_bytes() + b"\n")
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    # a helper that reads everything and then hangs: waited for once, briefly; this process does it all
    monkeypatch.setattr(verify_pool, "_BOOT", "import sys, time; sys.stdin.buffer.read(); time.sleep(3600)")
    snap = load(project, public, tmp_path / "s")
    assert stolen == [N]
    assert in_process[0] == N
    status = {t.name: (t.status, {d.code for d in t.diagnostics}) for t in snap.tools}
    assert status.pop(f"signed_tool_{N - 1}")[1] >= {"bad-signature"}
    assert {s for s, _ in status.values()} == {Status.ACTIVE}


def test_work_is_split_between_the_helper_and_this_process_with_the_same_verdicts(
    signed_project: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    in_process: list[int],
    stolen: list[int],
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N + 1)
    alone = load(project, public, tmp_path / "s1")
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    monkeypatch.setattr(verify_pool, "STEAL_ABOVE", N - 2)  # steal two, then wait for the helper
    monkeypatch.setattr(verify_pool, "_WAIT", 60.0)
    # a helper that answers the first two frames honestly and stops
    monkeypatch.setattr(
        verify_pool,
        "_BOOT",
        verify_pool._BOOT.replace(
            "from tooldir.trust.verify_worker import main; sys.exit(main())",
            "import struct; from tooldir.trust import verify_worker as w; data = sys.stdin.buffer.read(); "
            "frames = []; pos = 0\n"
            "while pos < len(data):\n"
            " (n,) = struct.unpack_from('>I', data, pos); frames.append(data[pos + 4 : pos + 4 + n]); pos += 4 + n\n"
            "sys.stdout.buffer.write(b''.join(w.verify_frame(f) for f in frames[:2]))",
        ),
    )
    in_process[0] = 0
    helped = load(project, public, tmp_path / "s2")
    assert verdicts(helped) == verdicts(alone)
    assert stolen == [N - 2]  # the last two at once, the two left after the helper stopped
    assert in_process[0] == N - 2


def test_a_helper_that_dies_midway_leaves_the_rest_to_this_process(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    monkeypatch.setattr(verify_pool, "_BOOT", "import sys; sys.stdin.buffer.read(10); sys.exit(3)")
    snap = load(project, public, tmp_path / "s")
    assert in_process[0] == N
    assert {t.status for t in snap.tools} == {Status.ACTIVE}


def test_no_helper_starts_for_a_source_that_does_not_accept_signatures(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    started: list[object] = []
    monkeypatch.setattr(verify_pool.SignaturePrefetch, "start", started.append)
    policy = Policy(
        sources=SourcesPolicy(project=ProjectSourcePolicy(require=("approval",))), keys=KeysPolicy(minisign=(public,))
    )
    config = make_config(project=project, user_dirs=[], policy=policy, state_dir=tmp_path / "s", read_only=True)
    snap = Loader(config).load()
    assert started == []
    assert in_process[0] == 0
    assert {t.status for t in snap.tools} == {Status.PENDING}


def test_the_helper_answers_a_garbled_ssh_frame_not_valid_and_refuses_an_unknown_kind() -> None:
    from tooldir.trust import verify_worker

    garbled = b"S" + (7).to_bytes(4, "big") + b"garbage" + b"the lock"
    assert verify_worker.verify_frame((5).to_bytes(4, "big") + garbled) == (5).to_bytes(4, "big") + b"\x03"
    with pytest.raises(ValueError, match="malformed"):
        verify_worker.verify_frame((5).to_bytes(4, "big") + b"X" + bytes(300))


def _minisign_frame(index: int, sig: signatures.MinisignSignature, public: bytes, lock: bytes) -> bytes:
    """The helper's frame for one minisign check, as the prefetch builds it."""
    prehash = hashlib.blake2b(lock, digest_size=64).digest()
    body = b"M" + public + sig.signature + prehash + sig.global_signature + sig.trusted_comment
    return index.to_bytes(4, "big") + body


def test_the_helper_answers_valid_only_for_what_in_process_verification_accepts_and_defers_the_rest() -> None:
    from tooldir.trust import verify_worker

    key, _secret, public = keys.generate_minisign_key()
    pub = signatures.parse_minisign_public_key(public)
    lock = b'{"a lock": 1}\n'
    good = signatures.parse_minisig(keys.minisign_sign(key, lock, "tool:x\tversion:1"))
    assert verify_worker.verify_frame(_minisign_frame(4, good, pub.public, lock)) == b"\0\0\0\4\0"
    # tampered lock, tampered trusted comment: not valid (1, 2 or 3: the parent verifies it for the reason)
    assert verify_worker.verify_frame(_minisign_frame(4, good, pub.public, lock + b" "))[4] != 0
    forged_comment = signatures.MinisignSignature(
        good.algorithm, good.key_id, good.signature, b"tool:x\tversion:9", good.global_signature
    )
    assert verify_worker.verify_frame(_minisign_frame(4, forged_comment, pub.public, lock))[4] != 0


def test_a_signature_the_helper_library_refuses_but_cryptography_accepts_gets_the_in_process_verdict() -> None:
    """libsodium also refuses small-order keys (here the identity point, for which any message
    "verifies" under OpenSSL's check): the helper answers 3, so the parent's own verification with
    ``cryptography`` decides, and the verdict never depends on which process verified."""
    from tooldir.trust import verify_worker

    identity = b"\x01" + bytes(31)
    weak = signatures.MinisignPublicKey(b"\x11" * 8, identity)
    sig = signatures.MinisignSignature(b"ED", weak.key_id, identity + bytes(32), b"tool:x", identity + bytes(32))
    assert signatures.verify_minisign(sig, weak, b"any lock") is None
    assert verify_worker.verify_frame(_minisign_frame(0, sig, weak.public, b"any lock")) == bytes(4) + b"\3"


def test_without_pynacl_the_helper_verifies_with_cryptography_and_names_the_failed_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tooldir.trust import verify_worker

    monkeypatch.setitem(sys.modules, "nacl.bindings", None)  # import nacl.bindings raises ImportError
    monkeypatch.setattr(verify_worker, "_verifier", [])
    verify = verify_worker._minisign_verifier()
    key, _secret, public = keys.generate_minisign_key()
    pub = signatures.parse_minisign_public_key(public).public
    lock = b'{"a lock": 1}\n'
    sig = signatures.parse_minisig(keys.minisign_sign(key, lock, "tool:x\tversion:1"))
    prehash = hashlib.blake2b(lock, digest_size=64).digest()
    assert verify(pub, sig.signature, prehash, sig.global_signature, sig.trusted_comment) == 0
    assert verify(pub, sig.signature, prehash[::-1], sig.global_signature, sig.trusted_comment) == 1
    assert verify(pub, sig.signature, prehash, sig.global_signature, b"tool:x\tversion:9") == 2


_LIAR = (
    "import sys, struct\n"
    "data = sys.stdin.buffer.read(); pos = 0; out = []\n"
    "while pos < len(data):\n"
    " (n,) = struct.unpack_from('>I', data, pos); (i,) = struct.unpack_from('>I', data, pos + 4)\n"
    " out.append(struct.pack('>IB', i, {code})); pos += 4 + n\n"
    "sys.stdout.buffer.write(b''.join(out))"
)


def test_a_helper_that_answers_valid_to_everything_cannot_make_a_changed_or_replayed_package_trusted(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer only says "this signature verifies": the key must still be trusted and not
    revoked, the lock must name the tool, list exactly its files, not be expired or rolled back."""
    project, public = signed_project
    root = project / ".tooldir" / "tools"
    (root / "signed_tool_1" / "run.py").write_text("print('changed after signing')\n")
    for name in (LOCK, MINISIG):  # tool 3 carries tool 2's signed lock
        (root / "signed_tool_3" / name).write_bytes((root / "signed_tool_2" / name).read_bytes())
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    monkeypatch.setattr(verify_pool, "_BOOT", _LIAR.format(code=0))
    snap = load(project, public, tmp_path / "s")
    status = {t.name: (t.status, {d.code for d in t.diagnostics}) for t in snap.tools}
    assert status.pop("signed_tool_1") == (Status.REJECTED, {"hash-mismatch"})
    assert status.pop("signed_tool_3") == (Status.REJECTED, {"bad-signature"})  # the lock names signed_tool_2
    assert {s for s, _ in status.values()} == {Status.ACTIVE}


def test_a_helper_answer_with_a_code_it_never_gives_discards_every_answer(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    monkeypatch.setattr(verify_pool, "_BOOT", _LIAR.format(code=7))
    snap = load(project, public, tmp_path / "s")
    assert in_process[0] == N
    assert {t.status for t in snap.tools} == {Status.ACTIVE}
