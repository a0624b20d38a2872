"""``tooldir init NAME [--dir ROOT] [--lang python|node|sh]``: scaffold a tool package."""

from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_OK, CommandError, console, print_json, safe
from .scaffold import LANGS, create_package

DEFAULT_ROOT = ".tooldir/tools"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="create a new tool package (manifest, script, README) that loads clean; never overwrites",
        description="Create ROOT/NAME with schema.json, a script that reads the request on stdin and answers on "
        "stdout, and a README. ROOT defaults to the project's tool root .tooldir/tools (then approve it with "
        "`tooldir allow NAME` before it runs); pass --dir with your user tool root to skip approval.",
    )
    p.add_argument("name", metavar="NAME", help="the tool name (letters, digits, _ and -; also the folder name)")
    p.add_argument("--dir", default=DEFAULT_ROOT, metavar="ROOT", help=f"the tool root (default: {DEFAULT_ROOT})")
    p.add_argument("--lang", default="python", choices=LANGS, help="the script's language (default: python)")
    p.add_argument("--json", action="store_true", help="print one JSON document for machines")
    p.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    try:
        folder, files = create_package(args.dir, args.name, args.lang)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    except FileExistsError:
        raise CommandError(f"{args.dir}/{args.name} already exists: not overwriting anything") from None
    except OSError as exc:
        raise CommandError(f"{exc.filename or args.dir}: {exc.strerror or exc}") from None
    if args.json:
        print_json({"path": str(folder), "files": files})
        return EXIT_OK
    out = console()
    out.print(safe(f"created {folder}/: {', '.join(files)}"))
    label = "next"
    if args.dir == DEFAULT_ROOT:  # a project tool: it runs once you approve it
        out.print(safe(f"next: tooldir allow {args.name}   (a project tool runs only once you approve it)"))
        label = "then"
    out.print(safe(f'{label}: tooldir run {args.name} --input \'{{"text": "hello"}}\''))
    return EXIT_OK
