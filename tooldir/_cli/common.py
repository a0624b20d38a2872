"""Shared CLI plumbing: common options, configuration, output.

Importing this module (every command module does, and ``tooldir --help`` imports them all) stays
cheap: the loader, the policy model and rich are imported by the functions that use them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from ..policy import Policy
    from ..snapshot.loader import LoadConfig

EXIT_OK = 0
EXIT_FOUND_ERRORS = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3


class CommandError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def common_options() -> argparse.ArgumentParser:
    """Options every command accepts (a parent parser)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--project", default=".", metavar="DIR", help="project directory (default: .)")
    parent.add_argument(
        "--user-dir",
        action="append",
        metavar="DIR",
        help="user tool root (repeatable; default: $XDG_CONFIG_HOME/tooldir/tools)",
    )
    parent.add_argument("--policy", metavar="FILE", help="policy file (default: $XDG_CONFIG_HOME/tooldir/policy.toml)")
    parent.add_argument(
        "--state-dir",
        metavar="DIR",
        help="user state (default: $TOOLDIR_STATE_DIR or $XDG_STATE_HOME/tooldir)",
    )
    parent.add_argument("--json", action="store_true", help="print one JSON document for machines")
    parent.add_argument(
        "--no-index",
        action="store_true",
        help="read every package instead of reusing the content index in the state dir (also: TOOLDIR_NO_INDEX=1)",
    )
    return parent


def policy_from_args(args: argparse.Namespace) -> Policy:
    from ..policy import load_policy

    policy, _ = load_policy(args.policy)
    return policy


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    from ..policy import read_policy
    from ..snapshot.loader import make_config

    project = args.project
    if project is not None and not Path(project).is_dir():
        raise CommandError(f"--project {project}: not a directory")
    state_dir = state_dir_from_args(args)
    effective = read_policy(args.policy)
    return make_config(
        project=project,
        user_dirs=args.user_dir,
        policy=effective.policy,
        state_dir=state_dir,
        policy_file=effective.file,
        policy_overridden=effective.overridden,
        index=False if getattr(args, "no_index", False) else None,
    )


def state_dir_from_args(args: argparse.Namespace) -> Path | None:
    """``--state-dir``, which must be absolute (StateDirError, exit 2); None: the default location."""
    from ..state import absolute_state_dir

    return None if args.state_dir is None else absolute_state_dir(args.state_dir, setting="--state-dir")


def _console_class() -> type[Console]:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """rich would exit 1 itself; the CLI ends every broken pipe the same way (tooldir._cli.main)."""
            self.quiet = True
            raise BrokenPipeError

    return _Console


# off a terminal without COLUMNS: wide enough that every table row stays on one line (a log or a
# pre-commit hook reads lines, and wrapping at a guessed width breaks paths and messages apart)
UNWRAPPED_WIDTH = 4096


def output_width(*, terminal: bool, environ: dict[str, str] | None = None) -> int | None:
    """The width stdout tables are drawn at: ``COLUMNS`` when it is a positive number (terminal or
    not), else the terminal's own (None) or, off a terminal, no wrapping."""
    columns = (os.environ if environ is None else environ).get("COLUMNS", "").strip()
    if columns.isdigit() and 0 < int(columns) <= UNWRAPPED_WIDTH:
        return int(columns)
    return None if terminal else UNWRAPPED_WIDTH


def rule(out: Console, title: Any) -> None:
    """A heading line: rich's rule across the output's width, except when nothing is wrapped
    (off a terminal without ``COLUMNS``), where a rule would be :data:`UNWRAPPED_WIDTH` characters
    wide: there it is ``── title ──``."""
    if out.width >= UNWRAPPED_WIDTH:
        out.print("── ", title, " ──", sep="")
    else:
        out.rule(title)


@cache
def console() -> Console:
    return _console_class()(highlight=False, soft_wrap=False, width=output_width(terminal=sys.stdout.isatty()))


@cache
def console_err() -> Console:
    # soft_wrap: a message (a path in it) is never broken across lines at an assumed width
    return _console_class()(stderr=True, highlight=False, soft_wrap=True)


def stderr_is_terminal() -> bool:
    """Whether progress may be drawn: only on a terminal, never into a pipe or a log."""
    return sys.stderr.isatty()


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (``--json`` is then indented, tables as wide as it is)."""
    return _isatty(sys.stdout)


def print_json(value: Any) -> None:
    """One JSON document on stdout: indented for a person at a terminal, compact (one line, the
    same content) for a pipe or a file, where the indenting encoder would cost ~4x the time. The
    compact text is written in pieces (:func:`compact_json_chunks`), never held whole: at 10k
    tools it is ~5 MB, and joining a newline to it copied it once more."""
    write = sys.stdout.write
    if _isatty(sys.stdout):
        write(json.dumps(value, indent=2, ensure_ascii=False))
    else:
        for chunk in compact_json_chunks(value):
            write(chunk)
    write("\n")
    sys.stdout.flush()


_BATCH = 256  # list items encoded at once: one call of the C encoder each


def compact_json_chunks(value: Any) -> Iterator[str]:
    """``json.dumps(value, ensure_ascii=False)`` in pieces, the same text: a top-level object's
    long lists are encoded a batch of items at a time (each batch by the C encoder)."""
    dumps = partial(json.dumps, ensure_ascii=False)
    if type(value) is not dict or not all(type(k) is str for k in value):
        yield dumps(value)
        return
    yield "{"
    for i, (key, item) in enumerate(value.items()):
        yield f"{', ' if i else ''}{dumps(key)}: "
        if type(item) is not list or len(item) <= _BATCH:
            yield dumps(item)
            continue
        yield "["
        for start in range(0, len(item), _BATCH):
            # dumps of a list is "[" + ", ".join(items) + "]": the batch without its brackets
            yield (", " if start else "") + dumps(item[start : start + _BATCH])[1:-1]
        yield "]"
    yield "}"


def render_json(value: Any) -> str:
    """What :func:`print_json` prints into a pipe or a file: one compact line (the C encoder)."""
    return json.dumps(value, ensure_ascii=False) + "\n"


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@cache
def _control() -> re.Pattern[str]:
    """Every character of tooldir.text's table, and a carriage return (it can overwrite a line)."""
    from ..text import ALL_KINDS, character_class

    return re.compile(character_class(ALL_KINDS, extra="\r"))


def clean(text: str | None) -> str:
    """Text from a tool directory, made safe to show on a terminal: control, escape, bidi,
    tag and other invisible characters (the table of :mod:`tooldir.text`) and carriage returns
    become visible ``<U+XXXX>`` markers. Tab and line feed stay."""
    if text is None:
        return ""
    return _control().sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def safe(text: str | None, style: str = "") -> Text:
    """A rich Text (never markup) of cleaned text."""
    from rich.text import Text

    return Text(clean(text), style=style)


def plural(count: int, noun: str) -> str:
    """``1 tool``, ``2 tools``: counts in messages read as English."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
