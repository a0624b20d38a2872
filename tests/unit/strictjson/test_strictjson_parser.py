"""Strict JSON: one meaning per document or a precise refusal (threats json:*)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tooldir._internal.strictjson import (
    FrozenDict,
    FrozenList,
    StrictJSONError,
    dumps_canonical,
    escape_pointer,
    freeze,
    freeze_arrays_in_place,
    iter_strings,
    loads,
    thaw,
)

# -- refusals, one per diagnostic code ------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        pytest.param(b'{"name": "safe", "name": "read_file"}', "duplicate-key", id="duplicate-top-level-key"),
        pytest.param(b'{"a": {"b": 1, "b": 2}}', "duplicate-key", id="duplicate-nested-key"),
        pytest.param(b'[{"k": 1, "k": 1}]', "duplicate-key", id="duplicate-key-inside-array"),
        pytest.param(b'{"x": NaN}', "non-finite-number", id="nan"),
        pytest.param(b'{"x": Infinity}', "non-finite-number", id="infinity"),
        pytest.param(b'{"x": -Infinity}', "non-finite-number", id="minus-infinity"),
        pytest.param(b'{"x": 1e400}', "non-finite-number", id="overflow-to-infinity"),
        pytest.param(b'{"x": -1e400}', "non-finite-number", id="negative-overflow"),
        pytest.param(b'\xef\xbb\xbf{"a": 1}', "invalid-encoding", id="bom"),
        pytest.param(b'{"a": "\xff"}', "invalid-encoding", id="invalid-utf8"),
        pytest.param(b'{"a": "\xed\xa0\x80"}', "invalid-encoding", id="raw-lone-surrogate"),
        pytest.param(b'{"a": "\\ud800"}', "invalid-encoding", id="escaped-lone-surrogate"),
        pytest.param(b'{"\\udc00": 1}', "invalid-encoding", id="escaped-lone-surrogate-in-key"),
        pytest.param(b'{"a": 1}\x00', "invalid-encoding", id="nul-byte"),
        pytest.param(b"\xff\xfe{\x00}\x00", "invalid-encoding", id="utf16"),
        pytest.param(b"", "invalid-json", id="empty"),
        pytest.param(b"{", "invalid-json", id="truncated"),
        pytest.param(b'{"a": 1} {"b": 2}', "invalid-json", id="two-documents"),
        pytest.param(b"{'a': 1}", "invalid-json", id="single-quotes"),
        pytest.param(b'{"a": 1,}', "invalid-json", id="trailing-comma"),
        pytest.param(b'{"a": "\x01"}', "invalid-json", id="raw-control-character"),
        pytest.param(b"1" * 5000, "invalid-json", id="integer-too-long"),
        pytest.param(b"[" * 40 + b"]" * 40, "too-deep", id="depth-40"),
        pytest.param(b'{"a":' * 33 + b"1" + b"}" * 33, "too-deep", id="objects-depth-33"),
        pytest.param(b"[" * 200_000, "too-deep", id="unterminated-200k-brackets"),
        pytest.param(b"[" * 200_000 + b"]" * 200_000, "too-deep", id="nested-200k"),
    ],
)
def test_each_refused_document_names_its_diagnostic_code(data: bytes, code: str) -> None:
    with pytest.raises(StrictJSONError) as caught:
        loads(data)
    assert caught.value.code == code
    assert caught.value.message


def test_depth_at_the_limit_is_accepted_and_one_more_is_refused() -> None:
    nested: list[Any] = []
    for _ in range(31):
        nested = [nested]
    assert loads(b"[" * 32 + b"]" * 32, max_depth=32) == freeze(nested)
    with pytest.raises(StrictJSONError) as caught:
        loads(b"[" * 33 + b"]" * 33, max_depth=32)
    assert caught.value.code == "too-deep"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    value = loads(b'{"a": "' + b"[" * 100 + b'"}', max_depth=4)
    assert value == {"a": "[" * 100}


def test_a_valid_surrogate_pair_escape_is_accepted() -> None:
    assert loads(b'"\\ud83d\\ude00"') == "\U0001f600"


def test_an_escaped_backslash_before_u_is_not_mistaken_for_a_surrogate() -> None:
    assert loads(b'"\\\\ud800"') == "\\ud800"


def test_leading_and_trailing_json_whitespace_is_accepted() -> None:
    assert loads(b' \t\r\n{"a": [1]}\n ') == {"a": [1]}


# -- frozen results -------------------------------------------------------------------------------


def test_parsed_objects_and_arrays_are_frozen_all_the_way_down() -> None:
    value = loads(b'{"a": [1, [2, {"b": [3]}]], "c": {"d": []}}')
    assert type(value) is FrozenDict
    assert type(value["a"]) is FrozenList
    assert type(value["a"][1]) is FrozenList
    assert type(value["a"][1][1]) is FrozenDict
    assert type(value["a"][1][1]["b"]) is FrozenList
    assert type(value["c"]["d"]) is FrozenList
    assert type(loads(b"[[1]]")[0]) is FrozenList


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__("x", 1),
        lambda d: d.__delitem__("a"),
        lambda d: d.update({"x": 1}),
        lambda d: d.pop("a"),
        lambda d: d.popitem(),
        lambda d: d.setdefault("x", 1),
        lambda d: d.clear(),
        lambda d: d.__ior__({"x": 1}),
        lambda d: d["a"].append(2),
        lambda d: d["a"].__setitem__(0, 5),
        lambda d: d["a"].extend([1]),
        lambda d: d["a"].sort(),
        lambda d: d["a"][1].__setitem__("k", 0),
    ],
    ids=[
        "setitem",
        "delitem",
        "update",
        "pop",
        "popitem",
        "setdefault",
        "clear",
        "ior",
        "list-append",
        "list-setitem",
        "list-extend",
        "list-sort",
        "nested-dict-setitem",
    ],
)
def test_every_mutation_of_a_parsed_value_raises_type_error(mutate: Any) -> None:
    value = loads(b'{"a": [1, {"k": 1}]}')
    with pytest.raises(TypeError):
        mutate(value)
    assert value == {"a": [1, {"k": 1}]}


def test_thaw_gives_an_independent_mutable_copy() -> None:
    frozen = loads(b'{"a": [1, {"b": 2}]}')
    plain = thaw(frozen)
    plain["a"][1]["b"] = 3
    assert type(plain) is dict
    assert frozen["a"][1]["b"] == 2


def test_frozen_values_are_hashable_and_equal_values_hash_alike() -> None:
    assert hash(loads(b'{"a": 1, "b": [2]}')) == hash(loads(b'{"b": [2], "a": 1}'))


# -- helpers --------------------------------------------------------------------------------------


def test_iter_strings_yields_keys_and_values_with_escaped_pointers() -> None:
    found = list(iter_strings(loads(b'{"a/b": ["x", {"~k": "y"}]}')))
    assert found == [("/a~1b", "a/b"), ("/a~1b/0", "x"), ("/a~1b/1/~0k", "~k"), ("/a~1b/1/~0k", "y")]


def test_escape_pointer_follows_rfc_6901() -> None:
    assert escape_pointer("a~/b") == "a~0~1b"


def test_canonical_dump_sorts_keys_and_is_compact() -> None:
    assert dumps_canonical({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


# -- properties -----------------------------------------------------------------------------------

_finite = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.none() | st.booleans() | st.integers(-(10**30), 10**30) | _finite | st.text(max_size=20)
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value).encode("utf-8")
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(_values, st.booleans())
def test_agrees_with_json_loads_on_every_valid_strict_document(value: Any, ascii_only: bool) -> None:
    if not _encodable(value) or _depth(value) > 32:
        return
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    parsed = loads(data)
    assert parsed == json.loads(data)
    assert dumps_canonical(parsed) == dumps_canonical(json.loads(data))


def _parses_like_json_or_refuses(data: bytes) -> None:
    """``loads`` either agrees with ``json.loads`` or raises StrictJSONError with a known code, nothing else."""
    try:
        value = loads(data)
    except StrictJSONError as exc:
        assert exc.code in {"invalid-encoding", "invalid-json", "duplicate-key", "non-finite-number", "too-deep"}
    else:
        assert value == json.loads(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_strict_json_error(data: bytes) -> None:
    _parses_like_json_or_refuses(data)


_json_tokens = st.sampled_from(
    [
        '{"a":',
        '"a"',
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        "1",
        "-0.5e3",
        "1e999",
        "NaN",
        "true",
        "null",
        '"\\ud800"',
        " ",
        '"é"',
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_json_tokens, max_size=60))
def test_json_like_token_soup_never_raises_anything_but_strict_json_error(tokens: list[str]) -> None:
    _parses_like_json_or_refuses("".join(tokens).encode("utf-8"))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=6), _scalars, min_size=1, max_size=6), st.data())
def test_a_duplicated_key_is_always_caught_wherever_it_is(obj: dict[str, Any], data: st.DataObject) -> None:
    if not _encodable(obj):
        return
    key = data.draw(st.sampled_from(sorted(obj)))
    members = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in obj.items()]
    members.insert(data.draw(st.integers(0, len(members))), f"{json.dumps(key)}: 0")
    document = "{" + ", ".join(members) + "}"
    wrapper = data.draw(st.sampled_from(["{}", '{{"outer": {}}}', "[1, {}]"]))
    with pytest.raises(StrictJSONError) as caught:
        loads(wrapper.format(document).encode("utf-8"))
    assert caught.value.code == "duplicate-key"


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_round_trips(number: float) -> None:
    parsed = loads(json.dumps(number).encode())
    assert parsed == number
    assert math.isfinite(parsed)


def test_the_shallow_parse_still_refuses_duplicates_and_freezing_afterwards_is_deep() -> None:
    with pytest.raises(StrictJSONError) as caught:
        loads(b'{"a": {"k": 1, "k": 2}}', freeze_arrays=False)
    assert caught.value.code == "duplicate-key"
    value = loads(b'{"a": [1, [2, {"b": [3]}]], "c": {"d": []}}', freeze_arrays=False)
    assert type(value) is FrozenDict and type(value["a"]) is list
    freeze_arrays_in_place(value)
    assert type(value["a"]) is FrozenList
    assert type(value["a"][1]) is FrozenList
    assert type(value["a"][1][1]["b"]) is FrozenList
    assert type(value["c"]["d"]) is FrozenList
    assert value == loads(b'{"a": [1, [2, {"b": [3]}]], "c": {"d": []}}')


@settings(max_examples=200, deadline=None)
@given(_values)
def test_shallow_parse_then_freeze_equals_the_deep_parse(value: Any) -> None:
    if not _encodable(value) or _depth(value) > 32:
        return
    data = json.dumps(value).encode()
    shallow = freeze_arrays_in_place(loads(data, freeze_arrays=False))
    deep = loads(data)
    assert shallow == deep
    assert _frozen_everywhere(shallow) == _frozen_everywhere(deep)


def _frozen_everywhere(value: Any) -> bool:
    if isinstance(value, dict):
        return type(value) is FrozenDict and all(_frozen_everywhere(v) for v in value.values())
    if isinstance(value, list):
        return type(value) is FrozenList and all(_frozen_everywhere(v) for v in value)
    return True


def test_shallow_parses_share_keys_between_documents_and_the_table_stays_bounded() -> None:
    from tooldir._internal import strictjson

    one = loads(b'{"type": "string", "note": {"nested": 1}}', freeze_arrays=False)
    two = loads(b'{"type": "string", "note": {"nested": 2}}', freeze_arrays=False)
    (k1, _), (k2, _) = next(iter(one.items())), next(iter(two.items()))
    assert k1 is k2
    assert next(iter(one["note"])) is next(iter(two["note"]))
    for i in range(strictjson._SHARED_MAX + 10):
        loads(b'{"k%d": 1}' % i, freeze_arrays=False)
    assert len(strictjson._SHARED) <= strictjson._SHARED_MAX + 1
