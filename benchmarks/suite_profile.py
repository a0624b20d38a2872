"""Where the test suite's wall time goes (issue 22): a pytest plugin and its report.

As a plugin it records, for every test, its worker, start and end (wall clock) and the CPU time
(user + sys) of the worker and of the child processes it reaped meanwhile, one JSON line per test
in one file per worker::

    SUITE_PROFILE_DIR=/tmp/prof .venv/bin/python -m pytest -p benchmarks.suite_profile -n 4 --dist loadgroup

Run as a script it reports the span, the CPU against the wall time, each worker's busy time and
end (the tail), the ``serial`` group's total, and the files and tests that take longest::

    python3 benchmarks/suite_profile.py /tmp/prof

On a busy machine the wall figures stretch; the CPU ones do not (much): compare those.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    start, cpu = time.time(), _cpu()
    yield
    end, used = time.time(), _cpu() - cpu
    out = Path(os.environ.get("SUITE_PROFILE_DIR", "suite-profile"))
    out.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {"id": item.nodeid, "worker": worker, "start": start, "end": end, "cpu": used, "group": _group(item)}
    with (out / f"{worker}.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def report(folder: Path, top: int = 25) -> None:
    rows: list[dict[str, Any]] = [
        json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()
    ]
    if not rows:
        sys.exit(f"no profile lines in {folder}")
    first = min(r["start"] for r in rows)
    last = max(r["end"] for r in rows)
    wall = sum(r["end"] - r["start"] for r in rows)
    cpu = sum(r["cpu"] for r in rows)
    print(f"{len(rows)} tests, span {last - first:.1f} s, test wall {wall:.1f} s, test CPU {cpu:.1f} s")
    workers: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        workers[r["worker"]].append(r)
    for name, own in sorted(workers.items()):
        busy = sum(r["end"] - r["start"] for r in own)
        print(
            f"  {name}: {len(own)} tests, busy {busy:.1f} s, CPU {sum(r['cpu'] for r in own):.1f} s,"
            f" first at {min(r['start'] for r in own) - first:.1f} s, done at {max(r['end'] for r in own) - first:.1f} s"
        )
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        if r["group"]:
            groups[r["group"]].append(r)
    for name, own in sorted(groups.items()):
        where = sorted({r["worker"] for r in own})
        print(
            f"group {name}: {len(own)} tests on {', '.join(where)}, wall {sum(r['end'] - r['start'] for r in own):.1f} s,"
            f" CPU {sum(r['cpu'] for r in own):.1f} s, from {min(r['start'] for r in own) - first:.1f} s"
            f" to {max(r['end'] for r in own) - first:.1f} s"
        )
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        entry = files[r["id"].split("::", 1)[0]]
        entry[0] += 1
        entry[1] += r["end"] - r["start"]
        entry[2] += r["cpu"]
    print("files by wall (tests, wall s, CPU s):")
    for path, (count, spent, used) in sorted(files.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {count:5.0f} {spent:7.1f} {used:7.1f}  {path}")
    print("tests by wall (wall s, CPU s, worker, start s):")
    for r in sorted(rows, key=lambda r: r["start"] - r["end"])[:top]:
        spent = r["end"] - r["start"]
        print(f"  {spent:6.1f} {r['cpu']:6.1f} {r['worker']:>4} {r['start'] - first:6.1f}  {r['id'][:110]}")


if __name__ == "__main__":
    report(Path(sys.argv[1] if len(sys.argv) > 1 else "suite-profile"))
