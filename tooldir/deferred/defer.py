"""Which tools are deferred: decided once, here. Pure.

Two halves make one decision:

- :func:`rules_defer` — the ``[defer]`` glob rules for one name (ordered ``Defer``/``NoDefer``;
  any matching ``NoDefer`` wins; ``mode = "off"`` defers nothing; the guard tools ``tool_search``
  and ``defer_execute_tool`` never).
- :func:`plan_deferral` — the **static plan** for the tools one snapshot offers under one policy:
  the rules pick the candidates, and in ``auto`` mode they are deferred only when deferring saves
  more tokens than the compact directory and the guard tools cost (all or none).

The :class:`DeferralPlan` is what every reader agrees on: ``scan``/``list``/``show`` (their
``deferred``), ``catalog``, a fresh :class:`~tooldir.deferred.session.Session`'s first listing, its token
report and ``tooldir serve``'s first ``tools/list``. It is the *starting point* only: what one
session does afterwards (tools ``tool_search`` loaded, idle tools re-deferred by
:mod:`tooldir.deferred.usage`) is that session's own dynamic state and lives in the session.

``ToolRecord.defer_candidate`` in a snapshot is :func:`rules_defer` under the loader's policy (the
loader never counts tokens); the one answer, in every listing and in ``ToolRecord.to_json(plan)``
(``scan --json``), is the plan's :meth:`DeferralPlan.is_deferred`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..policy import DeferPolicy
from .catalog import GUARD_DEFS, ToolDef, directory_entry, directory_text
from .tokenbounds import BOUNDED_ENCODINGS, token_lower_bound, token_upper_bound
from .tokens import TokenCounter, compact_json

__all__ = ["DeferralPlan", "plan_deferral", "rules_defer"]


def rules_defer(policy: DeferPolicy, name: str) -> bool:
    """What the ``[defer]`` rules say for ``name`` (:meth:`DeferPolicy.is_deferred`, the one home of
    the rules): a candidate only; in ``auto`` mode :func:`plan_deferral` also weighs the cost."""
    return policy.is_deferred(name)


@dataclass(frozen=True, slots=True)
class DeferralPlan:
    """The static deferral decision for the tools one snapshot offers under one ``[defer]`` policy.

    ``deferred``: the offered tools that start deferred. ``engaged``: whether rule candidates are
    deferred at all (``on``: yes; ``off``: no; ``auto``: when it saves tokens). ``decision``: the
    numbers behind it (``mode``, ``candidates``, and in auto mode the saving and the reason).
    """

    policy: DeferPolicy
    offered: frozenset[str]
    deferred: frozenset[str]
    engaged: bool
    decision: Mapping[str, Any]

    def is_deferred(self, name: str) -> bool:
        """Whether ``name`` starts deferred. A name this snapshot does not offer (pending,
        rejected, hidden by permissions) gets what the plan would do with it: the rules' verdict
        if candidates are deferred at all."""
        if name in self.offered:
            return name in self.deferred
        return self.engaged and rules_defer(self.policy, name)


def plan_deferral(
    offered: Mapping[str, ToolDef], policy: DeferPolicy, counter: TokenCounter, *, by_bounds: bool = False
) -> DeferralPlan:
    """The one deferral decision for the tools in ``offered`` (name -> definition; no guard tools).

    ``by_bounds``: in ``auto`` mode, first try to decide from exact bounds on the counts
    (:mod:`tooldir.deferred.tokenbounds`), without loading the tokenizer: the same tools are
    deferred, but ``decision`` then holds bounds (``saving_tokens_at_least``,
    ``directory_and_guard_tokens_at_most``) instead of counts. For readers of the deferred set only
    (``scan``, ``list``, ``show``)."""
    wanted = frozenset(n for n in offered if rules_defer(policy, n))
    decision: dict[str, Any] = {"mode": policy.mode, "candidates": len(wanted)}
    if policy.mode == "auto" and wanted and by_bounds and counter.encoding_name in BOUNDED_ENCODINGS:
        bounded = _decide_by_bounds(offered, wanted)
        if bounded is not None:
            decision.update(bounded)
            return DeferralPlan(policy, frozenset(offered), wanted, True, MappingProxyType(decision))
    if policy.mode == "auto" and wanted:

        def tokens(d: ToolDef) -> int:
            return counter.count_json(d.anthropic())

        cost = counter.count(directory_text([directory_entry(offered[n]) for n in sorted(wanted)]))
        cost += sum(tokens(g) for g in GUARD_DEFS)
        full = 0
        for n in sorted(wanted):  # stop counting once deferring clearly pays off
            full += tokens(offered[n])
            if full > 2 * cost:
                break
        decision.update(saving_tokens_at_least=full - cost, directory_and_guard_tokens=cost)
        if full <= cost:
            wanted = frozenset()
            decision["reason"] = "auto: deferring would cost more than it saves"
        else:
            decision["reason"] = "auto: deferring saves more than the search tools cost"
    engaged = policy.mode == "on" or bool(wanted)
    return DeferralPlan(policy, frozenset(offered), wanted, engaged, MappingProxyType(decision))


def _decide_by_bounds(offered: Mapping[str, ToolDef], wanted: frozenset[str]) -> dict[str, Any] | None:
    """The ``auto`` decision "defer" when a lower bound of what the full definitions cost already
    exceeds an upper bound of what the directory and the guard tools cost (then the exact counts
    decide the same), else None: only the exact counts can tell."""
    ordered = sorted(wanted)
    cost = token_upper_bound(directory_text([directory_entry(offered[n]) for n in ordered]))
    cost += sum(token_upper_bound(compact_json(g.anthropic())) for g in GUARD_DEFS)
    full = 0
    for n in ordered:
        full += token_lower_bound(offered[n].anthropic_compact_json())
        if full > cost:
            return {
                "saving_tokens_at_least": full - cost,
                "directory_and_guard_tokens_at_most": cost,
                "reason": "auto: deferring saves more than the search tools cost",
            }
    return None
