"""Cases that fork (tooldir._internal.forkpool): a large cold root is read by this process and
forked workers, the snapshot is exactly the sequential one, a worker that dies, hangs or sends
garbage only leaves its share to this process, nothing forks unless asked, above the threshold and
with one thread, and no worker outlives the load.

Not collected by the suite itself (the file name does not start with ``test_``): a fork is refused,
by design, in a process where other threads run, and pytest's own process may hold native threads
that earlier tests started (BLAS, tokenizers). ``test_parallel_read.py`` runs this file in a new
interpreter (``python -m pytest tests/unit/parallel/forked_cases.py`` runs it by hand)."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import join_native, native_threads
from toolkit import make_tool, manifest, project_tools
from toolkit import scan as scan_package_folder

from tooldir import signatures
from tooldir._internal import forkpool
from tooldir.model import Status
from tooldir.policy import KeysPolicy, Limits, Policy, ProjectSourcePolicy, SourcesPolicy
from tooldir.read.index import decode, header_for, index_path
from tooldir.snapshot.loader import Loader, make_config, user_root
from tooldir.snapshot.store import Snapshot
from tooldir.trust import keys, verify_pool
from tooldir.trust.lockfile import LOCK, MINISIG, render_lock

PARENT = os.getpid()


class Forks:
    """The pids of the workers each fork_map started (spied on ``_Pool.start``)."""

    def __init__(self) -> None:
        self.pids: list[int] = []


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> Forks:
    spy = Forks()
    start = forkpool._Pool.start

    def started(self: Any, first: int, end: int) -> Any:
        worker = start(self, first, end)
        if worker is not None:
            spy.pids.append(worker.pid)
        return worker

    monkeypatch.setattr(forkpool._Pool, "start", started)
    why = forkpool.can_fork()
    assert why is None, f"this test needs a process with one thread, not {why}: {native_threads()}"
    return spy


def _reaped(pid: int) -> bool:
    """The process is gone and waited for (not a zombie, not our child any more)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def _slow_square(x: int) -> tuple[int, int]:
    time.sleep(0.002)  # long enough that the worker gets a share before this process takes it all
    return x * x, os.getpid()


def _is_pair(value: object) -> bool:
    return type(value) is tuple and len(value) == 2


def _map(work: Callable[[int], tuple[int, int]], n: int = 60, **kw: Any) -> list[tuple[int, int]]:
    return forkpool.fork_map(list(range(n)), work, processes=2, accept=_is_pair, chunk=2, **kw)


# -- the pool ------------------------------------------------------------------------------------


def test_a_forked_map_gives_the_results_of_a_plain_map_in_item_order(forks: Forks) -> None:
    seen: list[int] = []
    out = _map(_slow_square, on_result=lambda i, _r: seen.append(i))
    assert [r[0] for r in out] == [x * x for x in range(60)]
    assert {pid for _, pid in out} == {PARENT, *forks.pids}  # both processes did a share
    assert len(forks.pids) == 1
    assert sorted(seen) == list(range(60))  # on_result once per item
    assert all(_reaped(pid) for pid in forks.pids)


def test_a_worker_killed_midway_leaves_its_share_to_this_process(
    forks: Forks, caplog: pytest.LogCaptureFixture
) -> None:
    def dies_in_worker(x: int) -> tuple[int, int]:
        if os.getpid() != PARENT and x >= 10:
            os.kill(os.getpid(), signal.SIGKILL)
        return _slow_square(x)

    caplog.set_level(logging.WARNING, logger="tooldir.parallel")
    out = _map(dies_in_worker)
    assert [r[0] for r in out] == [x * x for x in range(60)]
    assert [r.levelno for r in caplog.records if r.name == "tooldir.parallel"] == [logging.WARNING]
    assert all(_reaped(pid) for pid in forks.pids)


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(lambda _value: b"\x80\x05not a pickle", id="undecodable"),
        pytest.param(lambda value: forkpool.pickle.dumps([None] * len(value)), id="wrong-shape"),
        pytest.param(lambda value: forkpool.pickle.dumps(value[:-1]), id="too-few"),
    ],
)
def test_a_worker_sending_a_corrupt_frame_is_ignored_and_its_share_read_here(
    forks: Forks, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, garbage: Callable[[Any], bytes]
) -> None:
    real = forkpool.dumps
    monkeypatch.setattr(
        forkpool, "dumps", lambda value, *a: garbage(value) if os.getpid() != PARENT else real(value, *a)
    )
    caplog.set_level(logging.WARNING, logger="tooldir.parallel")
    out = _map(_slow_square)
    assert out == [(x * x, PARENT) for x in range(60)]  # nothing of the worker's was taken
    assert [r.levelno for r in caplog.records if r.name == "tooldir.parallel"] == [logging.WARNING]
    assert all(_reaped(pid) for pid in forks.pids)


def test_a_malformed_frame_header_is_ignored_and_its_share_read_here(
    forks: Forks, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = forkpool.dumps
    # a payload that claims to be longer than it is: the next frame's header is read as garbage
    monkeypatch.setattr(
        forkpool, "dumps", lambda value, *a: real(value, *a)[:-3] if os.getpid() != PARENT else real(value, *a)
    )
    caplog.set_level(logging.WARNING, logger="tooldir.parallel")
    out = _map(_slow_square)
    assert [r[0] for r in out] == [x * x for x in range(60)]
    assert all(pid == PARENT for _, pid in out[2:])  # at most the first frame decodes (then refused)
    assert all(_reaped(pid) for pid in forks.pids)


def test_a_hung_worker_never_makes_this_process_wait_and_is_killed(forks: Forks) -> None:
    def hangs_in_worker(x: int) -> tuple[int, int]:
        if os.getpid() != PARENT:
            time.sleep(3600)
        return x * x, os.getpid()

    started = time.monotonic()
    out = _map(hangs_in_worker, n=200)
    assert time.monotonic() - started < 30
    assert out == [(x * x, PARENT) for x in range(200)]
    assert len(forks.pids) == 1 and all(_reaped(pid) for pid in forks.pids)


def test_an_interrupt_in_this_process_leaves_no_worker_behind(forks: Forks) -> None:
    def interrupted(x: int) -> tuple[int, int]:
        if os.getpid() == PARENT and x == 50:
            raise KeyboardInterrupt
        return _slow_square(x)

    with pytest.raises(KeyboardInterrupt):
        _map(interrupted)
    assert len(forks.pids) == 1 and all(_reaped(pid) for pid in forks.pids)


def test_nothing_forks_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[int] = []
    monkeypatch.setattr(forkpool._Pool, "start", lambda *_: forked.append(1))
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert forkpool.can_fork() is not None
        out = _map(_slow_square, n=10)
    finally:
        stop.set()
        join_native(thread)  # gone for the kernel too, before the next case's fork check
    assert out == [(x * x, PARENT) for x in range(10)]
    assert forked == []


def test_nothing_forks_for_one_process_or_below_the_threshold() -> None:
    assert forkpool.processes_for(999, workers=2, min_items=1000) == 1
    assert forkpool.processes_for(5000, workers=1, min_items=1000) == 1
    assert forkpool.processes_for(1000, workers=2, min_items=1000) == min(2, forkpool.cpu_count())
    assert forkpool.processes_for(1, workers=8, min_items=0) == 1


# -- the loader ----------------------------------------------------------------------------------


@pytest.fixture
def mixed_root(tmp_path: Path) -> Path:
    """Good packages with broken ones between them: invalid JSON, duplicate keys, an oversized
    file, a symlink in a package, a symlinked package, a stray file, a folder named unlike its tool, a BOM."""
    root = tmp_path / "tools"
    root.mkdir()
    for i in range(24):
        make_tool(root, f"tool_{i:02d}", description=f"Tool number {i}: reads things.")
    make_tool(root, "tool_03x", raw_manifest=b'{"name": "bad_json",')
    make_tool(
        root, "tool_07x", raw_manifest=json.dumps(manifest("dup")).replace('"risk"', '"name": "x", "risk"', 1).encode()
    )
    make_tool(root, "tool_11x", extra_files={"big.bin": b"x" * 5000})
    linked = make_tool(root, "tool_13x")
    (linked / "link.py").symlink_to(linked / "run.py")
    (root / "tool_15x").symlink_to(root / "tool_15")
    (root / "stray.txt").write_text("not a package")
    make_tool(root, "tool_17x", raw_manifest=json.dumps(manifest("tool_17")).encode())  # another folder's name
    make_tool(root, "tool_19x", raw_manifest=b"\xef\xbb\xbf{}")  # a BOM
    return root


def _policy() -> Policy:
    return Policy(limits=Limits(max_file_bytes=4096))


def _load(root: Path, state: Path, *, workers: int, index: bool = True, project: Path | None = None) -> Snapshot:
    config = make_config(
        project=project, user_dirs=[root], policy=_policy(), state_dir=state, index=index, workers=workers
    )
    return Loader(replace(config, parallel_min=2)).load()


def _same(a: Snapshot, b: Snapshot) -> None:
    assert a.id == b.id
    assert a.to_json() == b.to_json()
    assert [d.to_json() for d in a.diagnostics] == [d.to_json() for d in b.diagnostics]


@pytest.mark.parametrize("index", [True, False], ids=["index", "no-index"])
def test_a_parallel_load_gives_the_sequential_snapshot_broken_packages_included(
    forks: Forks, mixed_root: Path, tmp_path: Path, index: bool
) -> None:
    alone = _load(mixed_root, tmp_path / "s1", workers=1, index=index)
    assert forks.pids == []
    shared = _load(mixed_root, tmp_path / "s2", workers=2, index=index)
    assert len(forks.pids) == 1 and all(_reaped(pid) for pid in forks.pids)
    _same(alone, shared)
    codes = {d.code for d in shared.diagnostics}
    assert {"invalid-json", "duplicate-key", "too-large", "symlink", "stray-file", "name-mismatch"} <= codes


def test_a_parallel_load_records_the_same_content_index(forks: Forks, mixed_root: Path, tmp_path: Path) -> None:
    alone = _load(mixed_root, tmp_path / "s1", workers=1)
    shared = _load(mixed_root, tmp_path / "s2", workers=2)
    assert len(forks.pids) == 1
    header = header_for(user_root(mixed_root), _policy())

    def entries(state: Path) -> dict[str, Any]:
        decoded = decode(index_path(state, user_root(mixed_root)).read_bytes(), header)
        assert decoded.problem is None
        return {name: (e.digest, e.stats, e.files, e.kept, e.diagnostics) for name, e in decoded.entries.items()}

    assert entries(tmp_path / "s2") == entries(tmp_path / "s1")
    assert len(entries(tmp_path / "s2")) >= 24
    # and a warm load from the index the parallel load wrote is the same snapshot again
    _same(_load(mixed_root, tmp_path / "s2", workers=2), alone)
    _same(shared, alone)


def test_a_parallel_load_of_a_project_root_gives_the_sequential_verdicts(
    forks: Forks, mixed_root: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    tools = project_tools(project)
    for i in range(12):
        make_tool(tools, f"proj_{i:02d}")
    make_tool(tools, "proj_05x", raw_manifest=b"[1, 2]")
    alone = _load(mixed_root, tmp_path / "s1", workers=1, project=project)
    shared = _load(mixed_root, tmp_path / "s2", workers=2, project=project)
    assert len(forks.pids) == 2  # one per root
    _same(alone, shared)
    status = {t.path.rsplit("/", 1)[-1]: str(t.status) for t in shared.tools if "/project/" in t.path}
    assert status.pop("proj_05x") == "rejected"
    assert set(status.values()) == {"pending"} and len(status) == 12


def test_a_worker_dying_during_a_load_changes_nothing_in_the_snapshot(
    forks: Forks, mixed_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    alone = _load(mixed_root, tmp_path / "s1", workers=1)
    real = forkpool.dumps

    def dies(value: Any, *args: Any) -> bytes:
        if os.getpid() != PARENT:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(value, *args)

    monkeypatch.setattr(forkpool, "dumps", dies)
    put = forkpool._Pool.put

    def slow_put(self: Any, i: int, result: Any) -> None:
        time.sleep(0.005)  # this process is slow: the worker's death is seen before it has read everything
        put(self, i, result)

    monkeypatch.setattr(forkpool._Pool, "put", slow_put)
    caplog.set_level(logging.WARNING, logger="tooldir.parallel")
    _same(_load(mixed_root, tmp_path / "s2", workers=2), alone)
    assert len(forks.pids) == 1 and all(_reaped(pid) for pid in forks.pids)
    assert [r.levelno for r in caplog.records if r.name == "tooldir.parallel"] == [logging.WARNING]


def test_a_loader_never_forks_by_default_or_below_the_threshold(forks: Forks, mixed_root: Path, tmp_path: Path) -> None:
    Loader(make_config(project=None, user_dirs=[mixed_root], state_dir=tmp_path / "s1")).load()
    Loader(make_config(project=None, user_dirs=[mixed_root], state_dir=tmp_path / "s2", workers=2)).load()
    assert forks.pids == []  # 30 packages: far below the default threshold


def test_a_signed_root_read_with_forked_workers_is_verified_by_the_helper_with_the_sequential_verdicts(
    forks: Forks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    tools = project_tools(project)
    key, _secret, public = keys.generate_minisign_key()
    for i in range(8):
        folder = make_tool(tools, f"signed_tool_{i}")
        lock = render_lock(folder.name, 1, None, scan_package_folder(folder).files)
        (folder / LOCK).write_bytes(lock)
        (folder / MINISIG).write_bytes(keys.minisign_sign(key, lock, f"tool:{folder.name}\tversion:1"))
    policy = Policy(
        sources=SourcesPolicy(project=ProjectSourcePolicy(require=("signature",))),
        keys=KeysPolicy(minisign=(public.splitlines()[1],)),
    )
    monkeypatch.setattr(verify_pool, "MIN_PACKAGES", 8)  # the signature helper verifies while reading
    monkeypatch.setattr(verify_pool, "STEAL_ABOVE", 1 << 30)  # this process waits for its answers
    monkeypatch.setattr(verify_pool, "_WAIT", 60.0)
    in_process = [0]
    verify = signatures._verify_minisign

    def counted(*args: object) -> str | None:
        in_process[0] += 1
        return verify(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(signatures, "_verify_minisign", counted)

    def load(state: Path, workers: int) -> Snapshot:
        config = make_config(
            project=project, user_dirs=[], policy=policy, state_dir=state, read_only=True, workers=workers
        )
        return Loader(replace(config, parallel_min=2)).load()

    def verdicts(snap: Snapshot) -> list[tuple[str, Status, str, tuple[str, ...]]]:
        return [(t.name, t.status, t.trust.method, tuple(sorted(d.code for d in t.diagnostics))) for t in snap.tools]

    alone = load(tmp_path / "s1", 1)
    shared = load(tmp_path / "s2", 2)
    assert len(forks.pids) == 1 and all(_reaped(pid) for pid in forks.pids)
    assert in_process[0] == 0  # every signature, also of the packages the worker read, went to the helper
    assert verdicts(shared) == verdicts(alone)
    assert {t.status for t in shared.tools} == {Status.ACTIVE}
