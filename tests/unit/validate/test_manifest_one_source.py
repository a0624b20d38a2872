"""The manifest has one source of truth (issue 13): the pydantic model generates the published
schema, the committed file equals what it generates, the model is strict, and both apply the
one tool-name rule of tooldir.names."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError
from toolkit import manifest

from tooldir import Manifest
from tooldir._internal.inputschema import DRAFT_2020_12
from tooldir._internal.strictjson import freeze
from tooldir.names import NAME_JSON_SCHEMA, NAME_MAX_LENGTH, is_valid_name
from tooldir.read import genschema
from tooldir.read.validate import manifest_schema


def test_the_committed_manifest_schema_is_exactly_what_the_model_generates() -> None:
    assert genschema.SCHEMA_FILE.read_text("utf-8") == genschema.render()
    assert manifest_schema() == genschema.generate()
    assert genschema.main(["--check"]) == 0


def test_the_generated_schema_is_self_contained_2020_12_with_the_shared_draft_constant() -> None:
    schema = genschema.generate()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == DRAFT_2020_12
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text and "anyOf" not in text
    assert "$" not in json.dumps(schema["properties"]["name"]["not"])  # never an anchored name pattern


def test_the_published_name_rule_is_the_one_in_tooldir_names() -> None:
    name_schema = manifest_schema()["properties"]["name"]
    assert {k: v for k, v in name_schema.items() if k in NAME_JSON_SCHEMA} == NAME_JSON_SCHEMA
    assert NAME_JSON_SCHEMA["maxLength"] == NAME_MAX_LENGTH


@pytest.mark.parametrize(
    "name",
    ["a", "abc_DEF-9", "n" * 64, "", "n" * 65, "abc\n", "a b", "a.b", "ab\x00", "fетch", "a$", "-", "_"],
)
def test_names_py_the_schema_and_the_model_agree_on_every_name(name: str) -> None:
    by_schema = not list(jsonschema.Draft202012Validator(manifest_schema()).iter_errors(manifest(name)))
    try:
        Manifest.model_validate(freeze(manifest(name)))
        by_model = True
    except ValidationError:
        by_model = False
    assert by_schema == by_model == is_valid_name(name)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


# Each of these was coerced or let through by the lax model, or drifted from the published schema.
_REFUSED = [
    ("network-yes", _set("execute/network", "yes")),
    ("network-one", _set("execute/network", 1)),
    ("timeout-string", _set("execute/timeout_s", "3")),
    ("timeout-bool", _set("execute/timeout_s", True)),
    ("timeout-null", _set("execute/timeout_s", None)),
    ("name-number", _set("name", 5)),
    ("description-number", _set("description", 7)),
    ("keyword-empty", _set("keywords", [""])),
    ("keyword-too-long", _set("keywords", ["k" * 65])),
    ("keyword-number", _set("keywords", [3])),
    ("command-item-empty", _set("execute/command", ["python3", ""])),
    ("command-item-number", _set("execute/command", ["python3", 1])),
    ("command-string", _set("execute/command", "python3 run.py")),
    ("env-leading-digit", _set("execute/env", ["1PATH"])),
    ("env-newline", _set("execute/env", ["PATH\n"])),
    ("env-dash", _set("execute/env", ["MY-VAR"])),
    ("env-too-long", _set("execute/env", ["V" * 129])),
    ("risk-number", _set("risk", 1)),
    ("input-schema-not-object-type", _set("input_schema", {"type": "string"})),
]


@pytest.mark.parametrize("mutate", [m for _, m in _REFUSED], ids=[n for n, _ in _REFUSED])
def test_the_strict_model_refuses_what_the_published_schema_refuses(mutate: Callable[[dict[str, Any]], None]) -> None:
    data = copy.deepcopy(manifest("echo_tool"))
    mutate(data)
    assert list(jsonschema.Draft202012Validator(manifest_schema()).iter_errors(data))
    with pytest.raises(ValidationError):
        Manifest.model_validate(freeze(data))


_ACCEPTED = [
    ("plain", lambda d: None),
    ("integer-timeout", _set("execute/timeout_s", 3)),
    ("no-timeout", lambda d: d["execute"].pop("timeout_s")),
    ("env-underscore", _set("execute/env", ["_X1", "LANG"])),
    ("no-keywords", lambda d: d.pop("keywords")),
]


@pytest.mark.parametrize("mutate", [m for _, m in _ACCEPTED], ids=[n for n, _ in _ACCEPTED])
def test_the_strict_model_accepts_what_the_published_schema_accepts(mutate: Callable[[dict[str, Any]], None]) -> None:
    data = copy.deepcopy(manifest("echo_tool"))
    mutate(data)
    assert not list(jsonschema.Draft202012Validator(manifest_schema()).iter_errors(data))
    model = Manifest.model_validate(freeze(data))
    assert model.name == "echo_tool"
    # arrays arrive as JSON lists (plain, as validate passes them, or frozen): both become tuples
    assert isinstance(Manifest.model_validate({**data, "input_schema": freeze(data["input_schema"])}).keywords, tuple)
