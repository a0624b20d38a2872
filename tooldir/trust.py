"""Candidate + user-side trust material -> Assessment. Pure: no I/O; ``now`` is passed in.

Trust is keyed by content, never by name: an approval records the package digest, a pin names a
digest, a signature covers a lock listing every file. Whatever the project contains, nothing in it
can grant trust.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from .model import Diagnostic, Risk, Severity, Status, Trust, error, warning
from .policy import Policy
from .state import Approval
from .validate import Candidate


@dataclass(frozen=True, slots=True)
class SignatureVerdict:
    """What signature verification concluded about one package."""

    trusted: bool
    signer: str | None = None
    version: int | None = None
    diagnostics: tuple[Diagnostic, ...] = ()


#: Verifies a package's lock and signature files; supplied by the signature stage.
SignatureCheck = Callable[[Candidate], SignatureVerdict | None]


@dataclass(frozen=True, slots=True)
class TrustInputs:
    """Everything trust depends on from the user's side, captured once per load."""

    policy: Policy
    approvals: Mapping[str, Approval]
    now: datetime
    check_signature: SignatureCheck | None = None


@dataclass(frozen=True, slots=True)
class Assessment:
    status: Status  # ACTIVE, PENDING or REJECTED
    trust: Trust
    diagnostics: tuple[Diagnostic, ...]


UNVERIFIED = Trust(False, "unverified")


def assess(candidate: Candidate, inputs: TrustInputs) -> Assessment:
    scan = candidate.scan
    manifest = candidate.manifest
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
                    "risk-not-allowed",
                    f"risk {manifest.risk} is above the {scan.source} source's limit {rules.max_risk}",
                    pointer="/risk",
                    **where,
                ),
            ),
        )
    if not rules.require:
        return Assessment(Status.ACTIVE, Trust(True, "none-required"), ())

    diags: list[Diagnostic] = []
    if "pin" in rules.require:
        pinned = inputs.policy.pins.get(manifest.name)
        if pinned == scan.digest:
            return Assessment(Status.ACTIVE, Trust(True, "pinned"), ())
        if pinned is not None:
            diags.append(
                warning("hash-mismatch", f"package digest {scan.digest} differs from the pinned {pinned}", **where)
            )
    if "signature" in rules.require and inputs.check_signature is not None:
        verdict = inputs.check_signature(candidate)
        if verdict is not None:
            if verdict.trusted:
                return Assessment(
                    Status.ACTIVE,
                    Trust(True, f"signed:{verdict.signer}", verdict.signer, verdict.version),
                    verdict.diagnostics,
                )
            diags.extend(verdict.diagnostics)
            if any(d.severity is Severity.ERROR for d in verdict.diagnostics):
                # a bad, replayed, revoked, rolled-back or expired signature is an attack, not a pending review
                return Assessment(Status.REJECTED, UNVERIFIED, tuple(diags))
    if "approval" in rules.require:
        approval = inputs.approvals.get(scan.path)
        if approval is not None and approval.digest == scan.digest and approval.name == manifest.name:
            return Assessment(Status.ACTIVE, Trust(True, "approved", approval.key), tuple(diags))
        if approval is not None:
            diags.append(
                warning(
                    "changed-since-approval",
                    f"package changed since it was approved on {approval.time} "
                    f"(approved {approval.digest}, now {scan.digest}); review and run 'tooldir allow' again",
                    **where,
                )
            )
            return Assessment(Status.PENDING, UNVERIFIED, tuple(diags))
    needed = " or ".join(rules.require)
    diags.append(warning("not-approved", f"{scan.source} tool needs {needed} before it can run", **where))
    return Assessment(Status.PENDING, UNVERIFIED, tuple(diags))


def risk_allowed(risk: Risk, ceiling: Risk) -> bool:
    return risk.rank <= ceiling.rank
