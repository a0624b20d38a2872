"""What a scenario's ``tooldir`` command line may say (drill:arena-escape).

A ``tooldir``, ``python-m-tooldir`` or ``forge-scanmemo`` step's arguments are parsed with
tooldir's own parser (so ``--state``, ``--state-dir=X`` and every other spelling are seen as
tooldir sees them), then held to an allowlist: each command may pass only the options listed in
:data:`ALLOWED`, and every option or argument that names a file or folder (:data:`PATH`) must
lead inside the arena, links included (:func:`tooldir.drill.confine.leads_to`). So ``revoke``,
``allow``, ``lock``, ``keygen``, ``sign`` ... act only on the arena's own state, policy and folders.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal, Protocol

from .confine import ArenaEscapeError, ScenarioError, inside, leads_to


class CommandLine(Protocol):
    """The ``tooldir`` command line a drill drives, in-process, as the user and the attacker type
    it. The CLI hands itself in (:func:`tooldir._cli.command_line`, passed to
    :func:`tooldir.drill.run_drill`): the drill never imports the CLI, whose ``drill`` command
    imports the drill."""

    @property
    def commands(self) -> Collection[str]:
        """Every command of this build."""
        ...

    def parser(self, args: list[str]) -> argparse.ArgumentParser:
        """The parser ``tooldir`` builds for ``args``."""
        ...

    def main(self, args: list[str]) -> int:
        """Run ``tooldir args`` in this process; its exit status."""
        ...

    def scan_memo_request(self, parsed: argparse.Namespace) -> tuple[Any, str, list[str]] | None:
        """The scan memo request of a parsed ``scan``, its key and the installed distributions'
        paths, as ``tooldir scan`` computes them (None: this scan keeps no memo)."""
        ...


Kind = Literal["path", "paths", "keypair", "value", "flag"]
PATH: Kind = "path"  # a file or folder tooldir reads or writes: must lead inside the arena
PATHS: Kind = "paths"  # a repeatable PATH
KEYPAIR: Kind = "keypair"  # keygen's PATH: PATH and PATH.pub
VALUE: Kind = "value"  # anything else tooldir takes as it is (a name, JSON, a number, a choice)
FLAG: Kind = "flag"

COMMON: dict[str, Kind] = {
    "project": PATH,
    "user_dir": PATHS,
    "policy": PATH,
    "state_dir": PATH,
    "json": FLAG,
    "no_index": FLAG,
}
"""The options every loading command takes (``tooldir._cli.common.common_options``)."""

ALLOWED: dict[str, dict[str, Kind]] = {
    "scan": {**COMMON, "strict": FLAG, "format": VALUE},
    "list": {**COMMON, "all": FLAG},
    "show": {**COMMON, "name": PATH},  # a tool name, or a package folder
    "allow": {**COMMON, "target": PATH, "yes": FLAG},
    "revoke": {**COMMON, "target": PATH},
    "lock": {**COMMON, "dir": PATH, "version": VALUE, "expires": VALUE},
    "keygen": {**COMMON, "path": KEYPAIR, "force": FLAG},
    "sign": {**COMMON, "dir": PATH, "key": PATH},
    "verify": {**COMMON, "dir": PATH},
    "audit verify": {**COMMON, "expect_head": VALUE, "allow_missing_head": FLAG},
    "audit head": dict(COMMON),
    "search": {**COMMON, "query": VALUE, "top_k": VALUE},
    "catalog": {**COMMON, "format": VALUE},
    "eval": {**COMMON, "tools": PATH, "queries": PATH},
    "policy show": dict(COMMON),
    "policy check": {"file": PATH, "json": FLAG},
    "adopt": {
        **COMMON,
        "source": PATH,
        "dry_run": FLAG,
        "format": VALUE,
        "write_client_config": FLAG,
    },  # --from: in the arena; only with --dry-run (vet)
    "init": {"name": VALUE, "dir": PATH, "lang": VALUE, "json": FLAG},
    "run": {**COMMON, "name": VALUE, "input": VALUE, "input_file": PATH},
    "serve": {**COMMON, "no_watch": FLAG, "turn_idle": VALUE, "log_file": PATH, "log_level": VALUE},
}
"""Per command (``"audit verify"`` for a subcommand): the options a step may pass and what they
are. Anything else the parser knows (``serve --http``, ``--token-file``, ``--unsafe-http-remote``,
``drill``'s folder ...) is refused. Which commands a step kind may run at all is the runner's
rule (``tooldir.drill.execute.CLI_STEPS``)."""

_STRUCTURE = frozenset({"command", "handler", "policy_command", "audit_command"})


def _chain(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> tuple[str, list[argparse.Action]]:
    """The command (``"audit verify"``) ``ns`` was parsed for, and the actions of its parser."""
    names: list[str] = []
    actions = list(parser._actions)
    while True:
        sub = next((a for a in actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            return " ".join(names), actions
        chosen = getattr(ns, sub.dest)
        names.append(chosen)
        actions = list(sub.choices[chosen]._actions)


def vet(args: list[str], *, cli: CommandLine, base: Path, cwd: Path, scenario: str, where: str) -> None:
    """Refuse a command line that could act outside the arena ``base`` (``cwd``: where the
    command runs, the arena's project; relative paths start there). A command line tooldir's parser rejects is left alone: ``tooldir``
    itself stops at the same parse, before it does anything.

    Raises:
        ArenaEscapeError: a path leads outside the arena.
        ScenarioError: an option the runner does not allow.
    """
    parser = cli.parser(args)
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            ns = parser.parse_args(args)
        except SystemExit:
            return
    command, actions = _chain(parser, ns)
    allowed = ALLOWED.get(command)
    if allowed is None:
        raise ScenarioError(f"{where}: 'tooldir {command}' may not run as a drill step", path=scenario)
    if command == "adopt" and not getattr(ns, "dry_run", False):
        # adopting fetches packages from the registries and writes the user's root, secrets and policy
        raise ScenarioError(f"{where}: 'tooldir adopt' runs in a drill step only with --dry-run", path=scenario)
    by_dest = {a.dest: a for a in actions}
    for dest, value in sorted(vars(ns).items()):
        if dest in _STRUCTURE:
            continue
        action = by_dest.get(dest)
        option = (action.option_strings[-1] if action and action.option_strings else dest.upper()) or dest
        kind = allowed.get(dest)
        if kind is None:
            if action is not None and value != action.default:
                raise ScenarioError(
                    f"{where}: 'tooldir {command}' {option} is not allowed in a drill step "
                    f"(allowed: {', '.join(sorted(allowed)) or 'nothing'})",
                    path=scenario,
                )
            continue
        if value is None or kind in (VALUE, FLAG):
            continue
        values = list(value) if kind == PATHS else [value]
        if kind == KEYPAIR:
            values += [f"{value}.pub"]
        for text in values:
            _vet_path(
                str(text), base=base, cwd=cwd, scenario=scenario, where=where, label=f"'tooldir {command}' {option}"
            )


def _vet_path(text: str, *, base: Path, cwd: Path, scenario: str, where: str, label: str) -> None:
    if text == "-":
        raise ScenarioError(f"{where}: {label} -: a drill step has no stdin", path=scenario)
    expanded = os.path.expanduser(text)  # as tooldir expands ~ (HOME is the arena's)
    to = leads_to(cwd, expanded)
    if to is None or not inside(base, to):
        raise ArenaEscapeError(
            f"{label} {text}: leads outside the arena ({'a link loop' if to is None else f'to {to}'}); "
            "a step's paths stay inside it",
            path=scenario,
            where=where,
            target=text,
        )
