"""Permission checks: may this tool run now? Pure functions of the policy and the request.

A check is anything with ``check(request) -> None`` that raises :class:`PermissionDeniedError`
saying why. Checks compose with :class:`AllOf` (every one must pass) and :class:`AnyOf` (one must
pass); an **empty composite denies**, so a forgotten rule list never means "allow everything".

:func:`from_policy` builds the default chain from ``[permissions]``:

- ``deny`` globs win over everything (``permission-denied``, reason names the rule). A deny glob
  matches the name as written, its case-folded form and its confusable :func:`~.names.skeleton`
  (the glob normalised the same way), so ``Delete_tag``, ``DELETE_REPO`` and ``de1ete_issue`` are
  all caught by ``deny = ["*delete*"]``;
- the name must match an ``allow`` glob **exactly** (case-sensitive, no look-alike folding).

Fail closed: a deny rule is read broadly (one more spelling refused is a nuisance; one spelling
let through is a hole), an allow rule narrowly (it grants only what it literally says; widening it
by case or look-alikes would let ``De1ete_all`` in through ``allow = ["delete_*"]``).

- ``mode = "plan"`` lets only ``read`` and ``external-read`` tools run;
- ``max_risk`` (optional) caps the risk of any tool, builtins included.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ..codes import CallErrorCode
from ..errors import PermissionDeniedError
from ..model import Risk, Source
from ..names import skeleton, skeleton_pattern
from ..policy import PermissionsPolicy

PLAN_RISKS = frozenset({Risk.READ, Risk.EXTERNAL_READ})


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    tool: str
    source: Source
    risk: Risk


class PermissionCheck(Protocol):
    def check(self, request: PermissionRequest) -> None:
        """Return if allowed; raise PermissionDeniedError (code ``permission-denied``) if not."""
        ...


def deny(message: str) -> PermissionDeniedError:
    return PermissionDeniedError(message, code=CallErrorCode.PERMISSION_DENIED)


@dataclass(frozen=True, slots=True)
class DenyNames:
    """Deny rules, matched on the name, its case-folded form and its confusable skeleton."""

    patterns: tuple[str, ...]
    _forms: tuple[tuple[str, str, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        forms = tuple((p, p.casefold(), skeleton_pattern(p)) for p in self.patterns)
        object.__setattr__(self, "_forms", forms)

    def check(self, request: PermissionRequest) -> None:
        hit = deny_match(request.tool, self._forms)
        if hit is not None:
            pattern, how = hit
            raise deny(f"{request.tool!r} matches the policy deny rule {pattern!r}{how}")


def deny_match(name: str, forms: Iterable[tuple[str, str, str]]) -> tuple[str, str] | None:
    """The first deny rule (pattern, casefolded pattern, skeleton pattern) that ``name`` matches,
    with how it matched ('' exactly, or the normalised form), or None."""
    folded: str | None = None
    skel: str | None = None
    for pattern, folded_pattern, skeleton_glob in forms:
        if fnmatch.fnmatchcase(name, pattern):
            return pattern, ""
        if folded is None:
            folded, skel = name.casefold(), skeleton(name)
        if fnmatch.fnmatchcase(folded, folded_pattern):
            return pattern, f" (compared case-insensitively as {folded!r})"
        if fnmatch.fnmatchcase(skel or "", skeleton_glob):
            return pattern, f" (compared as the look-alike skeleton {skel!r})"
    return None


@dataclass(frozen=True, slots=True)
class AllowNames:
    """Allow rules: exact, case-sensitive globs (never widened; see the module docstring)."""

    patterns: tuple[str, ...]

    def check(self, request: PermissionRequest) -> None:
        if not any(fnmatch.fnmatchcase(request.tool, p) for p in self.patterns):
            allowed = ", ".join(repr(p) for p in self.patterns) or "none"
            raise deny(f"{request.tool!r} matches no policy allow rule (allow: {allowed})")


@dataclass(frozen=True, slots=True)
class PlanMode:
    def check(self, request: PermissionRequest) -> None:
        if request.risk not in PLAN_RISKS:
            raise deny(
                f"plan mode (permissions.mode) runs only read and external-read tools; {request.tool!r} has risk "
                f"{request.risk}"
            )


@dataclass(frozen=True, slots=True)
class MaxRisk:
    limit: Risk

    def check(self, request: PermissionRequest) -> None:
        if request.risk.rank > self.limit.rank:
            raise deny(
                f"{request.tool!r} has risk {request.risk}, above the policy limit permissions.max_risk = "
                f'"{self.limit}"'
            )


class AllOf:
    """Every check must pass. Empty: denies."""

    __slots__ = ("checks",)

    def __init__(self, checks: Iterable[PermissionCheck]) -> None:
        self.checks = tuple(checks)

    def check(self, request: PermissionRequest) -> None:
        if not self.checks:
            raise deny("no permission rule applies (an empty rule set denies)")
        for c in self.checks:
            c.check(request)


class AnyOf:
    """One check must pass; the denial lists why each failed. Empty: denies."""

    __slots__ = ("checks",)

    def __init__(self, checks: Iterable[PermissionCheck]) -> None:
        self.checks = tuple(checks)

    def check(self, request: PermissionRequest) -> None:
        reasons: list[str] = []
        for c in self.checks:
            try:
                c.check(request)
            except PermissionDeniedError as exc:
                reasons.append(exc.message)
            else:
                return
        raise deny("; ".join(reasons) if reasons else "no permission rule applies (an empty rule set denies)")


def from_policy(policy: PermissionsPolicy) -> AllOf:
    checks: list[PermissionCheck] = [DenyNames(policy.deny), AllowNames(policy.allow)]
    if policy.mode == "plan":
        checks.append(PlanMode())
    if policy.max_risk is not None:
        checks.append(MaxRisk(policy.max_risk))
    return AllOf(checks)
