"""The ``tooldir`` command line: thin; every command is a module with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import ConfigError, ToolDirError
from . import drill, inspect, trust
from . import policy as policy_command
from . import run as run_command
from . import search as search_command
from . import serve as serve_command
from . import watch as watch_command
from .common import EXIT_OK, EXIT_USAGE, CommandError, console_err

COMMAND_MODULES = [
    inspect,
    trust,
    drill,
    run_command,
    watch_command,
    search_command,
    serve_command,
    policy_command,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tooldir",
        description="Load LLM agent tools from directories on disk, safely.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except CommandError as exc:
        console_err().print(f"tooldir {args.command}: {exc.message}", markup=False, highlight=False)
        return exc.exit_code
    except ConfigError as exc:
        console_err().print(f"tooldir {args.command}: {exc.diagnostics()}", markup=False, highlight=False)
        return EXIT_USAGE
    except ToolDirError as exc:
        console_err().print(f"tooldir {args.command}: {exc.diagnostics()}", markup=False, highlight=False)
        return 1
    except KeyboardInterrupt:
        return 130
    return code if code is not None else EXIT_OK


def run() -> None:
    sys.exit(main())
