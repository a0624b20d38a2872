"""Approving, revoking, locking, signing and explaining one tool package: what ``tooldir allow |
revoke | lock | sign | verify`` do, as functions a host application calls (the CLI only parses
arguments and prints).

A package is named by its folder path, or by its tool name (= folder name) in the configured
roots. It is read through discovery (no symlinks, bounded) and validated; its trust is judged by
the loader's own trust stage (``LoadConfig.signature_check`` and :func:`tooldir.trust.assess.assess`), so
:func:`explain` gives the verdict a load would give, step by step. Approvals and high-water marks
are user state (``config.state_dir``); nothing else is written but the package's own
``tool.lock`` / ``tool.lock.minisig``.

A package that cannot be handled raises :class:`tooldir.PackageError` with a ``reason``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ._internal.atomic import write_atomic
from .codes import DiagnosticCode
from .errors import DiscoveryError, PackageError
from .model import Diagnostic, Manifest, PackageFile, ServerManifest, Severity, Source, Status, Trust
from .read.discover import RootSpec, scan_one
from .read.validate import Candidate, validate_package
from .signatures import SignatureFormatError
from .snapshot.loader import LoadConfig, project_root
from .state import Approval, load_approvals, record_approval, record_versions, remove_approvals
from .trust.assess import SignatureVerdict, TrustInputs, assess, signed_versions
from .trust.keys import minisign_sign, parse_minisign_secret_key
from .trust.lockfile import LOCK, MINISIG, LockError, compare_files, format_time, parse_lock, render_lock

log = logging.getLogger("tooldir")

__all__ = [
    "LockWritten",
    "PackageRef",
    "SignatureWritten",
    "Verdict",
    "approve",
    "explain",
    "locate",
    "lock",
    "review",
    "revoke",
    "sign",
]


@dataclass(frozen=True, slots=True)
class PackageRef:
    """Where a package is: its root, folder name and path, and how the root was found."""

    root: RootSpec
    name: str
    path: str
    where: str  # for people: "a configured root", "the project root of ...", "outside every tool root ..."


@dataclass(frozen=True, slots=True)
class Verdict:
    """One package judged by the loader's trust stage, with the steps that led there."""

    package: PackageRef
    path: str  # the package folder as discovery read it
    manifest: Manifest | ServerManifest | None  # None: not a valid package (server.json: an MCP server)
    digest: str | None  # None: discovery refused the package
    files: tuple[PackageFile, ...]
    valid: bool
    status: Status  # ACTIVE, PENDING or REJECTED
    trust: Trust
    key: str | None  # identity of the key that signed the lock, trusted or not
    steps: tuple[dict[str, object], ...]  # {"step", "ok" (True/False/None), "detail"}
    diagnostics: tuple[Diagnostic, ...]

    @property
    def tool(self) -> str:
        return self.manifest.name if self.manifest else self.package.name


def _path_ref(target: str | os.PathLike[str], config: LoadConfig, *, must_exist: bool = True) -> PackageRef:
    target = os.fspath(target)
    if must_exist and not os.path.lexists(target):
        raise PackageError(f"{target}: no such tool folder", path=target, reason="not-found")
    absolute = os.path.abspath(target)
    parent, name = os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute)
    for root in config.roots:
        if root.path == parent:
            return PackageRef(root, name, os.path.join(root.path, name), "a configured root")
    parts = Path(parent).parts
    if len(parts) >= 3 and parts[-2:] == (".tooldir", "tools"):
        root = project_root(Path(parent).parent.parent)
        return PackageRef(root, name, os.path.join(root.path, name), f"the project root of {root.anchor}")
    root = RootSpec(Source.PROJECT, parent)
    return PackageRef(root, name, os.path.join(parent, name), "outside every tool root (judged as a project tool)")


def _is_path(target: str) -> bool:
    return os.sep in target or target in (".", "..") or os.path.isdir(target)


def locate(config: LoadConfig, target: str | os.PathLike[str]) -> PackageRef:
    """A package by folder path, or by tool name (= folder name) in ``config.roots``."""
    text = os.fspath(target)
    if isinstance(target, os.PathLike) or _is_path(text):
        return _path_ref(text, config)
    found = [PackageRef(r, text, os.path.join(r.path, text), "a configured root") for r in config.roots]
    found = [p for p in found if os.path.isdir(p.path)]
    if not found:
        roots = ", ".join(r.path for r in config.roots)
        raise PackageError(f"no tool folder named {text!r} in {roots}", path=text, reason="not-found")
    if len(found) > 1:
        paths = ", ".join(p.path for p in found)
        raise PackageError(f"{text!r} exists in several roots; pass the path: {paths}", path=text, reason="ambiguous")
    return found[0]


def _read(package: PackageRef, config: LoadConfig) -> Candidate:
    if not os.path.isdir(package.path) and not os.path.islink(package.path):
        raise PackageError(f"{package.path} is not a tool folder", path=package.path, reason="not-a-package")
    try:
        return validate_package(scan_one(package.root, package.name, config.policy.limits), config.policy)
    except DiscoveryError as exc:
        raise PackageError(exc.message, path=package.path, reason="not-a-package") from None


def _valid(candidate: Candidate, path: str) -> Candidate:
    if candidate.declared is None or candidate.scan.digest is None or not candidate.valid:
        raise PackageError(
            f"{path} is not a valid tool package",
            path=path,
            reason="invalid",
            found=candidate.diagnostics or candidate.scan.diagnostics,
        )
    return candidate


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


# ---------------------------------------------------------------------------------------------
# explain: the loader's trust stage, observed


def _judge(package: PackageRef, config: LoadConfig, now: datetime) -> Verdict:
    candidate = _read(package, config)
    factory = config.signature_check
    check = factory(config.policy, config.state_dir, now, explain=True) if factory is not None else None
    seen: list[SignatureVerdict | None] = []
    observed: Callable[[Candidate], SignatureVerdict | None] | None = None
    if check is not None:
        inner = check

        def observed(c: Candidate) -> SignatureVerdict | None:
            verdict = inner(c)
            seen.append(verdict)
            return verdict

    assessment = assess(candidate, TrustInputs(config.policy, load_approvals(config.state_dir), now, observed))
    signature = seen[-1] if seen else (check(candidate) if check is not None and candidate.valid else None)
    diags = (*candidate.diagnostics, *assessment.diagnostics)
    scan = candidate.scan
    return Verdict(
        package,
        scan.path,
        candidate.declared,
        scan.digest,
        scan.files,
        candidate.valid,
        assessment.status,
        assessment.trust,
        signature.key if signature else None,
        _steps(package, candidate, signature, trust=assessment.trust, diagnostics=diags, config=config),
        diags,
    )


def explain(config: LoadConfig, target: str | os.PathLike[str], *, now: datetime | None = None) -> Verdict:
    """The trust verdict a load would give the package, step by step (``tooldir verify``).

    Like every load, it records the signed version it verified in user state (rollback marks),
    unless ``config.read_only``."""
    verdict = _judge(locate(config, target), config, _now(now))
    if not config.read_only:
        marks = signed_versions(verdict.tool, verdict.trust)
        if marks:
            record_versions(config.state_dir, marks)
    return verdict


def _steps(
    package: PackageRef,
    candidate: Candidate,
    signature: SignatureVerdict | None,
    *,
    trust: Trust,
    diagnostics: tuple[Diagnostic, ...],
    config: LoadConfig,
) -> tuple[dict[str, object], ...]:
    scan, manifest = candidate.scan, candidate.declared
    file = "server.json" if candidate.server is not None else "schema.json"
    policy = config.policy
    steps: list[dict[str, object]] = []

    def add(step: str, ok: bool | None, detail: str) -> None:
        steps.append({"step": step, "ok": ok, "detail": detail})

    source = package.root.source
    add("source", None, f"{source} tool in {package.root.path}, {package.where}")
    if scan.digest is None:
        add("files", False, f"discovery refused the package ({', '.join(sorted({d.code for d in scan.diagnostics}))})")
        return tuple(steps)
    add("files", True, f"{len(scan.files)} regular files read safely; digest {scan.digest}")
    if manifest is None or not candidate.valid:
        codes = ", ".join(sorted({d.code for d in candidate.diagnostics if d.severity is Severity.ERROR}))
        add("manifest", False, f"{file} is invalid ({codes})")
        return tuple(steps)
    add("manifest", True, f"{file} is valid: {manifest.name}, risk {manifest.risk}")
    rules = policy.sources.for_source(source)
    ok_risk = manifest.risk.rank <= rules.max_risk.rank
    add("risk", ok_risk, f"risk {manifest.risk} {'within' if ok_risk else 'above'} the {source} limit {rules.max_risk}")
    if not ok_risk:
        return tuple(steps)
    if not rules.require:
        add("trust", True, f"the {source} source needs no trust under this policy")
        return tuple(steps)
    add("policy", None, f"{source} tools need one of: {', '.join(rules.require)}")
    if "pin" in rules.require:
        pinned = policy.pins.get(manifest.name)
        if pinned is None:
            add("pin", None, f"no pin for {manifest.name}")
        else:
            add("pin", pinned == scan.digest, f"pinned {pinned}" + ("" if pinned == scan.digest else " (differs)"))
    if "signature" in rules.require:
        if signature is None:
            add("signature", None, "no tool.lock and no signature")
        else:
            steps.extend(s.to_json() for s in signature.steps)
    if "approval" in rules.require:
        found = {d.code for d in diagnostics}
        if trust.trusted and trust.method != "approved":
            add("approval", None, f"not needed: trusted as {trust.method}")
        elif trust.method == "approved":
            key = f" (key {trust.signer})" if trust.signer else ""
            add("approval", True, f"approved with this digest{key}")
        elif DiagnosticCode.CHANGED_SINCE_APPROVAL in found:
            add("approval", False, "approved before, but the package changed since")
        elif DiagnosticCode.REVOKED_KEY in found and trust.method == "unverified":
            add("approval", False, "the approval recorded a key that is now revoked")
        else:
            add("approval", None, "not approved ('tooldir allow' records an approval)")
    return tuple(steps)


# ---------------------------------------------------------------------------------------------
# approve / revoke


def review(config: LoadConfig, target: str | os.PathLike[str], *, now: datetime | None = None) -> Verdict:
    """What :func:`approve` would approve: the package judged, refused if it cannot be approved
    (``reason`` ``invalid``, or ``rejected``: a rejection no approval overrides)."""
    verdict = _judge(locate(config, target), config, _now(now))
    if verdict.manifest is None or verdict.digest is None or not verdict.valid:
        raise PackageError(
            f"{verdict.path} is not a valid tool package",
            path=verdict.path,
            reason="invalid",
            found=verdict.diagnostics,
        )
    if verdict.status is Status.REJECTED:
        codes = ", ".join(sorted({d.code for d in verdict.diagnostics if d.severity is Severity.ERROR})) or "rejected"
        raise PackageError(
            f"{verdict.tool} is rejected ({codes}); an approval cannot override that",
            path=verdict.package.path,
            reason="rejected",
            found=verdict.diagnostics,
        )
    return verdict


def approve(
    config: LoadConfig,
    target: str | os.PathLike[str],
    *,
    digest: str | None = None,
    now: datetime | None = None,
    pin_upstream: bool = True,
) -> Approval:
    """Record the user's approval of the package's exact content (path, name, digest, files and
    the key that signed it, if any). ``digest``: approve only if the content is still the one
    reviewed (else ``reason`` ``changed``).

    An MCP server package is then started (now trusted, sandboxed), listed, and its definitions
    and instructions pinned, as ``tooldir allow`` does (:func:`tooldir.upstream.pin_after_approval`);
    ``pin_upstream=False`` approves without starting it (its tools are then pinned at their first
    trusted start). When it cannot be listed, the approval stands, the failure is recorded and
    logged, and its tools are pinned at its first successful start."""
    when = _now(now)
    verdict = review(config, target, now=when)
    manifest = verdict.manifest
    assert manifest is not None and verdict.digest is not None  # noqa: S101 -- review() checked
    if digest is not None and verdict.digest != digest:
        raise PackageError(
            f"{verdict.path} changed since it was reviewed (now {verdict.digest}); nothing approved",
            path=verdict.path,
            reason="changed",
        )
    approval = Approval(
        path=verdict.path,
        name=manifest.name,
        digest=verdict.digest,
        time=format_time(when),
        key=verdict.key,
        files=tuple((f.path, f.sha256) for f in verdict.files),
    )
    record_approval(config.state_dir, approval)
    if pin_upstream and isinstance(manifest, ServerManifest):
        from .errors import ExecutionError
        from .upstream import pin_after_approval

        try:
            pin_after_approval(config, approval.path)
        except ExecutionError as exc:
            log.warning("MCP server %s approved but not pinned: %s: %s", manifest.name, exc.code, exc.message)
    return approval


def revoke(config: LoadConfig, target: str | os.PathLike[str]) -> tuple[Approval, ...]:
    """Withdraw the approvals of a package path, or of every package approved under a tool name;
    returns the approvals removed (none: nothing was recorded)."""
    text = os.fspath(target)
    if isinstance(target, os.PathLike) or os.sep in text or os.path.isdir(text):
        paths = [_path_ref(text, config, must_exist=False).path]
    else:
        paths = [p for p, a in load_approvals(config.state_dir).items() if a.name == text]
    return tuple(remove_approvals(config.state_dir, paths))


# ---------------------------------------------------------------------------------------------
# lock / sign


@dataclass(frozen=True, slots=True)
class LockWritten:
    path: Path  # the tool.lock written
    name: str
    version: int
    expires: datetime | None
    files: tuple[str, ...]  # the files it lists
    stale_signatures: tuple[str, ...]  # signature files that signed the previous lock
    # the package was approved as it was and the new lock changed its content: it is pending until
    # approved again (approval is keyed by the exact content, and tool.lock is part of it)
    approval_outdated: bool = False


@dataclass(frozen=True, slots=True)
class SignatureWritten:
    path: Path  # the tool.lock.minisig written
    key_id: str
    name: str
    version: int


def _valid_at(config: LoadConfig, package_dir: str | os.PathLike[str]) -> Candidate:
    package = _path_ref(package_dir, config)
    return _valid(_read(package, config), package.path)


def lock(
    config: LoadConfig,
    package_dir: str | os.PathLike[str],
    *,
    version: int | None = None,
    expires: datetime | None = None,
    now: datetime | None = None,
) -> LockWritten:
    """Write ``tool.lock`` listing the sha256 of every file. ``version`` None: the previous
    lock's version if the files are unchanged, else previous + 1 (1 for a first lock).

    Raises ``ValueError`` for a negative version or an expiry not in the future."""
    if version is not None and version < 0:
        raise ValueError("version must be a non-negative integer")
    if expires is not None and expires <= _now(now):
        raise ValueError(f"expiry {format_time(expires)} is in the past")
    candidate = _valid_at(config, package_dir)
    assert candidate.declared is not None  # noqa: S101 -- _valid_at checked
    name, scan = candidate.declared.name, candidate.scan
    if version is None:
        previous = None
        if LOCK in scan.contents:
            try:
                previous = parse_lock(scan.contents[LOCK])
            except LockError:
                previous = None
        if previous is None:
            version = 1
        else:
            same = compare_files(previous, scan.files).clean and previous.name == name
            version = previous.version if same else previous.version + 1
    target = Path(scan.path) / LOCK
    text = render_lock(name, version, expires, scan.files)
    approval = load_approvals(config.state_dir).get(scan.path)
    approved_as_was = approval is not None and approval.digest == scan.digest
    write_atomic(target, text, mode=0o644, sync_dir=True)
    stale = tuple(s for s in ("tool.lock.minisig", "tool.lock.sig") if s in scan.contents)
    files = tuple(f.path for f in scan.files if f.path not in (LOCK, *stale))
    outdated = approved_as_was and scan.contents.get(LOCK) != text
    return LockWritten(target, name, version, expires, files, stale, approval_outdated=outdated)


def sign(
    config: LoadConfig, package_dir: str | os.PathLike[str], *, key: str | os.PathLike[str], now: datetime | None = None
) -> SignatureWritten:
    """Sign the package's ``tool.lock`` with the minisign secret key file ``key`` (unencrypted:
    ``tooldir keygen`` or ``minisign -G -W``), writing ``tool.lock.minisig``. The lock must list
    exactly the package's files (``reason`` ``no-lock`` / ``stale-lock`` otherwise).

    Raises ``ConfigError`` when the key file cannot be read or is not such a key."""
    from .errors import ConfigError

    try:
        secret = parse_minisign_secret_key(Path(key).read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"key {os.fspath(key)}: cannot read: {exc}") from None
    except SignatureFormatError as exc:
        raise ConfigError(f"key {os.fspath(key)}: {exc}") from None
    candidate = _valid_at(config, package_dir)
    assert candidate.declared is not None  # noqa: S101 -- _valid_at checked
    scan = candidate.scan
    lock_bytes = scan.contents.get(LOCK)
    if lock_bytes is None:
        raise PackageError(f"no {LOCK} in {scan.path}; run 'tooldir lock' first", path=scan.path, reason="no-lock")
    try:
        parsed = parse_lock(lock_bytes)
    except LockError as exc:
        raise PackageError(
            f"{LOCK} at {exc.pointer or '/'}: {exc.message}", path=scan.path, reason="stale-lock"
        ) from None
    mismatch = compare_files(parsed, scan.files)
    if parsed.name != candidate.declared.name or not mismatch.clean:
        if parsed.name != candidate.declared.name:
            detail = f"names {parsed.name!r}"
        else:
            detail = "; ".join(
                f"{label}: {', '.join(paths)}"
                for label, paths in (
                    ("unlisted", mismatch.unlisted),
                    ("missing", mismatch.missing),
                    ("changed", mismatch.changed),
                )
                if paths
            )
        raise PackageError(f"{LOCK} is stale ({detail}); run 'tooldir lock' again", path=scan.path, reason="stale-lock")
    stamp = int(_now(now).timestamp())
    comment = f"timestamp:{stamp}\tfile:{LOCK}\thashed\ttool:{parsed.name}\tversion:{parsed.version}"
    target = Path(scan.path) / MINISIG
    write_atomic(target, minisign_sign(secret, lock_bytes, comment), mode=0o644, sync_dir=True)
    return SignatureWritten(target, secret.public_key().id_hex, parsed.name, parsed.version)
