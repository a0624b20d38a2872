"""Map a function over many items with this process and forked workers, results in item order.

For the cold read of a large tool root (issue 14 item 3): reading, hashing and validating a
package is pure Python holding the GIL, so threads cannot share it; a forked worker shares the
already imported modules copy-on-write and starts in milliseconds. Used only when the caller
opted in (``LoadConfig.workers``; the CLI's one-shot commands do, a library host is never forked
by surprise) and only when it is safe (:func:`can_fork`): on Linux, from a process with exactly
one thread, for at least ``min_items`` items.

How the work is shared: the items are cut into chunks and the chunks into one contiguous segment
per worker. Each worker works through its segment from the front and sends every chunk's
results back over its own pipe as one frame (pickled: the data comes only from our own forked
child, through a pipe made for it, and is never read from a file or another user). This process
never waits for a worker: it takes chunks from the *back* of the segment with the most work
left, and checks the pipes after each chunk, until every chunk is done by one side or the
other. So a worker that is slow, hangs, dies or sends something malformed (then it is killed and
a warning logged) only leaves more chunks for this process: nothing is lost, and the result is
the same as a sequential map. At most one chunk per segment is done twice (where the two ends
meet). Every worker is killed and reaped before :func:`fork_map` returns or raises (also on
``KeyboardInterrupt``); a worker whose parent is gone dies at its next write (``EPIPE``).

Why not :class:`concurrent.futures.ProcessPoolExecutor` (issue 25 item 5, measured by
benchmarks/bench_pools.py: whole cold ``tooldir scan --json`` processes, 10k packages, 2 cores,
paired rounds, medians with min-max): the same reading through a fork-context executor (chunks of
the same size, results pickled as here, this process only collecting) took 1.19x the CPU
(1.09-1.26) and 33 MB more peak memory, for a wall time within the noise (0.92x, 0.86-1.05, at a
load average of 8-10 on 2 cores, where more runnable processes simply get a larger share); a
forkserver executor 1.04x the wall (0.85-1.28; its workers' CPU is not countable, they are the
server's children). And an executor cannot keep the contract above: its parent waits on futures,
so a hung worker hangs the load and a dead one fails every chunk still queued on the pool
(``BrokenProcessPool``) instead of leaving them to this process. The Ed25519 checks of a signed root are not done here but by the helper of
:mod:`tooldir.trust.verify_pool`, on purpose: it also runs where this module may not fork (a
threaded process, a library host's default), and where both run it measured faster than
verifying in these workers (see there).
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import fcntl
import gc
import io
import logging
import operator
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

log = logging.getLogger("tooldir.parallel")

X = TypeVar("X")
R = TypeVar("R")

#: frame header: magic, chunk index, number of results, payload length
_HEAD = struct.Struct(">4sIII")
_MAGIC = b"TDfm"
_PIPE_BYTES = 1 << 20  # asked of the kernel (best effort): a worker rarely waits for this process
_READ = 1 << 20


def _mapping_proxy(data: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(data)


def _reduce_proxy(proxy: MappingProxyType[Any, Any]) -> tuple[Any, ...]:
    return (_mapping_proxy, (dict(proxy),))


_Reducer = Callable[[Any], Any]  # pickle's reduce: an object -> (callable, args)


def dispatch_table(plain: Iterable[type] = ()) -> dict[type, _Reducer]:
    """How :func:`dumps` reduces what plain pickling cannot (read-only mappings, as a copy of their
    mapping) or does slowly: each dataclass of ``plain`` (every field an ``__init__`` argument)
    becomes its class and field values, rebuilt by calling the class (about half the time of the
    generic dataclass state, measured at 10k packages)."""
    table: dict[type, _Reducer] = {**copyreg.dispatch_table, MappingProxyType: _reduce_proxy}
    for cls in plain:
        fields = dataclasses.fields(cls)
        if not fields or not all(f.init for f in fields):
            raise TypeError(f"{cls.__name__}: only dataclasses whose every field is an __init__ argument")
        table[cls] = _fields_reducer(cls, [f.name for f in fields])
    return table


def _fields_reducer(cls: type, names: list[str]) -> _Reducer:
    if len(names) == 1:
        (name,) = names
        return lambda obj: (cls, (getattr(obj, name),))
    get = operator.attrgetter(*names)
    return lambda obj: (cls, get(obj))


_DEFAULT_TABLE = dispatch_table()


def dumps(value: object, table: Mapping[type, _Reducer] | None = None) -> bytes:
    """Pickle ``value`` with ``table`` (:func:`dispatch_table`)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DEFAULT_TABLE if table is None else table
    pickler.dump(value)
    return buf.getvalue()


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def native_threads() -> int | None:
    """Threads of this process as the kernel sees them (Linux ``/proc``), or None if unknown."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def can_fork() -> str | None:
    """None if forking a worker is safe here, else why not: not on Linux (elsewhere ``fork``
    is missing or unsafe with system frameworks loaded), or another thread is running (it may
    hold a lock the child would need)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return f"no safe fork on {sys.platform}"
    if threading.active_count() != 1:
        return f"{threading.active_count()} threads running"
    native = native_threads()
    if native is not None and native != 1:
        return f"{native} native threads running"
    return None


def processes_for(items: int, workers: int, min_items: int) -> int:
    """How many processes (this one included) share ``items`` items: 1 below ``min_items``
    items, else at most ``workers`` and the CPUs this process may use."""
    if workers <= 1 or items < max(min_items, 2):
        return 1
    return max(1, min(workers, cpu_count(), items))


@dataclass(slots=True)
class _Worker:
    pid: int
    fd: int  # read end of its results pipe (non-blocking)
    first: int  # its segment: chunks [first, end)
    end: int
    received: int  # chunks [first, received) came back from it
    hi: int  # chunks [hi, end) this process did itself (or takes next)
    buf: bytearray = field(default_factory=bytearray)
    alive: bool = True


def fork_map(
    items: Sequence[X],
    work: Callable[[X], R],
    *,
    processes: int,
    accept: Callable[[object], bool],
    on_result: Callable[[int, R], None] | None = None,
    chunk: int | None = None,
    plain: Iterable[type] = (),
) -> list[R]:
    """``[work(x) for x in items]``, shared between this process and ``processes - 1`` forked
    workers (see the module docstring); sequential when ``processes`` is 1, when there are
    fewer than two items, or when :func:`can_fork` says no (logged at debug level).

    ``accept`` checks each result a worker sent (its type): a frame with one it refuses counts as
    garbage. ``on_result(i, r)`` is called once per item, in this process, as soon as its result
    is here (not in item order). ``work`` must not depend on state it changes in this process:
    in a worker it runs on the copy made at the fork. ``chunk``: items per frame (default: up to
    32, smaller for few items). ``plain``: dataclasses in the results sent field by field
    (:func:`dispatch_table`).
    """
    n = len(items)
    why = None if processes > 1 and n > 1 else "one process"
    if why is None:
        why = can_fork()
    if why is not None:
        if processes > 1:
            log.debug("reading %d items in this process: %s", n, why)
        pool = _Pool(items, work, accept, on_result, [range(n)])
        pool.run_chunk(0)
        return pool.results
    size = chunk or max(1, min(32, n // (processes * 8)))
    pool = _Pool(items, work, accept, on_result, [range(i, min(i + size, n)) for i in range(0, n, size)])
    pool.table = dispatch_table(plain)
    try:
        pool.run(processes - 1)
    finally:
        pool.stop()
    return pool.results


class _Missing:
    pass


_MISSING: Any = _Missing()


def _segments(nchunks: int, nworkers: int) -> list[tuple[int, int]]:
    if nworkers <= 0:
        return []
    base, extra = divmod(nchunks, nworkers)
    out, start = [], 0
    for j in range(nworkers):
        end = start + base + (1 if j < extra else 0)
        out.append((start, end))
        start = end
    return out


class _Pool(Generic[X, R]):
    """One :func:`fork_map`: the chunks, the results so far and the workers."""

    def __init__(
        self,
        items: Sequence[X],
        work: Callable[[X], R],
        accept: Callable[[object], bool],
        on_result: Callable[[int, R], None] | None,
        chunks: list[range],
    ) -> None:
        self.items = items
        self.work = work
        self.accept = accept
        self.on_result = on_result
        self.chunks = chunks
        self.results: list[R] = [_MISSING] * len(items)
        self.workers: list[_Worker] = []
        self.table = _DEFAULT_TABLE

    def run(self, nworkers: int) -> None:
        # the first chunk here, before forking: what the work sets up on first use (compiled
        # validators, ~10 ms) is then set up once, and every worker inherits it. Its on_result
        # calls wait until the workers run: nothing they start (a helper process) is inherited.
        on_result, self.on_result = self.on_result, None
        self.run_chunk(0)
        rest = len(self.chunks) - 1
        bounds = [(1 + a, 1 + b) for a, b in _segments(rest, min(nworkers, rest))]
        for first, end in bounds:
            if self.start(first, end) is None:
                break
        self.on_result = on_result
        if on_result is not None:
            for i in self.chunks[0]:
                on_result(i, self.results[i])
        for first, end in bounds[len(self.workers) :]:  # workers that could not be started: ours
            for c in range(first, end):
                self.run_chunk(c)
        if self.workers:
            self.steal()
        for c in range(len(self.chunks)):  # never needed: every chunk was taken by one side
            if any(self.results[i] is _MISSING for i in self.chunks[c]):
                self.run_chunk(c)

    def put(self, i: int, result: R) -> None:
        if self.results[i] is _MISSING:
            self.results[i] = result
            if self.on_result is not None:
                self.on_result(i, result)

    def run_chunk(self, c: int) -> None:
        items, work, results = self.items, self.work, self.results
        for i in self.chunks[c]:
            if results[i] is _MISSING:
                self.put(i, work(items[i]))

    # -- workers -----------------------------------------------------------------------------

    def start(self, first: int, end: int) -> _Worker | None:
        try:
            r, w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            log.warning("cannot start a worker (pipe: %s); this process reads its share", exc.strerror)
            return None
        with contextlib.suppress(OSError):  # best effort: a worker rarely waits for this process
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(r)
            os.close(w)
            log.warning("cannot fork a worker (%s); this process reads its share", exc.strerror)
            return None
        if pid == 0:  # pragma: no cover - the child (coverage does not follow it)
            self.child(r, w, first, end)
        worker = _Worker(pid, r, first, end, received=first, hi=end)
        self.workers.append(worker)  # from here on, stop() kills and reaps it whatever happens
        os.close(w)
        os.set_blocking(r, False)
        return worker

    def child(self, r: int, w: int, first: int, end: int) -> None:  # pragma: no cover - in the worker
        """A worker's life: its segment from the front, one frame per chunk; never returns."""
        code = 0
        try:
            gc.disable()  # short-lived: never walk (and so copy) the parent's objects
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # the parent is gone: die at the next write
            os.close(r)
            for other in self.workers:  # read ends of the workers forked before this one
                os.close(other.fd)
            parent = os.getppid()
            items, work = self.items, self.work
            for c in range(first, end):
                span = self.chunks[c]
                payload = dumps([work(items[i]) for i in span], self.table)
                view = memoryview(_HEAD.pack(_MAGIC, c, len(span), len(payload)) + payload)
                while view:
                    view = view[os.write(w, view) :]
                if os.getppid() != parent:
                    break
        except BaseException:
            code = 1  # whatever happened, the parent reads the rest itself
        finally:
            os._exit(code)

    def steal(self) -> None:
        """Take chunks from the back of the busiest segment until every chunk is done."""
        workers = self.workers
        while True:
            for worker in workers:
                self.drain(worker)
            worker = max(workers, key=_left)
            if worker.hi <= worker.received:
                return
            worker.hi -= 1
            c = worker.hi
            if c != worker.received or not worker.alive:
                self.run_chunk(c)
                continue
            # the chunk the worker is most likely reading now: look for its frame between items
            for i in self.chunks[c]:
                if self.results[i] is _MISSING:
                    self.put(i, self.work(self.items[i]))
                self.drain(worker)
                if worker.received > c:
                    break

    def drain(self, worker: _Worker) -> None:
        """Read what the worker has written so far (never waits) and take its complete frames."""
        if not worker.alive:
            return
        while True:
            try:
                data = os.read(worker.fd, _READ)
            except BlockingIOError:
                break
            except OSError as exc:
                self.lost(worker, f"its pipe failed ({exc.strerror})")
                return
            if not data:
                if worker.received < worker.hi:
                    self.lost(worker, "it exited early")
                    return
                worker.alive = False
                break
            worker.buf += data
        buf = worker.buf
        while len(buf) >= _HEAD.size:
            magic, c, count, length = _HEAD.unpack_from(buf)
            if magic != _MAGIC or c != worker.received or c >= worker.end or count != len(self.chunks[c]):
                self.lost(worker, "it sent a malformed frame")
                return
            if len(buf) < _HEAD.size + length:
                return
            payload = bytes(buf[_HEAD.size : _HEAD.size + length])
            del buf[: _HEAD.size + length]
            try:
                decoded = pickle.loads(payload)  # noqa: S301 - from our own forked child's pipe only
            except Exception:
                self.lost(worker, "it sent a frame that does not decode")
                return
            if type(decoded) is not list or len(decoded) != count or not all(map(self.accept, decoded)):
                self.lost(worker, "it sent results of the wrong shape")
                return
            worker.received = c + 1
            for i, result in zip(self.chunks[c], decoded, strict=True):
                self.put(i, result)

    def lost(self, worker: _Worker, why: str) -> None:
        log.warning(
            "parallel read: worker %d stopped (%s); this process reads its remaining %d chunk(s)",
            worker.pid,
            why,
            max(0, worker.hi - worker.received),
        )
        worker.alive = False
        worker.buf.clear()
        with contextlib.suppress(OSError):
            os.kill(worker.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Kill every worker (it may be reading a chunk this process already did) and reap it."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                os.kill(worker.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.close(worker.fd)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(worker.pid, 0)


def _left(worker: _Worker) -> int:
    return worker.hi - worker.received
