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


def test_the_trust_commands_hold_no_trust_logic_of_their_own() -> None:
    """allow/revoke/lock/sign/verify call tooldir.manage; they never judge or record trust themselves."""
    import ast
    from pathlib import Path

    import tooldir._cli.trust as module

    tree = ast.parse(Path(module.__file__).read_text("utf-8"))
    imported = {
        (node.module or "").lstrip(".")
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level >= 2
    }
    assert imported.isdisjoint({"trust", "validate", "discover", "signatures"})
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert names.isdisjoint({"record_approval", "remove_approvals", "record_versions", "assess", "verify_package"})
