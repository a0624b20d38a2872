"""The CLI's parts for MCP server packages (DESIGN §10): showing what ``allow`` pinned (the
pinning itself is :func:`tooldir.upstream.pin_after_approval`, as ``tooldir.approve()`` does it) and
what ``show`` prints about a server package or one of its upstream tools (``watch``'s store is
:func:`tooldir.upstream.listed_store`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..codes import CallErrorCode
from ..errors import ExecutionError
from ..model import ToolRecord, is_runnable, why_not_runnable
from ..names import SEPARATOR
from ..snapshot.loader import LoadConfig
from ..upstream import (
    definition_diff,
    instructions_problems,
    last_failure,
    load_upstream_state,
    pin_after_approval,
    pinned_instructions,
    visible,
)
from .common import config_from_args, console, console_err, rule, safe


def pin_after_allow(config: LoadConfig, path: str, *, quiet: bool) -> dict[str, Any] | None:
    """After ``tooldir allow`` approved the server package at ``path``: start it (now trusted),
    list its tools and instructions, show every field with escapes made visible, and pin them.
    None when ``path`` is not a server package; ``{"error": ...}`` when it could not be listed."""
    try:
        pinned = pin_after_approval(config, path)
    except ExecutionError as exc:
        if exc.code == CallErrorCode.NOT_ACTIVE:
            return {"error": {"code": exc.code, "message": exc.message}}
        if not quiet:
            console_err().print(
                safe(f"{exc.code}: {exc.message}; its tools are pinned at its first successful start", "yellow")
            )
        return {"error": {"code": exc.code, "message": exc.message}}
    if pinned is None:
        return None
    record, listing, entry = pinned.record, pinned.listing, pinned.entry
    if not quiet:
        out = console()
        rule(out, safe(f"MCP server {record.name}: {len(listing.tools)} tool(s), listed {listing.listed_at}"))
        out.print("instructions (escapes visible):")
        out.print(safe(visible(listing.instructions)))
        for code, message in instructions_problems(listing.instructions):
            out.print(safe(f"{code}: {message}", "yellow"))
        for tool in listing.tools:
            out.print(safe(f"tool {tool.get('name')!a} — definition (every field, escapes visible):", "bold"))
            out.print(safe(visible(entry["definitions"][str(tool.get("name"))])))
        out.print(safe(f"pinned {len(entry['pins'])} definition(s) and the instructions of {record.name}", "green"))
    return {
        "listed_at": listing.listed_at,
        "instructions": listing.instructions,
        "pins": entry["pins"],
        "instructions_digest": entry["instructions_digest"],
        "instructions_problems": [{"code": c, "message": m} for c, m in instructions_problems(listing.instructions)],
    }


def print_upstream(record: ToolRecord, args: argparse.Namespace) -> None:
    out = console()
    data = load_upstream_state(config_from_args(args).state_dir)
    if record.server is not None:
        entry = data.get("packages", {}).get(record.path or "", {})
        last = entry.get("last") if isinstance(entry, dict) else None
        when = last.get("listed_at") if isinstance(last, dict) else None
        out.print(safe(f"MCP server package; last listed: {when or 'never'}"))
        _print_failure(record, data)
        out.print(safe(f"pinned instructions: {visible(pinned_instructions(data, record))}"))
        return
    ref = record.upstream
    assert ref is not None  # noqa: S101 - the caller checked
    out.print(safe(f"upstream: tool {ref.tool!a} of MCP server {ref.package} (listed {ref.listed_at})"))
    _print_failure(record, data)
    out.print(safe(f"definition digest: {ref.definition_digest}"))
    diff = definition_diff(data, record)
    if diff:
        out.print(safe("definition changed since it was approved:", "yellow"))
        out.print(safe(diff))


def _print_failure(record: ToolRecord, data: dict[str, Any]) -> None:
    failure = last_failure(data, record)
    if failure is not None:
        console().print(safe(f"last start failed ({failure.get('at')}): {failure['message']}", "yellow"))


def upstream_detail(record: ToolRecord, detail: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """``show --json``'s extra fields of a server package or one of its tools: the definition
    diff (a tool) and ``start_failure`` (``{"at", "message"}`` or None)."""
    if record.upstream is None and record.server is None:
        return detail
    data = load_upstream_state(config_from_args(args).state_dir)
    failure = last_failure(data, record)
    extra: dict[str, Any] = {
        "start_failure": None if failure is None else {"at": failure.get("at"), "message": failure["message"]}
    }
    if record.upstream is not None:
        extra["definition_diff"] = definition_diff(data, record)
    return {**detail, **extra}


def package_refusal(snapshot: Any, name: str) -> str | None:
    """Why ``name`` (``<package>__<tool>``) is not offered when its MCP server package is not
    trusted; None if no server package claims the name."""
    for record in snapshot.tools:
        if record.server is None or not name.startswith(record.name + SEPARATOR):
            continue
        return None if is_runnable(record) else why_not_runnable(record.name, record)
    return None
