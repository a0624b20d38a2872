"""Progress for long CLI work (``eval``, ``drill``, loading large roots), drawn on stderr.

Only on a terminal: into a pipe, a log file or CI nothing is drawn, so stderr keeps only whole
messages and stdout (``--json`` included) never changes. rich's progress machinery is imported
only when something is actually drawn.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .common import CommandError, clean, console_err, stderr_is_terminal

if TYPE_CHECKING:
    from ..snapshot.loader import LoadConfig
    from ..snapshot.store import Snapshot


class Tracker:
    """What a long loop reports: :meth:`label` says what runs now, :meth:`advance` that one unit is done.
    This base class draws nothing (stderr is not a terminal)."""

    def label(self, text: str) -> None:
        return None

    def advance(self) -> None:
        return None


class _Drawn(Tracker):
    def __init__(self, bar: Any, task: Any, description: str) -> None:
        self._bar, self._task, self._description = bar, task, description

    def label(self, text: str) -> None:
        self._bar.update(self._task, description=f"{self._description}: {clean(text)}")

    def advance(self) -> None:
        self._bar.advance(self._task)


@contextlib.contextmanager
def progress(description: str, total: int | None = None, *, animate: bool = True) -> Iterator[Tracker]:
    """A progress bar (``total`` known) or spinner (``total`` None) on stderr while the block runs,
    removed when it ends. Off (a :class:`Tracker` that draws nothing) when stderr is not a terminal.
    ``animate=False``: drawn once and on each update, by no thread of its own (a load may then
    fork workers, which it does only while this process has one thread)."""
    if not stderr_is_terminal():
        yield Tracker()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}", markup=False)]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    # never redirect stdout/stderr: what the work prints (and --json) reaches them untouched
    with Progress(
        *columns,
        console=console_err(),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
        auto_refresh=animate,
    ) as bar:
        task = bar.add_task(description, total=total)
        if not animate:
            bar.refresh()
        yield _Drawn(bar, task, description)


#: Set to a number to cap the processes a one-shot command's load may use (1: never fork).
ENV_WORKERS = "TOOLDIR_WORKERS"


def workers_from_env() -> int:
    """``$TOOLDIR_WORKERS`` (a positive number), else the CPUs this process may use.

    Raises:
        CommandError: the variable is set to anything but a positive number (exit 2).
    """
    from .._internal.forkpool import cpu_count

    value = os.environ.get(ENV_WORKERS, "").strip()
    if not value:
        return cpu_count()
    if not value.isdigit() or int(value) < 1:
        raise CommandError(f"${ENV_WORKERS}={value!r}: expected a positive number of processes (1: no workers)")
    return int(value)


def load_roots(config: LoadConfig) -> Snapshot:
    """``Loader(config).load()`` with a spinner on a terminal (large roots take a while). A
    one-shot command's load: a large root is read by every CPU (``LoadConfig.workers``), which
    forks only while this process has one thread: the line is then drawn without a refresh thread."""
    from dataclasses import replace

    from ..snapshot.loader import Loader

    if config.workers == 1:
        config = replace(config, workers=workers_from_env())
    with progress(f"loading {len(config.roots)} tool root(s)", animate=config.workers == 1):
        return Loader(config).load()
