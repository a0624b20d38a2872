"""Permission checks: may this tool run now? Pure functions of the policy and the request.

A check is anything with ``check(request) -> None`` that raises :class:`PermissionDeniedError`
saying why. Checks compose with :class:`AllOf` (every one must pass) and :class:`AnyOf` (one must
pass); an **empty composite denies**, so a forgotten rule list never means "allow everything".

:func:`from_policy` builds the default chain from ``[permissions]``:

- ``deny`` globs win over everything (``permission-denied``, reason names the rule);
- the name must match an ``allow`` glob;
- ``mode = "plan"`` lets only ``read`` and ``external-read`` tools run;
- ``max_risk`` (optional) caps the risk of any tool, builtins included.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .errors import PermissionDeniedError
from .model import Risk, Source
from .policy import PermissionsPolicy

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
    return PermissionDeniedError(message, code="permission-denied")


@dataclass(frozen=True, slots=True)
class DenyNames:
    patterns: tuple[str, ...]

    def check(self, request: PermissionRequest) -> None:
        for pattern in self.patterns:
            if fnmatch.fnmatchcase(request.tool, pattern):
                raise deny(f"{request.tool!r} matches the policy deny rule {pattern!r}")


@dataclass(frozen=True, slots=True)
class AllowNames:
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
