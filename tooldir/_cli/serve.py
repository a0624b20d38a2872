"""``tooldir serve``: an MCP server over stdio (one connection = one session)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_OK, CommandError, common_options, config_from_args

DEFAULT_TURN_IDLE_S = 30.0  # kept equal to tooldir.mcp_server.DEFAULT_TURN_IDLE_S (the SDK stays off --help)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        parents=[common_options()],
        help="serve the tools as an MCP server over stdio (for Claude Code, Cursor, Codex, ...)",
        description=(
            "Speak MCP on stdin/stdout: tools/list is this session's working set (eager tools, loaded "
            "deferred tools and tool_search); tools/call runs through the registry (trust, permission, "
            "sandbox, audit). Logs go to stderr or --log-file, never to stdout."
        ),
    )
    p.add_argument("--no-watch", action="store_true", help="do not watch the tool roots for changes")
    p.add_argument(
        "--turn-idle",
        type=float,
        default=DEFAULT_TURN_IDLE_S,
        metavar="SECONDS",
        help="a conversation turn ends after this much client idle time; idle loaded tools may then be "
        f"re-deferred (default: {DEFAULT_TURN_IDLE_S:g})",
    )
    p.add_argument("--log-file", metavar="FILE", help="append logs to FILE instead of stderr")
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log level (default: warning)",
    )
    p.set_defaults(handler=cmd_serve)


def _configure_logging(args: argparse.Namespace) -> None:
    import logging

    handler: logging.Handler
    if args.log_file:
        try:
            handler = logging.FileHandler(args.log_file, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"--log-file {args.log_file}: {exc.strerror or exc}") from None
    else:
        handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("%(asctime)s tooldir serve %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, args.log_level.upper()))


def cmd_serve(args: argparse.Namespace) -> int:
    """Configuration errors exit 2 before any MCP traffic. Then the protocol stream is claimed and
    its first message answered when it is ``initialize`` (tooldir._mcp_early), while the SDK's
    server is imported in a thread and the roots load inside the server (tooldir.mcp_server)."""
    import signal
    import threading

    import anyio

    from .._mcp_early import claim_wire, exit_on_early_signal
    from ..policy import default_policy_path

    if args.json:
        raise CommandError("--json does not apply: serve speaks MCP (JSON-RPC) on stdout")
    if not 0 <= args.turn_idle <= 86_400:
        raise CommandError("--turn-idle must be between 0 and 86400 seconds")
    config = config_from_args(args)
    _configure_logging(args)
    policy_file = args.policy or default_policy_path()
    wire = claim_wire()
    try:
        # until the server's loop takes signals over, SIGTERM/SIGINT end the process cleanly at once
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, exit_on_early_signal)
        # the SDK imports while this thread waits for the client's first line (no GIL held there)
        threading.Thread(target=_import_server, name="tooldir-serve-import", daemon=True).start()
        wire.answer_opening()
        from ..mcp_server import serve_stdio  # the SDK: waits for the import thread if still importing

        anyio.run(
            lambda: serve_stdio(
                config, watch=not args.no_watch, policy_file=policy_file, turn_idle_s=args.turn_idle, wire=wire
            )
        )
    finally:
        wire.restore()
    return EXIT_OK


def _import_server() -> None:
    import importlib

    try:
        importlib.import_module("tooldir.mcp_server")
    except Exception:  # the main thread's own import raises it again, where it is reported
        return
