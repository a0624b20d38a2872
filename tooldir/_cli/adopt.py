"""``tooldir adopt``: read the MCP server entries of the clients' configuration files and report
what is wrong with them, starting none (the I/O edge of :mod:`tooldir.adopt.entries`); without
``--dry-run``, make each stdio entry a pending server package (:mod:`tooldir.adopt.install`) and, with
``--write-client-config``, replace the adopted entries in the client's file with one ``tooldir serve``
entry (:func:`tooldir.mcp.clientfile.replace_with_tooldir`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..codes import DiagnosticCode
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

if TYPE_CHECKING:
    from ..adopt.entries import Finding, ServerEntry
    from ..adopt.install import Outcome

FORMATS = ("table", "json", "sarif")
_STYLE = {"error": "red", "warning": "yellow", "info": "dim"}


def register(sub: Any) -> None:
    from ..mcp.clients import CLIENTS  # light: tooldir --help imports no model

    p = sub.add_parser(
        "adopt",
        parents=[common_options()],
        help="make your MCP clients' configured servers pending, sandboxed server packages (--dry-run: only "
        "report what they would run: unpinned packages, plain-text secrets, ...); starts none",
        description="Reads the MCP server entries of Claude Code (~/.claude.json, .mcp.json), Cursor "
        "(~/.cursor/mcp.json, .cursor/mcp.json), VS Code (.vscode/mcp.json) and Codex (~/.codex/config.toml), "
        "or of FILE. --dry-run reports each finding with its file, line and fix. Without it, each stdio server "
        "fetched by npx/uvx/pipx/uv becomes a pending server package in your user root: its exact version "
        "resolved and installed into the package, its plain-text secrets moved to secrets.toml with a grant, "
        "no network. `tooldir allow PACKAGE` then starts it sandboxed and pins its tools. No server is started.",
    )
    p.add_argument(
        "--from",
        dest="source",
        metavar="CLIENT|FILE",
        help=f"one client ({', '.join(CLIENTS)}) or one configuration file (default: every client's files)",
    )
    p.add_argument("--dry-run", action="store_true", help="only report: write nothing, start nothing")
    p.add_argument(
        "--write-client-config",
        action="store_true",
        help="then replace the adopted entries in each client's file with one `tooldir serve` entry (a backup "
        "beside it, the rest of the file kept); nothing in a client's file changes without this flag",
    )
    p.add_argument("--format", choices=FORMATS, help="table (the default), json (as --json) or sarif (SARIF 2.1.0)")
    p.set_defaults(handler=cmd_adopt)


def _targets(source: str | None, home: Path, project: Path) -> list[tuple[str, Path, str]]:
    """(client, file, format) of every file to read."""
    from ..adopt.entries import CLIENT_FILES, CLIENTS

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
    from ..adopt.entries import MAX_CONFIG_BYTES, AdoptConfigError

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
    from ..snapshot.loader import Loader

    config = dataclasses.replace(config_from_args(args), read_only=True)
    snapshot = Loader(config).load()
    return {t.name for t in snapshot.tools} | {Path(t.path).name for t in snapshot.tools if t.path}


def cmd_adopt(args: argparse.Namespace) -> int:
    from ..adopt.entries import judge, parse_config, report_json

    fmt = args.format or ("json" if args.json else "table")
    if args.write_client_config and args.dry_run:
        raise CommandError("--write-client-config writes the client's file; leave out --dry-run")
    if fmt == "sarif" and not args.dry_run:
        raise CommandError("--format sarif reports findings: use it with --dry-run")
    home = Path.home()
    project = Path(os.path.abspath(args.project if args.project else os.getcwd()))
    files: list[dict[str, Any]] = []
    entries: list[ServerEntry] = []
    forms: dict[str, tuple[str, str]] = {}
    for client, file, form in _targets(args.source, home, project):
        text = _read(file)
        files.append({"client": client, "path": str(file), "found": text is not None})
        if text is not None:
            entries += parse_config(text, path=str(file), client=client, form=form)
            forms[str(file)] = (client, form)
    config = config_from_args(args)
    policy = config.policy
    if not args.dry_run:
        return _adopt(args, config, files, entries, fmt)
    found = judge(entries, interpreters=policy.exec.interpreters, existing=_existing_names(args))
    if fmt == "json":
        print_json(report_json(files, entries, found))
    elif fmt == "sarif":
        _print_sarif(found, project)
    else:
        _print_table(files, entries, found)
    return EXIT_OK


_FAILED = frozenset(
    {DiagnosticCode.ADOPT_INSTALL_FAILED, DiagnosticCode.ADOPT_OVER_LIMIT, DiagnosticCode.ADOPT_CONFLICT}
)


def _adopt(
    args: argparse.Namespace, config: Any, files: list[dict[str, Any]], entries: list[ServerEntry], fmt: str
) -> int:
    from ..adopt.install import Target, adopt_all
    from ..policy import default_policy_path
    from ..run.secrets import default_secrets_path
    from ..snapshot.loader import user_root_default

    target = Target(
        root=Path(user_root_default().path),
        secrets_file=default_secrets_path(),
        policy_file=Path(config.policy_file) if config.policy_file else default_policy_path(),
        limits=config.policy.limits,
    )
    out = console()
    report = None if fmt == "json" else (lambda line: out.print(safe(line, "dim"), soft_wrap=True))
    outcomes = adopt_all(
        entries,
        target,
        interpreters=config.policy.exec.interpreters,
        existing=sorted(_existing_names(args)),
        report=report,
    )
    rewritten = _write_client_config(args, outcomes) if args.write_client_config else []
    if fmt == "json":
        print_json(
            {
                "dry_run": False,
                "started": [],
                "files": files,
                "servers": [o.to_json() for o in outcomes],
                "client_config": rewritten,
            }
        )
    else:
        _print_outcomes(outcomes, rewritten)
    return EXIT_FOUND_ERRORS if any(o.code in _FAILED for o in outcomes) else EXIT_OK


def _key_path(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _write_client_config(args: argparse.Namespace, outcomes: list[Outcome]) -> list[dict[str, Any]]:
    from ..mcp.clientfile import ConfigFileError, replace_with_tooldir
    from .serve import server_argv

    by_file: dict[tuple[str, str], list[list[str]]] = {}
    for o in outcomes:
        if o.status in ("adopted", "already-adopted"):
            by_file.setdefault((o.entry.client, o.entry.file), []).append(_key_path(o.entry.pointer))
    done: list[dict[str, Any]] = []
    for (client, file), names in by_file.items():
        serve_args = argparse.Namespace(
            follow_workspace=True,  # the client starts it in (or names) the folder it has open
            no_watch=False,
            project=args.project or ".",
            user_dir=getattr(args, "user_dir", None),
            policy=getattr(args, "policy", None),
            state_dir=getattr(args, "state_dir", None),
        )
        command, argv = server_argv(serve_args, client)
        try:
            result = replace_with_tooldir(client, Path(file), names, command, argv)
        except ConfigFileError as exc:
            done.append({"file": file, "changed": False, "error": str(exc)})
            continue
        except OSError as exc:
            done.append({"file": file, "changed": False, "error": f"{file}: cannot write: {exc.strerror}"})
            continue
        done.append(
            {
                "file": str(result.path),
                "changed": result.changed,
                "backup": str(result.backup) if result.backup else None,
                "replaced": list(result.removed),
            }
        )
    return done


def _print_outcomes(outcomes: list[Outcome], rewritten: list[dict[str, Any]]) -> None:
    out = console()
    adopted = [o for o in outcomes if o.status == "adopted"]
    out.print(
        safe(
            f"tooldir adopt: {len(adopted)} of {len(outcomes)} server{'' if len(outcomes) == 1 else 's'} adopted; "
            "none was started",
            "bold",
        )
    )
    for o in outcomes:
        where = f"{o.entry.file}:{o.entry.line}" if o.entry.line else o.entry.file
        if o.status == "adopted":
            out.print(
                safe(
                    f"adopted {o.entry.name} ({where}) -> package {o.package}: {o.requested} resolved to "
                    f"{o.version}, {o.files} files; pending until `tooldir allow {o.package}`",
                    "green",
                ),
                soft_wrap=True,
            )
            if o.secrets:
                out.print(
                    safe(
                        f"  secrets {', '.join(o.secrets)} moved to secrets.toml and granted to {o.package} "
                        "(the client's file still holds them until --write-client-config; rotate them if it was "
                        "ever shared)",
                        "yellow",
                    ),
                    soft_wrap=True,
                )
            out.print(safe("  network: none (grant destinations in its server.json and your policy)", "dim"))
            for note in o.notes:
                out.print(safe(f"  {note}", "dim"), soft_wrap=True)
        elif o.status == "already-adopted":
            out.print(safe(f"already adopted {o.entry.name} ({where}) as package {o.package}; nothing changed"))
        else:
            out.print(safe(f"skipped {o.entry.name} ({where}): {o.code}: {o.message}", "yellow"), soft_wrap=True)
    for r in rewritten:
        if "error" in r:
            out.print(safe(f"client config not changed: {r['error']}", "red"), soft_wrap=True)
        elif r["changed"]:
            out.print(
                safe(
                    f"{r['file']}: {', '.join(r['replaced'])} replaced by one tooldir entry (previous file: "
                    f"{r['backup']})"
                ),
                soft_wrap=True,
            )
        else:
            out.print(safe(f"{r['file']}: already served by tooldir; nothing changed"), soft_wrap=True)


def _print_sarif(found: list[Finding], project: Path) -> None:
    from . import _version
    from .sarif import sarif_log

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
