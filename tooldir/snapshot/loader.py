"""Directories -> Snapshot: discover -> validate -> trust -> resolve -> snapshot.

Every build records, in the user's state, the highest signed version per (signer, tool) it
verified (rollback protection) and the signature verifications that succeeded: whatever loads a
tool for use - ``tooldir run``, ``serve``, the watcher, a host's ``Loader`` or ``tooldir.load`` -
arms rollback protection for it. ``LoadConfig.read_only`` (inspection only) turns this off.

``Loader`` keeps the validated candidate of every package so a rebuild after a change re-reads
only the packages that changed (the watcher uses :meth:`Loader.rebuild`). Trust is re-assessed
wherever its inputs may have changed: new packages, every package when the user's state or policy
files changed, and signed packages on every build (their verdict depends on the time).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any, Protocol, TypeVar

from .._internal import forkpool
from ..codes import DiagnosticCode
from ..errors import StateError
from ..model import BuiltinSpec, Diagnostic, PackageFile, Source, ToolRecord, warning
from ..names import skeleton
from ..policy import ManagedOverride, Policy, check_trusted, config_home, policy_diagnostics, read_policy
from ..read.discover import (
    EntryKind,
    PackageScan,
    RootSpec,
    is_hidden,
    list_packages,
    mode_kind,
    open_root,
    overfull_root,
    root_entry,
    scan_package,
)
from ..read.index import RootIndex, Row
from ..read.index import enabled as index_enabled
from ..read.validate import Candidate, validate_package
from ..signatures import parse_allowed_signers
from ..state import (
    APPROVALS,
    HIGH_WATER,
    Approval,
    absolute_state_dir,
    default_state_dir,
    load_approvals,
    load_high_water,
    load_verified,
    record_seen_versions,
    record_verified,
    record_versions,
)
from ..trust import verify_pool
from ..trust.assess import (
    AllowedSigners,
    Assessment,
    Keyring,
    SignatureCheck,
    TrustCache,
    TrustInputs,
    assess,
    keyring_from_policy,
    signed_versions,
    verify_package,
    with_marks,
)
from ..trust.lockfile import UNLISTED
from ..trust.verify_pool import SignaturePrefetch, prefetch_for
from .resolve import Assessed, resolve
from .store import DiagEntry, RecordEntry, Snapshot, assemble, diag_entry, record_entry

PROJECT_PARTS = (".tooldir", "tools")
#: Fewest packages to read in one root for which forked workers pay for themselves on 2 cores
#: (the default of ``LoadConfig.parallel_min``). benchmarks/bench_scan.py, whole ``scan --json``,
#: parallel vs ``TOOLDIR_WORKERS=1``, medians: 1k 0.98-1.04x faster (break-even), 3k 1.06x, 10k
#: 1.35x with the second core mostly idle (0.98x when other work keeps it busy: then the fork
#: only adds CPU, 2-14% for the pickled results, page faults and the chunk both ends read).
PARALLEL_MIN = 1000
log = logging.getLogger("tooldir.loader")

R = TypeVar("R")

Marks = Mapping[tuple[str, str], int]  # (signer, tool) -> highest signed version


class SignatureCheckFactory(Protocol):
    """Builds the signature check of one load from the policy, the state and the time; ``seen``
    holds high-water marks this process established itself (they count even if unwritten);
    ``explain`` makes each verdict carry its steps (``tooldir.manage.explain``)."""

    def __call__(
        self,
        policy: Policy,
        state_dir: Path,
        now: datetime,
        /,
        *,
        seen: Marks | None = None,
        cache: TrustCache | None = None,
        explain: bool = False,
    ) -> SignatureCheck | None: ...


def read_allowed_signers(path: str | None) -> AllowedSigners:
    """Read the user's allowed_signers file (``~`` expanded) -> (signers, problems). A missing or
    unreadable file means no SSH signer is trusted, and is reported as a problem.

    Raises:
        PolicyError: the file, or a folder on the way to it, is another user's or writable by others.
    """
    if not path:
        return (), ()
    file = os.path.expanduser(path)
    check_trusted(file, "allowed_signers file (keys.allowed_signers)", key="keys.allowed_signers")
    try:
        with open(file, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError as exc:
        return (), (f"{file}: cannot read allowed_signers: {exc.strerror}",)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return (), (f"{file}: allowed_signers is not UTF-8 text",)
    return parse_allowed_signers(text, file)


def read_keyring(policy: Policy, verified: frozenset[bytes] = frozenset()) -> Keyring:
    """The keyring of ``policy`` with its allowed_signers file read here (the I/O edge; the trust
    stage itself only gets the parsed lines)."""
    return keyring_from_policy(policy, verified, read_allowed_signers(policy.keys.allowed_signers))


def signature_check_factory(
    policy: Policy,
    state_dir: Path,
    now: datetime,
    /,
    *,
    seen: Marks | None = None,
    cache: TrustCache | None = None,
    explain: bool = False,
) -> SignatureCheck:
    """The check for one load: the keyring, high-water marks and the record of earlier successful
    verifications are read once, here (the I/O edge of the trust stage). ``cache``: the loader's
    own :class:`~tooldir.trust.assess.TrustCache` (parse and verification results)."""
    keyring = read_keyring(policy, load_verified(state_dir))
    marks = with_marks(load_high_water(state_dir), seen or {})
    return partial(verify_package, keyring=keyring, marks=marks, now=now, cache=cache, explain=explain)


def remember_load(state_dir: Path, records: Iterable[ToolRecord], *, loader: Loader | None = None) -> None:
    """Write what a load established to user state: the high-water mark of every signed version
    seen (rollback protection) and, given the ``loader`` that made them, the verifications that
    succeeded in it. Every ``Loader`` build does this itself; a host calls it only for snapshots it
    got another way (e.g. a ``read_only`` load it then decides to use). A relative ``state_dir``
    is refused (StateDirError)."""
    state_dir = absolute_state_dir(state_dir, setting="remember_load(state_dir=...)")
    record_seen_versions(state_dir, records)
    if loader is not None:
        record_verified(state_dir, loader.trust_cache.verifications.verified_digests())


def user_root_default() -> RootSpec:
    """``$XDG_CONFIG_HOME/tooldir/tools``. The config folder (and the home above it) is the user's
    own and may be a symlink the user made (dotfile managers): it is resolved once, here, so
    discovery, approvals and the sandbox's verified copy all see the same real path;
    ``tooldir/tools`` below it are opened without following symlinks."""
    return RootSpec(Source.USER, os.path.realpath(config_home()), ("tooldir", "tools"))


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
    signature_check: SignatureCheckFactory | None = None
    #: Inspection only: the load writes nothing to user state, so the signed versions it verifies
    #: are not recorded and rollback protection is NOT armed by it. Never run tools from such a
    #: snapshot (the CLI never sets this).
    read_only: bool = False
    #: The file the policy came from (the ``path`` of its ``policy-weakened`` warnings), if any.
    policy_file: str | None = None
    #: User values the managed policy overrode (``policy-managed`` warnings of every snapshot).
    policy_overridden: tuple[ManagedOverride, ...] = ()
    #: Use the persistent content index in ``state_dir`` (:mod:`tooldir.read.index`): a new process
    #: stats unchanged packages instead of reading and validating them. Off: every package is read.
    index: bool = True
    #: Processes that may share the reading of a root's packages (this one included). 1, the
    #: default, never forks: a library host is never forked by surprise. Above 1 (the CLI's one-shot
    #: commands set the CPU count), a root with at least ``parallel_min`` packages to read is
    #: shared with forked workers (:mod:`tooldir._internal.forkpool`), only on Linux and only while
    #: this process has one thread; the snapshot is the same as a sequential load's.
    workers: int = 1
    #: Fewest packages to read in one root for which forking workers pays (measured, see
    #: :data:`PARALLEL_MIN`).
    parallel_min: int = PARALLEL_MIN


PkgKey = tuple[str, str]  # (root path, folder name)


@dataclass(slots=True)
class _Package:
    candidate: Candidate
    group: str  # resolution group: the skeleton of its tool name (resolve() is local to one group)
    signed: bool  # has signature files: its verdict may depend on the time
    assessment: Assessment | None = None


@dataclass(slots=True)
class _Work:
    """What one build has to redo."""

    dirty: set[str] = field(default_factory=set)  # resolution groups
    fresh: list[_Package] = field(default_factory=list)  # packages without a trust assessment


@dataclass(slots=True)
class _Root:
    """What the loader knows about one root, as of the last build."""

    identity: tuple[int, int] | None  # (st_dev, st_ino) of the opened root; None if it could not be opened
    diags: tuple[DiagEntry, ...] = ()  # the root's own problems (unsafe, symlinked, too many entries)
    entries: set[str] = field(default_factory=set)  # every name directly under the root (counts toward the limit)
    listing: dict[str, DiagEntry] = field(default_factory=dict)  # per-entry problems: stray file, symlink, FIFO
    packages: dict[str, _Package] = field(default_factory=dict)
    overfull: bool = False


def _stat_signature(path: Path | str | None) -> tuple[int, int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Loader:
    """Loads snapshots for one configuration, caching per-package work between builds.

    Per package the loader keeps the validated candidate (parse, digest, validation), its trust
    assessment and its resolved records; :meth:`rebuild` re-reads only the packages named as
    changed, re-assesses trust where its inputs changed (user state, policy files, and packages
    with signature files, whose verdict depends on the time), re-resolves only the name groups
    those packages belong to, and assembles the snapshot from the kept entries. A root whose
    identity changed (replaced, or reappeared) is re-read whole. If a build raises, the caches are
    dropped, so the next build starts cold; nothing half-built is ever returned.
    """

    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        # What this loader verified for use, kept across resets and reconfiguration: facts about
        # what ran, never dropped. ``_unwritten`` are marks user state does not hold yet.
        self._seen: dict[tuple[str, str], int] = {}
        self._unwritten: dict[tuple[str, str], int] = {}
        self._verified_written: set[bytes] = set()
        # parse and verification results of this loader only (never module state): kept across
        # resets, since they are facts about content, keys and signatures, not about this config
        self._trust_cache = TrustCache()
        if config.read_only:
            log.info("read-only load: signed versions are not recorded (rollback protection not armed)")
        self._reset()

    def _reset(self) -> None:
        self._roots: dict[str, _Root] = {}
        self._groups: dict[str, tuple[RecordEntry, ...]] = {}
        self._members: dict[str, set[PkgKey]] = {}
        self._signed: dict[PkgKey, _Package] = {}
        self._builtin_entries: tuple[RecordEntry, ...] = ()
        self._built = False
        self._trust_key: object = None
        self._approvals: Mapping[str, Approval] = {}
        self._approvals_sig: object = ("unread",)
        # the policy's own warnings (values weaker than their defaults): part of every snapshot
        cfg = self.config
        self._policy_diags = tuple(
            diag_entry(d) for d in policy_diagnostics(cfg.policy, cfg.policy_file, cfg.policy_overridden)
        )

    @property
    def trust_cache(self) -> TrustCache:
        """What this loader's trust stage remembers (parses, verifications); never shared."""
        return self._trust_cache

    def reconfigure(self, config: LoadConfig) -> None:
        """Use a new configuration (e.g. a changed policy); the next build is a cold load."""
        with self._lock:
            self.config = config
            self._reset()
        if config.read_only:
            log.info("read-only load: signed versions are not recorded (rollback protection not armed)")

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

        ``changed`` maps a root path to the folder names that changed directly under it (an
        empty collection re-opens the root and only re-checks its permissions and identity), or
        to None to re-list the whole root (a root appeared, vanished or was replaced). ``None``
        re-reads all. Trust is re-evaluated on every build wherever its inputs may have changed
        (new packages; every package when approvals, high-water marks or allowed signers changed
        on disk; signed packages always). Root paths that are not configured roots are ignored.

        Raises whatever a stage raises (e.g. ``StateError`` for a corrupt approvals file); the
        caches are then dropped and the next build is cold.
        """
        with self._lock:
            try:
                return self._rebuild(changed, generation, now or datetime.now(UTC))
            except BaseException:
                self._reset()  # the caches may be half-updated: start cold next time
                raise

    # -- one build ---------------------------------------------------------------------------

    def _rebuild(self, changed: Mapping[str, Iterable[str] | None] | None, generation: int, now: datetime) -> Snapshot:
        cfg = self.config
        cold = changed is None or not self._built
        work = _Work()
        for root in cfg.roots:
            if cold:
                self._refresh_root(root, None, work)
            elif changed is not None and root.path in changed:
                names = changed[root.path]
                self._refresh_root(root, None if names is None else set(names), work)
        self._assess(cold, now, work)
        recorded = self._remember()
        if cold:
            self._resolve_all()
        else:
            for group in work.dirty:
                self._resolve_group(group)
        self._built = True
        extra: list[DiagEntry] = [*self._policy_diags, *recorded]
        for state in self._roots.values():
            extra.extend(state.diags)
            extra.extend(state.listing.values())
        entries = chain(self._builtin_entries, chain.from_iterable(self._groups.values()))
        return assemble(entries, extra, generation)

    # -- discovery and validation, per root and per package ------------------------------------

    def _refresh_root(self, root: RootSpec, names: set[str] | None, work: _Work) -> None:
        prev = self._roots.get(root.path)
        fd, diags = open_root(root)
        if fd is None:
            self._replace_root(root, prev, _Root(None, tuple(diag_entry(d) for d in diags)), work)
            return
        try:
            st = os.fstat(fd)
            identity = (st.st_dev, st.st_ino)
            if names is None or prev is None or prev.identity != identity or prev.overfull:
                self._replace_root(root, prev, self._list_root(fd, root, identity, diags), work)
                return
            prev.diags = tuple(diag_entry(d) for d in diags)
            for name in sorted(names):
                if name and name not in (".", "..") and "/" not in name and "\0" not in name:
                    self._refresh_entry(fd, root, prev, name, work)
            limit = self.config.policy.limits.max_root_entries
            if len(prev.entries) > limit:
                self._replace_root(root, prev, self._overfull(root, identity), work)
        finally:
            os.close(fd)

    def _overfull(self, root: RootSpec, identity: tuple[int, int]) -> _Root:
        diag = overfull_root(root, self.config.policy.limits.max_root_entries)
        return _Root(identity, (diag_entry(diag),), overfull=True)

    def _list_root(self, fd: int, root: RootSpec, identity: tuple[int, int], diags: list[Diagnostic]) -> _Root:
        policy = self.config.policy
        listed = list_packages(fd, root, policy.limits)
        if listed is None:
            return self._overfull(root, identity)
        present, more = listed
        state = _Root(identity, tuple(diag_entry(d) for d in diags if d.tool is None))
        state.entries = set(os.listdir(fd))
        for d in more:
            if d.tool is not None:
                state.listing[d.tool] = diag_entry(d)
            else:
                state.diags += (diag_entry(d),)
        with self._prefetch(root, len(present)) as prefetch:
            for name, candidate in self._read_packages(fd, root, present, state, prefetch):
                state.packages[name] = _package(candidate)
            if prefetch is not None:
                prefetch.close()
        return state

    @contextmanager
    def _prefetch(self, root: RootSpec, packages: int) -> Iterator[SignaturePrefetch | None]:
        """For a large root whose source requires signatures, a helper process that verifies
        them while the packages are read (:mod:`tooldir.trust.verify_pool`); it only fills
        this loader's verification cache, the trust stage still decides. A source that does not
        accept signatures never checks them, so nothing is verified for it."""
        cfg = self.config
        if (
            cfg.signature_check is None
            or packages < verify_pool.MIN_PACKAGES
            or "signature" not in cfg.policy.sources.for_source(root.source).require
        ):
            yield None
            return
        keyring = read_keyring(cfg.policy)
        if not prefetch_for(packages, keyring):
            yield None
            return
        with SignaturePrefetch(keyring, load_verified(cfg.state_dir), self._trust_cache) as p:
            yield p

    def _read_packages(
        self, fd: int, root: RootSpec, names: list[str], state: _Root, prefetch: SignaturePrefetch | None
    ) -> Iterable[tuple[str, Candidate]]:
        """The validated candidate of every package folder of a listed root: through the content
        index (:mod:`tooldir.read.index`) when it is enabled and the source needs no trust, which
        reads only what changed and is written back afterwards (never by a ``read_only`` load).
        The packages to read are shared with forked workers when the config allows it
        (:meth:`_map`)."""
        cfg = self.config
        policy = cfg.policy
        # a source whose tools need trust (approval, pin, signature) is never taken from the index:
        # its digest decides trust, so its files are read and hashed on every load, and with them
        # read, validating again costs no more than rebuilding the indexed record (measured)
        if not cfg.index or policy.sources.for_source(root.source).require:
            limits = policy.limits

            def read(name: str) -> Candidate:
                return validate_package(scan_package(fd, root, name, limits), policy)

            def offer(_: int, candidate: Candidate) -> None:
                if prefetch is not None:  # signatures verified by the helper while reading goes on
                    prefetch.offer(candidate.scan.contents)

            yield from zip(names, self._map(names, read, _is_candidate, offer), strict=True)
            return
        index = RootIndex.open(cfg.state_dir, root, policy, keep=not cfg.read_only)
        kept = [index.reuse(fd, root, name) for name in names]
        todo = [name for name, found in zip(names, kept, strict=True) if found is None]

        def read_indexed(name: str) -> _Read:
            return list(index.read_package(fd, root, name))

        def record(i: int, result: _Read) -> None:
            # each row goes to the index (its spool) as soon as it is here, and is let go: holding
            # the rows until the root is done kept every manifest's bytes twice (+38 MB at 10k)
            index.record(todo[i], result[1])
            result[1] = None

        fresh = iter(self._map(todo, read_indexed, _is_read, record))
        for name, reused in zip(names, kept, strict=True):
            if reused is not None:
                yield name, reused
                continue
            yield name, next(fresh)[0]
        problem = index.diagnostic(root)
        if problem is not None:
            state.diags += (diag_entry(problem),)
        if not cfg.read_only:
            index.save()

    def _map(
        self,
        names: list[str],
        read: Callable[[str], R],
        accept: Callable[[object], bool],
        on_result: Callable[[int, R], None] | None,
    ) -> list[R]:
        """``[read(name) for name in names]``, shared with forked workers for a large root when
        :attr:`LoadConfig.workers` allows (:func:`tooldir._internal.forkpool.fork_map`)."""
        cfg = self.config
        processes = forkpool.processes_for(len(names), cfg.workers, cfg.parallel_min)
        return forkpool.fork_map(names, read, processes=processes, accept=accept, on_result=on_result, plain=_PLAIN)

    def _refresh_entry(self, fd: int, root: RootSpec, state: _Root, name: str, work: _Work) -> None:
        """Re-read one entry directly under an open root, classified as ``list_packages`` does
        (:func:`tooldir.read.discover.root_entry`)."""
        state.listing.pop(name, None)
        try:
            kind = mode_kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            state.entries.discard(name)
            self._set_package(root, state, name, None, work)
            return
        except OSError:
            kind = EntryKind.DIR  # let the package scan report why it cannot be read
        state.entries.add(name)
        candidate: Candidate | None = None
        problem = root_entry(root, name, kind)
        if problem is not None:
            state.listing[name] = diag_entry(problem)
        elif kind is EntryKind.DIR and not is_hidden(name):
            limits = self.config.policy.limits
            scan = scan_package(fd, root, name, limits)
            if scan.diagnostics and all(d.code == DiagnosticCode.MISSING_FILE for d in scan.diagnostics):
                state.entries.discard(name)  # vanished between the stat and the scan
            else:
                candidate = validate_package(scan, self.config.policy)
        self._set_package(root, state, name, candidate, work)

    def _set_package(
        self,
        root: RootSpec,
        state: _Root,
        name: str,
        candidate: Candidate | None,
        work: _Work,
    ) -> None:
        key = (root.path, name)
        old = state.packages.pop(name, None)
        if old is not None:
            self._leave(old.group, key, work)
        if candidate is not None:
            pkg = _package(candidate)
            state.packages[name] = pkg
            self._join(pkg, key, work)

    def _join(self, pkg: _Package, key: PkgKey, work: _Work) -> None:
        self._members.setdefault(pkg.group, set()).add(key)
        if pkg.signed:
            self._signed[key] = pkg
        work.dirty.add(pkg.group)
        work.fresh.append(pkg)

    def _leave(self, group: str, key: PkgKey, work: _Work) -> None:
        self._signed.pop(key, None)
        members = self._members.get(group)
        if members is not None:
            members.discard(key)
            if not members:
                del self._members[group]
        work.dirty.add(group)

    def _replace_root(self, root: RootSpec, prev: _Root | None, new: _Root, work: _Work) -> None:
        path = root.path  # a property that joins strings: once, not once per package
        if prev is not None:
            for name, pkg in prev.packages.items():
                self._leave(pkg.group, (path, name), work)
        for name, pkg in new.packages.items():
            self._join(pkg, (path, name), work)
        self._roots[path] = new

    # -- trust ---------------------------------------------------------------------------------

    def _assess(self, cold: bool, now: datetime, work: _Work) -> None:
        """Assess new packages; re-assess all when the user's trust material changed, and signed
        packages on every build (expiry depends on the time)."""
        cfg = self.config
        state_dir = cfg.state_dir
        allowed = cfg.policy.keys.allowed_signers
        key = (
            _stat_signature(state_dir / APPROVALS),
            _stat_signature(state_dir / HIGH_WATER),
            _stat_signature(os.path.expanduser(allowed) if allowed else None),
        )
        everything = cold or key != self._trust_key
        if everything:
            todo = [p for state in self._roots.values() for p in state.packages.values()]
        else:
            signed = [p for p in self._signed.values() if p.assessment is not None]
            todo = [*work.fresh, *signed] if cfg.signature_check is not None else work.fresh
        if not todo:
            self._trust_key = key
            return
        approvals_sig = key[0]
        if approvals_sig != self._approvals_sig:
            self._approvals = load_approvals(state_dir)
            self._approvals_sig = approvals_sig
        check = (
            cfg.signature_check(cfg.policy, state_dir, now, seen=self._seen, cache=self._trust_cache)
            if cfg.signature_check
            else None
        )
        inputs = TrustInputs(cfg.policy, self._approvals, now, check)
        for pkg in todo:
            verdict = assess(pkg.candidate, inputs)
            if verdict != pkg.assessment:
                pkg.assessment = verdict
                work.dirty.add(pkg.group)
        self._trust_key = key

    def _remember(self) -> tuple[DiagEntry, ...]:
        """Record the signed versions this build verified (rollback high-water marks) and the
        verifications that succeeded, in user state. A mark counts in this loader at once, so a
        rebuild that brings an older version back is a rollback even if the state cannot be
        written; that failure is a warning diagnostic, and the write is retried on every build."""
        if not self._signed:
            return ()
        seen, unwritten = self._seen, self._unwritten
        for pkg in self._signed.values():
            if pkg.assessment is None:
                continue
            for signer, tool, version in signed_versions(pkg.candidate.name, pkg.assessment.trust):
                if seen.get((signer, tool), -1) < version:
                    seen[(signer, tool)] = unwritten[(signer, tool)] = version
        cfg = self.config
        if cfg.read_only:
            return ()
        state_dir = cfg.state_dir
        try:
            if unwritten:
                record_versions(state_dir, [(s, t, v) for (s, t), v in sorted(unwritten.items())])
                unwritten.clear()
                if isinstance(self._trust_key, tuple):
                    # our own write: signed packages are re-assessed on every build anyway, so it
                    # need not make the next build re-assess every unsigned package too
                    self._trust_key = (self._trust_key[0], _stat_signature(state_dir / HIGH_WATER), self._trust_key[2])
            verified = self._trust_cache.verifications.verified_digests()
            fresh = [d for d in verified if d not in self._verified_written]
            if fresh:
                record_verified(state_dir, fresh)
                self._verified_written.update(fresh)
        except (OSError, StateError) as exc:
            why = exc.diagnostics() if isinstance(exc, StateError) else (exc.strerror or str(exc))
            diag = warning(
                DiagnosticCode.STATE_UNWRITABLE,
                f"cannot record the signed versions this load verified in {state_dir}: {why}; "
                "until it can, rollback protection for them holds only in this process",
                path=str(state_dir),
            )
            return (diag_entry(diag),)
        return ()

    # -- resolution ----------------------------------------------------------------------------

    def _ordered(self, keys: Iterable[PkgKey]) -> list[_Package]:
        order = {root.path: i for i, root in enumerate(self.config.roots)}
        ranked = sorted(keys, key=lambda k: (order[k[0]], k[1]))
        return [self._roots[path].packages[name] for path, name in ranked]

    def _assessed(self, pkgs: Iterable[_Package]) -> list[Assessed]:
        out = []
        for pkg in pkgs:
            if pkg.assessment is None:  # never: every package is assessed before resolution
                raise RuntimeError(f"package {pkg.candidate.scan.path} was not assessed")
            out.append(Assessed(pkg.candidate, pkg.assessment))
        return out

    def _resolve_all(self) -> None:
        cfg = self.config
        pkgs = [p for root in cfg.roots for p in self._roots[root.path].packages.values()]
        records = resolve(self._assessed(pkgs), cfg.builtins, cfg.policy)
        builtins = [r for r in records if r.source is Source.BUILTIN]
        tools = [r for r in records if r.source is not Source.BUILTIN]
        self._builtin_entries = tuple(record_entry(r) for r in builtins)
        grouped: dict[str, list[RecordEntry]] = {}
        for pkg, record in zip(pkgs, tools, strict=True):
            grouped.setdefault(pkg.group, []).append(record_entry(record))
        self._groups = {g: tuple(entries) for g, entries in grouped.items()}

    def _resolve_group(self, group: str) -> None:
        members = self._members.get(group)
        if not members:
            self._groups.pop(group, None)
            return
        cfg = self.config
        records = resolve(self._assessed(self._ordered(members)), cfg.builtins, cfg.policy)
        self._groups[group] = tuple(record_entry(r) for r in records if r.source is not Source.BUILTIN)


#: what a worker's results are made of, sent field by field (tooldir._internal.forkpool.dispatch_table)
_PLAIN = (Candidate, PackageScan, Row, PackageFile, Diagnostic)


def _is_candidate(value: object) -> bool:
    return type(value) is Candidate


#: ``[candidate, row]`` of one package read for the content index (a list: the row is dropped
#: once recorded, see ``Loader._read_packages``)
_Read = list[Any]


def _is_read(value: object) -> bool:
    """The shape of a ``_Read`` (checked on what a worker sent)."""
    return (
        type(value) is list
        and len(value) == 2
        and type(value[0]) is Candidate
        and (value[1] is None or type(value[1]) is Row)
    )


def _package(candidate: Candidate) -> _Package:
    contents = candidate.scan.contents
    return _Package(candidate, skeleton(candidate.name), not UNLISTED.isdisjoint(contents))


def make_config(
    *,
    project: str | os.PathLike[str] | None = ".",
    user_dirs: Iterable[str | os.PathLike[str]] | None = None,
    policy: Policy | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    builtins: Iterable[BuiltinSpec] = (),
    policy_file: str | None = None,
    read_only: bool = False,
    index: bool | None = None,
    workers: int = 1,
    policy_overridden: tuple[ManagedOverride, ...] = (),
) -> LoadConfig:
    """What the CLI loads by default: ``policy=None`` means the user's policy file
    (``$XDG_CONFIG_HOME/tooldir/policy.toml``, read as ``tooldir scan`` reads it, under the
    machine's managed policy ``/etc/tooldir/policy.toml`` if there is one; the built-in
    defaults only when there is neither), ``policy_overridden``: the user values the managed
    policy overrode in ``policy`` (reported as ``policy-managed``), ``user_dirs=None`` the user's config dir, ``state_dir=None``
    ``$TOOLDIR_STATE_DIR`` or ``$XDG_STATE_HOME/tooldir``; ``project=None`` means no project
    source. ``policy_file``: where ``policy`` was read from (for diagnostics).
    ``read_only``: inspection only, see :attr:`LoadConfig.read_only`. ``index``: use the content
    index (:attr:`LoadConfig.index`); None means yes unless ``$TOOLDIR_NO_INDEX`` is ``1``.
    ``workers``: processes that may share the reading of a large root (:attr:`LoadConfig.workers`;
    1, the default, never forks).

    Raises:
        StateDirError: ``state_dir`` or ``$TOOLDIR_STATE_DIR`` is a relative path.
        PolicyError: ``policy=None`` and the user's policy file is invalid, or another user's.
        ValueError: ``workers`` is not a positive number.
    """
    if type(workers) is not int or workers < 1:
        raise ValueError(f"make_config(workers={workers!r}): expected a positive number of processes (1: no workers)")
    roots: list[RootSpec] = []
    if user_dirs is None:
        roots.append(user_root_default())
    else:
        roots.extend(user_root(d) for d in user_dirs)
    if project is not None:
        roots.append(project_root(project))
    if policy is None:  # what the CLI reads without --policy
        effective = read_policy()
        policy, policy_file = effective.policy, effective.file if policy_file is None else policy_file
        policy_overridden = effective.overridden
    return LoadConfig(
        roots=tuple(roots),
        policy=policy,
        state_dir=absolute_state_dir(state_dir, setting="state_dir") if state_dir is not None else default_state_dir(),
        builtins=tuple(builtins),
        signature_check=signature_check_factory,
        policy_file=policy_file,
        read_only=read_only,
        index=index_enabled() if index is None else index,
        workers=workers,
        policy_overridden=policy_overridden,
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
    """Load every tool root once and return an immutable snapshot (generation 1), with the
    defaults of :func:`make_config` (the user's policy file, user root and state, as the CLI)."""
    config = make_config(project=project, user_dirs=user_dirs, policy=policy, state_dir=state_dir, builtins=builtins)
    return Loader(config).load(now=now)
