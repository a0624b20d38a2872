"""Worker mechanisms of one cold load, A/B (issue 25 item 5): forkpool, the signature helper, ProcessPoolExecutor.

A load has two worker mechanisms: :mod:`tooldir._internal.forkpool` (forked workers that read,
hash and validate a large root's packages, the parent working from the other end) and
:mod:`tooldir.trust.verify_pool` (one ``python -I`` helper that verifies minisign signatures with
libsodium while the packages are read). This benchmark times whole ``tooldir scan --json``
processes (fresh state each run: a cold load) with the mechanisms swapped for the same work done
another way, everything else as shipped:

map (who reads the packages)
  forkpool        as shipped (``TOOLDIR_WORKERS`` sets the processes, this one included)
  ppe-fork        ``concurrent.futures.ProcessPoolExecutor`` (fork context, one worker per
                  process allowed; this process only collects), chunks of the same size, each
                  chunk's results pickled the way forkpool sends them
  ppe-forkserver  the same with the forkserver context (its server preloads the loader's
                  modules; a worker opens the root by path and rebuilds the reader). Its workers
                  are the server's children, not the command's: their CPU is in no figure here
verify (who checks a signed root's minisign signatures; only for ``--project`` of a signed tree)
  helper          as shipped: the verify_pool helper process
  inworker        in the read itself: whoever reads a package (a forked worker or this process)
                  verifies its signature with the helper's own code (libsodium) and sends the
                  answer with the package; no helper process
  inprocess       no helper: the trust stage verifies every signature in this process (OpenSSL)

    python3 benchmarks/bench_pools.py drive --map ppe-fork --verify inworker -- scan --json ...

runs one such process (``--state-dir FRESH`` becomes a new empty folder);

    python3 benchmarks/bench_pools.py [--quick] [--runs 5] [--workdir DIR]

runs every variant in interleaved rounds against the plain floor (:mod:`benchmarks.floor`) and
the shipped command (``--quick``: 2 rounds), printing min/median/max of wall and CPU (the process and every child it
waited for, from ``wait4``).
"""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: "job": (items, work, pickling table), set before a fork-context pool forks; "shipped": forkpool.fork_map
_STATE: dict[str, Any] = {}


def _chunk(bounds: tuple[int, int]) -> bytes:
    from tooldir._internal import forkpool

    items, work, table = _STATE["job"]
    return forkpool.dumps([work(items[i]) for i in range(*bounds)], table)


def _init_forkserver(spec: tuple[Any, ...]) -> None:
    """In a forkserver worker: open the root by path and rebuild the reader the closure was."""
    from tooldir._internal import forkpool
    from tooldir.read.discover import open_root, scan_package
    from tooldir.read.index import entry_from_candidate, fresh_row
    from tooldir.read.validate import validate_package

    kind, root, policy, limits, names, scanned_ns, euid, plain = spec
    fd, _ = open_root(root)
    assert fd is not None

    def read(name: str) -> Any:
        return validate_package(scan_package(fd, root, name, limits), policy)

    def read_indexed(name: str) -> Any:
        scan = scan_package(fd, root, name, limits)
        candidate = validate_package(scan, policy)
        entry = entry_from_candidate(candidate, scan, scanned_ns, euid)
        return [candidate, None if entry is None else fresh_row(entry)]

    _STATE["job"] = (names, read if kind == "plain" else read_indexed, forkpool.dispatch_table(plain))


def _forkserver_spec(items: Sequence[Any], work: Callable[[Any], Any], plain: Any) -> tuple[Any, ...]:
    cells = dict(zip(work.__code__.co_freevars, [c.cell_contents for c in work.__closure__ or ()], strict=True))
    root = cells["root"]
    if "index" in cells:
        index = cells["index"]
        return ("indexed", root, index.policy, index.limits, list(items), index.scanned_ns, index.header.euid, plain)
    return ("plain", root, cells["policy"], cells["limits"], list(items), 0, 0, plain)


def _ppe_map(context: str) -> Callable[..., list[Any]]:
    def fork_map(
        items: Sequence[Any],
        work: Callable[[Any], Any],
        *,
        processes: int,
        accept: Callable[[object], bool],
        on_result: Callable[[int, Any], None] | None = None,
        chunk: int | None = None,
        plain: Any = (),
    ) -> list[Any]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        from tooldir._internal import forkpool

        n = len(items)
        if processes <= 1 or n < 2:
            return _STATE["shipped"](items, work, processes=1, accept=accept, on_result=on_result, plain=plain)
        size = chunk or max(1, min(32, n // (processes * 8)))
        results: list[Any] = [None] * n
        ctx = multiprocessing.get_context(context)
        if context == "forkserver":
            ctx.set_forkserver_preload(["tooldir.snapshot.loader", "tooldir.read.index", "tooldir._internal.forkpool"])
            pool = ProcessPoolExecutor(processes, ctx, _init_forkserver, (_forkserver_spec(items, work, plain),))
        else:
            _STATE["job"] = (items, work, forkpool.dispatch_table(plain))
            pool = ProcessPoolExecutor(processes, ctx)
        with pool:
            futures = {pool.submit(_chunk, (s, min(s + size, n))): s for s in range(0, n, size)}
            for future in as_completed(futures):
                start = futures[future]
                for k, result in enumerate(pickle.loads(future.result())):  # noqa: S301 - our own child
                    if not accept(result):
                        raise SystemExit("benchmark invalid: a worker sent a result of the wrong shape")
                    results[start + k] = result
                    if on_result is not None:
                        on_result(start + k, result)
        _STATE.pop("job", None)
        return results

    return fork_map


def _install_inworker() -> None:
    """Signatures verified by whoever reads the package; no helper process."""
    import struct

    from tooldir._internal import forkpool
    from tooldir.signatures import MINISIGN_FAILURES
    from tooldir.snapshot import loader
    from tooldir.trust import verify_pool, verify_worker

    current: list[Any] = []
    head = struct.Struct(">I")

    class InWorker(verify_pool.SignaturePrefetch):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self._found: list[tuple[bytes, int]] = []
            current[:] = [self]

        def start(self) -> None:  # no helper
            return

        def _queue(self, digest: bytes, body: bytes, steal: Callable[[], object]) -> None:
            (_, code) = verify_worker._ANSWER.unpack(verify_worker.verify_frame(head.pack(0) + body))
            self._found.append((digest, code))

        def verify(self, contents: Any) -> list[tuple[bytes, int]]:
            self._found = []
            super().offer(contents)
            return self._found

        def offer(self, contents: Any) -> None:  # answered with the package instead
            return

        def close(self) -> int:
            current.clear()
            return 0

    inner = forkpool.fork_map

    def fork_map(items: Any, work: Any, *, accept: Any, on_result: Any = None, **kw: Any) -> list[Any]:
        if not current:
            return inner(items, work, accept=accept, on_result=on_result, **kw)
        prefetch = current[0]
        put = prefetch._cache.verifications.put

        def work2(x: Any) -> tuple[Any, list[tuple[bytes, int]]]:
            r = work(x)
            return r, prefetch.verify((r if not isinstance(r, list) else r[0]).scan.contents)

        def on2(i: int, pair: tuple[Any, list[tuple[bytes, int]]]) -> None:
            for digest, code in pair[1]:
                if code != 3:
                    put(digest, MINISIGN_FAILURES.get(code))
            if on_result is not None:
                on_result(i, pair[0])

        def accept2(pair: object) -> bool:
            return type(pair) is tuple and len(pair) == 2 and accept(pair[0])

        return [r for r, _ in inner(items, work2, accept=accept2, on_result=on2, **kw)]

    forkpool.fork_map = fork_map
    loader.SignaturePrefetch = InWorker  # type: ignore[misc]


def drive(argv: list[str]) -> None:
    """Run the tooldir command line in this process with the chosen mechanisms."""
    split = argv.index("--")
    opts, args = argv[:split], argv[split + 1 :]
    mapping = opts[opts.index("--map") + 1] if "--map" in opts else "forkpool"
    verify = opts[opts.index("--verify") + 1] if "--verify" in opts else "helper"
    if "--state-dir" in args and args[args.index("--state-dir") + 1] == "FRESH":
        args[args.index("--state-dir") + 1] = tempfile.mkdtemp(prefix="state-", dir=os.environ.get("BENCH_STATES"))
    from tooldir._internal import forkpool

    _STATE["shipped"] = forkpool.fork_map
    if mapping != "forkpool":
        forkpool.fork_map = _ppe_map(mapping.removeprefix("ppe-"))
    if verify == "inworker":
        _install_inworker()
    elif verify == "inprocess":
        from tooldir.snapshot import loader

        loader.prefetch_for = lambda packages, keyring: False  # the trust stage verifies in this process
    elif verify != "helper":
        raise SystemExit(f"unknown --verify {verify}")
    sys.argv = ["tooldir", *args]
    from tooldir._cli import run

    run()


# -- the paired rounds ---------------------------------------------------------------------------


def _process(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: pending tools (unsigned project)
        raise SystemExit(f"benchmark invalid: {argv} exited {os.waitstatus_to_exitcode(status)}")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def variants(workdir: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    sys.path.insert(0, str(HERE.parent))
    from benchmarks.bench_scan import tree
    from benchmarks.bench_signed import _policy_file, prepare

    py = sys.executable
    root = tree(workdir, 10_000)
    _unsigned, signed, public = prepare(10_000, workdir)
    policy = _policy_file(workdir, 10_000, public)
    empty = workdir / "no-project"
    empty.mkdir(exist_ok=True)
    me = str(Path(__file__).resolve())
    scan = ["scan", "--json", "--project", str(empty), "--user-dir", str(root), "--state-dir", "FRESH"]
    sig = ["scan", "--json", "--project", str(signed), "--user-dir", str(empty), "--policy", str(policy)]
    sig += ["--state-dir", "FRESH"]
    one, two = {"TOOLDIR_WORKERS": "1"}, {"TOOLDIR_WORKERS": "2"}

    def d(mapping: str, verify: str, args: list[str]) -> list[str]:
        return [py, me, "drive", "--map", mapping, "--verify", verify, "--", *args]

    return {
        "scan floor": ([py, str(HERE / "floor.py"), str(root)], {}),
        "scan forkpool w=1": (d("forkpool", "helper", scan), one),
        "scan forkpool w=2": (d("forkpool", "helper", scan), two),
        "scan ppe-fork w=2": (d("ppe-fork", "helper", scan), two),
        "scan ppe-forkserver w=2": (d("ppe-forkserver", "helper", scan), two),
        "signed floor": ([py, str(HERE / "floor.py"), str(signed / ".tooldir" / "tools")], {}),
        "signed w=1 helper": (d("forkpool", "helper", sig), one),
        "signed w=1 inprocess": (d("forkpool", "inprocess", sig), one),
        "signed forkpool inprocess": (d("forkpool", "inprocess", sig), two),
        "signed forkpool+helper": (d("forkpool", "helper", sig), two),
        "signed forkpool inworker": (d("forkpool", "inworker", sig), two),
        "signed ppe-fork inworker": (d("ppe-fork", "inworker", sig), two),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["drive"]:
        drive(argv[1:])
        return 0
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 2 if "--quick" in argv else 5
    workdir = Path(argv[argv.index("--workdir") + 1]) if "--workdir" in argv else Path(tempfile.gettempdir()) / "pools"
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)  # noqa: S103 -- discovery refuses group/world-writable roots, not readable ones
    table = variants(workdir)
    with tempfile.TemporaryDirectory(prefix="tooldir-bench-pools-") as states:
        env = {**os.environ, "BENCH_STATES": states}
        for argv_, extra in table.values():
            _process(argv_, {**env, **extra})  # warm the page cache
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in table}
        for _ in range(runs):
            for name, (argv_, extra) in table.items():
                samples[name].append(_process(argv_, {**env, **extra}))
    print(f"whole process, cold (fresh state), 10k packages, {runs} interleaved rounds: min/median/max")
    for name, rows in samples.items():
        w = sorted(r[0] for r in rows)
        c = sorted(r[1] for r in rows)
        print(
            f"{name:>26}  wall {w[0]:.2f}/{statistics.median(w):.2f}/{w[-1]:.2f} s"
            f"  cpu {c[0]:.2f}/{statistics.median(c):.2f}/{c[-1]:.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
