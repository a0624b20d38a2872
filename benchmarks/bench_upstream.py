"""Upstream MCP call benchmark (issue 16 item 8), measured against its baseline in the same run.

direct      the official SDK client (``stdio_client`` + ``ClientSession``) calling a tool of a
            standard-library MCP server it started itself, unsandboxed; timed inside the client's
            event loop (no thread hop: the most favourable baseline).
sandboxed   ``Registry.call`` of the same tool of the same server as a trusted ``server.json``
            package: resolve, input validation (schema worker), permission, hooks, the forward to
            the long-lived bubblewrapped server through tooldir's session thread, result
            sanitising and the fsynced audit line. Also shown: the hub's forward alone.

Each round times ``--calls`` calls of each side, interleaved round by round so machine noise hits
both; the figure is each round's p50, reported as min/median/max over ``--rounds`` rounds.
Target: sandboxed p50 - direct p50 <= 5 ms.

    python3 benchmarks/bench_upstream.py [--quick] [--rounds N] [--calls N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.sandbox import probe
from tooldir.sandbox.bubblewrap import resolve_interpreter
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore
from tooldir.upstream import UpstreamHub

SERVER = Path(__file__).resolve().parent.parent / "fixtures" / "mcp" / "misbehaving"
TARGET_MS = 5.0


class DirectClient:
    """The SDK client over its own stdio transport, in an event loop of its own thread."""

    def __init__(self, folder: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ready = asyncio.run_coroutine_threadsafe(self._open(folder), self.loop).result(60)
        self._stop: asyncio.Event

    async def _open(self, folder: Path) -> bool:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        python = resolve_interpreter("python3") or "python3"
        params = StdioServerParameters(command=python, args=[str(folder / "server.py")], cwd=str(folder))
        opened: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()

        async def hold() -> None:
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                opened.set_result(session)
                await self._stop.wait()

        self._task = asyncio.ensure_future(hold())
        self.session = await opened
        return True

    def time_calls(self, calls: int) -> list[float]:
        async def timed() -> list[float]:
            out = []
            for i in range(calls):
                start = time.perf_counter()
                result = await self.session.call_tool("add", {"a": i, "b": 1})
                out.append((time.perf_counter() - start) * 1000)
                assert not result.is_error
            return out

        samples: list[float] = asyncio.run_coroutine_threadsafe(timed(), self.loop).result(300)
        return samples

    def close(self) -> None:
        async def stop() -> None:
            self._stop.set()
            await asyncio.wait_for(self._task, 10)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def bench(tmp: Path, rounds: int, calls: int) -> dict[str, Any]:
    root = tmp / "tools"
    (root / "calc").mkdir(parents=True)
    for item in SERVER.iterdir():
        if item.is_file():
            shutil.copyfile(item, root / "calc" / item.name)
    data = json.loads((root / "calc" / "server.json").read_text())
    data["name"] = "calc"
    (root / "calc" / "server.json").write_text(json.dumps(data))
    policy = Policy()
    config = make_config(project=None, user_dirs=[root], policy=policy, state_dir=tmp / "state")
    store = SnapshotStore(Loader(config).load())
    registry = Registry(store, policy=policy, state_dir=tmp / "state")
    hub = UpstreamHub(policy, tmp / "state")
    direct = DirectClient(root / "calc")
    try:
        hub.attach_registry(registry)
        record = store.current.by_name["calc__add"]

        def sandboxed(n: int) -> list[float]:
            out = []
            for i in range(n):
                start = time.perf_counter()
                result = registry.call("calc__add", {"a": i, "b": 1})
                out.append((time.perf_counter() - start) * 1000)
                assert result.ok, result.error
            return out

        def forward(n: int) -> list[float]:
            out = []
            for i in range(n):
                start = time.perf_counter()
                hub.call(record, {"a": i, "b": 1})
                out.append((time.perf_counter() - start) * 1000)
            return out

        direct.time_calls(20)  # warm-up: both servers running, the schema worker started
        sandboxed(20)
        forward(20)
        per_round: dict[str, list[float]] = {"direct": [], "sandboxed": [], "forward": []}
        for _ in range(rounds):
            per_round["direct"].append(statistics.median(direct.time_calls(calls)))
            per_round["sandboxed"].append(statistics.median(sandboxed(calls)))
            per_round["forward"].append(statistics.median(forward(calls)))
    finally:
        direct.close()
        hub.close()
    summary = {k: {"min": min(v), "median": statistics.median(v), "max": max(v)} for k, v in per_round.items()}
    extra = [s - d for s, d in zip(per_round["sandboxed"], per_round["direct"], strict=True)]
    summary["added"] = {"min": min(extra), "median": statistics.median(extra), "max": max(extra)}
    return {"p50_ms": summary, "rounds": rounds, "calls": calls, "target_added_ms": TARGET_MS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--rounds", type=int, help="rounds (default 7, quick 3)")
    parser.add_argument("--calls", type=int, help="calls per side per round (default 200, quick 40)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    calls = args.calls or (40 if args.quick else 200)
    problem = probe(Policy().sandbox)
    if problem is not None:
        print(json.dumps({"unavailable": problem}) if args.json else f"upstream call: no sandbox here ({problem})")
        return 0
    with tempfile.TemporaryDirectory(prefix="tooldir-bench-upstream-") as tmp:
        result = bench(Path(tmp), rounds, calls)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    p = result["p50_ms"]
    for key, label in (
        ("direct", "SDK client -> server directly"),
        ("sandboxed", "Registry.call -> sandboxed server"),
        ("forward", "  of which the hub's forward alone"),
    ):
        print(f"{label:38s} p50 min/median/max {p[key]['min']:.2f} / {p[key]['median']:.2f} / {p[key]['max']:.2f} ms")
    added = p["added"]
    verdict = "meets" if added["median"] <= TARGET_MS else "MISSES"
    print(
        f"added by tooldir (p50): {added['median']:.2f} ms (min {added['min']:.2f}, max {added['max']:.2f}); "
        f"target <= +{TARGET_MS:g} ms: {verdict} ({rounds} rounds x {calls} calls)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
