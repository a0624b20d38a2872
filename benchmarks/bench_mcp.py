"""MCP server benchmark (issue 7 "Speed"): what ``tooldir serve`` adds on top of the Python API.

call       ``tools/call`` round trip of a sandboxed no-op tool through ``tooldir serve`` (a real
           subprocess driven by the SDK's stdio client) against the same call through the Python
           API in this process (``Session.call``, which is what the server runs, and the bare
           ``Registry.call``). Both run the tool in bubblewrap; the ratio is MCP / Python API.
list       ``tools/list`` with N tools in the working set (defer mode off: every tool listed):
           the round trip with the SDK client, the same with a minimal JSON-RPC client (so the SDK
           client's own validation of every tool is left out), and the rendering alone
           (``ToolServer.list_tools_sync``, cold and warm). Also the round trip with the default deferral (only the guard tools and
           eager ones are listed), and the time from spawning ``tooldir serve`` to an initialized
           session.

Warm page cache, median (and p95 for calls) of several runs.

    python3 benchmarks/bench_mcp.py [--quick] [--calls 30] [--tools 10000] [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.generate import generate
from benchmarks.stats import percentile
from tooldir.deferred.session import Session
from tooldir.mcp.server import ToolServer
from tooldir.policy import parse_policy
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

NOOP_SCRIPT = 'import sys\nsys.stdin.read()\nsys.stdout.write(\'{"ok": true, "content": null}\')\n'
NOOP_MANIFEST = {
    "name": "noop",
    "description": "Do nothing (benchmark).",
    "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
    "risk": "read",
    "keywords": ["noop"],
    "execute": {"command": ["python3", "run.py"], "timeout_s": 10, "network": False, "env": []},
}
EAGER = '[defer]\nmode = "off"\n'
DEFERRED = '[defer]\nmode = "on"\nrules = ["Defer(*)"]\n'


def write_noop(root: Path) -> None:
    folder = root / "noop"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.json").write_text(json.dumps(NOOP_MANIFEST))
    (folder / "run.py").write_text(NOOP_SCRIPT)
    os.chmod(root, 0o755)  # noqa: S103 -- discovery refuses group/world-writable roots


def serve_params(root: Path, policy: Path, state: Path, project: Path) -> StdioServerParameters:
    args = ["-m", "tooldir", "serve", "--user-dir", str(root), "--project", str(project)]
    args += ["--policy", str(policy), "--state-dir", str(state), "--no-watch", "--log-level", "error"]
    env = {k: os.environ[k] for k in ("HOME", "PATH", "XDG_CONFIG_HOME", "XDG_STATE_HOME") if k in os.environ}
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(project))


async def timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def interleaved_calls(
    params: StdioServerParameters, *, root: Path, policy_text: str, state: Path, project: Path, n: int
) -> dict[str, list[float]]:
    """The same no-op call through MCP, ``Session.call`` and ``Registry.call``, interleaved so all
    three see the same machine load (this box is shared and noisy)."""
    config = make_config(project=project, user_dirs=[root], policy=parse_policy(policy_text), state_dir=state)
    store = SnapshotStore(Loader(config).load())
    registry = Registry(store, policy=config.policy, state_dir=config.state_dir)
    session = Session(store, policy=config.policy, registry=registry, state_dir=config.state_dir)
    session.working_set()
    out: dict[str, list[float]] = {"mcp": [], "session": [], "registry": []}
    with open(os.devnull, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=60) as client:
            await client.list_tools()
            for _ in range(3):  # warm-up: sandbox probe, interpreter caches
                await client.call_tool("noop", {})
                session.call("noop", {})
            for _ in range(n):
                start = time.perf_counter()
                result = await client.call_tool("noop", {})
                out["mcp"].append(time.perf_counter() - start)
                if result.is_error:
                    raise SystemExit(f"noop failed through MCP: {result.content}")
                start = time.perf_counter()
                outcome = session.call("noop", {})
                out["session"].append(time.perf_counter() - start)
                if not outcome.ok:
                    raise SystemExit(f"noop failed through the Python API: {outcome.error}")
                start = time.perf_counter()
                registry.call("noop", {})
                out["registry"].append(time.perf_counter() - start)
    session.close()
    return out


async def mcp_list(params: StdioServerParameters, runs: int) -> dict[str, Any]:
    with open(os.devnull, "w") as errlog:
        start = time.perf_counter()
        async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=300) as client:
            startup = time.perf_counter() - start
            first = await timed(lambda: client.list_tools(cache_mode="refresh"))
            times = [await timed(lambda: client.list_tools(cache_mode="refresh")) for _ in range(runs)]
            listed = await client.list_tools(cache_mode="refresh")
            size = sum(len(t.model_dump_json(by_alias=True, exclude_none=True)) for t in listed.tools)
            return {
                "startup_s": startup,
                "first_s": first,
                "median_s": statistics.median(times),
                "tools": len(listed.tools),
                "bytes": size,
            }


def raw_list(params: StdioServerParameters, runs: int) -> dict[str, float]:
    """tools/list over the same pipe with a minimal JSON-RPC client (json.loads of the line): the
    server's share of the round trip, without the SDK client's validation of every tool."""
    env = params.env or {}
    with subprocess.Popen(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=params.cwd,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None

        def send(message: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()

        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        proc.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        times = []
        for i in range(runs + 1):
            start = time.perf_counter()
            send({"jsonrpc": "2.0", "id": i + 1, "method": "tools/list"})
            json.loads(proc.stdout.readline())
            times.append(time.perf_counter() - start)
        proc.stdin.close()
        proc.wait(timeout=60)
    return {"first_s": times[0], "median_s": statistics.median(times[1:])}


def server_side_list(root: Path, policy_text: str, state: Path, project: Path, runs: int) -> dict[str, float]:
    config = make_config(project=project, user_dirs=[root], policy=parse_policy(policy_text), state_dir=state)
    front = ToolServer.open(config, watch=False)
    try:
        start = time.perf_counter()
        front.list_tools_sync()
        cold = time.perf_counter() - start
        warm = []
        for _ in range(runs):
            start = time.perf_counter()
            front.list_tools_sync()
            warm.append(time.perf_counter() - start)
    finally:
        front.close()
    return {"cold_s": cold, "warm_median_s": statistics.median(warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1000 tools, 10 calls, 3 runs")
    parser.add_argument("--calls", type=int, help="timed calls per path (default 30)")
    parser.add_argument("--tools", type=int, help="tools for the tools/list measurement (default 10000)")
    parser.add_argument("--runs", type=int, help="timed tools/list runs (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    calls = args.calls or (10 if args.quick else 30)
    n_tools = args.tools or (1000 if args.quick else 10_000)
    runs = args.runs or (3 if args.quick else 5)

    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)  # noqa: S103 -- the roots live below; discovery checks their parents' modes
        project = base / "project"
        project.mkdir()
        policy_eager, policy_deferred = base / "eager.toml", base / "deferred.toml"
        policy_eager.write_text(EAGER)
        policy_deferred.write_text(DEFERRED)

        small = base / "small"
        write_noop(small)
        times = anyio.run(
            functools.partial(
                interleaved_calls,
                serve_params(small, policy_eager, base / "state-mcp", project),
                root=small,
                policy_text=EAGER,
                state=base / "state-api",
                project=project,
                n=calls,
            )
        )
        mcp_t, session_t, registry_t = times["mcp"], times["session"], times["registry"]
        call = {
            "calls": calls,
            "mcp_median_ms": statistics.median(mcp_t) * 1000,
            "mcp_p95_ms": percentile(mcp_t, 0.95) * 1000,
            "session_median_ms": statistics.median(session_t) * 1000,
            "registry_median_ms": statistics.median(registry_t) * 1000,
        }
        call["ratio_mcp_vs_session"] = call["mcp_median_ms"] / call["session_median_ms"]
        call["mcp_overhead_ms"] = call["mcp_median_ms"] - call["session_median_ms"]

        big = base / "big"
        generate(big, n_tools, seed=0)
        eager = anyio.run(mcp_list, serve_params(big, policy_eager, base / "state-l1", project), runs)
        deferred = anyio.run(mcp_list, serve_params(big, policy_deferred, base / "state-l2", project), runs)
        server = server_side_list(big, EAGER, base / "state-l3", project, runs)
        raw = raw_list(serve_params(big, policy_eager, base / "state-l4", project), runs)

    result = {
        "call": call,
        "list": {"n": n_tools, "eager": eager, "deferred": deferred, "server_side": server, "raw_client": raw},
    }
    if args.json:
        print(json.dumps({"benchmark": "mcp", "results": result}, indent=2))
        return
    print(f"mcp benchmark: sandboxed no-op tools/call, median of {calls} (p95 for MCP)")
    print(f"  through MCP (tooldir serve, stdio)   {call['mcp_median_ms']:8.2f} ms  (p95 {call['mcp_p95_ms']:.2f} ms)")
    print(f"  Python API Session.call              {call['session_median_ms']:8.2f} ms")
    print(f"  Python API Registry.call             {call['registry_median_ms']:8.2f} ms")
    print(
        f"  ratio MCP / Python API               {call['ratio_mcp_vs_session']:8.2f}x  (+{call['mcp_overhead_ms']:.2f} ms)"
    )
    print(f"tools/list with {n_tools} tools (median of {runs})")
    print(
        f"  every tool listed ({eager['tools']} tools, {eager['bytes'] / 1e6:.1f} MB): round trip "
        f"{eager['median_s'] * 1000:.0f} ms (first {eager['first_s'] * 1000:.0f} ms); "
        f"server side {server['warm_median_s'] * 1000:.0f} ms warm, {server['cold_s'] * 1000:.0f} ms cold"
    )
    print(
        f"  every tool listed, minimal JSON-RPC client (the server's share): {raw['median_s'] * 1000:.0f} ms "
        f"(first {raw['first_s'] * 1000:.0f} ms)"
    )
    print(f"  deferred (default rules; {deferred['tools']} listed): round trip {deferred['median_s'] * 1000:.1f} ms")
    print(
        f"  serve start to initialized session: eager {eager['startup_s']:.2f} s, deferred {deferred['startup_s']:.2f} s"
    )


if __name__ == "__main__":
    main()
