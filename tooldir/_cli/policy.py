"""``tooldir policy show`` and ``tooldir policy check FILE``: the effective policy and where each
value comes from; validating a policy file before using it."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from .common import EXIT_OK, EXIT_USAGE, common_options, console, print_json, safe

if TYPE_CHECKING:
    from ..policy import EffectivePolicy


def register(sub: Any) -> None:
    p = sub.add_parser(
        "policy",
        help="show the effective policy (with the origin of every value) or check a policy file",
        description="Policy files merge per key over the defaults (and a bundled preset named by "
        "`preset = NAME`); every key a file leaves out keeps its secure default.",
    )
    commands = p.add_subparsers(dest="policy_command", required=True, metavar="SUBCOMMAND")
    show = commands.add_parser(
        "show",
        parents=[common_options()],
        help="the effective policy: every key, its value and its origin (default, preset:NAME, FILE:LINE, "
        "managed:FILE:LINE)",
    )
    show.set_defaults(handler=cmd_show)
    check = commands.add_parser("check", help="validate a policy file (exit 2 with the error)")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--json", action="store_true", help="print one JSON document for machines")
    check.set_defaults(handler=cmd_check)


def _value(value: Any) -> str:
    return "(unset)" if value is None else json.dumps(value, ensure_ascii=False)


def cmd_show(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ..policy import read_policy

    effective = read_policy(args.policy)
    if args.json:
        print_json(effective.to_json())
        return EXIT_OK
    out = console()
    source = effective.file or "no policy file: the built-in defaults"
    preset = f" (preset {effective.preset})" if effective.preset else ""
    managed = f", under the managed policy {effective.managed_file}" if effective.managed_file else ""
    table = Table(title=f"tooldir policy — {source}{preset}{managed}", title_justify="left")
    table.add_column("key")
    table.add_column("value")
    table.add_column("origin")
    for key, value, origin in effective.values():
        table.add_row(safe(key), safe(_value(value)), safe(origin, "dim" if origin == "default" else "cyan"))
    out.print(table)
    _print_weakenings(effective)
    return EXIT_OK


def _print_weakenings(effective: EffectivePolicy) -> None:
    for weak in effective.weakenings():
        console().print(safe(f"warning policy-weakened: {weak.message()}", "yellow"))
    for override in effective.overridden:
        console().print(safe(f"warning policy-managed: {override.message()}", "yellow"))


def cmd_check(args: argparse.Namespace) -> int:
    from ..errors import PolicyError
    from ..policy import read_policy

    try:
        effective = read_policy(args.file)
    except PolicyError as exc:
        if not args.json:
            raise  # printed by the CLI's ConfigError handler, exit 2
        print_json({"ok": False, "error": {"message": exc.message, "path": exc.path, "key": exc.key, "line": exc.line}})
        return EXIT_USAGE
    weak = effective.weakenings()
    if args.json:
        print_json(
            {
                "ok": True,
                "file": effective.file,
                "preset": effective.preset,
                "weakened": [w.to_json() for w in weak],
                "managed": [o.to_json() for o in effective.overridden],
            }
        )
        return EXIT_OK
    keys = len(effective.origins)
    preset = f", preset {effective.preset}" if effective.preset else ""
    values = f"{keys} value{'' if keys == 1 else 's'} set{preset}"
    weakened = f"{len(weak)} weaken{'s' if len(weak) == 1 else ''} a default"
    console().print(safe(f"{args.file}: OK ({values}; {weakened})", "green"))
    _print_weakenings(effective)
    return EXIT_OK
