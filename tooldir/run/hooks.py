"""Pre- and post-call hooks, validated when they are registered (never discovered at call time).

A **pre hook** is called as ``hook(*, call=HookCall, input=Mapping)`` and returns ``None``
(continue unchanged), :class:`Deny` (the call is refused, ``hook-denied``) or :class:`Rewrite`
(continue with a new input, which is validated against the tool's schema again).

A **post hook** is called as ``hook(*, call=HookCall, content=Any)`` after a successful run and
returns ``None`` (keep) or :class:`Redact` (replace the content, e.g. to mask secrets).

Hooks run in registration order, only for tools whose name matches their glob. A hook that raises
fails the call closed (``hook-failed``): a pre hook's exception never lets a call through and a post
hook's exception never returns unredacted content.
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model import Risk, Source
from ..names import is_valid_name


@dataclass(frozen=True, slots=True)
class HookCall:
    """What a hook may know about the call."""

    tool: str
    source: Source
    risk: Risk
    digest: str | None
    session: str | None


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Redact:
    content: Any


PreHook = Callable[..., Deny | Rewrite | None]
PostHook = Callable[..., Redact | None]


@dataclass(frozen=True, slots=True)
class Hook:
    name: str
    kind: str  # "pre" | "post"
    match: str
    fn: Callable[..., Any]

    def applies_to(self, tool: str) -> bool:
        return fnmatch.fnmatchcase(tool, self.match)


_ARGS = {"pre": ("call", "input"), "post": ("call", "content")}


def make_hook(kind: str, fn: Callable[..., Any], *, name: str, match: str = "*") -> Hook:
    """Check a hook before it is accepted.

    Raises:
        ValueError: unknown kind, bad name or glob, not callable, or a signature that cannot be
            called with the keyword arguments of its kind.
    """
    if kind not in _ARGS:
        raise ValueError(f"hook kind must be 'pre' or 'post', not {kind!r}")
    if not is_valid_name(name):
        raise ValueError(f"hook name {name!r} must match [A-Za-z0-9_-]{{1,64}}")
    if not isinstance(match, str) or not match:
        raise ValueError(f"hook {name!r}: match must be a non-empty glob")
    if not callable(fn):
        raise ValueError(f"hook {name!r} is not callable")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"hook {name!r}: cannot read its signature ({exc})") from None
    a, b = _ARGS[kind]
    try:
        signature.bind(**{a: None, b: None})
    except TypeError as exc:
        raise ValueError(f"{kind} hook {name!r} must accept keyword arguments {a}= and {b}= ({exc})") from None
    return Hook(name, kind, match, fn)


class HookSet:
    """Registered hooks in order. Registration is validated; duplicate names are refused."""

    def __init__(self) -> None:
        self._hooks: list[Hook] = []

    def add(self, hook: Hook) -> None:
        if any(h.name == hook.name for h in self._hooks):
            raise ValueError(f"a hook named {hook.name!r} is already registered")
        self._hooks = [*self._hooks, hook]  # copy-on-write: a running call keeps its list

    def pre(self, tool: str) -> list[Hook]:
        return [h for h in self._hooks if h.kind == "pre" and h.applies_to(tool)]

    def post(self, tool: str) -> list[Hook]:
        return [h for h in self._hooks if h.kind == "post" and h.applies_to(tool)]

    def __len__(self) -> int:
        return len(self._hooks)
