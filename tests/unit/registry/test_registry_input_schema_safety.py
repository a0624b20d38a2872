"""The registry side of schema:remote-io and schema:redos: a call never fetches anything, a
catastrophic pattern fails closed within the stated bound, a validation that overruns the
budget is stopped (and the rest of the process keeps running), and builtins are held to the same
rules at registration."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from regkit import FakeSandbox, MemoryAudit, registry_for
from shared_helpers import forge_active
from toolkit import make_tool

from tooldir._internal.schema_worker import BUDGET_S, WALL_BACKSTOP_S
from tooldir._internal.strictjson import freeze
from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.snapshot.store import SnapshotStore, build_snapshot

pytestmark = pytest.mark.serial  # time bounds on validation: never beside another such test

#: The bound stated for schema:redos: ``^(a+)+$`` against 50k 'a' + '!' is refused in under 1 s
#: (the linear engine answers in milliseconds; a backtracking engine would never finish).
REDOS_BOUND_S = 1.0
#: A validation that overruns the budget (CPU time) is stopped: the call returns within the wall-clock
#: backstop plus this slack (killing and reaping the worker on a loaded 2-core machine).
SLACK_S = 3.0
#: A pattern built to thrash the linear engine's DFA cache: O(pattern x input), about 2 s per MiB.
THRASH = "(a|b)*a(a|b){200}c"
MATCH = "a" + "b" * 200 + "c"


def tool_with(tmp_path: Path, pattern: str) -> Path:
    root = tmp_path / "user"
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": pattern}}, "required": ["text"]}
    make_tool(root, "regex_tool", input_schema=schema)
    return root


def thrash_input() -> str:
    rng = random.Random(7)
    return "".join(rng.choice("ab") for _ in range((1 << 20) - 4096))


def registry_with_schema(tmp_path: Path, schema: dict[str, Any], box: FakeSandbox) -> Registry:
    """A registry whose snapshot holds a tool with ``schema``, as if discovery had missed it."""
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, "^a"), audit=MemoryAudit())
    good = setup.store.current.get("regex_tool")
    assert good is not None and good.manifest is not None
    manifest = good.manifest.model_copy(update={"input_schema": freeze(schema)})
    record = forge_active(good, manifest=manifest, digest="sha256:" + "1" * 64)
    store = SnapshotStore(build_snapshot([record], [], 1))
    return Registry(store, policy=Policy(), state_dir=tmp_path / "s2", sandbox=box, audit=MemoryAudit())


def test_a_catastrophic_pattern_against_a_long_input_is_refused_within_the_bound_and_nothing_runs(
    tmp_path: Path,
) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, "^(a+)+$"), sandbox=box, audit=MemoryAudit())
    setup.registry.call("regex_tool", {"text": "a"})  # the worker is started outside the measurement
    started = time.monotonic()
    result = setup.registry.call("regex_tool", {"text": "a" * 50_000 + "!"})
    assert time.monotonic() - started < REDOS_BOUND_S
    assert result.error is not None and result.error.code == "invalid-input"
    assert len(box.requests) == 1  # only the first, matching call ran


def test_a_validation_over_the_budget_is_stopped_refused_and_the_next_call_still_works(tmp_path: Path) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, THRASH), sandbox=box, audit=MemoryAudit())
    assert setup.registry.call("regex_tool", {"text": MATCH}).ok
    result = setup.registry.call("regex_tool", {"text": thrash_input()})
    # stopped by its CPU budget (the message names it), however long a loaded machine took to
    # give the worker that much CPU: a wall-clock bound here failed at load 9 (20 s for 1 s of CPU)
    assert result.error is not None and result.error.code == "invalid-input"
    assert str(BUDGET_S).rstrip("0").rstrip(".") in result.error.message
    assert setup.registry.call("regex_tool", {"text": MATCH}).ok
    assert len(box.requests) == 2


def test_the_process_keeps_running_while_a_slow_input_is_validated(tmp_path: Path) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, THRASH), sandbox=box, audit=MemoryAudit())
    setup.registry.register(
        "ping", {"type": "object"}, lambda *, input, context: "pong", description="Answer pong.", risk="read"
    )
    assert setup.registry.call("regex_tool", {"text": MATCH}).ok
    payload = thrash_input()
    slow: dict[str, Any] = {}

    def slow_call() -> None:
        slow["result"] = setup.registry.call("regex_tool", {"text": payload})
        slow["done"] = time.monotonic()

    thread = threading.Thread(target=slow_call)
    thread.start()
    time.sleep(0.2)  # the slow validation is under way in the worker
    answered = setup.registry.call("ping", {})
    answered_at = time.monotonic()
    thread.join(timeout=WALL_BACKSTOP_S + SLACK_S + 5)
    assert answered.ok and answered.content == "pong"
    assert "done" in slow and answered_at < slow["done"]
    assert slow["result"].error.code == "invalid-input"


def test_a_record_whose_schema_would_fetch_is_refused_and_nothing_connects(tmp_path: Path) -> None:
    box = FakeSandbox()
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        for i, schema in enumerate(
            [
                {"type": "object", "properties": {"a": {"$schema": f"{url}/meta"}}},
                {"type": "object", "items": {"$id": f"{url}/id"}},
                {"type": "object", "allOf": [{"$ref": f"{url}/ref"}]},
                {"type": "object", "$defs": {"d": {"$dynamicRef": f"{url}/dyn"}}},
            ]
        ):
            registry = registry_with_schema(tmp_path / str(i), schema, box)
            result = registry.call("regex_tool", {"a": 1})
            assert result.error is not None and result.error.code == "invalid-schema"
        with pytest.raises(BlockingIOError):
            server.accept()
    assert box.requests == []


def test_a_record_with_a_pattern_the_linear_engine_refuses_is_invalid_schema(tmp_path: Path) -> None:
    box = FakeSandbox()
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a+)+\\1"}}}
    result = registry_with_schema(tmp_path, schema, box).call("regex_tool", {"a": "aa"})
    assert result.error is not None and result.error.code == "invalid-schema"
    assert box.requests == []


def test_format_is_an_annotation_on_tool_input_so_no_input_is_compiled_as_a_regex(tmp_path: Path) -> None:
    box = FakeSandbox()
    schema = {"type": "object", "properties": {"a": {"type": "string", "format": "regex"}}}
    result = registry_with_schema(tmp_path, schema, box).call("regex_tool", {"a": "(a+)+" * 1000 + "\\"})
    assert result.ok


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$schema": "http://127.0.0.1:9/"}}},
        {"type": "object", "properties": {"a": {"$ref": "file:///dev/zero"}}},
        {"type": "object", "$id": "http://127.0.0.1:9/base"},
        {"type": "object", "$schema": "http://127.0.0.1:9/other-dialect"},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)"}}},
    ],
    ids=["nested-schema", "file-ref", "id", "top-level-foreign-schema", "lookahead"],
)
def test_a_builtin_schema_that_could_fetch_or_backtrack_is_refused_at_registration(
    tmp_path: Path, schema: dict[str, Any]
) -> None:
    setup = registry_for(tmp_path, audit=MemoryAudit())
    with pytest.raises(ValueError, match="input_schema"):
        setup.registry.register(
            "host_tool", schema, lambda *, input, context: None, description="A host tool.", risk="read"
        )


def test_error_messages_quote_a_long_input_only_in_part(tmp_path: Path) -> None:
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, "^b"), sandbox=box, audit=MemoryAudit())
    result = setup.registry.call("regex_tool", {"text": "a" * 100_000})
    assert result.error is not None and result.error.code == "invalid-input"
    assert len(result.error.message) < 2_000
    assert json.dumps(result.to_json())  # plain JSON


def test_a_forked_child_validates_with_its_own_worker_not_the_parents(tmp_path: Path) -> None:
    import os

    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, "^a"), sandbox=box, audit=MemoryAudit())
    assert setup.registry.call("regex_tool", {"text": "abc"}).ok  # the parent's worker is now idle in the pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = (
            setup.registry.call("regex_tool", {"text": "abc"}).ok
            and not setup.registry.call("regex_tool", {"text": "b"}).ok
        )
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1" and status == 0
    os.close(read)
    assert setup.registry.call("regex_tool", {"text": "abc"}).ok
    assert not setup.registry.call("regex_tool", {"text": "b"}).ok


def test_the_validation_worker_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = tool_with(tmp_path, "^a")
    child = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r}); sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from pathlib import Path
from regkit import FakeSandbox, MemoryAudit, registry_for
from tooldir._internal import schema_worker
setup = registry_for(Path({str(tmp_path / "child")!r}), user_dir=Path({str(root)!r}), sandbox=FakeSandbox(), audit=MemoryAudit())
assert setup.registry.call("regex_tool", {{"text": "abc"}}).ok
print(schema_worker.POOL._idle[0].proc.pid)
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return  # exited; only waiting to be reaped by init
        time.sleep(0.05)
    os.kill(pid, 9)  # our own test's leftover, by its pid
    raise AssertionError(f"validation worker {pid} outlived its parent")


def test_a_validation_over_its_memory_bound_is_a_specific_refusal_and_the_next_call_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve:starve: a recursive anyOf whose error messages quote a 100 kB string (about 1 GiB/s)."""
    from tooldir._internal import schema_worker

    real_check = schema_worker.POOL.check

    def long_budget(key: str, schema_json: str, input_json: str, limit: int, budget: float) -> list[str]:
        return real_check(key, schema_json, input_json, limit, 120.0)  # the memory bound ends it, not the time

    monkeypatch.setattr(schema_worker.POOL, "check", long_budget)
    branch = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"anyOf": [{**branch, "minItems": 2}, {**branch, "minItems": 2}, branch]}},
    }
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=tool_with(tmp_path, "^a"), audit=MemoryAudit())
    good = setup.store.current.get("regex_tool")
    assert good is not None and good.manifest is not None
    manifest = good.manifest.model_copy(update={"input_schema": freeze(schema)})
    # a digest of its own: workers cache compiled validators by digest (registry_with_schema shares one)
    record = forge_active(good, manifest=manifest, digest="sha256:" + "2" * 64)
    store = SnapshotStore(build_snapshot([record], [], 1))
    registry = Registry(store, policy=Policy(), state_dir=tmp_path / "s2", sandbox=box, audit=MemoryAudit())
    hog = json.loads("[" * 8 + json.dumps("x" * 100_000) + "]" * 8)
    result = registry.call("regex_tool", {"a": hog})
    assert result.error is not None and result.error.code == "invalid-input"
    assert "validating the input against the tool's input_schema needed more than" in result.error.message
    assert "MiB and was stopped; the input is refused" in result.error.message
    assert box.requests == []
    assert registry.call("regex_tool", {"a": [[], []]}).ok
    assert len(box.requests) == 1
