"""``tooldir adopt``: read the MCP server entries of the clients' configuration files and report
what is wrong with them, starting none (the I/O edge of :mod:`tooldir.adopt`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK, CommandError, common_options, config_from_args, console, print_json, safe

if TYPE_CHECKING:
    from ..adopt import Finding, ServerEntry

FORMATS = ("table", "json", "sarif")
_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def register(sub: Any) -> None:
    from ..mcp_config import CLIENTS  # light: tooldir --help imports no model

    p = sub.add_parser(
        "adopt",
        parents=[common_options()],
        help="report what your MCP clients' configured servers would run (unpinned packages, plain-text secrets, "
        "...), without starting any",
        description="Reads the MCP server entries of Claude Code (~/.claude.json, .mcp.json), Cursor "
        "(~/.cursor/mcp.json, .cursor/mcp.json), VS Code (.vscode/mcp.json) and Codex (~/.codex/config.toml), "
        "or of FILE, and reports each finding with its file, line and fix. No server is started.",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="CLIENT|FILE",
        help=f"one client ({', '.join(CLIENTS)}) or one configuration file (default: every client's files)",
    )
    p.add_argument("--dry-run", action="store_true", help="only report: write nothing, start nothing")
    p.add_argument("--format", choices=FORMATS, help="table (the default), json (as --json) or sarif (SARIF 2.1.0)")
    p.set_defaults(handler=cmd_adopt)


def _targets(source: str | None, home: Path, project: Path) -> list[tuple[str, Path, str]]:
    """(client, file, format) of every file to read."""
    from ..adopt import CLIENT_FILES, CLIENTS

    if source is None or source in CLIENTS:
        clients = CLIENTS if source is None else (source,)
        return [
            (client, (home if where == "home" else project) / rel, form)
            for client in clients
            for where, rel, form in CLIENT_FILES[client]
        ]
    file = Path(source)
    if not file.exists():
        raise CommandError(f"--from {source}: neither a client ({', '.join(CLIENTS)}) nor an existing file")
    if file.suffix == ".toml":
        return [("codex", file, "toml")]
    client = "vscode" if file.parent.name == ".vscode" else "cursor" if file.parent.name == ".cursor" else "claude-code"
    return [(client, file, "json-servers" if client == "vscode" else "json-mcpServers")]


def _read(file: Path) -> str | None:
    """The file's text; None when there is no such file. A FIFO, device or huge file is refused."""
    from ..adopt import MAX_CONFIG_BYTES, AdoptConfigError

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AdoptConfigError(f"cannot read it: {exc.strerror or exc}", path=str(file)) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AdoptConfigError("cannot read it: not a regular file", path=str(file))
        data = handle.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise AdoptConfigError(f"cannot read it: over {MAX_CONFIG_BYTES} bytes", path=str(file))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AdoptConfigError(f"invalid UTF-8 at byte {exc.start}", path=str(file)) from None


def _existing_names(args: argparse.Namespace) -> set[str]:
    """Names of the tools and packages you have (a read-only load, as ``tooldir scan``; no server starts)."""
    from ..loader import Loader

    config = dataclasses.replace(config_from_args(args), read_only=True)
    snapshot = Loader(config).load()
    return {t.name for t in snapshot.tools} | {Path(t.path).name for t in snapshot.tools if t.path}


def cmd_adopt(args: argparse.Namespace) -> int:
    from ..adopt import judge, parse_config, report_json

    if not args.dry_run:
        raise CommandError(
            "tooldir adopt writes server packages only in a later version; run it with --dry-run to see the "
            "findings (nothing is written or started)"
        )
    fmt = args.format or ("json" if args.json else "table")
    home = Path.home()
    project = Path(os.path.abspath(args.project if args.project else os.getcwd()))
    files: list[dict[str, Any]] = []
    entries: list[ServerEntry] = []
    for client, file, form in _targets(args.source, home, project):
        text = _read(file)
        files.append({"client": client, "path": str(file), "found": text is not None})
        if text is not None:
            entries += parse_config(text, path=str(file), client=client, form=form)
    policy = config_from_args(args).policy
    found = judge(entries, interpreters=policy.exec.interpreters, existing=_existing_names(args))
    if fmt == "json":
        print_json(report_json(files, entries, found))
    elif fmt == "sarif":
        _print_sarif(found, project)
    else:
        _print_table(files, entries, found)
    return EXIT_OK


def _print_sarif(found: list[Finding], project: Path) -> None:
    from ..sarif import sarif_log
    from . import _version

    lines = {id(f.diagnostic): (f.diagnostic.path or "", f.line) for f in found}

    def locate(d: Any) -> tuple[str, int | None] | None:
        return lines.get(id(d))

    print_json(sarif_log([f.diagnostic for f in found], root=project.resolve(), version=_version(), locate=locate))


def _within(pointer: str | None, entry: str) -> bool:
    return pointer is not None and (pointer == entry or pointer.startswith(entry + "/"))


def _print_table(files: list[dict[str, Any]], entries: list[ServerEntry], found: list[Finding]) -> None:
    out = console()
    read = [f for f in files if f["found"]]
    out.print(
        safe(
            f"tooldir adopt --dry-run: {len(entries)} server{'' if len(entries) == 1 else 's'} in {len(read)} "
            f"file{'' if len(read) == 1 else 's'}; nothing was started or written",
            "bold",
        )
    )
    for f in files:
        out.print(safe(f"  {'read' if f['found'] else 'none'}  {f['client']}: {f['path']}", "dim"))
    for entry in entries:
        mine = [f for f in found if f.diagnostic.path == entry.file and _within(f.diagnostic.pointer, entry.pointer)]
        where = f"{entry.file}:{entry.line}" if entry.line else entry.file
        out.print(safe(f"{entry.name} ({entry.transport}, {entry.client}) {where}", "bold"))
        if not mine:
            out.print(safe("  no findings", "green"))
        for item in mine:
            d = item.diagnostic
            at = f"{d.path}:{item.line}" if item.line else d.path
            # a finding is one line whatever the width (a path in it is never broken)
            out.print(
                safe(f"  {d.severity} {d.code} {at}: {d.message}", _STYLE.get(str(d.severity), "")), soft_wrap=True
            )
            out.print(safe(f"    fix: {item.fix}", "dim"), soft_wrap=True)
