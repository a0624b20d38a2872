"""One versioned canonical JSON (tooldir._internal.strictjson.canonical_json) for every digest.
Digests already in users' state were made with these exact bytes, so each form is pinned here
byte for byte: a change of a form fails these tests instead of breaking stored approvals, pins
and audit chains (a new form must get a new version)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from tooldir._internal.strictjson import CANONICAL_VERSIONS, canonical_json, dumps_canonical
from tooldir.deferred.catalog import ToolDef
from tooldir.run.audit import AuditEvent, JsonlAudit, canonical, input_digest, verify
from tooldir.upstream import digest_of

VALUE = {"b": [1, "caf\u00e9 \u202e"], "a": {"z": 1.5, "y": None, "x": True}}
FORM_1 = '{"a":{"x":true,"y":null,"z":1.5},"b":[1,"caf\u00e9 \u202e"]}'.encode()
FORM_2 = b'{"a":{"x":true,"y":null,"z":1.5},"b":[1,"caf\\u00e9 \\u202e"]}'


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_each_canonical_form_is_pinned_byte_for_byte() -> None:
    assert CANONICAL_VERSIONS == (1, 2)
    assert canonical_json(VALUE, 1) == FORM_1 == dumps_canonical(VALUE).encode()
    assert canonical_json(VALUE, 2) == FORM_2


def test_form_2_refuses_non_finite_numbers_and_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError):
        canonical_json({"n": math.nan}, 2)
    with pytest.raises(ValueError, match="unknown canonical JSON version 3"):
        canonical_json(VALUE, 3)


def test_every_stored_digest_is_made_over_its_named_form() -> None:
    assert digest_of(VALUE) == sha(FORM_2)  # upstream.json: definition and instruction pins
    assert input_digest(VALUE) == sha(FORM_1)  # audit lines: the input's hash
    assert canonical(VALUE) == FORM_2  # audit records of version 2
    tool = ToolDef("t", "d\u00e9", {"type": "object"})
    assert tool.digest == sha(canonical_json(["t", "d\u00e9", {"type": "object"}, None], 1))


def test_an_audit_log_written_by_this_code_verifies(tmp_path: Path) -> None:
    # (version 1 lines, raw UTF-8: tests/unit/registry/test_audit_exact.py)
    path = tmp_path / "audit.jsonl"
    sink = JsonlAudit(path)
    for n in range(3):
        sink.record(AuditEvent(f"t{n}", "user", None, "sha256:x", "deny", "caf\u00e9", "denied", "not-active", 1.0))
    assert verify(path).ok
    for raw in path.read_bytes().splitlines():
        assert canonical_json(json.loads(raw), 2) == raw
