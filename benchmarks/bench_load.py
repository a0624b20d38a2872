"""Load benchmark: tooldir's full cold load against the floor, in the same run (issue 2 "Speed").

floor      scandir walk (root -> package -> files) + read every file + ``json.loads`` of every
           schema.json + sha256 of every file, keeping the parsed manifests and digests (a loader
           has to return what it loaded). Plain Python, the least any loader must do.
floor-nogc the same with the cyclic GC paused (what a careful loader can also do).
discard    the floor without keeping anything (no GC pressure at all): the strictest reference.
tooldir    ``Loader(make_config(user_dirs=[root], project=None, index=False)).load()``: a fresh
           Loader each run (no per-package cache, no content index), user source so trust needs no approvals; everything else real.
           The library leaves its host's GC alone, so this is what a host gets.
tooldir-cli the same load with the cyclic GC paused around it, as the ``tooldir`` CLI runs its
           one-shot commands (``tooldir._internal.gcpause``).

Warm page cache (one untimed pass first), median of several runs; peak Python memory measured
in a separate, untimed pass with tracemalloc. Target: tooldir <= 2.0x the floor at 10k.

    python3 benchmarks/bench_load.py [--quick] [--sizes 1000,10000] [--runs 5] [--json]
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from benchmarks.sizes import parse_args
from benchmarks.sizes import workdir as workdir_for
from tooldir._internal.gcpause import gc_paused
from tooldir.model import Status
from tooldir.snapshot.loader import Loader, make_config


def _walk(root: str, keep: bool) -> dict[str, tuple[object, dict[str, str]]]:
    loaded: dict[str, tuple[object, dict[str, str]]] = {}
    with os.scandir(root) as packages:
        for pkg in packages:
            if not pkg.is_dir(follow_symlinks=False):
                continue
            manifest: object = None
            digests: dict[str, str] = {}
            with os.scandir(pkg.path) as files:
                for f in files:
                    if not f.is_file(follow_symlinks=False):
                        continue
                    with open(f.path, "rb") as fh:
                        data = fh.read()
                    digests[f.name] = hashlib.sha256(data).hexdigest()
                    if f.name == "schema.json":
                        manifest = json.loads(data)
            if keep:
                loaded[pkg.name] = (manifest, digests)
            else:
                loaded[pkg.name] = (None, {})
    return loaded


def floor(root: str) -> int:
    """Walk + read + json.loads + sha256 of every file, keeping the results. Returns the count."""
    return len(_walk(root, keep=True))


def floor_discard(root: str) -> int:
    return len(_walk(root, keep=False))


def floor_nogc(root: str) -> int:
    was = gc.isenabled()
    gc.disable()
    try:
        return floor(root)
    finally:
        if was:
            gc.enable()


def tooldir_load(root: str, state_dir: str) -> int:
    # index=False: a cold load reads every package (the content index would make every run but the
    # first a rescan; benchmarks/bench_index.py measures that)
    snap = Loader(make_config(project=None, user_dirs=[root], state_dir=state_dir, index=False)).load()
    return sum(1 for t in snap.tools if t.status is Status.ACTIVE)


def tooldir_load_cli(root: str, state_dir: str) -> int:
    with gc_paused():
        return tooldir_load(root, state_dir)


def _time(fn: Callable[[], int]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, result). The loaded value is dropped inside the
    timed region, so every variant also pays for freeing what it built."""
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - w0, time.process_time() - c0, result


def _peak(fn: Callable[[], int]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench(n: int, runs: int, workdir: Path) -> dict[str, Any]:
    root = workdir / f"tools-{n}"
    if not root.exists():
        generate(root, n, seed=0)
    state = str(workdir / "state")
    fns: dict[str, Callable[[], int]] = {
        "floor": lambda: floor(str(root)),
        "floor-nogc": lambda: floor_nogc(str(root)),
        "discard": lambda: floor_discard(str(root)),
        "tooldir": lambda: tooldir_load(str(root), state),
        "tooldir-cli": lambda: tooldir_load_cli(str(root), state),
    }
    for fn in fns.values():
        fn()  # warm the page cache and imports
    # Interleave the runs so drift on a noisy machine hits every variant alike.
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    results: dict[str, int] = {}
    for _ in range(runs):
        for key, fn in fns.items():
            gc.collect()
            w, c, results[key] = _time(fn)
            wall[key].append(w)
            cpu[key].append(c)
    if results["tooldir"] != n or results["floor"] != n:
        raise SystemExit(
            f"benchmark invalid: floor loaded {results['floor']}, tooldir loaded {results['tooldir']} of {n}"
        )
    median = {k: statistics.median(v) for k, v in wall.items()}
    median_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    peaks = {k: _peak(fns[k]) for k in ("floor", "tooldir")}
    return {
        "n": n,
        "runs": runs,
        "seconds": median,
        "cpu_seconds": median_cpu,
        "ratio": median["tooldir"] / median["floor"],
        "ratio_cpu": median_cpu["tooldir"] / median_cpu["floor"],
        "ratio_vs_nogc_floor": median["tooldir"] / median["floor-nogc"],
        "ratio_vs_discard": median["tooldir"] / median["discard"],
        "ratio_cli": median["tooldir-cli"] / median["floor"],
        "peak_bytes": peaks,
    }


def main(argv: list[str] | None = None) -> int:
    args, sizes, runs = parse_args(__doc__, argv)
    with workdir_for(args, "tooldir-bench-") as workdir:
        rows = [bench(n, runs, workdir) for n in sizes]
    if args.json:
        print(json.dumps({"benchmark": "load", "results": rows}, indent=2))
        return 0
    print(f"load benchmark: median of {runs} interleaved runs, warm page cache; target tooldir <= 2.0x floor at 10k")
    print(
        f"{'n':>7} {'floor s':>8} {'nogc s':>8} {'discard s':>9} {'tooldir s':>9}"
        f" {'ratio':>6} {'cpu':>6} {'vs nogc':>7} {'vs discard':>10} {'cli-mode':>8} {'floor MB':>8} {'tooldir MB':>10}"
    )
    for r in rows:
        s, p = r["seconds"], r["peak_bytes"]
        print(
            f"{r['n']:>7} {s['floor']:>8.3f} {s['floor-nogc']:>8.3f} {s['discard']:>9.3f} {s['tooldir']:>9.3f}"
            f" {r['ratio']:>5.2f}x {r['ratio_cpu']:>5.2f}x {r['ratio_vs_nogc_floor']:>6.2f}x"
            f" {r['ratio_vs_discard']:>9.2f}x {r['ratio_cli']:>7.2f}x {p['floor'] / 1e6:>8.1f} {p['tooldir'] / 1e6:>10.1f}"
        )
    print("ratio = wall-clock median vs floor; cpu = the same on this process's CPU time (robust to a busy machine)")
    print("cli-mode = the load with the GC paused, as the CLI runs it, vs floor")
    print("peak MB = tracemalloc peak of Python allocations during one load (untimed pass)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
