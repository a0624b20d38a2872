"""Execution benchmark (issue 5 "Speed"), measured against baselines in the same run.

registry overhead   ``Registry.call`` of a builtin no-op handler minus calling the handler directly:
                    resolve, schema validation, permission, hooks, result, and the audit line
                    (fsynced JSONL in a temp state dir; also shown with an in-memory sink).
                    Target: <= 0.5 ms per call.
sandboxed call      ``Registry.call`` of a directory tool whose script reads the stdin envelope and
                    answers ``{"ok": true}`` (bubblewrap, seccomp, verified copy, limits) versus a
                    plain ``subprocess.run`` of the same interpreter and script with the same stdin.
                    Target: ratio <= 1.5x. Also the sandbox run alone (no registry, no audit).

Medians; the two sides of each comparison are interleaved so machine noise hits both.

    python3 benchmarks/bench_exec.py [--quick] [--calls N] [--spawns N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tooldir.audit import AuditEvent
from tooldir.loader import Loader, make_config
from tooldir.policy import Policy
from tooldir.registry import Registry
from tooldir.sandbox import RunRequest
from tooldir.sandbox.bubblewrap import resolve_interpreter
from tooldir.snapshot import SnapshotStore

NOOP_SCRIPT = 'import json, sys\njson.load(sys.stdin)\nprint(\'{"ok": true, "content": null}\')\n'
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}


class _MemoryAudit:
    def __init__(self) -> None:
        self.n = 0

    def record(self, event: AuditEvent) -> str:
        self.n += 1
        return str(self.n)


def _handler(*, input: Any, context: Any) -> Any:
    return None


def _registry(tmp: Path, audit: Any = None) -> Registry:
    policy = Policy()
    config = make_config(project=None, user_dirs=[tmp / "tools"], policy=policy, state_dir=tmp / "state")
    store = SnapshotStore(Loader(config).load())
    return Registry(store, policy=policy, state_dir=tmp / "state", audit=audit)


def bench_overhead(tmp: Path, calls: int) -> dict[str, float]:
    (tmp / "tools").mkdir(exist_ok=True)
    jsonl = _registry(tmp)
    memory = _registry(tmp, audit=_MemoryAudit())
    for reg in (jsonl, memory):
        reg.register("noop", SCHEMA, _handler, description="Does nothing.")
        for _ in range(100):
            reg.call("noop", {"n": 1})

    def per_call(fn: Any) -> float:
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - start) / calls * 1000)
        return statistics.median(samples)

    direct = per_call(lambda: _handler(input={"n": 1}, context={}))
    with_audit = per_call(lambda: jsonl.call("noop", {"n": 1}))
    no_fsync = per_call(lambda: memory.call("noop", {"n": 1}))
    return {
        "direct_handler_ms": direct,
        "registry_call_ms": with_audit,
        "registry_overhead_ms": with_audit - direct,
        "registry_overhead_memory_audit_ms": no_fsync - direct,
    }


def bench_sandbox(tmp: Path, spawns: int) -> dict[str, float]:
    pkg = tmp / "tools" / "noop_tool"
    pkg.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": "noop_tool",
        "description": "Reads its input and answers ok.",
        "input_schema": SCHEMA,
        "risk": "read",
        "execute": {"command": ["python3", "run.py"]},
    }
    (pkg / "schema.json").write_text(json.dumps(manifest))
    (pkg / "run.py").write_text(NOOP_SCRIPT)
    registry = _registry(tmp)
    problem = registry.sandbox_problem()
    if problem is not None:
        return {"unavailable": 1.0}
    python = resolve_interpreter("python3")
    assert python is not None
    envelope = json.dumps({"version": 1, "input": {"n": 1}, "context": {}}).encode()

    def plain() -> None:
        done = subprocess.run([python, "run.py"], input=envelope, capture_output=True, cwd=pkg, env={}, check=True)
        assert b'"ok": true' in done.stdout

    def sandboxed() -> None:
        result = registry.call("noop_tool", {"n": 1})
        assert result.ok, result.error

    box = registry.sandbox()
    record = registry.store.current.get("noop_tool")
    assert box is not None and record is not None
    request = RunRequest(record, envelope, 10.0, {}, False)

    def sandbox_only() -> None:
        assert box.run(request).exit_code == 0

    for _ in range(3):
        plain()
        sandboxed()
        sandbox_only()
    plain_ms, call_ms, run_ms = [], [], []
    for _ in range(spawns):
        for fn, samples in ((plain, plain_ms), (sandboxed, call_ms), (sandbox_only, run_ms)):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1000)
    p, c, r = statistics.median(plain_ms), statistics.median(call_ms), statistics.median(run_ms)
    return {"plain_spawn_ms": p, "sandboxed_call_ms": c, "sandbox_run_ms": r, "ratio": c / p, "sandbox_ratio": r / p}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--calls", type=int, help="builtin calls per sample (default 2000, quick 300)")
    parser.add_argument("--spawns", type=int, help="sandboxed calls (default 40, quick 10)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    calls = args.calls or (300 if args.quick else 2000)
    spawns = args.spawns or (10 if args.quick else 40)
    with tempfile.TemporaryDirectory(prefix="tooldir-bench-exec-") as tmp:
        (Path(tmp) / "a").mkdir()
        overhead = bench_overhead(Path(tmp) / "a", calls)
        sandbox = bench_sandbox(Path(tmp) / "b", spawns)
    result = {"overhead": overhead, "sandbox": sandbox, "uid": os.geteuid()}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"registry overhead per builtin call: {overhead['registry_overhead_ms']:.3f} ms (target <= 0.5)")
    print(f"  of which without the fsynced audit line: {overhead['registry_overhead_memory_audit_ms']:.3f} ms")
    if "ratio" in sandbox:
        print(
            f"sandboxed no-op Registry.call {sandbox['sandboxed_call_ms']:.1f} ms vs plain spawn "
            f"{sandbox['plain_spawn_ms']:.1f} ms: {sandbox['ratio']:.2f}x (target <= 1.5)"
        )
        print(f"  the sandbox run alone (no registry, no audit): {sandbox['sandbox_ratio']:.2f}x")
    else:
        print("sandboxed call: bubblewrap unavailable here")
    return 0


if __name__ == "__main__":
    sys.exit(main())
