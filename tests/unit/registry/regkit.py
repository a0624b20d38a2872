"""Helpers for registry tests: a registry over a real loaded snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared_helpers import FakeSandbox

from tooldir.policy import Policy
from tooldir.run.audit import AuditEvent
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

__all__ = ["NOOP_SCHEMA", "FakeSandbox", "MemoryAudit", "Setup", "registry_for"]

NOOP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "additionalProperties": False,
}


class MemoryAudit:
    """An audit sink that keeps events in memory (the JSONL sink has its own tests)."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> str:
        self.events.append(event)
        return f"mem-{len(self.events)}"


@dataclass
class Setup:
    registry: Registry
    store: SnapshotStore
    state: Path


def registry_for(
    tmp_path: Path,
    *,
    user_dir: Path | None = None,
    project: Path | None = None,
    policy: Policy | None = None,
    sandbox: Any = None,
    audit: Any = None,
    builtins: Any = (),
) -> Setup:
    state = tmp_path / "state"
    policy = policy or Policy()
    config = make_config(
        project=project,
        user_dirs=[user_dir] if user_dir is not None else [],
        policy=policy,
        state_dir=state,
        builtins=builtins,
    )
    store = SnapshotStore(Loader(config).load())
    registry = Registry(store, policy=policy, state_dir=state, sandbox=sandbox, audit=audit)
    return Setup(registry, store, state)
