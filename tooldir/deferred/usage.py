"""When does a loaded tool go back to deferred? A discounted Beta model of per-turn usage.

For each deferred tool a session has loaded, the evidence "used in a turn" / "idle in a turn" is
kept as a Beta(α, β) whose pseudo-counts decay by ``discount`` every turn (recent turns count more).
The prior is ``prior_strength`` pseudo-turns at the tool's persisted usage rate (or
``default_prior`` without history). With ``p = α / (α + β)``:

- keeping the tool loaded costs its schema tokens on every request: ``keep = schema``;
- deferring it costs, in expectation, one search round trip plus the schema again whenever it is
  needed: ``expected = p · (search_cost + schema)``.

A tool is re-deferred when it has been idle for at least ``min_idle_turns`` and ``expected <
keep``. Pinned tools never re-defer. Usage rates persist across sessions in user state
(``usage.json``) as an exponentially weighted moving average.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import StateError
from ..policy import DeferPolicy
from ..state import read_json, write_json_atomic

USAGE_FILE = "usage.json"


@dataclass(frozen=True, slots=True)
class Usage:
    """The usage evidence of one loaded tool."""

    alpha: float
    beta: float
    idle_turns: int = 0
    turns: int = 0  # turns completed while loaded
    uses: int = 0  # of which the tool was used

    @property
    def p_use(self) -> float:
        return self.alpha / (self.alpha + self.beta)


def start(policy: DeferPolicy, prior: float | None) -> Usage:
    p0 = policy.default_prior if prior is None else min(max(prior, 0.0), 1.0)
    return Usage(alpha=policy.prior_strength * p0, beta=policy.prior_strength * (1.0 - p0))


def end_turn(policy: DeferPolicy, usage: Usage, used: bool) -> Usage:
    g = policy.discount
    return replace(
        usage,
        alpha=g * usage.alpha + (1.0 if used else 0.0),
        beta=g * usage.beta + (0.0 if used else 1.0),
        idle_turns=0 if used else usage.idle_turns + 1,
        turns=usage.turns + 1,
        uses=usage.uses + (1 if used else 0),
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    redefer: bool
    reason: str
    numbers: Mapping[str, float | int]


def judge(policy: DeferPolicy, usage: Usage, schema_tokens: int, *, pinned: bool) -> Verdict:
    """Keep or re-defer, with the numbers that decided it."""
    p = usage.p_use
    keep = schema_tokens
    expected = p * (policy.search_cost_tokens + schema_tokens)
    numbers: dict[str, float | int] = {
        "p_use": round(p, 4),
        "alpha": round(usage.alpha, 4),
        "beta": round(usage.beta, 4),
        "idle_turns": usage.idle_turns,
        "keep_cost_tokens": keep,
        "expected_search_cost_tokens": round(expected, 1),
    }
    if pinned:
        return Verdict(False, "pinned: never re-deferred", numbers)
    if not policy.redefer:
        return Verdict(False, "re-deferral is off in policy", numbers)
    if usage.idle_turns < policy.min_idle_turns:
        return Verdict(False, f"idle {usage.idle_turns} < {policy.min_idle_turns} turns", numbers)
    if expected < keep:
        return Verdict(
            True,
            f"idle {usage.idle_turns} turns; expected re-search cost {expected:.1f} < {keep} tokens to keep it loaded",
            numbers,
        )
    return Verdict(False, f"expected re-search cost {expected:.1f} >= {keep} tokens to keep it loaded", numbers)


# ------------------------------------------------------------------------------------------------
# Persisted priors


def load_priors(state_dir: Path) -> dict[str, float]:
    """Per-tool usage rates from earlier sessions (empty when there is no file yet)."""
    path = state_dir / USAGE_FILE
    raw = read_json(path, {"version": 1, "tools": {}})
    tools = raw.get("tools", {})
    if not isinstance(tools, dict):
        raise StateError("'tools' must be an object", path=str(path))
    out: dict[str, float] = {}
    for name, entry in tools.items():
        p = entry.get("p_use") if isinstance(entry, dict) else None
        if isinstance(p, int | float) and 0.0 <= p <= 1.0:
            out[str(name)] = float(p)
    return out


def save_priors(state_dir: Path, observed: Mapping[str, Usage], policy: DeferPolicy) -> dict[str, Any]:
    """Fold this session's observed usage rates into the persisted priors (EWMA); atomic write."""
    path = state_dir / USAGE_FILE
    raw = read_json(path, {"version": 1, "tools": {}})
    found = raw.get("tools")
    tools: dict[str, Any] = found if isinstance(found, dict) else {}
    lam = policy.usage_ewma
    for name, usage in sorted(observed.items()):
        if usage.turns == 0:
            continue
        rate = usage.uses / usage.turns
        old = tools.get(name, {})
        prev = old.get("p_use") if isinstance(old, dict) else None
        p = rate if not isinstance(prev, int | float) else (1 - lam) * float(prev) + lam * rate
        sessions = (old.get("sessions", 0) if isinstance(old, dict) else 0) + 1
        tools[name] = {"p_use": round(p, 6), "sessions": sessions}
    value = {"version": 1, "tools": tools}
    write_json_atomic(path, value)
    return value
