"""The CLI's parts for MCP server packages (DESIGN §10): pinning definitions after ``allow``,
what ``show`` prints about a server package or one of its upstream tools, and ``watch``'s store
that extends every snapshot with the last listings."""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

from ..errors import ExecutionError
from ..loader import LoadConfig, Loader
from ..model import ToolRecord, is_runnable, why_not_runnable
from ..snapshot import Snapshot, SnapshotDiff, SnapshotStore, diff
from ..upstream import (
    approve_listing,
    definition_diff,
    instructions_problems,
    last_failure,
    load_upstream_state,
    pinned_instructions,
    visible,
)
from ..upstream_names import SEPARATOR
from .common import config_from_args, console, console_err, rule, safe


def pin_after_allow(config: LoadConfig, path: str, *, quiet: bool) -> dict[str, Any] | None:
    """After ``tooldir allow`` approved the server package at ``path``: start it (now trusted),
    list its tools and instructions, show every field with escapes made visible, and pin them.
    None when ``path`` is not a server package; ``{"error": ...}`` when it could not be listed."""
    snapshot = Loader(config).load()
    record = next((t for t in snapshot.tools if t.server is not None and t.path == path), None)
    if record is None:
        return None
    if not is_runnable(record):
        return {"error": {"code": "not-active", "message": why_not_runnable(record.name, record)}}
    try:
        listing, entry = approve_listing(record, config.policy, config.state_dir)
    except ExecutionError as exc:
        if not quiet:
            console_err().print(
                safe(f"{exc.code}: {exc.message}; its tools are pinned at its first successful start", "yellow")
            )
        return {"error": {"code": exc.code, "message": exc.message}}
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


class ListedStore(SnapshotStore):
    """The watch's store: every snapshot published into it is first extended with the upstream
    tools of the MCP server packages' last listings in user state (DESIGN §10, as ``scan`` shows
    them: pins checked, only trusted packages, and no server is ever started); an extension that
    changes nothing is not published. :meth:`relist` re-extends the current snapshot when the
    listings changed (``tooldir serve`` or ``tooldir allow`` listed a server)."""

    def __init__(self, first: Snapshot, loader: Loader) -> None:
        self._loader = loader
        self._extending = threading.RLock()  # extend + publish as one step: no older base wins
        self._seen = self._listings_stamp()
        super().__init__(self._extended(first))

    def _listings_stamp(self) -> tuple[int, int, int] | None:
        from ..upstream import UPSTREAM_STATE

        try:
            st = os.stat(os.path.join(self._loader.config.state_dir, UPSTREAM_STATE))
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _extended(self, snapshot: Snapshot) -> Snapshot:
        if not any(t.server is not None for t in snapshot.tools):
            return snapshot
        from ..upstream import extend_snapshot, load_upstream_state

        config = self._loader.config
        return extend_snapshot(snapshot, load_upstream_state(config.state_dir), config.policy, config.builtins)

    def publish(self, snapshot: Snapshot) -> tuple[Snapshot, SnapshotDiff]:
        with self._extending:
            extended = self._extended(snapshot)
            current = self.current
            if extended.id == current.id:
                return current, diff(current, current)
            return super().publish(extended)

    def relist(self) -> None:
        """Re-extend the current snapshot if the listings file changed since last seen."""
        stamp = self._listings_stamp()
        if stamp == self._seen:
            return
        self._seen = stamp
        with self._extending:
            self.publish(self.current)
