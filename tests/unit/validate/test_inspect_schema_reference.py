"""The input-schema walk (schema:remote-io, schema:redos) skips plain scalar keywords and scalar
leaves without building their pointers; on random schema-like documents it finds exactly what
the plain walk over every member finds: the same problems, patterns and references, in order."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldir._internal.inputschema import DRAFT_2020_12, MAX_PATTERNS, SchemaFacts, inspect_schema
from tooldir._internal.strictjson import escape_pointer, freeze

_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_DATA = frozenset({"const", "enum", "default", "examples"})
_REFS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})


def reference(schema: Any, pointer: str = "") -> SchemaFacts:
    """The plain walk: every member of every object and every item of every array, visited."""
    facts = SchemaFacts()
    problems = facts.problems

    def walk(node: Any, where: str, top: bool) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{where}/{index}", False)
            return
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            at = f"{where}/{escape_pointer(key)}"
            if key == "$schema":
                if not top:
                    problems.append((at, f"a nested $schema is not allowed (a validator would fetch {value!r})"))
                elif value not in (DRAFT_2020_12, DRAFT_2020_12 + "#"):
                    problems.append((at, f"input_schema must be draft 2020-12 (or draft-07), not {value!r}"))
            elif key == "$id":
                problems.append(
                    (at, f"$id is not allowed in an input schema (it moves where references resolve: {value!r})")
                )
            elif key == "$vocabulary":
                problems.append((at, "$vocabulary is for meta-schemas, not tool input schemas"))
            elif key in _REFS:
                facts.has_refs = True
                if isinstance(value, str) and not value.startswith("#"):
                    problems.append((at, f"only local references ('#...') are allowed, not {value!r}"))
            elif key in _DATA:
                continue
            elif key in _NAME_MAPS and isinstance(value, dict):
                if key == "patternProperties":
                    facts.patterns.extend((f"{at}/{escape_pointer(name)}", name) for name in value)
                for name, sub in value.items():
                    walk(sub, f"{at}/{escape_pointer(name)}", False)
            else:
                if key == "pattern" and isinstance(value, str):
                    facts.patterns.append((at, value))
                walk(value, at, False)

    walk(schema, pointer, True)
    if len(facts.patterns) > MAX_PATTERNS:
        problems.append((pointer, f"{len(facts.patterns)} patterns; an input schema may hold at most {MAX_PATTERNS}"))
    return facts


_KEYS = st.sampled_from(
    [
        "type", "description", "title", "minimum", "format", "additionalProperties", "$comment", "items",
        "properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "const", "enum", "default",
        "examples", "$schema", "$id", "$vocabulary", "$ref", "$dynamicRef", "$recursiveRef", "pattern", "anyOf",
        "not", "a/b", "x~y", "",
    ]
)  # fmt: skip
_SCALARS = st.sampled_from(
    [DRAFT_2020_12, "#/$defs/a", "https://example.com/s", "^(a+)+$", "string", "object", 0, 1.5, True, None]
) | st.text(max_size=4)
_TREES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=1500, deadline=None)
@given(_TREES, st.sampled_from(["", "/input_schema"]))
def test_the_walk_finds_exactly_what_the_plain_walk_finds(schema: Any, pointer: str) -> None:
    for value in (schema, freeze(schema)):
        assert inspect_schema(value, pointer) == reference(value, pointer)


def test_a_plain_keyword_holding_an_object_is_still_walked() -> None:
    schema = {"type": "object", "additionalProperties": {"$ref": "https://x/y", "pattern": "a"}, "title": {"$id": 1}}
    facts = inspect_schema(schema, "/input_schema")
    assert facts == reference(schema, "/input_schema")
    assert [p for p, _ in facts.problems] == ["/input_schema/additionalProperties/$ref", "/input_schema/title/$id"]
    assert facts.patterns == [("/input_schema/additionalProperties/pattern", "a")]
