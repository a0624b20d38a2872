"""A registry with its upstream hub over one user root, for the session tests."""

from __future__ import annotations

import site
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tooldir.policy import Policy, SandboxPolicy
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import Snapshot, SnapshotStore
from tooldir.upstream import UpstreamHub

RUNTIME = tuple(site.getsitepackages())  # the test venv: the mcp SDK for FastMCP servers


def server_policy(**sandbox: Any) -> Policy:
    settings: dict[str, Any] = {"env_allow": ("TOOLDIR_TEST_VARIANT",), "runtime_roots": RUNTIME, **sandbox}
    return Policy(sandbox=SandboxPolicy(**settings))


@dataclass
class Rig:
    registry: Registry
    hub: UpstreamHub
    store: SnapshotStore
    base: Snapshot
    state: Path

    @property
    def snapshot(self) -> Snapshot:
        return self.store.current

    def relist(self) -> Snapshot:
        extended, _ = self.hub.refresh(self.base)
        self.store.publish(extended)
        return extended


@contextmanager
def rig(root: Path, state: Path, policy: Policy | None = None, *, project: Path | None = None) -> Iterator[Rig]:
    policy = policy or server_policy()
    config = make_config(project=project, user_dirs=[root], state_dir=state, policy=policy)
    base = Loader(config).load()
    store = SnapshotStore(base)
    registry = Registry(store, policy=policy, state_dir=state)
    hub = UpstreamHub(policy, state)
    try:
        hub.attach_registry(registry)
        yield Rig(registry, hub, store, base, state)
    finally:
        hub.close()
