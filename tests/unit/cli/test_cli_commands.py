"""The CLI's lazy command table names exactly the commands its modules register."""

from __future__ import annotations

import argparse

from tooldir._cli import COMMANDS, build_parser


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_the_command_table_lists_every_registered_command_in_help_order() -> None:
    assert _choices(build_parser()) == list(COMMANDS)


def test_a_named_command_registers_the_commands_of_its_module_only() -> None:
    assert _choices(build_parser(["lock", "x"])) == ["allow", "revoke", "lock", "keygen", "sign", "verify"]
    assert _choices(build_parser(["--help"])) == list(COMMANDS)
