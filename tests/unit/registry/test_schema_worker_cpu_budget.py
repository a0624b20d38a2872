"""The validation budget is the worker's CPU time, not the wall clock: what is refused does not
depend on how busy the machine is (a stopped worker is the busiest machine there is), and a worker
that gets no CPU at all still ends at the wall-clock backstop."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import pytest

from tooldir._internal import schema_worker

SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}, separators=(",", ":"))
REQUEST = (f'{{"key":"k","limit":3,"schema":{SCHEMA},"input":{{"n":1}}}}\n').encode()


def _resume_after(pid: int, seconds: float) -> threading.Thread:
    def resume() -> None:
        time.sleep(seconds)  # the worker stays stopped this long: wall time passes, CPU time does not
        os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=resume, name="resume-worker")
    thread.start()
    return thread


def test_a_worker_held_off_the_cpu_for_longer_than_the_budget_still_answers() -> None:
    worker = schema_worker._Worker()
    try:
        assert worker.ask(REQUEST, schema_worker.BUDGET_S) == {"errors": []}  # compiled and warm
        os.kill(worker.proc.pid, signal.SIGSTOP)
        started = time.monotonic()  # before the resumer's clock starts: it is held at least this long
        resumer = _resume_after(worker.proc.pid, schema_worker.BUDGET_S * 2)
        answer = worker.ask(REQUEST, schema_worker.BUDGET_S)
        resumer.join()
        assert time.monotonic() - started >= schema_worker.BUDGET_S * 2  # it was held past the budget
        assert answer == {"errors": []}
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)
        worker.kill()


def test_a_worker_that_gets_no_cpu_at_all_ends_at_the_wall_clock_backstop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_worker, "WALL_BACKSTOP_FACTOR", 2.0)
    worker = schema_worker._Worker()
    try:
        os.kill(worker.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(schema_worker.BudgetExceededError):
            worker.ask(REQUEST, 0.5)
        assert time.monotonic() - started >= 0.5 * 2.0  # the backstop, not the CPU budget, ended it
    finally:
        worker.kill()


def test_the_cpu_time_read_is_the_kernels_and_grows_while_the_worker_works() -> None:
    worker = schema_worker._Worker()
    try:
        before = worker._cpu_seconds()
        with open(f"/proc/{worker.proc.pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        assert before == (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        busy = json.dumps({"type": "string", "pattern": "(a|b)*a(a|b){200}c"})
        rng = random.Random(7)
        text = "".join(rng.choice("ab") for _ in range(1 << 19))  # about 1 s of CPU against that pattern
        hog = f'{{"key":"h","limit":3,"schema":{busy},"input":"{text}"}}\n'.encode()
        with pytest.raises(schema_worker.BudgetExceededError):
            worker.ask(hog, 0.3)
        assert (
            worker._cpu_seconds() - before >= 0.3 - 0.02
        )  # stopped once it had spent it (a tick of slack); ask leaves the kill to its caller
    finally:
        worker.kill()
