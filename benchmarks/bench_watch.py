"""Watch benchmark (issue 4 "Speed"): one changed file at N packages, incremental vs cold, and latency.

incremental  a file of one package changes; ``Loader.rebuild({root: {name}})`` on the loader that
             already holds every package, then ``SnapshotStore.publish`` (median of --runs)
cold         the same rebuild done as a cold load: a fresh ``Loader(config).load()`` + publish
ratio        cold / incremental (target: >= 100x at 10k)
latency      event-to-publish with a real ``Watcher`` (inotify, --debounce-ms): write one file, time
             until a subscriber receives the snapshot with the new digest; median and p95 over --edits

User source (no approvals needed), warm page cache, everything else real. The snapshot published
by the incremental path is checked to equal the cold load's (same content-derived id).

    python3 benchmarks/bench_watch.py [--quick] [--n 10000] [--runs 20] [--edits 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate
from benchmarks.stats import percentile
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import Snapshot, SnapshotDiff, SnapshotStore
from tooldir.snapshot.watch import Watcher


def bench(n: int, *, runs: int, cold_runs: int, edits: int, debounce_ms: int, workdir: Path) -> dict[str, Any]:
    root = workdir / f"tools-{n}"
    if not root.exists():
        generate(root, n, seed=0)
    packages = sorted(p.name for p in root.iterdir() if p.is_dir())
    config = make_config(project=None, user_dirs=[root], state_dir=workdir / "state")
    loader = Loader(config)
    store = SnapshotStore(loader.load())

    def touch(i: int) -> str:
        name = packages[(i * 7919) % len(packages)]
        # unique content every time (trees are reused between runs): the digest always changes
        (root / name / "run.py").write_text(f"print({i!r}, {time.time_ns()})  # benchmark edit\n")
        return name

    # incremental: one changed file -> published snapshot
    incremental = []
    for i in range(runs):
        name = touch(i)
        t0 = time.perf_counter()
        snap = loader.rebuild({str(root): {name}}, generation=store.current.generation + 1)
        store.publish(snap)
        incremental.append(time.perf_counter() - t0)

    # the same rebuild as a cold load
    cold = []
    cold_snap: Snapshot | None = None
    for _ in range(cold_runs):
        t0 = time.perf_counter()
        cold_snap = Loader(config).load()
        SnapshotStore(store.current).publish(cold_snap)
        cold.append(time.perf_counter() - t0)
    assert cold_snap is not None and cold_snap.id == store.current.id, "incremental result differs from a cold load"

    # event-to-publish latency with a real watcher
    latencies: list[float] = []
    arrived = threading.Condition()
    seen: dict[str, float] = {}

    def on_publish(snap: Snapshot, change: SnapshotDiff) -> None:
        now = time.perf_counter()
        with arrived:
            for _, new in change.changed:
                seen[new.digest or ""] = now
            arrived.notify_all()

    started = time.perf_counter()
    watcher = Watcher(loader, store, debounce_s=debounce_ms / 1000, rescan_on_start=False)
    watcher.subscribe(on_publish)
    with watcher:
        arm_s = time.perf_counter() - started
        for i in range(runs, runs + edits):
            before = store.current
            t0 = time.perf_counter()
            name = touch(i)
            snap = watcher.wait_for(
                lambda s, name=name, old=before: s.by_name[name].digest != old.by_name[name].digest, 30
            )
            digest = snap.by_name[name].digest or ""
            with arrived:
                arrived.wait_for(lambda digest=digest: digest in seen, 30)
                latencies.append(seen[digest] - t0)
    inc = statistics.median(incremental)
    cld = statistics.median(cold)
    return {
        "n": n,
        "incremental_s": inc,
        "incremental_p95_s": percentile(incremental, 0.95),
        "cold_s": cld,
        "ratio": cld / inc,
        "latency_median_s": statistics.median(latencies),
        "latency_p95_s": percentile(latencies, 0.95),
        "debounce_s": debounce_ms / 1000,
        "watcher_start_s": arm_s,
        "runs": runs,
        "cold_runs": cold_runs,
        "edits": edits,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1000 packages, fewer runs")
    parser.add_argument("--n", type=int, default=10_000, help="packages (default 10000)")
    parser.add_argument("--runs", type=int, default=20, help="incremental runs (default 20)")
    parser.add_argument("--cold-runs", type=int, default=3, help="cold loads (default 3)")
    parser.add_argument("--edits", type=int, default=40, help="single edits timed through the watcher (default 40)")
    parser.add_argument("--debounce-ms", type=int, default=20, help="watcher debounce (default 20)")
    parser.add_argument("--workdir", type=Path, help="reuse generated trees here (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    n, runs, cold_runs, edits = args.n, args.runs, args.cold_runs, args.edits
    if args.quick:
        n, runs, cold_runs, edits = 1000, 10, 2, 15
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        row = bench(n, runs=runs, cold_runs=cold_runs, edits=edits, debounce_ms=args.debounce_ms, workdir=args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="tooldir-bench-watch-") as tmp:
            row = bench(n, runs=runs, cold_runs=cold_runs, edits=edits, debounce_ms=args.debounce_ms, workdir=Path(tmp))
    if args.json:
        print(json.dumps({"benchmark": "watch", "results": [row]}, indent=2))
        return 0
    print(f"watch benchmark at {row['n']} packages (warm cache; target: incremental >= 100x faster than cold)")
    print(
        f"  one changed file -> published snapshot: {row['incremental_s'] * 1000:.1f} ms median, p95 {row['incremental_p95_s'] * 1000:.1f} ms ({runs} runs)"
    )
    print(f"  the same as a cold load:                {row['cold_s'] * 1000:.0f} ms median ({cold_runs} runs)")
    print(f"  ratio cold / incremental:               {row['ratio']:.0f}x")
    print(
        f"  event -> publish (watcher, debounce {row['debounce_s'] * 1000:.0f} ms): median {row['latency_median_s'] * 1000:.1f} ms, "
        f"p95 {row['latency_p95_s'] * 1000:.1f} ms ({edits} edits)"
    )
    print(f"  watcher start (arming inotify watches): {row['watcher_start_s']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
