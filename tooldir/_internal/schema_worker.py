"""Tool input validated in a child process with a hard time budget (``schema:redos``).

jsonschema-rs holds the GIL while it validates, and even a linear-time regex engine is
O(pattern size x input size): a 1 MiB input against a pattern built to thrash the DFA cache takes
tens of seconds in-process, and every other request of ``tooldir serve`` would wait. So directory
tools' inputs are checked by a small pool of worker processes (``python -I``, importing only
this module, :mod:`.inputschema` and jsonschema-rs; compiled validators cached per schema digest). The caller waits
on a pipe, without the GIL, until the worker has spent :data:`BUDGET_S` of CPU time on the request
(or :data:`WALL_BACKSTOP_S` have passed, whatever it spent); a worker that overruns is killed and the
input is refused (fail closed). The budget is the worker's CPU time, not the wall clock, so what is
refused does not depend on how busy the machine is: on a loaded machine a wall-clock budget refused
inputs that validate in a tenth of it, and it raced the memory bound below.

The budget bounds time, not memory: a small input against a recursive ``anyOf`` makes the validator
collect errors at a gigabyte per second (``serve:starve``). So for each request the worker lowers
its own address-space limit (``RLIMIT_AS``, soft) to its size right then plus
:func:`work_bytes` of the request (what a valid 1 MiB input needs is under a fifth of it); an
allocation past it ends the worker (Rust aborts, Python raises ``MemoryError``) and the caller
gets :class:`MemoryBoundError`, never a traceback; the next check starts a fresh worker. At most
:data:`MAX_BUSY` workers validate at once (more checks wait their turn, each bounded by the
budget), and a worker that has grown past :data:`_RETIRE_BYTES` (compiled validators, freed memory
not given back) exits after answering, so all of validation together stays within a few hundred MiB.

Protocol: one JSON line per request ``{"key", "schema", "input", "limit"}`` and per answer
``{"errors": [...]}`` or ``{"compile_error": "..."}``; the worker writes ``{"ready": true}`` once
it has started, so start-up time never counts against the budget. A worker ends on end of input.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from typing import Any

from .helper import start_helper

#: CPU-time budget of one input validation (seconds of the worker's CPU). The bound stated for
#: ``schema:redos``: a call whose input validation overruns it is refused; on an idle core, within
#: about this time.
BUDGET_S = 1.0
#: However little CPU the worker got (a loaded machine, a stopped worker), a validation ends after
#: this many seconds of wall-clock time per second of budget.
WALL_BACKSTOP_FACTOR = 10.0
WALL_BACKSTOP_S = BUDGET_S * WALL_BACKSTOP_FACTOR
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_STARTUP_S = 30.0  # a loaded machine may take long to start Python; never counted as the budget
_MAX_IDLE = 4
_CACHE = 256
_MEMORY_BYTES = 2 << 30  # hard address-space cap of a worker; each request gets far less (work_bytes)
#: Address space one validation may add to the worker, before the request's own share.
WORK_BASE_BYTES = 96 << 20
#: ... plus this many bytes per byte of the request (schema and input as JSON text): parsed JSON
#: takes up to ~25 bytes per byte of text (``[[],[],...]``), and the validator's own copy less.
WORK_BYTES_PER_BYTE = 64
MAX_BUSY = 4  # workers validating at once (each bounded by the budget and by work_bytes)
_RETIRE_BYTES = 256 << 20  # a worker larger than this after a request exits (its cache with it)
# Started with -I (no cwd, no user site, no PYTHON* variables) and without tooldir/__init__: a bare
# package object stands in for it, so only strictjson, inputschema and jsonschema-rs are imported.
_BOOT = (
    "import sys, types; pkg = types.ModuleType('tooldir'); pkg.__path__ = [sys.argv[1]]; "
    "sys.modules['tooldir'] = pkg; from tooldir._internal.schema_worker import main; sys.exit(main())"
)


class BudgetExceededError(Exception):
    """The worker did not answer within the budget (its CPU time, or the wall-clock backstop); it
    was killed."""


class WorkerFailedError(Exception):
    """The worker could not start, died, or answered something unreadable."""


class MemoryBoundError(WorkerFailedError):
    """Validating needed more memory than :func:`work_bytes` allows; the worker was ended."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"validation needed more than its memory bound of {limit >> 20} MiB and was stopped")


class SchemaCompileError(Exception):
    """The worker could not compile the schema (message from jsonschema-rs)."""


def work_bytes(request_bytes: int) -> int:
    """Address space one validation of a ``request_bytes`` request may add to its worker."""
    return WORK_BASE_BYTES + WORK_BYTES_PER_BYTE * request_bytes


class _Worker:
    def __init__(self) -> None:
        self.proc = start_helper(_BOOT)
        self._buffer = b""
        try:
            ready = self._read_line(time.monotonic() + _STARTUP_S)
        except BudgetExceededError:
            self.kill()
            raise WorkerFailedError(f"the validation worker did not start within {_STARTUP_S:g} s") from None
        if ready != b'{"ready": true}':
            self.kill()
            raise WorkerFailedError("the validation worker did not start")

    def ask(self, request: bytes, budget: float) -> dict[str, Any]:
        stdin = self.proc.stdin
        assert stdin is not None  # noqa: S101 - created with PIPE
        deadline = time.monotonic() + budget * WALL_BACKSTOP_FACTOR
        cpu_limit = self._cpu_seconds() + budget
        try:
            stdin.write(request)
            stdin.flush()
        except OSError as exc:
            raise WorkerFailedError(f"the validation worker is gone: {exc}") from None
        try:
            line = self._read_line(deadline, cpu_limit)
        except WorkerFailedError:
            if self._aborted():  # an allocation past the request's bound (Rust's handler aborts)
                raise MemoryBoundError(work_bytes(len(request))) from None
            raise
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerFailedError("the validation worker answered something unreadable") from None
        if not isinstance(answer, dict):
            raise WorkerFailedError("the validation worker answered something unreadable")
        if "memory_exceeded" in answer:  # Python's MemoryError; the worker exits after saying so
            raise MemoryBoundError(work_bytes(len(request)))
        return answer

    def _aborted(self) -> bool:
        """The worker ended by SIGABRT (its output pipe has closed, so it is gone or going)."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return False
        return code == -signal.SIGABRT

    def _cpu_seconds(self) -> float:
        """The worker's CPU time so far (user + system, from the kernel's view of it); 0 when it is
        gone (its answer or its end is then on the pipe)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            return 0.0
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime: fields 14 and 15

    def _read_line(self, deadline: float, cpu_limit: float | None = None) -> bytes:
        """The next line from the worker, within the wall-clock ``deadline`` and, with ``cpu_limit``,
        before the worker's CPU time reaches it."""
        stdout = self.proc.stdout
        assert stdout is not None  # noqa: S101 - created with PIPE
        fd = stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if cpu_limit is not None:
                    # the worker is one thread: it cannot spend the CPU left in less wall time than
                    # that, so waiting that long first never overshoots (a tick's granularity aside)
                    cpu_left = cpu_limit - self._cpu_seconds()
                    if cpu_left <= 0:
                        raise BudgetExceededError
                    left = min(left, max(cpu_left, 0.01))
                if left <= 0:
                    raise BudgetExceededError
                if not sel.select(left):
                    if time.monotonic() >= deadline:
                        raise BudgetExceededError
                    continue  # the CPU budget is checked again at the top
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise WorkerFailedError("the validation worker exited")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def close(self) -> None:
        """End an idle worker: end of input makes it exit; kill it if it does not."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(OSError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()  # our own child, by its pid
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


class _Pool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._starting: threading.Thread | None = None
        self._busy = threading.BoundedSemaphore(MAX_BUSY)

    def prestart(self) -> None:
        """Start one worker in the background now, when an input check will come soon (``tooldir
        run``: the worker's Python start then overlaps the load instead of following it). The next
        :meth:`check` waits for it rather than starting another; a failed start only means the
        check starts its own."""
        with self._lock:
            if self._idle or self._starting is not None:
                return
            thread = threading.Thread(target=self._start_one, name="tooldir-schema-worker-start", daemon=True)
            self._starting = thread
        thread.start()

    def _start_one(self) -> None:
        worker: _Worker | None = None
        try:
            worker = _Worker()
        except Exception:  # an optimisation: the check starts its own worker
            worker = None
        with self._lock:
            self._starting = None
            if worker is not None and len(self._idle) < _MAX_IDLE:
                self._idle.append(worker)
                worker = None
        if worker is not None:
            worker.close()

    def check(self, key: str, schema_json: str, input_json: str, limit: int, budget: float) -> list[str]:
        head = f'{{"key":{json.dumps(key)},"limit":{int(limit)},"schema":{schema_json},"input":'
        request = (head + input_json + "}\n").encode()
        with self._busy:  # a wait bounded by the budgets of the checks ahead
            return self._check(request, budget)

    def _check(self, request: bytes, budget: float) -> list[str]:
        with self._lock:
            starting = None if self._idle else self._starting
        if starting is not None:
            starting.join()  # bounded: a worker's start gives up after _STARTUP_S
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker()
        try:
            answer = worker.ask(request, budget)
        except (BudgetExceededError, WorkerFailedError):
            worker.kill()
            raise
        with self._lock:
            if len(self._idle) < _MAX_IDLE and not answer.get("retire"):
                self._idle.append(worker)
                worker = None
        if worker is not None:
            worker.close()
        if "compile_error" in answer:
            raise SchemaCompileError(str(answer["compile_error"]))
        errors = answer.get("errors")
        if not isinstance(errors, list):
            raise WorkerFailedError("the validation worker answered something unreadable")
        return [str(e) for e in errors]

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()

    def forget(self) -> None:
        """In a forked child: the workers (and their pipes) belong to the parent; start afresh."""
        self._lock = threading.Lock()
        self._idle = []
        self._starting = None
        self._busy = threading.BoundedSemaphore(MAX_BUSY)


POOL = _Pool()
atexit.register(POOL.close)
os.register_at_fork(after_in_child=POOL.forget)


class BudgetedValidator:
    """The validator of one directory tool's input: checked in a worker within :data:`BUDGET_S`."""

    __slots__ = ("key", "schema_json")

    def __init__(self, key: str, schema: Any) -> None:
        self.key = key
        self.schema_json = json.dumps(schema, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    def errors(self, input_json: str, limit: int = 3, budget: float = BUDGET_S) -> list[str]:
        """Up to ``limit`` '<pointer>: <message>' lines for the compact JSON ``input_json``.

        Raises:
            BudgetExceededError: validation overran ``budget`` seconds (the worker was killed).
            MemoryBoundError: validation needed more memory than its bound (the worker ended).
            WorkerFailedError: no worker could be started or it died.
            SchemaCompileError: the schema does not compile (the scan should have refused it).
        """
        return POOL.check(self.key, self.schema_json, input_json, limit, budget)


# ------------------------------------------------------------------------------------- the worker


def main() -> int:
    """The worker process: read requests from stdin, answer on stdout, end on end of input."""
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_BYTES, _MEMORY_BYTES))
    from .inputschema import compile_input_schema, input_errors

    validators: OrderedDict[str, Any] = OrderedDict()
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    page = os.sysconf("SC_PAGESIZE")
    for line in sys.stdin.buffer:
        bound = min(_address_space(page) + work_bytes(len(line)), _MEMORY_BYTES)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (bound, _MEMORY_BYTES))
        except (ValueError, OSError):
            return 1  # unbounded it never validates: the caller is told the worker exited
        try:
            request = json.loads(line)
            key = request["key"]
            validator = validators.get(key)
            if validator is None:
                validator = compile_input_schema(request["schema"])
                validators[key] = validator
                while len(validators) > _CACHE:
                    validators.popitem(last=False)
            else:
                validators.move_to_end(key)
            answer: dict[str, Any] = {"errors": input_errors(validator, request["input"], int(request["limit"]))}
        except MemoryError:
            out.write('{"memory_exceeded": true}\n')
            out.flush()
            return 1  # a fresh worker takes the next request
        except Exception as exc:  # one bad request never ends the worker
            answer = {
                "compile_error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            }
        retire = _address_space(page) > _RETIRE_BYTES  # freed memory is seldom given back: start afresh
        if retire:
            answer["retire"] = True
        out.write(json.dumps(answer, ensure_ascii=True) + "\n")
        out.flush()
        if retire:
            return 0
    return 0


def _address_space(page: int) -> int:
    """This process's mapped address space now (bytes; what RLIMIT_AS counts)."""
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[0]) * page
