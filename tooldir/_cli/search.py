"""``tooldir search``, ``catalog`` and ``eval``: what the model can find, what it costs, how well it ranks."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .common import (
    EXIT_FOUND_ERRORS,
    EXIT_OK,
    CommandError,
    common_options,
    config_from_args,
    console,
    print_json,
    safe,
)
from .progress import load_roots, progress

if TYPE_CHECKING:
    from ..deferred.session import Session
    from ..snapshot.store import Snapshot

# kept equal to tooldir.deferred.catalog.FORMATS and tooldir.deferred.session.MAX_TOP_K (tests/test_startup_imports.py):
# registering the options must not import the catalog and the session (tooldir --help stays cheap)
FORMATS = ("anthropic", "openai", "mcp")
MAX_TOP_K = 20
EVAL_RANKERS = ("bm25f", "hybrid", "ensemble")  # kept equal to tooldir.deferred.evaluate.RANKERS (tests/unit/search)


def register(sub: Any) -> None:
    parent = common_options()
    p = sub.add_parser("search", parents=[parent], help="rank tools for a query, as tool_search would")
    p.add_argument("query", help="keywords ('+word' required), or 'select:a,b' for exact names")
    p.add_argument("--top-k", type=int, default=5, metavar="N", help=f"matches to show (1-{MAX_TOP_K}; default 5)")
    p.set_defaults(handler=cmd_search)
    p = sub.add_parser("catalog", parents=[parent], help="the compact directory of deferred tools and a token report")
    p.add_argument("--format", choices=FORMATS, help="also print the first-turn tool definitions in this format")
    p.set_defaults(handler=cmd_catalog)
    p = sub.add_parser("eval", parents=[parent], help="score tool search on a labelled set beside plain BM25")
    p.add_argument("--tools", required=True, metavar="FILE", help='JSON lines {"name", "description", "input_schema"}')
    p.add_argument("--queries", required=True, metavar="FILE", help='JSON lines {"query", "relevant": [names]}')
    p.add_argument(
        "--ranker",
        choices=EVAL_RANKERS,
        help="the active ranker (default: the best installed); every ranker available is scored beside it",
    )
    p.set_defaults(handler=cmd_eval)


@contextlib.contextmanager
def _session(args: argparse.Namespace) -> Iterator[tuple[Session, Snapshot]]:
    """The first turn of one session over the roots (the model has seen the eager tools). No usage
    priors are read or written: the command shows what a fresh conversation would find."""
    from ..toolbox import open_config

    config = config_from_args(args)
    with open_config(config, load=lambda loader: load_roots(loader.config)) as toolbox:
        session = toolbox.session(state_dir=None)
        session.working_set()
        yield session, toolbox.snapshot


def cmd_search(args: argparse.Namespace) -> int:
    if not 1 <= args.top_k <= MAX_TOP_K:
        raise CommandError(f"--top-k must be from 1 to {MAX_TOP_K}")
    if not args.query.strip():
        raise CommandError("the query is empty")
    with _session(args) as (session, _):
        result = session.tool_search(queries=[args.query], top_k=args.top_k, scope="all")
    if args.json:
        data = result.to_json()
        data.pop("hint", None)
        print_json(data)
        return EXIT_OK if result.matches else EXIT_FOUND_ERRORS
    from rich.table import Table

    from ..deferred.catalog import summary

    out = console()
    table = Table("name", "score", "source", "load state", "summary", title=f"tooldir search — {args.query}")
    for m in result.matches:
        score = "exact" if m.score is None else f"{m.score:.3f}"
        table.add_row(
            safe(m.name, "bold"), score, m.source, m.load_state, safe(summary(str(m.schema.get("description", ""))))
        )
    out.print(table)
    for item in result.missing:
        out.print(safe(f"missing: {item}", "yellow"))
    for name, reason in result.unavailable:
        out.print(safe(f"unavailable: {name} — {reason}", "red"))
    return EXIT_OK if result.matches else EXIT_FOUND_ERRORS


def cmd_catalog(args: argparse.Namespace) -> int:
    from ..deferred.catalog import directory_text

    with _session(args) as (session, snap):
        entries = session.directory()
        working = session.working_set()
        report = session.token_report()
        decision = session.defer_decision
    if args.json:
        data: dict[str, Any] = {
            "snapshot": {"id": snap.id, "generation": snap.generation},
            "directory": [e.to_json() for e in entries],
            "directory_text": directory_text(entries),
            "working_set": [d.name for d in working],
            "tokens": report.to_json(),
            "defer": decision,
        }
        if args.format:
            data["tools"] = [d.render(args.format) for d in working]
        print_json(data)
        return EXIT_OK
    from rich.table import Table

    out = console()
    table = Table("name", "risk", "summary", title=f"deferred tools ({len(entries)})")
    for e in entries:
        table.add_row(safe(e.name, "bold"), e.risk or "builtin", safe(e.summary))
    out.print(table)
    out.print(safe("first turn: " + (", ".join(d.name for d in working) or "(no tools)")))
    label = "exact" if report.exact else "ESTIMATE"
    out.print(
        safe(
            f"tokens ({report.method}, {label}): all schemas {report.full_load}, first turn {report.first_turn} "
            f"({report.first_turn_share:.1%}), saving {report.saving}"
        )
    )
    out.print(safe(f"defer: {decision.get('reason', decision.get('mode'))}"))
    if args.format:
        print_json([d.render(args.format) for d in working])
    return EXIT_OK


def cmd_eval(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..deferred.evaluate import evaluate, read_queries, read_tools

    with progress("reading the labelled set"):  # stderr, only on a terminal
        docs = read_tools(args.tools)
        queries = read_queries(args.queries, {d.name for d in docs})
    with progress("searching") as tracker:
        report = evaluate(
            docs,
            queries,
            ranker=args.ranker or "default",
            progress=lambda done, total: tracker.label(f"searching: {done}/{total} rankings"),
        )
    if args.json:
        print_json(report.to_json())
        return EXIT_OK
    out = console()
    groups = [("all", report.n, report.rankers)]
    groups += [(split, int(g["n"]), g["rankers"]) for split, g in report.splits.items()]
    for label, n, rankers in groups:
        names = list(rankers)
        table = Table(
            "metric",
            *names,
            f"Δ {report.ranker} vs plain_bm25",
            title=f"tool search ({label}: {n} queries, {report.tools} tools; active ranker {report.ranker})",
        )
        for key, base in rankers["plain_bm25"].items():
            value = rankers[report.ranker][key]
            table.add_row(key, *(f"{rankers[r][key]:.3f}" for r in names), f"{value - base:+.3f}")
        out.print(table)
    if report.note:
        out.print(safe(f"semantic ranker not used: {report.note}", "yellow"))
    return EXIT_OK
