"""Strict JSON: one meaning per document, or a precise refusal.

Refuses what parsers disagree on or what can hurt a consumer: a BOM, invalid UTF-8, NUL, lone
surrogates (raw or escaped), duplicate keys, NaN/Infinity and numbers that overflow to infinity,
nesting deeper than a limit (a cheap bracket count first; pathological nesting stops at the
interpreter's recursion guard and is reported, never raised), and integers too long to convert. Results are deep-frozen (see :func:`freeze`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any, Literal, NoReturn

#: The diagnostic codes a strict parse refuses with: members of ``tooldir.codes.DiagnosticCode``
#: (this module imports nothing of tooldir; tests/unit/test_codes.py keeps the two equal).
StrictJSONCode = Literal["invalid-encoding", "invalid-json", "duplicate-key", "non-finite-number", "too-deep"]


class StrictJSONError(ValueError):
    """``code`` is a stable diagnostic code; ``pointer`` locates the problem where known."""

    def __init__(self, code: StrictJSONCode, message: str, pointer: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.pointer = pointer


class FrozenDict(dict[str, Any]):
    """A dict that refuses mutation. Still a ``dict`` for json, jsonschema and jsonschema-rs."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("this JSON object is frozen")

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(json.dumps(self, sort_keys=True))

    def __reduce__(self) -> Any:
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A list that refuses mutation (a ``list`` for validators that check ``isinstance``)."""

    __slots__ = ()

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("this JSON array is frozen")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = reverse = sort = clear = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(json.dumps(self))

    def __reduce__(self) -> Any:
        return (FrozenList, (list(self),))


def freeze(value: Any) -> Any:
    """Deep-freeze a plain JSON value."""
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A mutable deep copy of a (frozen) JSON value."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_BOM = b"\xef\xbb\xbf"
_NUL = b"\x00"


def _pairs(pairs: list[tuple[str, Any]]) -> FrozenDict:
    # Hot path (called once per JSON object): build in C, compare sizes to catch duplicates, and
    # only walk the values in Python when one of them is a list that still needs freezing.
    obj = FrozenDict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJSONError("duplicate-key", f"duplicate key {key!r} in one object")
            seen.add(key)
    if list in map(type, obj.values()):
        for key, value in pairs:
            if type(value) is list:
                dict.__setitem__(obj, key, _freeze_list(value))
    return obj


#: Keys shared between the documents of the shallow parse (what validation uses): a load of 10k
#: manifests then holds one "type", "description", ... instead of one per object (about 13 MB
#: less at 10k). Values are not shared: that took a Python loop over every member (3 MB more at
#: 10k, ~35k fewer instructions a manifest, measured with callgrind). Bounded: cleared when it
#: grows past _SHARED_MAX entries.
_SHARED: dict[str, str] = {}
_SHARED_MAX = 1 << 16


def _pairs_shallow(pairs: list[tuple[str, Any]]) -> FrozenDict:
    """Like :func:`_pairs` but leaves arrays as plain lists (see ``loads(freeze_arrays=False)``),
    and shares keys (:data:`_SHARED`; equal keys, one string object). Hot path, once per JSON
    object, written so the work stays in C: build, compare sizes (a duplicate: :func:`_pairs`
    names it), rebuild from the shared keys (``map`` of a C method over the keys)."""
    obj = FrozenDict(pairs)
    if len(obj) != len(pairs):
        _pairs(pairs)  # raises, naming the key
    if len(_SHARED) > _SHARED_MAX:
        _SHARED.clear()
    share = _SHARED.setdefault
    return FrozenDict(zip(map(share, obj, obj), obj.values(), strict=True))


def freeze_arrays_in_place(value: Any) -> Any:
    """Replace every plain list inside a tree of FrozenDicts/lists by a FrozenList, in place.
    For trees from ``loads(freeze_arrays=False)`` that nobody else holds yet. Returns the value."""
    if type(value) is list:
        return _freeze_list_deep(value)
    stack = [value] if isinstance(value, dict) else []
    while stack:
        obj = stack.pop()
        for key, item in obj.items():
            kind = type(item)
            if kind is list:
                dict.__setitem__(obj, key, _freeze_list_deep(item))
            elif kind is FrozenDict:
                stack.append(item)
    return value


def _freeze_list_deep(items: list[Any]) -> FrozenList:
    out = FrozenList([_freeze_list_deep(v) if type(v) is list else v for v in items])
    for item in out:
        if type(item) is FrozenDict:
            freeze_arrays_in_place(item)
    return out


def _freeze_list(items: list[Any]) -> FrozenList:
    # dicts inside are already frozen by _pairs; only nested plain lists remain
    if list in map(type, items):
        return FrozenList([_freeze_list(v) if type(v) is list else v for v in items])
    return FrozenList(items)


def _constant(name: str) -> NoReturn:
    raise StrictJSONError("non-finite-number", f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise StrictJSONError("non-finite-number", f"number {text[:40]} overflows to infinity")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of a parsed value (iterative: no recursion)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest if isinstance(value, (dict, list)) else 0


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


_decoder = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
_shallow_decoder = json.JSONDecoder(object_pairs_hook=_pairs_shallow, parse_constant=_constant, parse_float=_float)


def loads(data: bytes, *, max_depth: int = 32, freeze_arrays: bool = True) -> Any:
    """Parse one JSON document from bytes, strictly, returning deep-frozen values.

    ``freeze_arrays=False`` (a fast path for callers that freeze what they keep, see
    :func:`freeze_arrays_in_place`) leaves arrays as plain lists; objects are always frozen.

    Raises:
        StrictJSONError: with ``code`` one of invalid-encoding, invalid-json, duplicate-key,
            non-finite-number, too-deep.
    """
    if data.startswith(_BOM):
        raise StrictJSONError("invalid-encoding", "file starts with a byte-order mark (BOM)")
    if _NUL in data:
        raise StrictJSONError("invalid-encoding", f"NUL byte at offset {data.index(_NUL)}")
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        raise StrictJSONError("invalid-encoding", f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None
    try:
        value = (_decoder if freeze_arrays else _shallow_decoder).decode(text)
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError("invalid-json", f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError("too-deep", f"nesting depth exceeds the limit of {max_depth}") from None
    except ValueError as exc:  # e.g. an integer with too many digits
        raise StrictJSONError("invalid-json", f"unparseable value: {str(exc)[:120]}") from None
    # Cheap bound first: a document with few brackets cannot be nested deeper than their count.
    if data.count(b"[") + data.count(b"{") > max_depth:
        depth = _depth(value)
        if depth > max_depth:
            raise StrictJSONError("too-deep", f"nesting depth {depth} exceeds the limit of {max_depth}")
    if b"\\" in data and _ESCAPED_SURROGATE.search(data) and _has_surrogate(value):
        raise StrictJSONError("invalid-encoding", "escaped lone surrogate (\\uD800-\\uDFFF) in a string")
    if type(value) is list and freeze_arrays:
        return _freeze_list(value)
    return value


#: The canonical JSON forms every digest is computed over, by version: the one home of "the bytes
#: that are hashed". Digests already stored in users' state (audit chains, upstream pins) were made
#: with one of these and must keep verifying, so a form is never changed: a new one gets the next
#: number and the old stay readable (an audit line names its record version; see ``tooldir.run.audit``).
#:
#: - ``1``: compact separators, keys sorted, non-ASCII as UTF-8 (NaN/Infinity as Python writes them):
#:   tool input digests, tool-definition digests (``ToolDef.digest``), audit records of version 1.
#: - ``2``: the same with every non-ASCII character escaped (``\\uXXXX``) and NaN/Infinity refused:
#:   pure ASCII, one form per value: audit records of version 2, upstream definition and
#:   instruction pins (``upstream.json``).
CANONICAL_VERSIONS = (1, 2)
_CANONICAL_ENCODERS = {
    1: json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False),
    2: json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False),
}


def canonical_json(value: Any, version: int) -> bytes:
    """The canonical JSON bytes of ``value`` in form ``version`` (:data:`CANONICAL_VERSIONS`).

    Raises:
        ValueError: form 2 of a non-finite number, or an unknown version.
        TypeError: a value JSON cannot encode.
    """
    encoder = _CANONICAL_ENCODERS.get(version)
    if encoder is None:
        raise ValueError(f"unknown canonical JSON version {version!r}; known: {CANONICAL_VERSIONS}")
    return encoder.encode(value).encode("utf-8")


def dumps_canonical(value: Any) -> str:
    """Form 1 of :func:`canonical_json` as text (what is hashed and measured in-process)."""
    return _CANONICAL_ENCODERS[1].encode(value)


def iter_strings(value: Any, pointer: str = "") -> Iterable[tuple[str, str]]:
    """Yield (json pointer, string) for every key and string value inside ``value``."""
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, dict):
        for key, item in value.items():
            child = f"{pointer}/{escape_pointer(key)}"
            yield child, key
            yield from iter_strings(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_strings(item, f"{pointer}/{index}")


def escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")
