"""``tooldir scan``, ``list`` and ``show``: what would load, and why."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from .common import (
    EXIT_FOUND_ERRORS,
    EXIT_OK,
    CommandError,
    common_options,
    config_from_args,
    console,
    print_json,
    render_json,
    rule,
    safe,
    stdout_is_terminal,
)
from .progress import load_roots

SCAN_FORMATS = ("table", "json", "sarif")
if TYPE_CHECKING:
    from ..deferred.defer import DeferralPlan
    from ..model import ToolRecord
    from ..netallow import NetworkGrant
    from ..policy import Policy
    from ..read import scanmemo
    from ..snapshot.loader import LoadConfig
    from ..snapshot.store import Snapshot

# keyed by the values of tooldir.model's Status and Severity (StrEnums): the model stays unimported
_STATUS_STYLE = {"active": "green", "pending": "yellow", "shadowed": "dim", "rejected": "red"}
_SEVERITY_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def register(sub: Any) -> None:
    parent = common_options()
    p = sub.add_parser("scan", parents=[parent], help="load every tool root and report tools and diagnostics")
    p.add_argument("--strict", action="store_true", help="exit 1 if any error diagnostic was found")
    p.add_argument(
        "--format",
        choices=SCAN_FORMATS,
        help="table (people, the default), json (the same as --json) or sarif (SARIF 2.1.0 for code scanning)",
    )
    p.set_defaults(handler=cmd_scan)
    p = sub.add_parser("list", parents=[parent], help="list the tools that would be offered (active and pending)")
    p.add_argument("--all", action="store_true", help="also list shadowed and rejected tools")
    p.set_defaults(handler=cmd_list)
    p = sub.add_parser("show", parents=[parent], help="show one tool: manifest, files, trust and diagnostics")
    p.add_argument("name")
    p.set_defaults(handler=cmd_show)


def load_snapshot(args: argparse.Namespace) -> tuple[Snapshot, DeferralPlan, Policy]:
    """The snapshot, the static deferral plan a fresh session over it would start from (so
    ``deferred`` here is what ``catalog``, a session and ``tooldir serve`` do) and the policy."""
    config, snap, plan = _load(args)
    return snap, plan, config.policy


def _load(args: argparse.Namespace) -> tuple[LoadConfig, Snapshot, DeferralPlan]:
    from ..deferred.staticplan import initial_plan

    config = config_from_args(args)
    # the load records the signed versions it verified (rollback protection), as every load does
    snap = load_roots(config)
    if any(t.server is not None for t in snap.tools):  # MCP server packages: their last listings
        from ..upstream import with_last_listings  # (never starts a server)

        snap = with_last_listings(snap, config.state_dir, config.policy, config.builtins)
    # only the deferred set is shown: decided from token bounds when they suffice (no tokenizer load)
    return config, snap, initial_plan(snap, policy=config.policy, builtins=config.builtins, by_bounds=True)


def record_json(record: ToolRecord, plan: DeferralPlan, policy: Policy) -> dict[str, Any]:
    """A record as ``scan``/``list``/``show`` print it: ``deferred`` is the plan's decision,
    ``network`` what the policy grants it (``false``, ``true`` or ``{"allow": [...]}``)."""
    data = record.to_json(plan.is_deferred)
    grant = network_grant(record, policy)
    data["network"] = None if grant is None else grant.to_json()
    if record.upstream is not None:  # an MCP server package's tool: when it was last listed
        data["upstream"] = {
            "package": record.upstream.package,
            "tool": record.upstream.tool,
            "definition_digest": record.upstream.definition_digest,
            "listed_at": record.upstream.listed_at,
        }
    return data


def network_grant(record: ToolRecord, policy: Policy) -> NetworkGrant | None:
    """The network the policy grants ``record`` (None for a builtin)."""
    spec = record.manifest.execute if record.manifest is not None else None
    if spec is None and record.server is not None:
        spec = record.server.server
    return None if spec is None else policy.sandbox.network_grant(spec.declared_network())


def network_text(grant: NetworkGrant) -> str:
    """What ``show`` prints about a tool's network."""
    if grant.kind == "unrestricted":
        return "unrestricted (any host: sandbox.network_unrestricted = true)"
    if grant.kind == "allow":
        listed = ", ".join(str(e) for e in grant.allow) or "nothing (the policy's sandbox.network_allow covers none)"
        return f"only through tooldir's proxy, to {listed}"
    return "none" + (f" ({grant.why})" if grant.why else "")


def scan_json(snap: Snapshot, plan: DeferralPlan, policy: Policy) -> dict[str, Any]:
    """The ``scan --json`` document (:meth:`Snapshot.to_json` with the plan's ``deferred``; built
    once, not rendered twice: at 10k tools the first rendering alone held ~6 MB)."""
    return {
        "snapshot": {"id": snap.id, "generation": snap.generation},
        "tools": [record_json(t, plan, policy) for t in snap.tools],
        "diagnostics": [d.to_json() for d in snap.diagnostics],
    }


def scan_format(args: argparse.Namespace) -> str:
    """``--format``, with ``--json`` an alias of ``--format json``."""
    if args.json and args.format not in (None, "json"):
        raise CommandError(f"--json is --format json; it cannot be combined with --format {args.format}")
    return str(args.format or ("json" if args.json else "table"))


def cmd_scan(args: argparse.Namespace) -> int:
    fmt = scan_format(args)
    pending = _memo_lookup(args, fmt)
    if isinstance(pending, int):  # a memo hit: its output is printed, this is its exit status
        return pending
    config, snap, plan = _load(args)
    has_errors = any(d.severity == "error" for d in snap.diagnostics)
    status = EXIT_FOUND_ERRORS if args.strict and has_errors else EXIT_OK
    if pending is None:
        print_scan(fmt, snap, plan, args, config)
        return status
    text = render_scan(fmt, snap, plan, args, config)
    sys.stdout.write(text)
    sys.stdout.flush()
    _memo_save(pending, config, snap, text, status)
    return status


def print_scan(fmt: str, snap: Snapshot, plan: DeferralPlan, args: argparse.Namespace, config: LoadConfig) -> None:
    if fmt == "json":
        print_json(scan_json(snap, plan, config.policy))
    elif fmt == "sarif":
        from .sarif_out import scan_sarif

        print_json(scan_sarif(snap, project=args.project, config=config))
    else:
        print_tools(snap.tools, plan, title=f"tooldir scan — snapshot {snap.id} (generation {snap.generation})")
        print_diagnostics(snap)


def render_scan(fmt: str, snap: Snapshot, plan: DeferralPlan, args: argparse.Namespace, config: LoadConfig) -> str:
    """What :func:`print_scan` prints into a pipe or a file (never a terminal), as text."""
    if fmt == "table":
        with console().capture() as captured:
            print_scan(fmt, snap, plan, args, config)
        return captured.get()
    if fmt == "json":
        return render_json(scan_json(snap, plan, config.policy))
    from .sarif_out import scan_sarif

    return render_json(scan_sarif(snap, project=args.project, config=config))


def _memo_lookup(args: argparse.Namespace, fmt: str) -> int | scanmemo.Pending | None:
    """Before the library is imported: the scan memo (:mod:`tooldir.read.scanmemo`). A hit prints the
    stored output and gives its exit status; a miss gives what the memo's writer needs (None:
    no memo for this scan, e.g. ``--no-index`` or stdout is a terminal). Never raises: any
    problem is a miss."""
    from ..read import scanmemo

    keyed = memo_request(args, fmt)
    if keyed is None:
        return None
    req, key, dist_paths = keyed
    try:
        hit = scanmemo.lookup(req, key)
    except (OSError, ValueError):
        return None
    if hit is not None:
        sys.stdout.write(hit.text)
        sys.stdout.flush()
        return hit.status
    return scanmemo.prepare(req, key, dist_paths)


def memo_request(args: argparse.Namespace, fmt: str) -> tuple[scanmemo.Request, str, list[str]] | None:
    """The memo request of this scan, its key and the installed distributions' paths; None when
    this scan has no memo (``--no-index``, ``TOOLDIR_NO_INDEX=1``, stdout is a terminal) or the
    normal path must say what is wrong with the options."""
    from ..read import scanmemo

    if not scanmemo.enabled(no_index=bool(getattr(args, "no_index", False))) or stdout_is_terminal():
        return None
    options = {k: getattr(args, k, None) for k in _MEMO_OPTIONS}
    try:
        req = scanmemo.request(
            fmt=fmt,
            strict=bool(args.strict),
            project=args.project,
            user_dirs=args.user_dir,
            policy=args.policy,
            state=args.state_dir,
            options=options,
        )
        keyed = None if req is None else scanmemo.key(req)
    except (OSError, ValueError):
        return None
    if req is None or keyed is None:
        return None
    return req, keyed[0], keyed[1]


_MEMO_OPTIONS = ("command", "format", "json", "strict", "project", "user_dir", "policy", "state_dir", "no_index")


def _memo_save(pending: scanmemo.Pending, config: LoadConfig, snap: Snapshot, text: str, status: int) -> None:
    from ..read import scanmemo

    sources = config.policy.sources
    required = {str(root.source): bool(sources.for_source(root.source).require) for root in config.roots}
    if config.index and scanmemo.memoizable(
        tools=snap.tools, diagnostics=snap.diagnostics, trust_required=required, read_only=config.read_only
    ):
        scanmemo.save(pending, text, status)


def cmd_list(args: argparse.Namespace) -> int:
    snap, plan, policy = load_snapshot(args)
    tools = snap.tools if args.all else tuple(snap.by_name.values())
    if args.json:
        print_json(
            {
                "snapshot": {"id": snap.id, "generation": snap.generation},
                "tools": [record_json(t, plan, policy) for t in tools],
            }
        )
    else:
        print_tools(tools, plan, title="tools")
    return EXIT_OK


def secrets_of(record: ToolRecord, config: LoadConfig) -> list[dict[str, Any]]:
    """What ``show`` says of the secrets ``record`` declares (granted? set?), never a value."""
    from ..run.secrets import SecretsFileError, describe, read_secrets_file

    declared = record.manifest.execute.secrets if record.manifest is not None else ()
    if not declared:
        return []
    entries, problem = None, None
    try:
        entries = read_secrets_file()
    except SecretsFileError as exc:
        problem = exc.diagnostics()
    return describe(record.name, declared, config.policy.secrets.grants, entries, problem)


def _secret_line(item: dict[str, Any], tool: str) -> str:
    granted = "granted" if item["granted"] else f"NOT granted (add it to [secrets.grants] {tool} in your policy)"
    value = {"set": "set in secrets.toml", "command": "given by a command (run at call time)"}.get(
        item["value"], "missing from secrets.toml" if item["value"] == "missing" else item["value"]
    )
    return f"  {item['name']}: {granted}; {value}"


def cmd_show(args: argparse.Namespace) -> int:
    config, snap, plan = _load(args)
    policy = config.policy
    records = snap.records(args.name)
    if not records:
        raise CommandError(f"no tool named {args.name!r} in any root", exit_code=EXIT_FOUND_ERRORS)
    if args.json:
        details = [detail_json(r, plan, policy) for r in records]
        for record, detail in zip(records, details, strict=True):
            if record.manifest is not None and record.manifest.execute.secrets:
                detail["secrets"] = secrets_of(record, config)
        if any(r.upstream is not None or r.server is not None for r in records):
            from .upstream import upstream_detail

            details = [upstream_detail(r, d, args) for r, d in zip(records, details, strict=True)]
        print_json({"snapshot": {"id": snap.id, "generation": snap.generation}, "records": details})
        return EXIT_OK
    out = console()
    for record in records:
        rule(out, safe(f"{record.name} ({record.source}) — {record.status}"))
        out.print(safe(f"path:   {record.path}"))
        out.print(safe(f"trust:  {record.trust.method}"))
        out.print(safe(f"digest: {record.digest}"))
        if record.shadowed_by:
            out.print(safe(f"shadowed by: {record.shadowed_by}"))
        if record.upstream is not None or record.server is not None:
            from .upstream import print_upstream

            print_upstream(record, args)
        grant = network_grant(record, policy)
        if grant is not None:
            out.print(safe(f"network: {network_text(grant)}"))
        if record.manifest is not None and record.manifest.execute.secrets:
            out.print(safe("secrets:"))
            for item in secrets_of(record, config):
                out.print(safe(_secret_line(item, record.name)))
        if record.manifest is not None:
            out.print(safe("manifest:"))
            out.print(safe(json.dumps(record.manifest.model_dump(mode="json"), indent=2, ensure_ascii=False)))
        if record.files:
            from rich.table import Table

            table = Table("file", "bytes", "sha256", title="files")
            for f in record.files:
                table.add_row(safe(f.path), str(f.size), f.sha256)
            out.print(table)
        if record.diagnostics:
            print_diagnostic_rows(record.diagnostics)
    return EXIT_OK


def detail_json(record: ToolRecord, plan: DeferralPlan, policy: Policy) -> dict[str, Any]:
    data = record_json(record, plan, policy)
    data["manifest"] = None if record.manifest is None else record.manifest.model_dump(mode="json")
    data["files"] = [
        {"path": f.path, "sha256": f.sha256, "size": f.size, "executable": f.executable} for f in record.files
    ]
    data["shadowed_by"] = record.shadowed_by
    data["diagnostics"] = [d.to_json() for d in record.diagnostics]
    if record.server is not None:
        data["manifest"] = record.server.model_dump(mode="json")
    return data


def print_tools(tools: tuple[ToolRecord, ...] | list[ToolRecord], plan: DeferralPlan, *, title: str) -> None:
    from rich.table import Table

    table = Table("name", "source", "status", "trust", "risk", "deferred", "path", title=title)
    for t in tools:
        table.add_row(
            safe(t.name, "bold"),
            str(t.source),
            safe(str(t.status), _STATUS_STYLE[t.status]),
            safe(t.trust.method),
            str(t.risk or "-"),
            "yes" if plan.is_deferred(t.name) else "no",
            safe(t.path or "(builtin)"),
        )
    console().print(table)


def print_diagnostics(snap: Snapshot) -> None:
    if snap.diagnostics:
        print_diagnostic_rows(snap.diagnostics)
    else:
        console().print("no diagnostics")


def print_diagnostic_rows(diags: Any) -> None:
    from rich.table import Table

    table = Table("severity", "code", "tool", "pointer", "message", title="diagnostics")
    for d in diags:
        table.add_row(
            safe(str(d.severity), _SEVERITY_STYLE[d.severity]),
            safe(d.code),
            safe(d.tool or ""),
            safe(d.pointer or ""),
            safe(d.message),
        )
    console().print(table)
