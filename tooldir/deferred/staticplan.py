"""The static view of a snapshot under a policy: what it offers, why the rest is unavailable, and
the static deferral plan (:mod:`tooldir.deferred.defer`) a fresh session starts from. Pure.

Its own module so that ``scan``, ``list`` and ``show`` (which only report the plan) do not import
:mod:`tooldir.deferred.session` and with it the registry, the sandbox, the audit log and search (about
0.1 s of a CLI start). :mod:`tooldir.deferred.session` uses and re-exports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import PermissionDeniedError
from ..model import BuiltinSpec, Risk, Source, is_runnable, why_not_runnable
from ..names import GUARD_TOOLS
from ..policy import Policy
from ..run.permissions import PermissionCheck, PermissionRequest, from_policy
from ..snapshot.store import Snapshot
from ..trust.assess import builtin_record
from .catalog import ToolDef, tool_def
from .defer import DeferralPlan, plan_deferral
from .tokens import TokenCounter, default_counter

__all__ = ["View", "initial_plan", "static_view"]


@dataclass(frozen=True, slots=True)
class View:
    """What one snapshot offers this session: definitions, availability, deferral."""

    snapshot_id: str
    defs: Mapping[str, ToolDef]  # available tools (guard tools excluded)
    sources: Mapping[str, Source]
    unavailable: Mapping[str, str]  # name -> reason
    plan: DeferralPlan  # the static plan: where every session over this view starts

    @property
    def deferred(self) -> frozenset[str]:
        return self.plan.deferred


def static_view(
    snapshot: Snapshot,
    policy: Policy,
    builtins: Mapping[str, BuiltinSpec],
    permissions: PermissionCheck,
    counter: TokenCounter,
    *,
    by_bounds: bool = False,
) -> View:
    """What ``snapshot`` offers under ``policy`` before any session state: the definitions, why the
    rest is unavailable, and the static deferral plan of what is offered."""
    defs: dict[str, ToolDef] = {}
    sources: dict[str, Source] = {}
    unavailable: dict[str, str] = {}
    records = dict(snapshot.by_name)
    for name, spec in builtins.items():
        records.setdefault(name, builtin_record(spec, defer_candidate=False))
    for name, record in sorted(records.items()):
        if name in GUARD_TOOLS:
            continue
        if not is_runnable(record):
            unavailable[name] = why_not_runnable(name, record, for_model=True)
            continue
        try:
            permissions.check(PermissionRequest(name, record.source, record.risk or Risk.EXEC))
        except PermissionDeniedError as exc:
            unavailable[name] = f"permission: {exc.message}"
            continue
        d = tool_def(record, builtins.get(name))
        if d is not None:
            defs[name] = d
            sources[name] = record.source
    plan = plan_deferral(defs, policy.defer, counter, by_bounds=by_bounds)
    return View(f"{snapshot.id}/{snapshot.generation}", defs, sources, unavailable, plan)


def initial_plan(
    snapshot: Snapshot,
    *,
    policy: Policy,
    builtins: Iterable[BuiltinSpec] = (),
    counter: TokenCounter | None = None,
    by_bounds: bool = False,
) -> DeferralPlan:
    """The static deferral plan a fresh :class:`Session` over ``snapshot`` with ``policy`` and
    ``builtins`` starts from (``scan``, ``list`` and ``show`` report it). A running session's
    own state (loaded and re-deferred tools) is not in it: see :attr:`Session.deferral_plan`.
    ``by_bounds``: see :func:`tooldir.deferred.defer.plan_deferral` (the same deferred set, often without
    loading the tokenizer; the decision's numbers are then bounds)."""
    specs = {b.name: b for b in builtins if b.name not in GUARD_TOOLS}
    counter = counter or default_counter()
    return static_view(snapshot, policy, specs, from_policy(policy.permissions), counter, by_bounds=by_bounds).plan
