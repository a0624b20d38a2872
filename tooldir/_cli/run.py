"""``tooldir run NAME --input JSON``, ``tooldir audit verify`` and ``tooldir audit head``.

``run --json`` prints ``{"ok", "content", "error": {"code", "message"} | null, "audit_id", "sandbox"}``:
the four keys of DESIGN §8, plus ``"sandbox": {"backend", "memory_bound"}`` for a directory tool
(``memory_bound`` is ``"cgroup"``, ``"cgroup-v1"``, ``"systemd-scope"``, ``"rlimit+seccomp"`` or, unsandboxed,
``"rlimit"``), null otherwise.
Exit codes: 0 ok; 1 the tool ran and failed (``tool-failed``, ``tool-error``, ``timeout``, ...);
2 bad input or unknown tool; 3 refused (permission, hooks, trust status, sandbox unavailable).

``audit verify [--expect-head SEQ:HASH] [--allow-missing-head]`` exits 0 when the chain is intact
and ends at the recorded head (and passes through the expected one), 1 otherwise; ``--json`` prints
``{"path", "ok", "lines", "head": {"seq", "hash"}, "recorded_head": {"seq", "hash"} | null,
"broken_line", "reason_code", "reason", "problems": [{"line", "code", "severity", "message"}]}``.
``audit head`` prints the recorded head as ``SEQ:HASH`` (``--json``: ``{"path", "seq", "hash"}``),
the form to ship elsewhere and give back to ``--expect-head``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codes import CallErrorCode
from ..names import SEPARATOR  # a constant only
from .common import (
    EXIT_FOUND_ERRORS,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandError,
    common_options,
    config_from_args,
    console,
    console_err,
    print_json,
    safe,
)
from .progress import load_roots

if TYPE_CHECKING:
    from ..run.registry import CallResult, Registry

USAGE_CODES = frozenset({CallErrorCode.INVALID_INPUT, CallErrorCode.UNKNOWN_TOOL})
REFUSED_CODES = frozenset(
    {
        CallErrorCode.NOT_ACTIVE,
        CallErrorCode.SESSION_REFUSED,
        CallErrorCode.PERMISSION_DENIED,
        CallErrorCode.HOOK_DENIED,
        CallErrorCode.SANDBOX_UNAVAILABLE,
        CallErrorCode.CHANGED_SINCE_VERIFICATION,
        CallErrorCode.SECRET_UNAVAILABLE,
        CallErrorCode.AUDIT_UNAVAILABLE,
    }
)


def register(sub: Any) -> None:
    parent = common_options()
    p = sub.add_parser("run", parents=[parent], help="run one tool through the registry (sandboxed)")
    p.add_argument("name")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--input", metavar="JSON", help="the tool input, a JSON object")
    group.add_argument("--input-file", metavar="FILE", help="read the input JSON object from FILE ('-' = stdin)")
    p.set_defaults(handler=cmd_run)
    p = sub.add_parser("audit", help="the audit log")
    audit_sub = p.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    v = audit_sub.add_parser("verify", parents=[parent], help="check the audit log's hash chain, byte for byte")
    v.add_argument(
        "--expect-head",
        metavar="SEQ:HASH",
        help="a head printed earlier by 'tooldir audit head' and kept elsewhere: the log must pass through it",
    )
    v.add_argument(
        "--allow-missing-head",
        action="store_true",
        help="WEAKER: accept a log without a recorded head (a log of an older version), as a warning",
    )
    v.set_defaults(handler=cmd_audit_verify)
    h = audit_sub.add_parser("head", parents=[parent], help="print the audit chain head (SEQ:HASH) to keep elsewhere")
    h.set_defaults(handler=cmd_audit_head)


def exit_code_for(result: CallResult) -> int:
    if result.ok:
        return EXIT_OK
    code = result.error.code if result.error else ""
    if code in USAGE_CODES:
        return EXIT_USAGE
    if code in REFUSED_CODES:
        return EXIT_REFUSED
    return EXIT_FOUND_ERRORS


def sandbox_report(registry: Registry, record: object | None) -> dict[str, str] | None:
    """Which backend runs this directory tool, or the MCP server of this upstream tool, and what
    bounds its memory (None for other tools)."""
    if record is not None and getattr(record, "upstream", None) is not None:
        from ..sandbox.bubblewrap import choose_bound

        return {"backend": "bubblewrap", "memory_bound": choose_bound(registry.policy.sandbox).kind}
    box = registry.sandbox() if record is not None else None
    if box is None:
        return None
    return {"backend": box.name, "memory_bound": str(getattr(box, "memory_bound", "unknown"))}


def _read_input(args: argparse.Namespace, limit: int) -> dict[str, Any]:
    from .._internal.strictjson import StrictJSONError, loads, thaw

    if args.input is not None:
        raw = args.input.encode("utf-8", "surrogateescape")
        where = "--input"
    else:
        where = f"--input-file {args.input_file}"
        try:
            if args.input_file == "-":
                raw = sys.stdin.buffer.read(limit + 1)
            else:
                with open(args.input_file, "rb") as fh:
                    raw = fh.read(limit + 1)
        except OSError as exc:
            raise CommandError(f"{where}: cannot read: {exc.strerror}") from None
    if len(raw) > limit:
        raise CommandError(f"{where}: larger than {limit} bytes")
    try:
        value = loads(raw)
    except StrictJSONError as exc:
        raise CommandError(f"{where}: not valid JSON ({exc.code}): {exc.message}") from None
    if not isinstance(value, dict):
        raise CommandError(f"{where}: must be a JSON object, not {type(value).__name__}")
    result: dict[str, Any] = thaw(value)
    return result


def cmd_run(args: argparse.Namespace) -> int:
    from .._internal.strictjson import thaw
    from ..toolbox import open_config

    config = config_from_args(args)
    data = _read_input(args, config.policy.sandbox.max_input_bytes)
    from .._internal.schema_worker import POOL

    POOL.prestart()  # a directory tool's input is checked in a worker: start it while the roots load
    from ..sandbox.bubblewrap import prestart_probe

    prestart_probe(config.policy.sandbox)  # and find out whether bubblewrap works here meanwhile
    # an MCP server package's tool (<package>__<tool>): start the trusted servers, stopped on leaving
    with open_config(config, upstream=SEPARATOR in args.name, load=lambda loader: load_roots(loader.config)) as box:
        result = box.call(args.name, data)
        registry, snapshot, start_problems = box.registry, box.snapshot, box.start_problems
    if SEPARATOR in args.name and result.error is not None and result.error.code == CallErrorCode.UNKNOWN_TOOL:
        from .upstream import package_refusal

        why = package_refusal(snapshot, args.name)
        if why is not None:
            raise CommandError(f"{args.name}: {why}", EXIT_REFUSED)
        problem = start_problems.get(args.name.split(SEPARATOR, 1)[0])
        if problem is not None:  # its server never listed its tools: say why, not just "unknown"
            raise CommandError(f"{args.name}: unknown until its MCP server lists it: {problem}", EXIT_FOUND_ERRORS)
    if args.json:
        record = snapshot.by_name.get(args.name)  # upstream tools too, once listed
        print_json({**result.to_json(), "sandbox": sandbox_report(registry, record)})
        return exit_code_for(result)
    if result.error is not None:
        console_err().print(safe(f"error {result.error.code}: {result.error.message}", "red"))
    if result.content is not None:
        content = result.content
        text = content if isinstance(content, str) else json.dumps(thaw(content), indent=2, ensure_ascii=False)
        console().print(safe(text))
    console_err().print(safe(f"audit id: {result.audit_id}", "dim"))
    return exit_code_for(result)


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from ..run.audit import AUDIT_FILE, parse_head, verify

    config = config_from_args(args)
    path = Path(config.state_dir) / AUDIT_FILE
    expect = None
    if args.expect_head is not None:
        try:
            expect = parse_head(args.expect_head)
        except ValueError as exc:
            raise CommandError(f"--expect-head {args.expect_head!r}: {exc}") from None
    try:
        report = verify(path, expect_head=expect, require_head=not args.allow_missing_head)
    except OSError as exc:
        raise CommandError(f"cannot read the audit log {path}: {exc.strerror}", exit_code=EXIT_FOUND_ERRORS) from None
    if args.json:
        print_json({"path": str(path), **report.to_json()})
        return EXIT_OK if report.ok else EXIT_FOUND_ERRORS
    head = f"{report.head_seq}:{report.head}"
    if report.ok:
        console().print(safe(f"audit log {path}: {report.lines} lines, chain intact, head {head}"))
    else:
        console().print(safe(f"audit log {path}: BROKEN", "red"))
    for problem in report.problems:
        where = f"line {problem.line}: " if problem.line is not None else ""
        style = "red" if problem.severity == "error" else "yellow"
        console().print(safe(f"  {problem.severity} {where}{problem.code}: {problem.message}", style))
    if not report.ok:
        intact = {0: "no line is", 1: "line 1 is"}.get(report.lines, f"lines 1-{report.lines} are")
        console().print(safe(f"  {intact} intact (head {head})"))
    return EXIT_OK if report.ok else EXIT_FOUND_ERRORS


def cmd_audit_head(args: argparse.Namespace) -> int:
    from ..errors import StateError
    from ..run.audit import AUDIT_FILE, GENESIS
    from ..state import audit_head_path, load_chain_head

    config = config_from_args(args)
    log_path = Path(config.state_dir) / AUDIT_FILE
    path = audit_head_path(log_path)
    try:
        head = load_chain_head(path)
    except StateError as exc:
        raise CommandError(exc.diagnostics(), exit_code=EXIT_FOUND_ERRORS) from None
    if head is None:
        if log_path.exists() and log_path.stat().st_size > 0:
            raise CommandError(
                f"no chain head is recorded in {path} (head-missing): a log written by an older version "
                "gets one at its next call; run 'tooldir audit verify'",
                exit_code=EXIT_FOUND_ERRORS,
            )
        seq, digest = 0, GENESIS
    else:
        seq, digest = head.seq, head.hash
    if args.json:
        print_json({"path": str(path), "seq": seq, "hash": digest})
    else:
        print(f"{seq}:{digest}")
    return EXIT_OK
