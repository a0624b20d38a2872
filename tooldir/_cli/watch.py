"""``tooldir watch``: keep loading as the tool directories change; one line per published snapshot."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from .._internal.gcpause import gc_paused
from .common import EXIT_OK, CommandError, common_options, config_from_args, console, plural, safe

if TYPE_CHECKING:
    from ..model import ToolRecord
    from ..snapshot.store import Snapshot, SnapshotDiff
    from ..snapshot.watch import WatchProblem


def register(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        parents=[common_options()],
        help="watch the tool roots and report every new snapshot (JSON lines with --json)",
        description="Load every tool root, then watch them (and the user's state and policy) and print one "
        "line per published snapshot: its generation and what changed. Stop with Ctrl-C or SIGTERM.",
    )
    p.add_argument(
        "--debounce-ms", type=int, default=50, metavar="MS", help="quiet time before a batch is rebuilt (default 50)"
    )
    p.set_defaults(handler=cmd_watch)


def snapshot_line(snap: Snapshot, change: SnapshotDiff) -> dict[str, Any]:
    """The JSON line for one published snapshot."""
    statuses = Counter(str(t.status) for t in snap.tools)
    severities = Counter(str(d.severity) for d in snap.diagnostics)
    return {
        "event": "snapshot",
        "snapshot": {"id": snap.id, "generation": snap.generation},
        "previous_generation": change.old_generation,
        "diff": change.to_json(),
        "counts": {s: statuses.get(s, 0) for s in ("active", "pending", "shadowed", "rejected")},
        "diagnostics": {s: severities.get(s, 0) for s in ("error", "warning", "info")},
    }


def problem_line(problem: WatchProblem) -> dict[str, Any]:
    return {"event": "problem", **problem.to_json()}


class _Printer:
    """Serialises output from the worker thread and the main thread; a closed pipe stops the watch."""

    def __init__(self, as_json: bool, stop: threading.Event) -> None:
        self.as_json = as_json
        self.stop = stop
        self.lock = threading.Lock()

    def closed(self) -> None:
        # the reader went away (e.g. `| head -1`): stop quietly, and keep the interpreter's final
        # flush from complaining about the broken pipe
        self.stop.set()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)

    def _emit(self, line: Callable[[], dict[str, Any]], human: Callable[[], None]) -> None:
        """One JSON line (``--json``) or the human form, under the lock."""
        with self.lock:
            try:
                if self.as_json:
                    sys.stdout.write(json.dumps(line(), ensure_ascii=False) + "\n")
                    sys.stdout.flush()
                else:
                    human()
            except (BrokenPipeError, ValueError):
                self.closed()

    def snapshot(self, snap: Snapshot, change: SnapshotDiff) -> None:
        self._emit(lambda: snapshot_line(snap, change), lambda: _print_summary(snap, change))

    def problem(self, problem: WatchProblem) -> None:
        self._emit(
            lambda: problem_line(problem),
            lambda: console().print(safe(f"! {problem.code}: {problem.message}", "yellow")),
        )


def _print_summary(snap: Snapshot, change: SnapshotDiff) -> None:
    out = console()
    codes = sorted({d.code for d in snap.diagnostics if d.severity == "error"})
    errors = sum(1 for d in snap.diagnostics if d.severity == "error")
    offered = len(snap.by_name)
    head = (
        f"generation {snap.generation} ({snap.id}): {plural(offered, 'tool')} offered, "
        f"+{len(change.added)} -{len(change.removed)} ~{len(change.changed)} "
        f"status {len(change.status_changed)}, {plural(errors, 'error')}" + (f" ({', '.join(codes)})" if codes else "")
    )
    out.print(safe(head, "bold"))

    def where(t: ToolRecord) -> str:
        return f"{t.name} ({t.source}, {t.status}) {t.path or '(builtin)'}"

    for t in change.added:
        out.print(safe(f"  + {where(t)}", "green"))
    for t in change.removed:
        out.print(safe(f"  - {where(t)}", "red"))
    for _, t in change.changed:
        out.print(safe(f"  ~ {where(t)} now {t.digest}", "yellow"))
    for old, new in change.status_changed:
        out.print(safe(f"  * {new.name} ({new.source}) {old.status} -> {new.status}", "cyan"))


def cmd_watch(args: argparse.Namespace) -> int:
    from ..policy import default_policy_path
    from ..snapshot.loader import Loader
    from ..toolbox import open_config

    if args.debounce_ms < 0 or args.debounce_ms > 60_000:
        raise CommandError("--debounce-ms must be between 0 and 60000")
    config = config_from_args(args)
    stop = threading.Event()
    printer = _Printer(args.json, stop)

    def cold_load(loader: Loader) -> Snapshot:
        with gc_paused():  # the cold load; the watcher's small rebuilds run with the GC on
            return loader.load()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # the library's watch: the upstream tools of the MCP server packages' last listings, the
        # policy file followed, no server started
        with open_config(
            config,
            policy_file=args.policy or default_policy_path(),
            watch=True,
            load=cold_load,
            on_snapshot=printer.snapshot,
            on_problem=printer.problem,
            debounce_s=args.debounce_ms / 1000,
        ):
            stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
