"""``tooldir drill [DIR] [--only ID...] [--list] [--require-all]``: rehearse poisoned-directory incidents."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._data import SCENARIOS
from .common import EXIT_FOUND_ERRORS, EXIT_OK, CommandError, console, print_json, safe
from .progress import progress

if TYPE_CHECKING:
    from ..drill import DrillResult, Scenario


def register(sub: Any) -> None:
    p = sub.add_parser(
        "drill",
        help="plant poisoned tool directories in a temporary home and prove nothing bad happens",
        description="Run every scenario of DIR (default: the scenarios bundled with tooldir) in an isolated "
        "temporary home and state dir. Exit 0 when every drill that can run on this machine passed; drills that "
        "need what this machine lacks (root, a working sandbox) are reported as not runnable here.",
    )
    p.add_argument(
        "dir", nargs="?", metavar="DIR", help="a folder of scenario folders (see fixtures/poisoned/README.md)"
    )
    p.add_argument(
        "--only",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID",
        help="run only these threat ids, drill ids or scenario folders (globs allowed, e.g. 'fs:*')",
    )
    p.add_argument("--list", action="store_true", help="list the drills (id, threat, title, requires); run nothing")
    p.add_argument(
        "--require-all",
        action="store_true",
        help="also fail (exit 1) when a drill cannot run on this machine (e.g. needs root)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document for machines")
    p.set_defaults(handler=cmd_drill)


def bundled_scenarios() -> Path | None:
    """The scenarios shipped inside the package (missing only from a broken install)."""
    return SCENARIOS if SCENARIOS.is_dir() else None


def cmd_drill(args: argparse.Namespace) -> int:
    from ..drill import load_scenarios, run_drill, select, verdict
    from . import command_line

    directory = Path(args.dir).resolve() if args.dir else bundled_scenarios()
    if directory is None:
        raise CommandError("no bundled scenarios next to this installation; pass a scenario DIR")
    scenarios = load_scenarios(directory)
    if not scenarios:
        raise CommandError(f"{directory}: no scenario folders (folders with scenario.toml)")
    try:
        chosen = select(scenarios, args.only)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if args.list:
        return list_drills(chosen, as_json=args.json)
    results: list[DrillResult] = []
    with progress("drills", total=len(chosen)) as tracker:  # stderr, only on a terminal
        for s in chosen:
            tracker.label(s.drill_id)
            results.append(run_drill(s, cli=command_line()))
            tracker.advance()
    passed = verdict(results, require_all=args.require_all)
    if args.json:
        counts = Counter(r.status for r in results)
        print_json(
            {
                "drills": [r.to_json() for r in results],
                "counts": {status: counts.get(status, 0) for status in ("passed", "failed", "not-runnable")},
                "require_all": args.require_all,
                "passed": passed,
            }
        )
    else:
        print_results(results, passed=passed, require_all=args.require_all)
    return EXIT_OK if passed else EXIT_FOUND_ERRORS


def list_drills(scenarios: list[Scenario], *, as_json: bool) -> int:
    rows = [
        {"id": s.drill_id, "threat": s.threat, "title": s.title, "requires": list(s.requires), "scenario": s.name}
        for s in scenarios
    ]
    if as_json:
        print_json({"drills": rows})
        return EXIT_OK
    from rich.table import Table

    table = Table("id", "threat", "title", "requires", title="tooldir drills")
    for s in scenarios:
        table.add_row(safe(s.drill_id, "bold"), safe(s.threat), safe(s.title), safe(", ".join(s.requires) or "-"))
    out = console()
    out.print(table)
    out.print(safe(f"{len(scenarios)} drills"))
    return EXIT_OK


_VERDICT = {"passed": ("pass", "green"), "failed": ("FAIL", "bold red"), "not-runnable": ("not run", "yellow")}


def print_results(results: list[DrillResult], *, passed: bool, require_all: bool) -> None:
    from rich.table import Table

    table = Table("id", "expectation", "result", "status", title="tooldir drill")
    for r in results:
        if r.status == "not-runnable":
            result = safe(r.reason or "", "yellow")
        else:
            result = safe(r.observed)
            for c in r.checks:
                if not c.passed and c.message != r.observed:
                    result.append("\n")
                    result.append_text(safe(f"{c.name}: {c.message}", "red"))
        label, style = _VERDICT[r.status]
        table.add_row(safe(r.scenario.drill_id, "bold"), safe(r.scenario.expected), result, safe(label, style))
    out = console()
    out.print(table)
    counts = Counter(r.status for r in results)
    seconds = sum(r.seconds for r in results)
    if counts["passed"] == len(results):
        summary = f"{len(results)} drills, all passed"
    else:
        parts = [f"{counts['passed']} passed", f"{counts['failed']} failed"]
        if counts["not-runnable"]:
            needs = sorted({r.unavailable or "" for r in results if r.status == "not-runnable"})
            parts.append(f"{counts['not-runnable']} not runnable here ({'; '.join(needs)})")
        summary = f"{len(results)} drills: " + ", ".join(parts)
    if not passed and not counts["failed"]:
        summary += " — exit 1: " + ("--require-all is set" if require_all and counts["passed"] else "no drill ran")
    out.print(safe(f"{summary} ({seconds:.1f} s)"))
