"""The ``tooldir`` command line: thin; every command is a module with ``register(subparsers)``.

Command modules are imported lazily: a run imports only the module of the command it names (all
of them only for ``tooldir --help`` or an unknown command). This keeps start-up short and keeps
the library's import graph acyclic: the drill runner runs ``tooldir X`` steps in-process through
:func:`command_line` (handed to it by ``tooldir drill``), and never imports this package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Collection, Sequence
from typing import Any

from .._internal.gcpause import gc_paused
from .common import EXIT_OK, EXIT_USAGE, CommandError, console_err

#: Exit status when the reader of stdout went away (``tooldir scan --json | head -c1``): what a
#: shell reports for a process ended by SIGPIPE (128 + 13), as other Unix tools end.
EXIT_BROKEN_PIPE = 141

#: Every command, in the order ``tooldir --help`` lists them, and the module that registers it.
COMMANDS: dict[str, str] = {
    "init": "init",
    "scan": "inspect",
    "list": "inspect",
    "show": "inspect",
    "allow": "trust",
    "revoke": "trust",
    "lock": "trust",
    "keygen": "trust",
    "sign": "trust",
    "verify": "trust",
    "drill": "drill",
    "run": "run",
    "audit": "run",
    "watch": "watch",
    "search": "search",
    "catalog": "search",
    "eval": "search",
    "serve": "serve",
    "policy": "policy",
    "adopt": "adopt",
}


#: Commands that keep running (or run many short loads): the cyclic GC stays on for them.
LONG_RUNNING = frozenset({"watch", "serve", "drill"})


def _selected(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (the top-level parser has no options but ``-h`` and ``--version``)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


class _Version(argparse.Action):
    """``--version``: looks the installed version up only when asked (importlib.metadata is not free)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        sys.stdout.write(f"tooldir {_version()}\n")
        parser.exit()


def _version() -> str:
    """The installed distribution's version (the metadata pip wrote), or "unknown" from a bare tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tooldir")
    except PackageNotFoundError:
        return "unknown"


def _silence_stdout() -> None:
    """The reader of stdout is gone: point fd 1 at the null device, so the interpreter's final
    flush of what is still buffered does not print a BrokenPipeError at exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: with a known command, only that command's module is imported and
    registered; otherwise (``--help``, a typo, ``argv`` None) every command is."""
    parser = argparse.ArgumentParser(
        prog="tooldir",
        description="Load LLM agent tools from directories on disk, safely.",
    )
    parser.add_argument("--version", action=_Version, help="print the installed version of tooldir and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    command = None if argv is None else _selected(argv)
    if argv is not None and list(argv[:1]) == ["--version"]:
        modules: list[str] = []  # argparse exits at --version before it needs any command
    else:
        modules = [COMMANDS[command]] if command else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        # A one-shot command builds large, long-lived structures and exits: pausing the cyclic GC
        # is the CLI's process-wide choice (the library never makes it for its host).
        pause = contextlib.nullcontext() if args.command in LONG_RUNNING else gc_paused()
        with pause:
            code: int = args.handler(args)
    except CommandError as exc:
        console_err().print(f"tooldir {args.command}: {exc.message}", markup=False, highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # tooldir.errors imports the model (pydantic): only once a command failed, so a command
        # that never loads the library (a scan memo hit, --help, --version) never pays for it
        from ..errors import ConfigError, ToolDirError

        if isinstance(exc, ConfigError):
            console_err().print(f"tooldir {args.command}: {exc.diagnostics()}", markup=False, highlight=False)
            return EXIT_USAGE
        if isinstance(exc, ToolDirError):
            console_err().print(f"tooldir {args.command}: {exc.diagnostics()}", markup=False, highlight=False)
            return 1
        if isinstance(exc, BrokenPipeError):  # stdout's reader went away (``| head``): end quietly
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        if isinstance(exc, OSError) and exc.errno is not None:
            # the OS refused a file (a full disk, EIO, a read-only or vanished state dir): one
            # line naming the error and the file; state files are replaced atomically, so the
            # old one is still in place
            where = f": {exc.filename}" if exc.filename else ""
            message = f"{exc.strerror or exc} (errno {exc.errno}){where}"
            console_err().print(f"tooldir {args.command}: {message}", markup=False, highlight=False)
            return EXIT_USAGE
        raise
    return code if code is not None else EXIT_OK


class _CommandLine:
    """This command line, as the drill drives it (:class:`tooldir.drill.cliargs.CommandLine`)."""

    @property
    def commands(self) -> Collection[str]:
        return COMMANDS.keys()

    def parser(self, args: list[str]) -> argparse.ArgumentParser:
        return build_parser(args)

    def main(self, args: list[str]) -> int:
        return main(args)

    def scan_memo_request(self, parsed: argparse.Namespace) -> tuple[Any, str, list[str]] | None:
        from .inspect import memo_request, scan_format

        return memo_request(parsed, scan_format(parsed))


def command_line() -> _CommandLine:
    """The ``tooldir`` command line, for :func:`tooldir.drill.run_drill` (its steps run through it)."""
    return _CommandLine()


def run() -> None:
    sys.exit(main())
