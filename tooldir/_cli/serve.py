"""``tooldir serve``: an MCP server over stdio (one connection = one session)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ..mcp.clients import CLIENTS  # plain data (json only): --help stays light
from .common import EXIT_OK, CommandError, common_options, config_from_args, console, safe

DEFAULT_TURN_IDLE_S = 30.0  # kept equal to tooldir.mcp.server.DEFAULT_TURN_IDLE_S (the SDK stays off --help)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        parents=[common_options()],
        help="serve the tools as an MCP server over stdio or HTTP (for Claude Code, Cursor, Codex, VS Code, ...)",
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
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP over Streamable HTTP at http://HOST:PORT/mcp instead of stdio (loopback only unless "
        "--unsafe-http-remote; needs --token-file)",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --http: the bearer token every request must send (one line; a file of yours, mode 600)",
    )
    p.add_argument(
        "--unsafe-http-remote",
        action="store_true",
        help="with --http: allow a non-loopback address (logged); anyone who reaches the port with the token runs tools",
    )
    p.add_argument(
        "--print-config",
        choices=CLIENTS,
        metavar="CLIENT",
        help=f"print the configuration snippet that makes CLIENT ({', '.join(CLIENTS)}) start this server, and exit",
    )
    p.add_argument(
        "--install-config",
        choices=CLIENTS,
        metavar="CLIENT",
        help="merge that entry into CLIENT's user-level configuration file (idempotent, a .bak beside it), and exit",
    )
    p.add_argument(
        "--config-file",
        metavar="FILE",
        help="with --install-config: the file to merge into (default: the client's user-level file)",
    )
    p.add_argument(
        "--follow-workspace",
        action="store_true",
        help="with --print-config/--install-config: the project is the folder the client has open, not a fixed --project",
    )
    p.set_defaults(handler=cmd_serve)


def _configure_logging(args: argparse.Namespace) -> None:
    """Logs to stderr or --log-file, every repeated line rate-limited (a client must not be able
    to fill the disk with the server's warnings about it: tooldir._internal.ratelog)."""
    import logging

    from .._internal.ratelog import RateLimitFilter

    handler: logging.Handler
    if args.log_file:
        try:
            handler = logging.FileHandler(args.log_file, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"--log-file {args.log_file}: {exc.strerror or exc}") from None
    else:
        handler = logging.StreamHandler()  # stderr
    handler.setFormatter(logging.Formatter("%(asctime)s tooldir serve %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RateLimitFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, args.log_level.upper()))


def server_argv(args: argparse.Namespace, client: str | None = None) -> tuple[str, list[str]]:
    """(command, args) that start this server over stdio with this invocation's roots, all absolute:
    the installed ``tooldir`` script beside this interpreter, else ``python -m tooldir``. With
    ``--follow-workspace`` the project is the client's workspace variable where ``client`` has one,
    else the folder the client starts the server in (no ``--project``)."""
    from ..mcp.clients import WORKSPACE_VARIABLE

    script = Path(sys.executable).parent / "tooldir"
    command, argv = (str(script), ["serve"]) if script.is_file() else (sys.executable, ["-m", "tooldir", "serve"])
    if getattr(args, "follow_workspace", False):
        if client in WORKSPACE_VARIABLE:
            argv += ["--project", WORKSPACE_VARIABLE[client]]
    else:
        project = Path(args.project).expanduser()
        if not project.is_dir():
            raise CommandError(f"--project {args.project}: not a directory")
        argv += ["--project", str(project.resolve())]
    for folder in args.user_dir or ():
        argv += ["--user-dir", str(Path(folder).expanduser().resolve())]
    if args.policy:
        argv += ["--policy", str(Path(args.policy).expanduser().resolve())]
    if args.state_dir:
        argv += ["--state-dir", args.state_dir]  # must already be absolute (checked when serving)
    if args.no_watch:
        argv.append("--no-watch")
    return command, argv


def cmd_serve(args: argparse.Namespace) -> int:
    if args.json:
        raise CommandError("--json does not apply: serve speaks MCP (JSON-RPC) on stdout")
    if args.print_config and args.install_config:
        raise CommandError("--print-config and --install-config: choose one")
    client = args.print_config or args.install_config
    if client is None and (args.follow_workspace or args.config_file):
        raise CommandError("--follow-workspace and --config-file apply only with --print-config or --install-config")
    if args.config_file and not args.install_config:
        raise CommandError("--config-file applies only with --install-config")
    if client is not None:
        if args.http:
            raise CommandError(
                f"--{'print' if args.print_config else 'install'}-config writes a stdio configuration; leave out --http"
            )
        if args.follow_workspace and args.project != ".":
            raise CommandError("--follow-workspace takes the project from the client; leave out --project")
        if args.print_config:
            from ..mcp.clients import client_config

            sys.stdout.write(client_config(client, *server_argv(args, client)))
            return EXIT_OK
        return _install_config(args, client)
    if not 0 <= args.turn_idle <= 86_400:
        raise CommandError("--turn-idle must be between 0 and 86400 seconds")
    if args.http is None:
        if args.token_file or args.unsafe_http_remote:
            raise CommandError("--token-file and --unsafe-http-remote apply only with --http HOST:PORT")
        return _serve_stdio(args)
    return _serve_http(args)


def _install_config(args: argparse.Namespace, client: str) -> int:
    from ..mcp.clientfile import ConfigFileError, install_client_config
    from ..mcp.clients import user_config_path

    path = Path(args.config_file).expanduser() if args.config_file else user_config_path(client)
    try:
        done = install_client_config(client, path, *server_argv(args, client))
    except ConfigFileError as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"{path}: cannot write: {exc.strerror}") from None
    out = console()
    if not done.changed:
        out.print(safe(f"{done.path}: the tooldir entry is already there; nothing changed"))
    else:
        out.print(
            safe(f"{done.path}: tooldir entry written" + (f" (previous file: {done.backup})" if done.backup else ""))
        )
        out.print(safe(f"restart {client} (or reload its MCP servers) to start it"))
    return EXIT_OK


def _serve_stdio(args: argparse.Namespace) -> int:
    """Configuration errors exit 2 before any MCP traffic. Then the protocol stream is claimed and
    its first message answered when it is ``initialize`` (tooldir.mcp.early), while the SDK's
    server is imported in a thread and the roots load inside the server (tooldir.mcp.server)."""
    import signal
    import threading

    import anyio

    from ..mcp.early import any_server_package, claim_wire, exit_on_early_signal
    from ..policy import default_policy_path

    config = config_from_args(args)
    _configure_logging(args)
    policy_file = args.policy or default_policy_path()
    # the instructions of trusted MCP server packages go into the initialize answer: then it waits for the load
    open_first = any_server_package(r.path for r in config.roots)
    wire = claim_wire()
    try:
        # until the server's loop takes signals over, SIGTERM/SIGINT end the process cleanly at once
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, exit_on_early_signal)
        # the SDK imports while this thread waits for the client's first line (no GIL held there)
        threading.Thread(target=_import_server, name="tooldir-serve-import", daemon=True).start()
        wire.answer_opening(early=not open_first)
        from ..mcp.server import serve_stdio  # the SDK: waits for the import thread if still importing

        anyio.run(
            lambda: serve_stdio(
                config,
                watch=not args.no_watch,
                policy_file=policy_file,
                turn_idle_s=args.turn_idle,
                wire=wire,
                open_first=open_first,
            )
        )
    finally:
        wire.restore()
    return EXIT_OK


def _serve_http(args: argparse.Namespace) -> int:
    import anyio

    from ..mcp.http import Bind, HttpSetupError, parse_bind, read_token, serve_http

    try:
        bind = parse_bind(args.http)
        if not args.token_file:
            raise HttpSetupError("--http needs --token-file FILE: tooldir never serves HTTP without a bearer token")
        token = read_token(args.token_file)
    except HttpSetupError as exc:
        raise CommandError(str(exc)) from None
    from ..policy import default_policy_path

    config = config_from_args(args)
    _configure_logging(args)
    policy_file = args.policy or default_policy_path()

    def ready(where: Bind) -> None:
        sys.stderr.write(f"tooldir serve: MCP over HTTP at {where.url}\n")
        sys.stderr.flush()

    try:
        anyio.run(
            lambda: serve_http(
                config,
                bind=bind,
                token=token,
                allow_remote=args.unsafe_http_remote,
                watch=not args.no_watch,
                policy_file=policy_file,
                turn_idle_s=args.turn_idle,
                on_ready=ready,
            )
        )
    except HttpSetupError as exc:
        raise CommandError(str(exc)) from None
    finally:
        _report_suppressed()
    return EXIT_OK


def _report_suppressed() -> None:
    from .._internal.ratelog import RateLimitFilter

    for handler in logging.getLogger().handlers:
        for found in handler.filters:
            if isinstance(found, RateLimitFilter):
                for line in found.summary():
                    logging.getLogger("tooldir.serve").warning("%s", line)


def _import_server() -> None:
    import importlib

    try:
        importlib.import_module("tooldir.mcp.server")
    except Exception:  # the main thread's own import raises it again, where it is reported
        return
