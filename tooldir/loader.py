"""Directories -> Snapshot: discover -> validate -> trust -> resolve -> snapshot.

``Loader`` keeps the validated candidate of every package so a rebuild after a change re-reads
only the packages that changed (the watcher uses :meth:`Loader.rebuild`). Trust is re-assessed for
every package on every build: it is cheap and depends on user state that may have changed.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .discover import RootSpec, list_packages, open_root, scan_package
from .model import BuiltinSpec, Diagnostic, Source, error
from .policy import Policy
from .resolve import Assessed, resolve
from .snapshot import Snapshot, build_snapshot
from .state import Approval, default_state_dir, load_approvals
from .trust import SignatureCheck, TrustInputs, assess, signature_check_factory
from .validate import Candidate, validate_package

PROJECT_PARTS = (".tooldir", "tools")


def user_root_default() -> RootSpec:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return RootSpec(Source.USER, config, ("tooldir", "tools"))


def project_root(project: str | os.PathLike[str]) -> RootSpec:
    return RootSpec(Source.PROJECT, os.path.realpath(project), PROJECT_PARTS)


def user_root(path: str | os.PathLike[str]) -> RootSpec:
    return RootSpec(Source.USER, os.path.realpath(path))


@dataclass(frozen=True, slots=True)
class LoadConfig:
    roots: tuple[RootSpec, ...]
    policy: Policy
    state_dir: Path
    builtins: tuple[BuiltinSpec, ...] = ()
    #: Builds the signature check for one load from the policy and state (set by the trust stage).
    signature_check: Callable[[Policy, Path, datetime], SignatureCheck | None] | None = None


@contextmanager
def _gc_paused() -> Iterator[None]:
    # The scan allocates many long-lived objects; the cyclic GC makes it superlinear (PERF_NOTES).
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Loader:
    """Loads snapshots for one configuration, caching per-package work between builds."""

    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self._candidates: dict[str, dict[str, Candidate]] = {}  # root path -> folder name -> candidate
        self._root_diags: dict[str, tuple[Diagnostic, ...]] = {}

    def load(self, *, generation: int = 1, now: datetime | None = None) -> Snapshot:
        """A cold load of every root."""
        return self.rebuild(None, generation=generation, now=now)

    def rebuild(
        self,
        changed: Mapping[str, Iterable[str] | None] | None,
        *,
        generation: int,
        now: datetime | None = None,
    ) -> Snapshot:
        """Re-read what changed and build a new snapshot.

        ``changed`` maps a root path to the folder names that changed under it, or to None to
        re-list the whole root (a root appeared, vanished or was replaced). ``None`` re-reads all.
        """
        with _gc_paused():
            for root in self.config.roots:
                if changed is None or root.path in changed:
                    names = None if changed is None else changed[root.path]
                    self._refresh_root(root, None if names is None else set(names))
            return self._assemble(generation, now or datetime.now(UTC))

    def _refresh_root(self, root: RootSpec, names: set[str] | None) -> None:
        policy = self.config.policy
        fd, diags = open_root(root)
        if fd is None:
            self._candidates[root.path] = {}
            self._root_diags[root.path] = tuple(diags)
            return
        try:
            cache = self._candidates.get(root.path, {})
            if names is None or root.path not in self._root_diags:
                listed = list_packages(fd, root, policy.limits)
                if listed is None:
                    self._candidates[root.path] = {}
                    self._root_diags[root.path] = (
                        error(
                            "too-many-entries",
                            f"root {root.path} has more than {policy.limits.max_root_entries} entries; nothing loaded from it",
                            source=root.source,
                            path=root.path,
                        ),
                    )
                    return
                present, more = listed
                self._root_diags[root.path] = tuple(diags + more)
                fresh = {
                    name: validate_package(scan_package(fd, root, name, policy.limits), policy) for name in present
                }
                self._candidates[root.path] = fresh
                return
            for name in names:
                scan = scan_package(fd, root, name, policy.limits)
                if scan.diagnostics and all(d.code == "missing-file" for d in scan.diagnostics):
                    cache.pop(name, None)  # the folder is gone
                else:
                    cache[name] = validate_package(scan, policy)
            self._candidates[root.path] = dict(sorted(cache.items()))
        finally:
            os.close(fd)

    def _assemble(self, generation: int, now: datetime) -> Snapshot:
        cfg = self.config
        approvals: Mapping[str, Approval] = load_approvals(cfg.state_dir)
        check = cfg.signature_check(cfg.policy, cfg.state_dir, now) if cfg.signature_check else None
        inputs = TrustInputs(cfg.policy, approvals, now, check)
        assessed = [
            Assessed(c, assess(c, inputs)) for root in cfg.roots for c in self._candidates.get(root.path, {}).values()
        ]
        records = resolve(assessed, cfg.builtins, cfg.policy)
        extra = [d for root in cfg.roots for d in self._root_diags.get(root.path, ())]
        return build_snapshot(records, extra, generation)


def make_config(
    *,
    project: str | os.PathLike[str] | None = ".",
    user_dirs: Iterable[str | os.PathLike[str]] | None = None,
    policy: Policy | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    builtins: Iterable[BuiltinSpec] = (),
) -> LoadConfig:
    """Roots from the arguments (``user_dirs=None`` means the user's config dir; ``project=None``
    means no project source)."""
    roots: list[RootSpec] = []
    if user_dirs is None:
        roots.append(user_root_default())
    else:
        roots.extend(user_root(d) for d in user_dirs)
    if project is not None:
        roots.append(project_root(project))
    return LoadConfig(
        roots=tuple(roots),
        policy=policy or Policy(),
        state_dir=Path(state_dir) if state_dir is not None else default_state_dir(),
        builtins=tuple(builtins),
        signature_check=signature_check_factory,
    )


def load(
    *,
    project: str | os.PathLike[str] | None = ".",
    user_dirs: Iterable[str | os.PathLike[str]] | None = None,
    policy: Policy | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    builtins: Iterable[BuiltinSpec] = (),
    now: datetime | None = None,
) -> Snapshot:
    """Load every tool root once and return an immutable snapshot (generation 1)."""
    config = make_config(project=project, user_dirs=user_dirs, policy=policy, state_dir=state_dir, builtins=builtins)
    return Loader(config).load(now=now)
