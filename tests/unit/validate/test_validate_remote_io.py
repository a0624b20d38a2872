"""schema:remote-io: discovery never fetches anything an input schema names. Nested ``$schema``,
``$id``, ``$vocabulary`` and non-local references are ``invalid-input-schema`` with the pointer,
and every validator refuses retrieval even if a check were missed (a 127.0.0.1 listener sees
nothing; ``file:///dev/zero`` and a FIFO never block)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool, manifest

import tooldir
from tooldir import Snapshot, Status
from tooldir._internal.inputschema import compile_input_schema, remote_io_problems

BOUND_S = 5.0  # a load of a few tools takes milliseconds; a stalled fetch would take 30 s or forever


@pytest.fixture
def listener() -> Iterator[tuple[str, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield f"http://127.0.0.1:{server.getsockname()[1]}", server


def accepted(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def hostile_schemas(url: str) -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (input schema, pointer of the refused keyword). Each one also holds a local $ref
    and a pattern, so the scan compiles it."""
    local = {"$defs": {"s": {"type": "string", "pattern": "^a"}}, "required": []}

    def obj(**props: Any) -> dict[str, Any]:
        return {"type": "object", **local, "properties": {"ok": {"$ref": "#/$defs/s"}, **props}}

    return {
        "nested_schema": (obj(a={"$schema": f"{url}/meta"}), "/input_schema/properties/a/$schema"),
        "schema_in_items": (
            obj(a={"type": "array", "items": {"$schema": f"{url}/items"}}),
            "/input_schema/properties/a/items/$schema",
        ),
        "schema_in_defs": (
            {**obj(), "$defs": {"s": {"type": "string"}, "d": {"$schema": f"{url}/defs"}}},
            "/input_schema/$defs/d/$schema",
        ),
        "schema_in_allof": (
            {**obj(), "allOf": [{"type": "object"}, {"$schema": f"{url}/allof"}]},
            "/input_schema/allOf/1/$schema",
        ),
        "nested_id": (obj(a={"$id": f"{url}/id", "type": "string"}), "/input_schema/properties/a/$id"),
        "top_id_relative_ref": (
            {**obj(a={"$ref": "#/$defs/s"}), "$id": f"{url}/base.json"},
            "/input_schema/$id",
        ),
        "remote_ref": (obj(a={"$ref": f"{url}/ref"}), "/input_schema/properties/a/$ref"),
        "relative_ref": (obj(a={"$ref": "other.json"}), "/input_schema/properties/a/$ref"),
        "dynamic_ref": (obj(a={"$dynamicRef": f"{url}/dyn"}), "/input_schema/properties/a/$dynamicRef"),
        "ref_in_any_of": (
            obj(a={"anyOf": [{"type": "null"}, {"$ref": f"{url}/anyof"}]}),
            "/input_schema/properties/a/anyOf/1/$ref",
        ),
        "vocabulary": ({**obj(), "$vocabulary": {f"{url}/vocab": True}}, "/input_schema/$vocabulary"),
    }


def load_user(root: Path) -> tuple[Snapshot, float]:
    started = time.monotonic()
    snap = tooldir.load(project=None, user_dirs=[root], state_dir=root.parent / "state")
    return snap, time.monotonic() - started


def test_no_hostile_input_schema_makes_the_scan_connect_and_each_is_invalid_input_schema_at_its_pointer(
    tmp_path: Path, listener: tuple[str, socket.socket]
) -> None:
    url, server = listener
    root = tmp_path / "tools"
    cases = hostile_schemas(url)
    for name, (schema, _) in cases.items():
        make_tool(root, name, input_schema=schema)
    make_tool(root, "fine_tool")
    snap, seconds = load_user(root)
    assert accepted(server) == 0
    assert seconds < BOUND_S
    for name, (_, pointer) in cases.items():
        found = {(d.code, d.pointer) for d in snap.diagnostics if d.tool == name}
        assert ("invalid-input-schema", pointer) in found, name
        assert snap.records(name)[0].status is Status.REJECTED
    assert snap.records("fine_tool")[0].status is Status.ACTIVE


# The scan runs in a child with an address-space cap and a timeout: were a file ever read, the
# test would fail (killed or timed out) instead of eating the machine's memory or hanging.
CHILD = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import tooldir
started = time.monotonic()
snap = tooldir.load(project=None, user_dirs=[sys.argv[1]], state_dir=sys.argv[2])
seconds = time.monotonic() - started
print(json.dumps({"seconds": seconds, "diagnostics": [[d.tool, d.code, d.pointer] for d in snap.diagnostics]}))
"""


def test_file_uris_to_dev_zero_and_a_fifo_are_refused_without_opening_them(tmp_path: Path) -> None:
    fifo = tmp_path / "outside" / "pipe"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    root = tmp_path / "tools"
    local = {"$defs": {"s": {"type": "string"}}, "required": []}
    cases = {
        "fifo_ref": ({"a": {"$ref": fifo.as_uri()}}, "/input_schema/properties/a/$ref"),
        "fifo_schema": ({"a": {"$schema": fifo.as_uri()}}, "/input_schema/properties/a/$schema"),
        "zero_ref": ({"a": {"$ref": "file:///dev/zero"}}, "/input_schema/properties/a/$ref"),
        "zero_schema": ({"a": {"$schema": "file:///dev/zero"}}, "/input_schema/properties/a/$schema"),
    }
    for name, (props, _) in cases.items():
        schema = {"type": "object", **local, "properties": {"ok": {"$ref": "#/$defs/s"}, **props}}
        make_tool(root, name, input_schema=schema)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["seconds"] < BOUND_S
    found = {tuple(d) for d in report["diagnostics"]}
    for name, (_, pointer) in cases.items():
        assert (name, "invalid-input-schema", pointer) in found


def test_escaped_keywords_are_found_too(tmp_path: Path, listener: tuple[str, socket.socket]) -> None:
    url, server = listener
    root = tmp_path / "tools"
    schema = json.dumps({"type": "object", "properties": {"a": {"SCHEMA": f"{url}/x"}}}).replace(
        '"SCHEMA"', '"\\u0024schema"'
    )
    raw = json.dumps(manifest("escaped", input_schema={})).replace('"input_schema": {}', f'"input_schema": {schema}')
    make_tool(root, "escaped", raw_manifest=raw.encode())
    snap, _ = load_user(root)
    assert accepted(server) == 0
    assert ("invalid-input-schema", "/input_schema/properties/a/$schema") in {
        (d.code, d.pointer) for d in snap.diagnostics
    }


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"$id": {"type": "string"}, "$schema": {"type": "string"}}},
        {"type": "object", "default": {"$schema": "http://x.invalid/", "$ref": "http://x.invalid/"}},
        {"type": "object", "properties": {"k": {"enum": [{"$id": "http://x.invalid/"}]}}},
        {"type": "object", "$defs": {"$ref": {"type": "string"}}, "properties": {"a": {"$anchor": "here"}}},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
    ],
    ids=["property-names", "default-data", "enum-data", "defs-named-ref-and-anchor", "top-level-draft"],
)
def test_names_data_and_the_top_level_dialect_are_not_mistaken_for_remote_keywords(schema: dict[str, Any]) -> None:
    assert remote_io_problems(schema, "/input_schema") == []


def test_the_compiled_validator_refuses_retrieval_even_when_the_checks_are_bypassed(
    listener: tuple[str, socket.socket],
) -> None:
    url, server = listener
    nested = {"type": "object", "properties": {"a": {"$schema": f"{url}/meta"}}}
    validator = compile_input_schema(nested)  # what a missed check would let through: compiles, fetches nothing
    assert validator.is_valid({"a": 1})
    with pytest.raises(ValueError, match="never retrieves"):
        compile_input_schema({"type": "object", "properties": {"a": {"$ref": f"{url}/ref"}}})
    with pytest.raises(ValueError, match="never retrieves"):
        compile_input_schema({"type": "object", "properties": {"a": {"$ref": "file:///dev/zero"}}})
    assert accepted(server) == 0


def test_every_manifest_validator_of_the_scan_refuses_retrieval(monkeypatch: pytest.MonkeyPatch) -> None:
    import jsonschema_rs

    from tooldir.read import validate

    built: list[dict[str, Any]] = []
    real = jsonschema_rs.Draft202012Validator

    def spy(schema: Any, **kwargs: Any) -> Any:
        built.append(kwargs)
        return real(schema, **kwargs)

    monkeypatch.setattr(validate.jsonschema_rs, "Draft202012Validator", spy)
    for fn in (validate._fast_manifest_validator, validate._input_schema_meta_validator, validate._all_clear_validator):
        fn.cache_clear()
        try:
            fn()
        finally:
            fn.cache_clear()
    assert len(built) == 3
    assert all(kwargs.get("retriever") is not None for kwargs in built)
