"""Start-up benchmark (issue 14 items 1 and "serve"): whole processes, against ``python -c pass``.

help        ``tooldir --help``                     target: <= +120 ms over ``python -c pass``
version     ``tooldir --version``                  target: <= +120 ms over ``python -c pass``
import      ``python -c "import tooldir"``         target: <= +120 ms over ``python -c pass``
sdk-import  ``python -c "import mcp.server.lowlevel"``: what importing the MCP SDK's server alone costs
            (no target; the reason ``tooldir serve`` answers ``initialize`` before importing it)
serve       ``tooldir serve`` over N generated user tools (benchmarks/generate.py), a fresh state folder
            per round, the watcher on (the default): from spawning the process to the answer to the
            client's first request, ``initialize`` (target <= 1.5 s at 10k), and to the answer to the
            first ``tools/list`` sent right after ``notifications/initialized`` (no target: it waits
            for the roots to load; reported against the in-process cold load of the same root).

Every process runs on the interpreter running this script (the one tooldir is installed in; the
``tooldir`` script next to it when there is one, else ``python -m tooldir``). Rounds interleave
the variants; min/median/max of each, the ratio or the difference of the medians to the baseline.

    python3 benchmarks/bench_startup.py [--quick] [--rounds 9] [--sizes 1000,10000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.generate import generate

PY = sys.executable
_SCRIPT = Path(PY).with_name("tooldir")
TOOLDIR = [str(_SCRIPT)] if _SCRIPT.exists() else [PY, "-m", "tooldir"]
HELP_TARGET_MS = 120.0
SERVE_TARGET_S = 1.5
WAIT_S = 600.0

COMMANDS: dict[str, list[str]] = {
    "pass": [PY, "-c", "pass"],
    "help": [*TOOLDIR, "--help"],
    "version": [*TOOLDIR, "--version"],
    "import": [PY, "-c", "import tooldir"],
    "sdk-import": [PY, "-c", "import mcp.server.lowlevel"],
}

LABELS = {
    "pass": "python -c pass",
    "help": "tooldir --help",
    "version": "tooldir --version",
    "import": 'python -c "import tooldir"',
    "sdk-import": 'python -c "import mcp.server.lowlevel"',
}


def run_once(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def spread(values: list[float], scale: float = 1.0) -> dict[str, float]:
    return {
        "min": min(values) * scale,
        "median": statistics.median(values) * scale,
        "max": max(values) * scale,
        "rounds": len(values),
    }


def startup_rows(rounds: int, cwd: Path) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for cmd in COMMANDS.values():  # one untimed pass: warm page cache and .pyc files
        run_once(cmd, cwd)
    for _ in range(rounds):
        for name, cmd in COMMANDS.items():
            times[name].append(run_once(cmd, cwd))
    return {name: spread(values, 1000.0) for name, values in times.items()}


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def _read_until(fd: int, wanted: int, buffer: bytearray, deadline: float) -> dict[str, Any]:
    while True:
        while b"\n" in buffer:
            raw, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            message = json.loads(raw) if raw.strip() else {}
            if message.get("id") == wanted:
                return dict(message)
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 1 << 16) if ready else b""
        if not chunk:
            raise SystemExit(f"tooldir serve gave no answer to request {wanted}")
        buffer += chunk


def serve_once(root: Path, project: Path, cwd: Path) -> tuple[float, float]:
    """(seconds to the initialize answer, seconds to the first tools/list answer) from the spawn."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-state-") as state:
        cmd = [*TOOLDIR, "serve", "--user-dir", str(root), "--project", str(project), "--state-dir", state]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdin is not None and proc.stdout is not None
        deadline = time.monotonic() + WAIT_S
        buffer = bytearray()
        try:
            proc.stdin.write(_line(INITIALIZE))
            proc.stdin.flush()
            answer = _read_until(proc.stdout.fileno(), 1, buffer, deadline)
            initialized = time.perf_counter() - start
            if "result" not in answer:
                raise SystemExit(f"initialize failed: {answer}")
            proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            proc.stdin.write(_line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            proc.stdin.flush()
            listed = _read_until(proc.stdout.fileno(), 2, buffer, deadline)
            first_list = time.perf_counter() - start
            if "result" not in listed:
                raise SystemExit(f"tools/list failed: {listed}")
        finally:
            proc.stdin.close()
            proc.wait(timeout=WAIT_S)
            proc.stdout.close()
    return initialized, first_list


def cold_load_s(root: Path, project: Path) -> float:
    """The in-process cold load of the same root (Loader.load, read-only state): what tools/list waits for."""
    from tooldir.snapshot.loader import Loader, make_config

    with tempfile.TemporaryDirectory(prefix="bench-startup-load-") as state:
        config = make_config(project=str(project), user_dirs=[str(root)], state_dir=state, read_only=True)
        start = time.perf_counter()
        Loader(config).load()
        return time.perf_counter() - start


def serve_rows(sizes: list[int], rounds: int, workdir: Path) -> dict[str, dict[str, Any]]:
    project = workdir / "project"
    project.mkdir(exist_ok=True)
    out: dict[str, dict[str, Any]] = {}
    for n in sizes:
        root = workdir / f"user-{n}"
        if not root.exists():
            generate(root, n, seed=0)
        serve_once(root, project, workdir)  # untimed: warm page cache and .pyc files
        inits, lists, loads = [], [], []
        for _ in range(rounds):
            first, listed = serve_once(root, project, workdir)
            inits.append(first)
            lists.append(listed)
            loads.append(cold_load_s(root, project))
        out[str(n)] = {"initialize_s": spread(inits), "tools_list_s": spread(lists), "cold_load_s": spread(loads)}
    return out


def _fmt(row: dict[str, float], unit: str) -> str:
    return f"{row['min']:8.1f} {row['median']:8.1f} {row['max']:8.1f} {unit}"


def report(startup: dict[str, dict[str, float]], serve: dict[str, dict[str, Any]]) -> dict[str, Any]:
    base = startup["pass"]["median"]
    rows: dict[str, Any] = {"startup_ms": {}, "serve": {}}
    print(f"{'process':<40} {'min':>8} {'median':>8} {'max':>8}      over pass   ratio   target")
    for name, row in startup.items():
        over = row["median"] - base
        target = "" if name in ("pass", "sdk-import") else f"<= +{HELP_TARGET_MS:.0f} ms"
        met = "" if not target else ("ok" if over <= HELP_TARGET_MS else "MISSED")
        label = LABELS[name]
        ratio = row["median"] / base
        print(f"{label:<40} {_fmt(row, 'ms')} {over:+9.1f} ms {ratio:6.2f}x   {target} {met}")
        rows["startup_ms"][name] = {
            **row,
            "over_pass_ms": over,
            "ratio_to_pass": ratio,
            "target_over_pass_ms": HELP_TARGET_MS if target else None,
        }
    sdk = startup["sdk-import"]["median"] / 1000.0
    for n, row in serve.items():
        init, listed, load = row["initialize_s"], row["tools_list_s"], row["cold_load_s"]
        met = "ok" if init["median"] <= SERVE_TARGET_S else "MISSED"
        print(
            f"serve {n:>6} tools: initialize answered   {_fmt(init, 's')}"
            f"   {init['median'] / sdk:5.2f}x the SDK import alone   target <= {SERVE_TARGET_S} s {met}"
        )
        print(
            f"serve {n:>6} tools: first tools/list      {_fmt(listed, 's')}"
            f"   cold load alone (in-process) {load['median']:.2f} s   no target"
        )
        rows["serve"][n] = {
            **row,
            "initialize_target_s": SERVE_TARGET_S,
            "initialize_vs_sdk_import": init["median"] / sdk,
        }
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="sizes 200,1000 and 3 rounds")
    parser.add_argument("--rounds", type=int, help="rounds per variant (default 9 start-up, 5 serve)")
    parser.add_argument("--sizes", help="comma-separated tool counts for serve (default 1000,10000)")
    parser.add_argument("--workdir", type=Path, help="reuse generated trees here (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([200, 1000] if args.quick else [1000, 10_000])
    startup_rounds = args.rounds or (3 if args.quick else 9)
    serve_rounds = args.rounds or (3 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        workdir: Path = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(workdir, 0o755)  # noqa: S103 -- discovery refuses group/world-writable roots, not readable ones
        env_home = workdir / "home"  # no user policy or state of the person running the benchmark
        env_home.mkdir(exist_ok=True)
        os.environ.update(HOME=str(env_home), XDG_CONFIG_HOME=str(env_home / ".config"))
        os.environ.update(XDG_STATE_HOME=str(env_home / ".state"))
        startup = startup_rows(startup_rounds, workdir)
        serve = serve_rows(sizes, serve_rounds, workdir)
        if args.json:
            import contextlib
            import io

            with contextlib.redirect_stdout(io.StringIO()):
                rows = report(startup, serve)
            print(json.dumps(rows, indent=2))
        else:
            report(startup, serve)


if __name__ == "__main__":
    main()
