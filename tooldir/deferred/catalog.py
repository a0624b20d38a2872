"""Tool definitions in the formats models take, and the compact directory of deferred tools. Pure.

- :class:`ToolDef` renders one tool for Anthropic (``{"name", "description", "input_schema"}``,
  optionally ``"defer_loading": true``), OpenAI (``{"type": "function", "function": {...}}``)
  and MCP (``{"name", "description", "inputSchema"}``).
- :func:`directory_text` is the compact directory for the system prompt: one line per deferred
  tool with its name, risk and a one-line summary.
- The guard tools ``tool_search`` and ``defer_execute_tool`` are defined here (never deferred).
- :func:`tool_reference_blocks` is what a client-side ``tool_search`` returns on the Anthropic API
  so the named deferred tools are expanded in place (``{"type": "tool_reference", ...}``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._internal.strictjson import dumps_canonical, thaw
from ..model import BuiltinSpec, Risk, ToolRecord
from ..text import ALL_KINDS, character_class

Format = Literal["anthropic", "openai", "mcp"]
FORMATS: tuple[Format, ...] = ("anthropic", "openai", "mcp")
SUMMARY_CHARS = 60


@dataclass(frozen=True, slots=True)
class ToolDef:
    """One tool's model-facing definition. ``input_schema`` may be deep-frozen (shared with the
    snapshot); every rendering returns fresh, mutable JSON."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    risk: Risk | None = None

    @property
    def digest(self) -> str:
        """The schema version: sha256 over name, description, input schema and risk."""
        body = dumps_canonical(
            [self.name, self.description, self.input_schema, None if self.risk is None else str(self.risk)]
        )
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()

    @property
    def contract_digest(self) -> str:
        """What a caller relies on when it calls the tool: sha256 over name, input schema and risk
        (not the description). A session refuses a call as stale only when this changed."""
        body = dumps_canonical([self.name, self.input_schema, None if self.risk is None else str(self.risk)])
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()

    def schema_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": thaw(self.input_schema)}

    def anthropic_compact_json(self) -> str:
        """``compact_json(self.anthropic())`` without the thawed copy: json encodes the frozen
        dicts and lists exactly as their plain copies (they are ``dict``/``list`` subclasses)."""
        return json.dumps(
            {"name": self.name, "description": self.description, "input_schema": self.input_schema},
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def anthropic(self, *, defer_loading: bool = False) -> dict[str, Any]:
        out = self.schema_json()
        if defer_loading:
            out["defer_loading"] = True
        return out

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": thaw(self.input_schema)},
        }

    def mcp(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": thaw(self.input_schema)}

    def render(self, fmt: Format) -> dict[str, Any]:
        if fmt == "anthropic":
            return self.anthropic()
        if fmt == "openai":
            return self.openai()
        if fmt == "mcp":
            return self.mcp()
        raise ValueError(f"unknown tool format {fmt!r}; expected one of {FORMATS}")


def tool_def(record: ToolRecord, builtin: BuiltinSpec | None = None) -> ToolDef | None:
    """The definition of a record with a manifest, or of a builtin from its spec."""
    if record.manifest is not None:
        m = record.manifest
        return ToolDef(m.name, m.description, m.input_schema, m.risk)
    if builtin is not None:
        return ToolDef(builtin.name, builtin.description, builtin.input_schema, builtin.risk)
    return None


# ------------------------------------------------------------------------------------------------
# The compact directory

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


# every character of tooldir.text's table (controls, bidi, tags, invisible ones) and tab/CR/LF
_INVISIBLE = re.compile(character_class(ALL_KINDS, extra="\t\n\r"))


def _visible(text: str) -> str:
    """Control and format characters become spaces: the directory is model-facing."""
    return _INVISIBLE.sub(" ", text)


def summary(description: str, limit: int = SUMMARY_CHARS) -> str:
    """The first sentence of ``description`` on one line, at most ``limit`` characters."""
    head = description[: limit * 4]
    # printable ASCII holds none of the characters _visible replaces (a check in C, no regex pass)
    text = " ".join((head if head.isascii() and head.isprintable() else _visible(head)).split())
    first = _first_sentence(text)
    if len(first) > limit:
        cut = first[: limit - 1].rsplit(" ", 1)[0] if " " in first[: limit - 1] else first[: limit - 1]
        first = cut.rstrip(",;:") + "…"
    return first


def _first_sentence(text: str) -> str:
    """``_SENTENCE_END.split(text, maxsplit=1)[0]`` for a text whose only whitespace is single
    spaces (as ``" ".join(s.split())`` leaves it): up to the first ``.``, ``!`` or ``?`` followed by
    a space (three ``str.find`` calls, no regex pass over the text)."""
    end = len(text)
    for mark in (". ", "! ", "? "):
        at = text.find(mark, 0, end)
        if at >= 0:
            end = at + 1
    return text[:end]


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    name: str
    summary: str
    risk: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "risk": self.risk}


def directory_entry(d: ToolDef) -> DirectoryEntry:
    return DirectoryEntry(d.name, summary(d.description), None if d.risk is None else str(d.risk))


DIRECTORY_HEADER = "Deferred tools: load with tool_search (tool_names or keywords), then call."


def directory_text(entries: Sequence[DirectoryEntry]) -> str:
    """The compact directory for the system prompt ("" when nothing is deferred): one
    ``name: summary`` line per tool, grouped under a ``[risk]`` line, least dangerous first."""
    if not entries:
        return ""
    order = {str(r): r.rank for r in Risk}
    lines = [DIRECTORY_HEADER]
    group: str | None = None
    for e in sorted(entries, key=lambda e: (order.get(e.risk or "", len(order)), e.name)):
        risk = e.risk or "builtin"
        if risk != group:
            lines.append(f"[{risk}]")
            group = risk
        lines.append(f"{e.name}: {e.summary}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Guard tools

TOOL_SEARCH = ToolDef(
    "tool_search",
    "Load deferred tools by exact tool_names (or query 'select:a,b') and/or keyword queries "
    "('+word' = required). Returns matches with full schemas; then call them.",
    {
        "type": "object",
        "properties": {
            "queries": {"type": "array", "items": {"type": "string"}},
            "tool_names": {"type": "array", "items": {"type": "string"}},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 20},
        },
        "additionalProperties": False,
    },
    Risk.READ,
)

DEFER_EXECUTE_TOOL = ToolDef(
    "defer_execute_tool",
    "Run a loaded deferred tool by name with its input.",
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "input": {"type": "object"}},
        "required": ["name", "input"],
        "additionalProperties": False,
    },
    Risk.EXEC,
)

GUARD_DEFS: tuple[ToolDef, ...] = (TOOL_SEARCH, DEFER_EXECUTE_TOOL)


def tool_reference_blocks(names: Iterable[str]) -> list[dict[str, str]]:
    """Anthropic ``tool_result`` content for a client-side search: the named deferred tools are
    expanded from the request's ``defer_loading`` definitions."""
    return [{"type": "tool_reference", "tool_name": n} for n in names]


# ------------------------------------------------------------------------------------------------
# tool_search results


@dataclass(frozen=True, slots=True)
class Match:
    name: str
    score: float | None  # None for an exact-name selection
    source: str
    load_state: str  # "loaded" (newly loaded by this search) | "cached" (already loaded, same schema)
    schema: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "score": None if self.score is None else round(self.score, 4),
            "source": self.source,
            "load_state": self.load_state,
            "schema": dict(self.schema),
        }


@dataclass(frozen=True, slots=True)
class SearchResult:
    matches: tuple[Match, ...] = ()
    missing: tuple[str, ...] = ()
    unavailable: tuple[tuple[str, str], ...] = ()
    hint: str | None = None
    #: why some entries of ``missing`` are not matches, as (entry, reason): an exact name of an
    #: immediate (eager) tool is missing because the model already has it and calls it directly
    missing_reasons: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "matches": [m.to_json() for m in self.matches],
            "missing": list(self.missing),
            "unavailable": [{"name": n, "reason": r} for n, r in self.unavailable],
        }
        if self.missing_reasons:
            out["missing_reasons"] = [{"name": n, "reason": r} for n, r in self.missing_reasons]
        if self.hint is not None:
            out["hint"] = self.hint
        return out

    def tool_reference_blocks(self) -> list[dict[str, str]]:
        """The matches as Anthropic ``tool_reference`` blocks (for ``defer_loading`` requests)."""
        return tool_reference_blocks(m.name for m in self.matches)
