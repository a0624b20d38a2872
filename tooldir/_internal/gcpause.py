"""Pause the cyclic garbage collector while building large, long-lived structures.

A process-wide setting, so only the CLI uses it on its own (around one-shot commands, and the first
load of ``tooldir watch``); library code never changes its host's GC. A host opts in explicitly with
``with tooldir.gc_paused(): loader.load()`` (``benchmarks/bench_load.py`` measures both)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC for the block: a build of 10k+ long-lived objects otherwise makes the
    young-generation collections superlinear (a cold ``Loader.load()`` of 10k generated packages
    from ``benchmarks/generate.py`` took about 2x as long without it, median of 5 runs)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # Promote what the build allocated straight to the oldest generation (freeze + unfreeze
            # are two list splices) instead of letting the re-enabled GC scan every new, long-lived
            # object in its young generations first. Cyclic garbage is
            # still found, at the next full collection. Skipped if the host froze objects itself.
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
