"""A large signed root is verified by a helper process while it is read (tooldir._internal.
verify_pool): the verdicts are exactly those of in-process verification, a bad signature is still
refused, and a helper that fails leaves everything to the in-process path."""

from __future__ import annotations

from pathlib import Path

import pytest
from toolkit import make_tool, project_tools
from toolkit import scan as scan_package_folder

from tooldir import keys, signatures
from tooldir._internal import verify_pool
from tooldir.loader import Loader, make_config
from tooldir.lockfile import LOCK, MINISIG, render_lock
from tooldir.model import Status
from tooldir.policy import KeysPolicy, Policy, ProjectSourcePolicy, SourcesPolicy
from tooldir.snapshot import Snapshot

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
    assert in_process[0] == 0
    status = {t.name: (t.status, {d.code for d in t.diagnostics}) for t in snap.tools}
    assert status.pop("signed_tool_1")[1] >= {"bad-signature"}
    assert status.pop("signed_tool_2")[1] >= {"bad-signature"}
    assert {s for s, _ in status.values()} == {Status.ACTIVE}


def test_a_helper_that_cannot_start_leaves_the_verification_to_this_process(
    signed_project: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_process: list[int]
) -> None:
    project, public = signed_project
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", N)
    monkeypatch.setattr(verify_pool.sys, "executable", str(tmp_path / "no-such-python"))
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
