"""Helpers for session tests: a real store, registry and session over builtins and directory tools."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared_helpers import FakeSandbox

from tooldir.deferred.session import Session
from tooldir.deferred.tokens import TokenCounter
from tooldir.policy import DeferPolicy, Policy
from tooldir.run.permissions import PermissionCheck
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "the text"}},
    "required": ["text"],
    "additionalProperties": False,
}

BUILTINS = {
    "weather_lookup": "Look up the current weather forecast for a city.",
    "stock_quote": "Get the latest stock price quote for a ticker symbol.",
    "calendar_create_event": "Create a calendar event with a title and time.",
    "calendar_list_events": "List calendar events in a date range.",
    "translate_text": "Translate text between human languages.",
}


def echo(*, input: dict[str, Any], context: dict[str, Any]) -> Any:
    return {"echo": input}


@dataclass
class Setup:
    store: SnapshotStore
    registry: Registry
    session: Session
    loader: Loader
    sandbox: FakeSandbox
    state: Path


def defer_policy(**defer: Any) -> Policy:
    fields = {"mode": "on", "rules": ("Defer(*)",), **defer}
    return Policy(defer=DeferPolicy(**fields))


def setup(
    tmp_path: Path,
    *,
    policy: Policy | None = None,
    user_dir: Path | None = None,
    builtins: dict[str, Any] | None = None,
    permissions: PermissionCheck | None = None,
    **session_kw: Any,
) -> Setup:
    policy = policy or defer_policy()
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[user_dir] if user_dir else [], policy=policy, state_dir=state)
    loader = Loader(config)
    store = SnapshotStore(loader.load())
    sandbox = FakeSandbox()  # answers like a tool that ran; records every run
    registry = Registry(store, policy=policy, state_dir=state, sandbox=sandbox, permissions=permissions)
    for name, spec in (BUILTINS if builtins is None else builtins).items():
        desc, schema = (spec, TEXT_SCHEMA) if isinstance(spec, str) else spec  # description or (description, schema)
        registry.register(name, schema, echo, description=desc)
    session_kw.setdefault("counter", TokenCounter(prefer_exact=False))
    session = Session(store, policy=policy, registry=registry, state_dir=state, **session_kw)
    return Setup(store, registry, session, loader, sandbox, state)


def republish(s: Setup) -> None:
    """Re-read every root and publish the result (what the watcher does after a change)."""
    s.store.publish(s.loader.load())
