"""``tooldir drill [DIR] [--only ID...]``: rehearse poisoned-directory incidents."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from .._data import SCENARIOS
from ..drill import DrillResult, load_scenarios, run_drill, run_drills, select
from .common import EXIT_FOUND_ERRORS, EXIT_OK, CommandError, console, print_json, safe


def register(sub: Any) -> None:
    p = sub.add_parser(
        "drill",
        help="plant poisoned tool directories in a temporary home and prove nothing bad happens",
        description="Run every scenario of DIR (default: the scenarios bundled with tooldir) in an isolated "
        "temporary home and state dir; exit 0 only if every drill passes.",
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
    p.add_argument("--json", action="store_true", help="print one JSON document for machines")
    p.set_defaults(handler=cmd_drill)


def bundled_scenarios() -> Path | None:
    """The scenarios shipped inside the package (missing only from a broken install)."""
    return SCENARIOS if SCENARIOS.is_dir() else None


def cmd_drill(args: argparse.Namespace) -> int:
    directory = Path(args.dir) if args.dir else bundled_scenarios()
    if directory is None:
        raise CommandError("no bundled scenarios next to this installation; pass a scenario DIR")
    scenarios = load_scenarios(directory)
    if not scenarios:
        raise CommandError(f"{directory}: no scenario folders (folders with scenario.toml)")
    try:
        chosen = select(scenarios, args.only)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    results: list[DrillResult] = []
    if args.json:
        results = run_drills(chosen)
    else:
        with console().status("running drills...") as status:
            for s in chosen:
                status.update(safe(f"drill {s.drill_id}"))
                results.append(run_drill(s))
    passed = all(r.passed for r in results)
    if args.json:
        print_json({"drills": [r.to_json() for r in results], "passed": passed})
    else:
        print_results(results)
    return EXIT_OK if passed else EXIT_FOUND_ERRORS


def print_results(results: list[DrillResult]) -> None:
    table = Table("id", "expectation", "result", "pass", title="tooldir drill")
    for r in results:
        failures = [c for c in r.checks if not c.passed]
        result = safe(r.observed)
        for c in failures:
            result.append("\n")
            result.append_text(safe(f"{c.name}: {c.message}", "red"))
        table.add_row(
            safe(r.scenario.drill_id, "bold"),
            safe(r.scenario.expected),
            result,
            safe("pass", "green") if r.passed else safe("FAIL", "bold red"),
        )
    out = console()
    out.print(table)
    failed = sum(not r.passed for r in results)
    seconds = sum(r.seconds for r in results)
    verdict = "all passed" if not failed else f"{failed} failed"
    out.print(safe(f"{len(results)} drills, {verdict} ({seconds:.1f} s)"))
