"""A tool's input schema: what it may contain, and the one way tooldir compiles it.

Discovery and the registry both go through here, so what ``scan`` accepted is exactly what a call
validates against. Two threats shape it:

- ``schema:remote-io``: an input schema must never make a validator fetch anything. Nested
  ``$schema``, any ``$id``, ``$vocabulary`` and every reference that is not local (``#...``) are
  refused by :func:`remote_io_problems`; on top of that every validator is built with
  :func:`refuse_retrieval` as its retriever, so a missed case fails instead of doing I/O.
- ``schema:redos``: patterns are compiled with the linear-time ``regex`` engine (no backreferences,
  no lookaround), with a bounded program size and at most :data:`MAX_PATTERNS` per schema. A pattern
  that engine cannot compile is an ``invalid-input-schema`` at scan, never a slower fallback.
  ``format`` is an annotation (never asserted on tool input), and Python's ``re`` never sees a
  tool's pattern.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NoReturn

import jsonschema_rs

from .strictjson import escape_pointer, thaw

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
#: draft-07, as the official MCP TypeScript SDK's servers declare it: accepted when nothing in the
#: schema means something else under 2020-12 (which validates it), see :data:`_DRAFT_07_DIFFERENT`.
DRAFT_07 = frozenset(
    f"{scheme}://json-schema.org/draft-07/schema{end}" for scheme in ("http", "https") for end in ("", "#")
)
#: draft-07 keywords 2020-12 ignores or reads otherwise (an array ``items``, and ``$ref`` beside
#: other keywords, which draft-07 ignores, are checked too).
_DRAFT_07_DIFFERENT = frozenset({"additionalItems", "dependencies", "$recursiveRef", "$recursiveAnchor"})
_REF_SIBLINGS_OK = frozenset({"$ref", "description", "title", "$comment", "default", "examples"})
#: Largest compiled program of one ``pattern`` (bytes, the regex crate's ``size_limit``).
REGEX_SIZE_LIMIT = 64 * 1024
#: Lazy-DFA cache of one pattern (bytes); when it fills up the engine stays linear, only slower.
REGEX_DFA_SIZE_LIMIT = 256 * 1024
#: ``pattern`` values plus ``patternProperties`` keys allowed in one input schema.
MAX_PATTERNS = 128

# Keywords whose value maps names (not keywords) to subschemas.
_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
# Keywords whose value is plain data: never compiled, never resolved.
_DATA = frozenset({"const", "enum", "default", "examples"})
_REFS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})
#: Keywords that hold nothing :func:`inspect_schema` looks for when their value is a scalar (the
#: common leaves of a schema: skipped without building their pointer). Never one it checks.
_PLAIN_KEYWORDS = frozenset(
    {"type", "description", "title", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
     "additionalProperties", "format", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems",
     "minProperties", "maxProperties", "readOnly", "writeOnly", "deprecated", "$comment"}
)  # fmt: skip
_MESSAGE_MAX = 300  # an error message quotes the instance, which may be a whole 1 MiB string


class RetrievalRefusedError(ValueError):
    """Raised by :func:`refuse_retrieval`: tooldir never fetches a schema."""


def refuse_retrieval(uri: str) -> NoReturn:
    """The retriever of every validator tooldir builds: no network, no files, ever."""
    raise RetrievalRefusedError(f"tooldir never retrieves schemas (refused {uri!r})")


def regex_options() -> Any:
    """Linear-time pattern engine with bounded program and cache sizes."""
    return jsonschema_rs.RegexOptions(size_limit=REGEX_SIZE_LIMIT, dfa_size_limit=REGEX_DFA_SIZE_LIMIT)


@dataclass(slots=True)
class SchemaFacts:
    """What one walk over an input schema found (see :func:`inspect_schema`)."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    """(JSON pointer, message): what could make a validator fetch, or too many patterns."""
    patterns: list[tuple[str, str]] = field(default_factory=list)
    """(JSON pointer, regex) of every ``pattern`` value and ``patternProperties`` key."""
    has_refs: bool = False
    """A (local) ``$ref``/``$dynamicRef`` is present: only compiling the schema tells if it resolves."""


def remote_io_problems(schema: Any, pointer: str = "") -> list[tuple[str, str]]:
    """(JSON pointer, message) for everything in ``schema`` that could make a validator fetch a
    resource or change where references resolve, and for too many patterns. Pure.
    (:func:`inspect_schema` has the details.)"""
    return inspect_schema(schema, pointer).problems


def _is_draft_07(value: Any) -> bool:
    return isinstance(value, str) and value in DRAFT_07


def inspect_schema(schema: Any, pointer: str = "") -> SchemaFacts:
    """One walk over ``schema``: its remote-io problems, its patterns and whether it has references.

    Only the top level may carry ``$schema`` (and only draft 2020-12); ``$id`` and ``$vocabulary``
    are refused everywhere; ``$ref``/``$dynamicRef`` must start with ``#``. Property names are
    names, not keywords (``"properties": {"$id": ...}`` is a property called ``$id``), and
    ``const``/``enum``/``default``/``examples`` are data.
    """
    facts = SchemaFacts()
    problems = facts.problems
    draft_07 = isinstance(schema, dict) and _is_draft_07(schema.get("$schema"))

    def draft_07_differences(node: dict[str, Any], where: str) -> None:
        for key in sorted(_DRAFT_07_DIFFERENT & node.keys()):
            problems.append((f"{where}/{escape_pointer(key)}", f"{key} means something else under draft 2020-12"))
        if isinstance(node.get("items"), list):
            problems.append((f"{where}/items", "an array items (draft-07) is prefixItems under draft 2020-12"))
        if "$ref" in node and not node.keys() <= _REF_SIBLINGS_OK:
            problems.append((f"{where}/$ref", "draft-07 ignores the keywords beside $ref; draft 2020-12 applies them"))

    # only objects and arrays are walked, and the plain scalar keywords are skipped before their
    # pointer is built (most members of a schema hold nothing to find)
    def walk(node: Any, where: str, top: bool) -> None:
        if not isinstance(node, dict):
            if isinstance(node, list):
                for index, item in enumerate(node):
                    if isinstance(item, dict | list):
                        walk(item, f"{where}/{index}", False)
            return
        if draft_07:
            draft_07_differences(node, where)
        for key, value in node.items():
            if key in _PLAIN_KEYWORDS and not isinstance(value, dict | list):
                continue  # "type": "string", "description": "...", "minimum": 0: nothing to find
            at = f"{where}/{escape_pointer(key)}"
            if key == "$schema":
                if not top:
                    problems.append((at, f"a nested $schema is not allowed (a validator would fetch {value!r})"))
                elif value not in (DRAFT_2020_12, DRAFT_2020_12 + "#") and not _is_draft_07(value):
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
                    if isinstance(sub, dict | list):
                        walk(sub, f"{at}/{escape_pointer(name)}", False)
            else:
                if key == "pattern" and isinstance(value, str):
                    facts.patterns.append((at, value))
                if isinstance(value, dict | list):
                    walk(value, at, False)

    walk(schema, pointer, True)
    if len(facts.patterns) > MAX_PATTERNS:
        problems.append((pointer, f"{len(facts.patterns)} patterns; an input schema may hold at most {MAX_PATTERNS}"))
    return facts


@lru_cache(maxsize=4096)
def pattern_problem(pattern: str) -> str | None:
    """Why the linear-time engine refuses ``pattern`` (as tool input validation would compile
    it), or None. Cached: most tools repeat a handful of patterns."""
    try:
        compile_input_schema({"pattern": pattern})
    except (ValueError, jsonschema_rs.ReferencingError) as exc:
        return compile_error(exc, "")[1]
    return None


def compile_input_schema(schema: Mapping[str, Any]) -> Any:
    """The validator of a tool's input: draft 2020-12, linear-time patterns, ``format`` as an
    annotation, no retrieval.

    Raises:
        ValueError: the schema cannot be compiled (``jsonschema_rs.ValidationError`` carries the
            ``instance_path`` of the offending keyword, e.g. a pattern the engine refuses).
        jsonschema_rs.ReferencingError: a reference does not resolve.
    """
    return jsonschema_rs.Draft202012Validator(
        thaw(schema),
        validate_formats=False,
        retriever=refuse_retrieval,
        pattern_options=regex_options(),
    )


def compile_error(exc: Exception, pointer: str) -> tuple[str, str]:
    """(pointer, message) for an exception of :func:`compile_input_schema`."""
    path = getattr(exc, "instance_path", None)
    where = pointer + "".join(f"/{escape_pointer(str(p))}" for p in path) if path else pointer
    text = str(getattr(exc, "message", "") or exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    if where.endswith("/pattern") or "/patternProperties/" in where:
        reason += (
            f" (patterns use a linear-time engine: no backreferences or lookaround,"
            f" at most {REGEX_SIZE_LIMIT // 1024} KiB compiled)"
        )
    return where, reason


def input_errors(validator: Any, data: Any, limit: int = 3) -> list[str]:
    """Up to ``limit`` '<pointer>: <message>' lines for ``data`` against a compiled validator."""
    errors: list[str] = []
    for err in validator.iter_errors(data):
        where = "".join(f"/{escape_pointer(str(p))}" for p in err.instance_path)
        message = err.message if len(err.message) <= _MESSAGE_MAX else err.message[:_MESSAGE_MAX] + " [...]"
        errors.append(f"{where or '/'}: {message}")
        if len(errors) >= limit:
            break
    return errors
