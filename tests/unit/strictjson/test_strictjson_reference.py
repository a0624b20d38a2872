"""The fast strict parsers (hooks that keep the work in C, keys shared between documents, cheap
pre-checks before the depth and surrogate walks; the deep parse, and the shallow one validation
uses followed by freezing its arrays) agree with a plain reference reading of every rule on
random and adversarial documents: the same refusal code, or an equal value that is frozen all
the way down."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tooldir._internal.strictjson import FrozenDict, FrozenList, StrictJSONError, freeze_arrays_in_place, loads


class _Refused(Exception):
    def __init__(self, code: str) -> None:
        self.code = code


def _reference_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Refused("duplicate-key")
    return dict(pairs)


def _reference_constant(name: str) -> Any:
    raise _Refused("non-finite-number")


def _reference_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused("non-finite-number")
    return value


def _reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_reference_depth(v) for v in value), default=0)
    return 0


def _reference_strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_reference_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _reference_strings(v)]
    return []


def reference(data: bytes, max_depth: int = 32) -> tuple[str, Any]:
    """("ok", value) or ("refused", code): each rule of the strict reading, spelled out."""
    if data.startswith(b"\xef\xbb\xbf") or b"\x00" in data:
        return "refused", "invalid-encoding"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "refused", "invalid-encoding"
    try:
        value = json.loads(
            text, object_pairs_hook=_reference_pairs, parse_constant=_reference_constant, parse_float=_reference_float
        )
    except _Refused as exc:
        return "refused", exc.code
    except RecursionError:
        return "refused", "too-deep"
    except ValueError:  # JSONDecodeError, or an integer too long to convert
        return "refused", "invalid-json"
    if _reference_depth(value) > max_depth:
        return "refused", "too-deep"
    for string in _reference_strings(value):
        try:
            string.encode("utf-8")
        except UnicodeEncodeError:
            return "refused", "invalid-encoding"
    return "ok", value


def fast(data: bytes, max_depth: int = 32) -> tuple[str, Any]:
    try:
        return "ok", loads(data, max_depth=max_depth)
    except StrictJSONError as exc:
        return "refused", exc.code


def shallow(data: bytes, max_depth: int = 32) -> tuple[str, Any]:
    """The parse validation makes: arrays left plain, then frozen in place."""
    try:
        return "ok", freeze_arrays_in_place(loads(data, max_depth=max_depth, freeze_arrays=False))
    except StrictJSONError as exc:
        return "refused", exc.code


def frozen_all_the_way_down(value: Any) -> bool:
    if isinstance(value, dict):
        return type(value) is FrozenDict and all(frozen_all_the_way_down(v) for v in value.values())
    if isinstance(value, list):
        return type(value) is FrozenList and all(frozen_all_the_way_down(v) for v in value)
    return True


# -- documents: JSON text built from fragments, adversarial ones included ------------------------

_STRINGS = st.sampled_from(
    [
        '"a"', '"type"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"', '"x\\udfffy"', '"\\\\ud800"', '"\\"\\\\"',
        '"[{"', '"\\u0000"', '"é"', '"\\t"',
    ]
) | st.text(max_size=4).map(json.dumps)  # fmt: skip
_NUMBERS = st.sampled_from(
    ["0", "-1", "1.5", "1e308", "1e999", "-1e999", "NaN", "Infinity", "-Infinity", "9" * 5000, "1e-400", "2E+3"]
) | st.integers().map(str)
_ATOMS = _STRINGS | _NUMBERS | st.sampled_from(["true", "false", "null"])


def _object(items: list[tuple[str, str]], duplicate: bool) -> str:
    members = [f"{key}: {value}" for key, value in items]
    if duplicate and items:
        members.append(f"{items[0][0]}: 0")
    return "{" + ", ".join(members) + "}"


_VALUES = st.recursive(
    _ATOMS,
    lambda inner: (
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]")
        | st.builds(_object, st.lists(st.tuples(_STRINGS, inner), max_size=4), st.booleans())
    ),
    max_leaves=12,
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    text = draw(_VALUES)
    nesting = draw(st.sampled_from([0, 0, 0, 5, 31, 32, 33, 40]))
    opener = draw(st.sampled_from(["[", '{"k": '])) if nesting else ""
    closer = {"[": "]", '{"k": ': "}"}.get(opener, "")
    data = (opener * nesting + text + closer * nesting).encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none"] * 6 + ["bom", "nul", "bad-utf8", "trailing", "spaces"]))
    if damage == "bom":
        data = b"\xef\xbb\xbf" + data
    elif damage == "nul":
        data = data[:1] + b"\x00" + data[1:]
    elif damage == "bad-utf8":
        data = data + b"\xff"
    elif damage == "trailing":
        data = data + b" 1"
    elif damage == "spaces":
        data = b" \n\t" + data + b"\r\n "
    return data


@settings(max_examples=1500, deadline=None)
@given(documents())
def test_the_fast_parsers_and_the_reference_reading_agree_on_every_document(data: bytes) -> None:
    expected = reference(data)
    for parse in (fast, shallow):
        outcome, value = parse(data)
        assert (outcome, value) == expected
        if outcome == "ok":
            assert frozen_all_the_way_down(value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_the_fast_parsers_and_the_reference_reading_agree_on_arbitrary_bytes(data: bytes) -> None:
    assert fast(data) == shallow(data) == reference(data)


def test_a_duplicate_key_is_named_in_the_refusal_wherever_it_is() -> None:
    cases = {b'{"a": 1, "b": 2, "a": 3}': "a", b'[{"x": {"deep": 1, "deep": 2}}]': "deep", b'{"": 1, "": 2}': ""}
    for data, key in cases.items():
        try:
            loads(data)
        except StrictJSONError as exc:
            assert exc.code == "duplicate-key"
            assert repr(key) in exc.message
        else:
            raise AssertionError(f"{data!r} was accepted")


def test_the_shallow_parse_shares_keys_between_documents() -> None:
    one = loads(b'{"properties": {"x": {"type": "string", "enum": [["a"], {"b": []}]}}}', freeze_arrays=False)
    two = loads(b'{"properties": {"y": {"type": "integer"}}}', freeze_arrays=False)
    assert next(iter(one)) is next(iter(two))  # "properties": one string object for both
    assert next(iter(one["properties"]["x"])) is next(iter(two["properties"]["y"]))
    assert frozen_all_the_way_down(freeze_arrays_in_place(one)) and type(loads(b"[[1], {}]")) is FrozenList
    assert loads(b"{}", freeze_arrays=False) == {} and type(loads(b"{}", freeze_arrays=False)) is FrozenDict
