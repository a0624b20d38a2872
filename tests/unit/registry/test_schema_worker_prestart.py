"""A validation worker started ahead (``tooldir run`` starts one while it loads the roots) is the
one the next input check uses; a failed start ahead only means the check starts its own."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool

from tooldir._cli import main
from tooldir._internal import schema_worker

SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}, separators=(",", ":"))


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> tuple[schema_worker._Pool, list[str]]:
    """A fresh pool whose workers' starts are recorded by the thread that made them."""
    fresh = schema_worker._Pool()
    started: list[str] = []
    real = schema_worker._Worker

    class Recorded(real):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            started.append(threading.current_thread().name)
            super().__init__()

    monkeypatch.setattr(schema_worker, "_Worker", Recorded)
    monkeypatch.setattr(schema_worker, "POOL", fresh)
    yield fresh, started
    fresh.close()


def test_the_check_after_a_prestart_uses_the_worker_started_ahead(pool: Any) -> None:
    fresh, started = pool
    fresh.prestart()
    fresh.prestart()  # one at a time
    assert fresh.check("k", SCHEMA, '{"n": "x"}', 3, schema_worker.BUDGET_S) != []
    assert fresh.check("k", SCHEMA, '{"n": 1}', 3, schema_worker.BUDGET_S) == []
    assert started == ["tooldir-schema-worker-start"]


def test_a_prestart_that_fails_leaves_the_check_to_start_its_own(pool: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh, started = pool
    real = schema_worker._Worker

    tried = threading.Event()

    def broken() -> Any:
        started.append("broken")
        tried.set()
        raise schema_worker.WorkerFailedError("the validation worker did not start")

    monkeypatch.setattr(schema_worker, "_Worker", broken)
    fresh.prestart()
    assert tried.wait(10)
    thread = fresh._starting
    if thread is not None:
        thread.join()
    monkeypatch.setattr(schema_worker, "_Worker", real)
    assert fresh.check("k", SCHEMA, '{"n": 1}', 3, schema_worker.BUDGET_S) == []
    assert started == ["broken", "MainThread"]  # the failed start ahead, then the check's own


def test_tooldir_run_checks_a_directory_tools_input_in_the_worker_it_started_while_loading(
    tmp_path: Path, pool: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, started = pool
    user = tmp_path / "user"
    make_tool(user, "probe_tool")
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            "run",
            "probe_tool",
            "--input",
            '{"text": 5}',
            "--json",
            "--user-dir",
            "user",
            "--state-dir",
            str(tmp_path / "state"),
        ]
    )
    assert code == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid-input"
    assert started == ["tooldir-schema-worker-start"]
