"""Command-line options and the working folder shared by the size-scaled load benchmarks."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def parse_args(doc: str | None, argv: list[str] | None) -> tuple[argparse.Namespace, list[int], int]:
    """``--quick``, ``--sizes``, ``--runs``, ``--workdir``, ``--json``; returns (args, sizes, runs)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help="small sizes (200, 1000), 3 runs")
    parser.add_argument("--sizes", help="comma-separated package counts (default 1000,10000)")
    parser.add_argument("--runs", type=int, help="timed runs per variant (default 5)")
    parser.add_argument("--workdir", type=Path, help="reuse generated trees here (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([200, 1000] if args.quick else [1000, 10_000])
    return args, sizes, args.runs or (3 if args.quick else 5)


@contextmanager
def workdir(args: argparse.Namespace, prefix: str) -> Iterator[Path]:
    """``--workdir`` or a temporary folder, readable but not writable by others (as discovery requires)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        folder: Path = args.workdir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o755)  # noqa: S103 -- discovery refuses group/world-writable roots, not readable ones
        yield folder
