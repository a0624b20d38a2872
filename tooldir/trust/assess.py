"""Candidate + user-side trust material -> Assessment. Pure: no I/O; ``now``, the key material
(policy keys and the parsed allowed_signers lines) and the :class:`TrustCache` are passed in. No
module state: what is remembered between builds lives in the ``TrustCache`` a ``Loader`` owns.

Trust is keyed by content, never by name: an approval records the package digest, a pin names a
digest, a signature covers a lock listing every file. Whatever the project contains, nothing in it
can grant trust.

Signature verification (:func:`verify_package`) walks these steps and records each one, so
``tooldir verify`` can explain a verdict: signature files parse -> signer not revoked -> key trusted
-> signature (and minisign trusted comment) valid -> lock parses -> lock names this tool (replay)
-> files equal the lock -> not expired -> not older than the highest version seen (rollback).
A failure that indicates an attack is an error (the tool is rejected); an unknown key or a package
without a signature is only "not trusted by signature" (pending if approval is acceptable).
:func:`tooldir.snapshot.loader.signature_check_factory` is the edge that reads the allowed_signers file, the
high-water marks and earlier verifications once per load, and the loader records the versions each
load verified (rollback protection).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TypeVar, cast

from ..codes import DiagnosticCode
from ..model import (
    BuiltinSpec,
    Diagnostic,
    Grant,
    PackageFile,
    Severity,
    Source,
    Status,
    ToolRecord,
    Trust,
    _issue_seal,
    error,
    is_runnable,
    warning,
)
from ..policy import Policy
from ..read.validate import Candidate
from ..signatures import (
    NAMESPACE,
    AllowedSigner,
    MinisignPublicKey,
    SignatureFormatError,
    VerificationCache,
    key_ident,
    parse_minisig,
    parse_minisign_public_key,
    parse_sshsig,
    verify_minisign,
    verify_sshsig,
)
from ..state import Approval, HighWater
from .lockfile import LOCK, MINISIG, SSHSIG, LockError, compare_files, format_time, parse_lock


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a signature verification, for people (``tooldir verify``)."""

    name: str
    ok: bool | None  # None: informational / not applicable
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"step": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class SignatureVerdict:
    """What signature verification concluded about one package."""

    trusted: bool
    signer: str | None = None  # identity of the trusted key: minisign:<ID> | ssh:SHA256:...
    version: int | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    label: str | None = None  # for people: SSH principal or minisign key id
    key: str | None = None  # identity of the key that signed, even if it is not trusted
    steps: tuple[Step, ...] = ()
    signers: tuple[str, ...] = ()  # every trusted key whose signature verified


#: Verifies a package's lock and signature files; supplied by the signature stage.
SignatureCheck = Callable[[Candidate], SignatureVerdict | None]


@dataclass(frozen=True, slots=True)
class Keyring:
    """Trusted and revoked keys from the user's policy (and allowed_signers file)."""

    minisign: Mapping[bytes, MinisignPublicKey] = field(default_factory=dict)  # key id -> key
    ssh: tuple[AllowedSigner, ...] = ()
    revoked: frozenset[str] = frozenset()  # identities
    problems: tuple[str, ...] = ()  # unreadable allowed_signers, malformed lines
    verified: frozenset[bytes] = frozenset()  # verifications that succeeded before (user state)


def revoked_idents(entries: tuple[str, ...]) -> frozenset[str]:
    """Identities of the policy's revocation entries (the policy validated them)."""
    out = set()
    for entry in entries:
        try:
            out.add(key_ident(entry))
        except SignatureFormatError:
            continue
    return frozenset(out)


AllowedSigners = tuple[tuple[AllowedSigner, ...], tuple[str, ...]]  # (signers, problems)


def keyring_from_policy(
    policy: Policy, verified: frozenset[bytes] = frozenset(), allowed_signers: AllowedSigners = ((), ())
) -> Keyring:
    """The keyring of a policy. ``allowed_signers``: the parsed lines of the policy's
    allowed_signers file and its problems, read by the caller (:func:`tooldir.snapshot.loader.read_keyring`);
    without them no SSH key is trusted."""
    keys = {}
    for line in policy.keys.minisign:
        key = parse_minisign_public_key(line)
        keys[key.key_id] = key
    ssh, problems = allowed_signers
    return Keyring(keys, ssh, revoked_idents(policy.keys.revoked), problems, verified)


def signed_versions(name: str, trust: Trust) -> tuple[tuple[str, str, int], ...]:
    """The (signer, tool, version) high-water marks a verdict establishes: one per key whose
    signature verified, for a tool trusted by signature; none otherwise."""
    if not trust.trusted or trust.version is None or not trust.signer:
        return ()
    return tuple((signer, name, trust.version) for signer in dict.fromkeys((trust.signer, *trust.signers)))


def with_marks(marks: HighWater, seen: Mapping[tuple[str, str], int]) -> HighWater:
    """``marks`` raised by ``seen`` (never lowered): what a process verified itself counts even
    when it could not be written to user state."""
    if not seen:
        return marks
    merged = dict(marks)
    for key, version in seen.items():
        if merged.get(key, -1) < version:
            merged[key] = version
    return merged


@dataclass(frozen=True, slots=True)
class TrustInputs:
    """Everything trust depends on from the user's side, captured once per load."""

    policy: Policy
    approvals: Mapping[str, Approval]
    now: datetime
    check_signature: SignatureCheck | None = None
    #: identities of the policy's revocation entries, derived once per load
    revoked: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "revoked", revoked_idents(self.policy.keys.revoked))


@dataclass(frozen=True, slots=True)
class Assessment:
    status: Status  # ACTIVE, PENDING or REJECTED
    trust: Trust
    diagnostics: tuple[Diagnostic, ...]
    #: ACTIVE only: this stage's Grant for exactly the assessed package (what lets resolve make an
    #: active record); an Assessment made anywhere else has none, so its tool can never run.
    grant: Grant | None = None


ADOPTED_MARKER = "adopted.json"
"""The file ``tooldir adopt`` writes in a package it made from a client's entry: such a package needs
approval even in the user's own tool folder."""
UNVERIFIED = Trust(False, "unverified")
_NONE_REQUIRED = Trust(True, "none-required")
_BUILTIN = Trust(True, "builtin")
T = TypeVar("T")

#: The only holder of the seal that makes a Grant (taken once, when this module is imported).
_SEAL = _issue_seal()


_ACTIVE = Status.ACTIVE


def _active(candidate: Candidate, trust: Trust, diagnostics: tuple[Diagnostic, ...] = ()) -> Assessment:
    scan = candidate.scan
    return Assessment(
        _ACTIVE, trust, diagnostics, Grant(candidate.name, scan.source, scan.digest, trust.method, seal=_SEAL)
    )


def builtin_record(spec: BuiltinSpec, *, defer_candidate: bool) -> ToolRecord:
    """The snapshot record of a tool registered in Python by the host: the one place a builtin's
    record (and its Grant) is made, for the resolver, the registry and the session alike."""
    grant = Grant(spec.name, Source.BUILTIN, None, _BUILTIN.method, seal=_SEAL)
    return ToolRecord(
        name=spec.name,
        source=Source.BUILTIN,
        path=None,
        status=Status.ACTIVE,
        trust=_BUILTIN,
        digest=None,
        risk=spec.risk,
        defer_candidate=defer_candidate,
        manifest=None,
        grant=grant,
    )


def assess(candidate: Candidate, inputs: TrustInputs) -> Assessment:
    scan = candidate.scan
    manifest = candidate.declared  # schema.json, or server.json of an MCP server package
    if manifest is None or not candidate.valid or scan.digest is None:
        return Assessment(Status.REJECTED, UNVERIFIED, ())
    where = {"tool": manifest.name, "source": scan.source, "path": scan.path}
    rules = inputs.policy.sources.for_source(scan.source)
    if manifest.risk.rank > rules.max_risk.rank:
        return Assessment(
            Status.REJECTED,
            UNVERIFIED,
            (
                error(
                    DiagnosticCode.RISK_NOT_ALLOWED,
                    f"risk {manifest.risk} is above the {scan.source} source's limit {rules.max_risk}; to allow it, "
                    f'set sources.{scan.source}.max_risk = "{manifest.risk}" in your policy (a weakening, reported '
                    "as policy-weakened)",
                    pointer="/risk",
                    **where,
                ),
            ),
        )
    require = rules.require
    if scan.source is Source.USER and any(f.path == ADOPTED_MARKER for f in scan.files):
        # written by `tooldir adopt` from a client's configuration: someone else's code, fetched for
        # you, so it waits for your approval (`tooldir allow`) even in your own tool folder
        require = ("approval",)
    if not require:
        return _active(candidate, _NONE_REQUIRED)

    diags: list[Diagnostic] = []
    if "pin" in require:
        pinned = inputs.policy.pins.get(manifest.name)
        if pinned == scan.digest:
            return _active(candidate, Trust(True, "pinned"))
        if pinned is not None:
            diags.append(
                warning(
                    DiagnosticCode.HASH_MISMATCH,
                    f"package digest {scan.digest} differs from the pinned {pinned}",
                    **where,
                )
            )
    if "signature" in require and inputs.check_signature is not None:
        verdict = inputs.check_signature(candidate)
        if verdict is not None:
            if verdict.trusted:
                signed = Trust(
                    True, f"signed:{verdict.label or verdict.signer}", verdict.signer, verdict.version, verdict.signers
                )
                return _active(candidate, signed, verdict.diagnostics)
            diags.extend(verdict.diagnostics)
            if any(d.severity is Severity.ERROR for d in verdict.diagnostics):
                # a bad, replayed, revoked, rolled-back or expired signature is an attack, not a pending review
                return Assessment(Status.REJECTED, UNVERIFIED, tuple(diags))
    if "approval" in require:
        approval = inputs.approvals.get(scan.path)
        if approval is not None and approval.key and approval.key in inputs.revoked:
            # an approval given to a package signed by a key that is now revoked no longer counts
            diags.append(
                error(
                    DiagnosticCode.REVOKED_KEY,
                    f"the approval of {approval.time} recorded signing key {approval.key}, which is revoked",
                    **where,
                )
            )
            return Assessment(Status.REJECTED, UNVERIFIED, tuple(diags))
        if approval is not None and approval.digest == scan.digest and approval.name == manifest.name:
            return _active(candidate, Trust(True, "approved", approval.key), tuple(diags))
        if approval is not None:
            diags.append(
                warning(
                    DiagnosticCode.CHANGED_SINCE_APPROVAL,
                    f"package changed since it was approved on {approval.time} "
                    f"({describe_changes(approval.files, scan.files)}; approved {approval.digest}, now {scan.digest}); "
                    "review and run 'tooldir allow' again",
                    **where,
                )
            )
            return Assessment(Status.PENDING, UNVERIFIED, tuple(diags))
    needed = " or ".join(require)
    diags.append(warning(DiagnosticCode.NOT_APPROVED, f"{scan.source} tool needs {needed} before it can run", **where))
    return Assessment(Status.PENDING, UNVERIFIED, tuple(diags))


def assess_upstream(candidate: Candidate, package: ToolRecord, pinned: str | None) -> Assessment:
    """An upstream tool of an MCP server package (DESIGN §10), ``candidate`` made from its listed
    definition (``scan.digest`` = the definition's digest). Active only when its package is
    runnable (trusted, exactly as listed) and the definition is the one pinned for it (``pinned``);
    otherwise pending with ``definition-new`` / ``definition-changed``."""
    scan = candidate.scan
    where = {"tool": candidate.name, "source": scan.source, "path": scan.path}
    if not candidate.valid or scan.digest is None:
        return Assessment(Status.REJECTED, UNVERIFIED, ())
    if not is_runnable(package) or package.server is None:
        diag = warning(DiagnosticCode.NOT_APPROVED, f"its MCP server package {package.name!r} is not trusted", **where)
        return Assessment(Status.PENDING, UNVERIFIED, (diag,))
    if pinned is None:
        diag = warning(
            DiagnosticCode.DEFINITION_NEW,
            f"the server offers a tool that was not there when it was approved ({scan.digest}); review it with "
            f"'tooldir show {candidate.name}' and run 'tooldir allow {package.name}' to approve it",
            **where,
        )
        return Assessment(Status.PENDING, UNVERIFIED, (diag,))
    if pinned != scan.digest:
        diag = warning(
            DiagnosticCode.DEFINITION_CHANGED,
            f"the tool's definition changed since it was approved (pinned {pinned}, now {scan.digest}); "
            f"'tooldir show {candidate.name}' shows the change, 'tooldir allow {package.name}' approves it",
            **where,
        )
        return Assessment(Status.PENDING, UNVERIFIED, (diag,))
    return _active(candidate, Trust(True, package.trust.method, package.trust.signer))


# ---------------------------------------------------------------------------------------------
# approvals: what changed


def changed_files(approved: tuple[tuple[str, str], ...], files: tuple[PackageFile, ...]) -> dict[str, list[str]]:
    """{"changed": [...], "added": [...], "removed": [...]} between an approval's file list and now."""
    before = dict(approved)
    now = {f.path: f.sha256 for f in files}
    return {
        "changed": sorted(p for p in before.keys() & now.keys() if before[p] != now[p]),
        "added": sorted(now.keys() - before.keys()),
        "removed": sorted(before.keys() - now.keys()),
    }


def describe_changes(approved: tuple[tuple[str, str], ...], files: tuple[PackageFile, ...]) -> str:
    if not approved:
        return "the approval has no file list"
    parts = [f"{kind}: {', '.join(paths)}" for kind, paths in changed_files(approved, files).items() if paths]
    return "; ".join(parts) or "only file modes changed"


# ---------------------------------------------------------------------------------------------
# signatures


@dataclass(slots=True)
class _Run:
    """Accumulates steps and diagnostics of one package verification."""

    candidate: Candidate
    explain: bool = False  # record steps (tooldir verify); off on the load path
    steps: list[Step] = field(default_factory=list)
    diags: list[Diagnostic] = field(default_factory=list)

    def step(self, name: str, ok: bool | None, detail: str | Callable[[], str]) -> None:
        """Record a step; ``detail`` may be a callable so the load path never formats it."""
        if self.explain:
            self.steps.append(Step(name, ok, detail() if callable(detail) else detail))

    def diag(
        self, severity: Severity, code: DiagnosticCode, file: str, message: str, pointer: str | None = None
    ) -> None:
        scan = self.candidate.scan
        path = os.path.join(scan.path, file) if file else scan.path
        self.diags.append(Diagnostic(severity, code, message, self.candidate.name, scan.source, path, pointer))

    def fail(self, step: str, code: DiagnosticCode, file: str, message: str, pointer: str | None = None) -> None:
        self.step(step, False, f"{code}: {message}")
        self.diag(Severity.ERROR, code, file, message, pointer)

    def doubt(self, step: str, code: DiagnosticCode, file: str, message: str) -> None:
        self.step(step, False, f"{code}: {message}")
        self.diag(Severity.WARNING, code, file, message)

    def verdict(
        self,
        *,
        trusted: bool,
        signer: str | None = None,
        version: int | None = None,
        label: str | None = None,
        key: str | None = None,
        signers: tuple[str, ...] = (),
    ) -> SignatureVerdict:
        diags, steps = tuple(self.diags), tuple(self.steps)
        return SignatureVerdict(trusted, signer, version, diags, label, key, steps, signers)


_MEMO_MAX = 1 << 16


class TrustCache:
    """What the trust stage remembers between builds, owned by one ``Loader``: parsed signature
    and lock files by content, and signature verification results. Two loaders (two policies, two
    keyrings) never share one, so nothing one of them verified can count for the other."""

    def __init__(self) -> None:
        self._parsed: dict[Callable[[bytes], object], dict[bytes, object]] = {}
        self.verifications = VerificationCache()

    def parse(self, parse: Callable[[bytes], T], data: bytes) -> T:
        """``parse(data)`` remembered by content: every build re-assesses every signed package, and
        the bytes of unchanged packages are the same objects (their hash is cached), so a rebuild
        parses nothing. Parse errors (ValueError subclasses) are remembered and re-raised."""
        memo = self._parsed.setdefault(parse, {})
        found = memo.get(data)
        if found is None:
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            try:
                found = parse(data)
            except ValueError as exc:
                found = exc
            memo[data] = found
        if isinstance(found, ValueError):
            raise found.with_traceback(None)  # do not grow the remembered exception's traceback
        return cast(T, found)

    def clear(self) -> None:
        """Forget every parse and verification result (benchmarks, tests)."""
        self._parsed.clear()
        self.verifications.clear()


@dataclass(frozen=True, slots=True)
class _Signed:
    ident: str  # identity of the trusted key
    label: str


def _check_minisig(
    run: _Run, data: bytes, lock: bytes, keyring: Keyring, cache: TrustCache
) -> tuple[_Signed | None, str | None]:
    try:
        sig = cache.parse(parse_minisig, data)
    except SignatureFormatError as exc:
        run.fail("minisign", DiagnosticCode.BAD_SIGNATURE, MINISIG, f"malformed {MINISIG}: {exc}")
        return None, None
    ident = sig.key_ident
    run.step("minisign", True, lambda: f"{MINISIG} parses; signed by key {ident}")
    if ident in keyring.revoked:
        run.fail("minisign key", DiagnosticCode.REVOKED_KEY, MINISIG, f"signed by revoked key {ident}")
        return None, ident
    key = keyring.minisign.get(sig.key_id)
    if key is None:
        run.doubt(
            "minisign key", DiagnosticCode.UNTRUSTED_KEY, MINISIG, f"signed by {ident}, which is not in keys.minisign"
        )
        return None, ident
    run.step("minisign key", True, lambda: f"{ident} is a trusted key (keys.minisign)")
    problem = verify_minisign(sig, key, lock, keyring.verified, cache.verifications)
    if problem:
        run.fail("minisign signature", DiagnosticCode.BAD_SIGNATURE, MINISIG, problem)
        return None, ident
    run.step(
        "minisign signature",
        True,
        lambda: (
            "signature and trusted comment are valid "
            f"(trusted comment: {sig.trusted_comment.decode('utf-8', 'replace')})"
        ),
    )
    return _Signed(ident, f"minisign:{key.id_hex}"), ident


def _check_sshsig(
    run: _Run, data: bytes, lock: bytes, keyring: Keyring, now: datetime, *, cache: TrustCache
) -> tuple[_Signed | None, str | None]:
    try:
        sig = cache.parse(parse_sshsig, data)
    except SignatureFormatError as exc:
        run.fail("ssh", DiagnosticCode.BAD_SIGNATURE, SSHSIG, f"malformed {SSHSIG}: {exc}")
        return None, None
    ident = sig.key_ident
    run.step("ssh", True, lambda: f"{SSHSIG} parses; {sig.key_type} key {sig.fingerprint}, namespace {sig.namespace!r}")
    if ident in keyring.revoked:
        run.fail("ssh key", DiagnosticCode.REVOKED_KEY, SSHSIG, f"signed by revoked key {sig.fingerprint}")
        return None, ident
    problem = verify_sshsig(sig, lock, keyring.verified, cache.verifications)
    if problem:
        run.fail("ssh signature", DiagnosticCode.BAD_SIGNATURE, SSHSIG, problem)
        return None, ident
    if sig.namespace != NAMESPACE:
        # replay: a valid signature made for another purpose (git, file, ...)
        run.fail(
            "ssh signature",
            DiagnosticCode.BAD_SIGNATURE,
            SSHSIG,
            f"signature is for namespace {sig.namespace!r}, not {NAMESPACE!r}",
        )
        return None, ident
    run.step("ssh signature", True, lambda: f"signature is valid for namespace {NAMESPACE!r}")
    reasons = []
    for signer in keyring.ssh:
        if signer.key_blob != sig.public_key:
            continue
        if not signer.allows_namespace(NAMESPACE):
            reasons.append(f"allowed_signers line {signer.line} does not allow namespace {NAMESPACE!r}")
            continue
        window = signer.valid_at(now)
        if window:
            reasons.append(window)
            continue
        principal = ",".join(signer.principals)
        run.step(
            "ssh key",
            True,
            f"{sig.fingerprint} is allowed for {principal} (allowed_signers line {signer.line})",
        )
        return _Signed(ident, principal), ident
    why = "; ".join(reasons) or "the key is not in the allowed_signers file"
    run.doubt("ssh key", DiagnosticCode.UNTRUSTED_KEY, SSHSIG, f"signed by {sig.fingerprint}: {why}")
    for problem in keyring.problems:
        run.diag(Severity.WARNING, DiagnosticCode.INVALID_KEY, "", problem)
    return None, ident


def verify_package(
    candidate: Candidate,
    *,
    keyring: Keyring,
    marks: HighWater,
    now: datetime,
    explain: bool = False,
    cache: TrustCache | None = None,
) -> SignatureVerdict | None:
    """Verify a package's lock and signatures. None when it has no signature and no lock.
    ``explain`` records every step in the verdict (for ``tooldir verify``); ``cache``: the
    caller's :class:`TrustCache` (none: nothing is remembered beyond this call)."""
    contents = candidate.scan.contents
    lock_bytes, mini, ssh = contents.get(LOCK), contents.get(MINISIG), contents.get(SSHSIG)
    if lock_bytes is None and mini is None and ssh is None:
        return None
    run = _Run(candidate, explain)
    cache = cache if cache is not None else TrustCache()
    if mini is None and ssh is None:
        run.step("signature", None, f"{LOCK} is present but not signed ({MINISIG} or {SSHSIG})")
        return run.verdict(trusted=False)
    if lock_bytes is None:
        run.doubt("lock", DiagnosticCode.MISSING_FILE, LOCK, f"a signature is present but {LOCK} is missing")
        return run.verdict(trusted=False)
    signed: list[_Signed] = []
    key: str | None = None
    if mini is not None:
        ok, ident = _check_minisig(run, mini, lock_bytes, keyring, cache)
        key = key or ident
        signed += [ok] if ok else []
    if ssh is not None:
        ok, ident = _check_sshsig(run, ssh, lock_bytes, keyring, now, cache=cache)
        key = key or ident
        signed += [ok] if ok else []
    if any(d.severity is Severity.ERROR for d in run.diags) or not signed:
        return run.verdict(trusted=False, key=key)
    return _check_lock(run, lock_bytes, signed, marks, now, cache=cache)


def _check_lock(
    run: _Run, lock_bytes: bytes, signed: list[_Signed], marks: HighWater, now: datetime, *, cache: TrustCache
) -> SignatureVerdict:
    first = signed[0]
    untrusted = partial(run.verdict, trusted=False, key=first.ident)
    try:
        lock = cache.parse(parse_lock, lock_bytes)
    except LockError as exc:
        run.fail(
            "lock", DiagnosticCode.INVALID_LOCK, LOCK, f"{LOCK} is signed but malformed: {exc.message}", exc.pointer
        )
        return untrusted()
    run.step("lock", True, lambda: f"{LOCK} parses: {lock.name} version {lock.version}, {len(lock.files)} files")
    name = run.candidate.name
    if lock.name != name:
        # replay: a lock signed for another tool
        run.fail(
            "lock name",
            DiagnosticCode.BAD_SIGNATURE,
            LOCK,
            f"the lock is signed for tool {lock.name!r}, not {name!r}",
            "/name",
        )
        return untrusted()
    run.step("lock name", True, lambda: f"the lock names this tool ({name})")
    mismatch = compare_files(lock, run.candidate.scan.files)
    for path in mismatch.unlisted:
        run.fail("files", DiagnosticCode.UNLISTED_FILE, path, f"{path} is not listed in the signed {LOCK}")
    for path in mismatch.missing:
        run.fail("files", DiagnosticCode.MISSING_FILE, path, f"{path} is listed in the signed {LOCK} but missing")
    for path in mismatch.changed:
        run.fail("files", DiagnosticCode.HASH_MISMATCH, path, f"{path} differs from the hash in the signed {LOCK}")
    if not mismatch.clean:
        return untrusted()
    run.step("files", True, lambda: f"every file matches the lock ({len(lock.files)} files)")
    if lock.expires is not None and lock.expired(now):
        run.fail("expiry", DiagnosticCode.EXPIRED, LOCK, f"the lock expired at {format_time(lock.expires)}", "/expires")
        return untrusted()
    run.step(
        "expiry", True, lambda: "no expiry" if lock.expires is None else f"valid until {format_time(lock.expires)}"
    )
    for s in signed:
        seen = marks.get((s.ident, lock.name))
        if seen is not None and lock.version < seen:
            run.fail(
                "rollback", DiagnosticCode.ROLLBACK, LOCK, f"version {lock.version} is older than version {seen} seen from {s.label}",
                "/version",
            )  # fmt: skip
            return untrusted()
    run.step("rollback", True, lambda: f"version {lock.version} is not older than any version seen from this signer")
    # a high-water mark per signer: dropping one of two signatures must not reopen older versions
    signers = tuple(dict.fromkeys(s.ident for s in signed))
    return run.verdict(
        trusted=True, signer=first.ident, version=lock.version, label=first.label, key=first.ident, signers=signers
    )
