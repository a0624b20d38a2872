from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from regkit import NOOP_SCHEMA, MemoryAudit, registry_for
from toolkit import make_tool

from tooldir.model import Risk, Source, Status


def noop(*, input: dict[str, Any], context: dict[str, Any]) -> Any:
    return {"echo": input, "context": context}


def test_builtin_runs_with_validated_input_and_context_and_is_audited(tmp_path: Path) -> None:
    audit = MemoryAudit()
    setup = registry_for(tmp_path, audit=audit)
    setup.registry.register("echo_input", NOOP_SCHEMA, noop, description="Echo.")
    result = setup.registry.call("echo_input", {"n": 3}, context={"user": "x"})
    assert result.ok
    assert result.content == {"echo": {"n": 3}, "context": {"user": "x"}}
    assert result.error is None
    assert result.audit_id == "mem-1"
    event = audit.events[0]
    assert (event.tool, event.source, event.decision, event.status) == ("echo_input", "builtin", "allow", "ok")


@pytest.mark.parametrize(
    ("name", "schema", "why"),
    [
        ("", NOOP_SCHEMA, "must match"),
        ("has space", NOOP_SCHEMA, "must match"),
        ("x" * 65, NOOP_SCHEMA, "must match"),
        ("tool_search", NOOP_SCHEMA, "guard tool"),
        ("defer_execute_tool", NOOP_SCHEMA, "guard tool"),
        ("arr", {"type": "array"}, "type 'object'"),
        ("nott", {"properties": {}}, "type 'object'"),
        ("badschema", {"type": "object", "properties": {"a": {"type": 5}}}, "not a valid JSON Schema"),
        ("listschema", [1], "must be a JSON object"),
    ],
    ids=["empty", "space", "too-long", "guard-search", "guard-defer", "array-schema", "no-type", "invalid", "list"],
)
def test_register_rejects_bad_names_and_non_object_schemas(tmp_path: Path, name: str, schema: Any, why: str) -> None:
    setup = registry_for(tmp_path)
    with pytest.raises(ValueError, match=why):
        setup.registry.register(name, schema, noop, description="x")
    assert setup.registry.builtin_specs() == ()


def test_register_rejects_duplicates_and_handlers_without_keyword_arguments(tmp_path: Path) -> None:
    setup = registry_for(tmp_path)
    setup.registry.register("one", NOOP_SCHEMA, noop, description="x")
    with pytest.raises(ValueError, match="already registered"):
        setup.registry.register("one", NOOP_SCHEMA, noop, description="x")
    with pytest.raises(ValueError, match="input= and context="):
        setup.registry.register("two", NOOP_SCHEMA, lambda x: x, description="x")
    with pytest.raises(ValueError, match="description"):
        setup.registry.register("three", NOOP_SCHEMA, noop, description=" ")
    with pytest.raises(ValueError, match="risk"):
        setup.registry.register("four", NOOP_SCHEMA, noop, description="x", risk="dangerous")


def test_guard_names_are_registered_only_with_the_guard_flag(tmp_path: Path) -> None:
    setup = registry_for(tmp_path)
    spec = setup.registry.register("tool_search", NOOP_SCHEMA, noop, description="Search.", guard=True)
    assert spec.name == "tool_search"
    with pytest.raises(ValueError, match="guard=True is only for"):
        setup.registry.register("other", NOOP_SCHEMA, noop, description="x", guard=True)


def test_builtin_specs_reserve_their_names_against_directory_tools(tmp_path: Path) -> None:
    first = registry_for(tmp_path / "a")
    first.registry.register("read_thing", NOOP_SCHEMA, noop, description="Read.", risk=Risk.READ)
    specs = first.registry.builtin_specs()
    user = tmp_path / "user"
    make_tool(user, "read_thing")
    second = registry_for(tmp_path / "b", user_dir=user, builtins=specs)
    records = second.store.current.records("read_thing")
    directory = [r for r in records if r.source is Source.USER]
    assert directory and directory[0].status is Status.REJECTED
    assert any(d.code == "reserved-name" for d in directory[0].diagnostics)


def test_builtin_wins_even_when_the_host_forgot_to_pass_its_specs_to_the_loader(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "read_thing")
    setup = registry_for(tmp_path, user_dir=user)  # builtins not passed to make_config
    setup.registry.register("read_thing", NOOP_SCHEMA, lambda *, input, context: "builtin", description="Read.")
    result = setup.registry.call("read_thing", {})
    assert result.ok and result.content == "builtin"


def test_handler_exception_becomes_a_handler_failed_result(tmp_path: Path) -> None:
    audit = MemoryAudit()
    setup = registry_for(tmp_path, audit=audit)

    def broken(*, input: Any, context: Any) -> Any:
        raise RuntimeError("disk on fire")

    setup.registry.register("broken", NOOP_SCHEMA, broken, description="x")
    result = setup.registry.call("broken", {})
    assert not result.ok
    assert result.error is not None and result.error.code == "handler-failed"
    assert "disk on fire" in result.error.message
    assert audit.events[-1].status == "error" and audit.events[-1].decision == "allow"


@pytest.mark.serial  # a time bound
def test_registry_overhead_for_a_builtin_call_stays_small(tmp_path: Path) -> None:
    setup = registry_for(tmp_path, audit=MemoryAudit())
    setup.registry.register("noop", NOOP_SCHEMA, lambda *, input, context: None, description="x")
    for _ in range(50):
        setup.registry.call("noop", {"n": 1})
    start = time.perf_counter()
    for _ in range(500):
        setup.registry.call("noop", {"n": 1})
    per_call_ms = (time.perf_counter() - start) * 1000 / 500
    assert per_call_ms < 2.0  # generous bound for a noisy CI box; the benchmark reports the real figure


def test_a_handler_returning_non_json_content_gives_invalid_output(tmp_path: Path) -> None:
    setup = registry_for(tmp_path, audit=MemoryAudit())
    setup.registry.register("sets", NOOP_SCHEMA, lambda *, input, context: {1, 2}, description="x")
    result = setup.registry.call("sets", {})
    assert result.error is not None and result.error.code == "invalid-output" and result.content is None
