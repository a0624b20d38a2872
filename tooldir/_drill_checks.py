"""The checking half of a drill: outcome (codes, statuses, calls, audit verify, storm), canary,
control tools, user state and the audit record of each call. Pure functions of what the run saw."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _drill_exec as ex
from ._drill_plant import Arena
from ._drill_storm import StormReport
from ._drill_watch import WatchReport
from .model import Status
from .snapshot import Snapshot

if TYPE_CHECKING:
    from .drill import Scenario


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # "runnable" | "outcome" | "canary" | "control" | "state" | "audit"
    passed: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.name, "passed": self.passed, "message": self.message}


def check_outcome(
    scenario: Scenario,
    arena: Arena,
    snapshot: Snapshot,
    elapsed: float,
    outcomes: Sequence[ex.CallOutcome],
    *,
    storm: StormReport | None = None,
    watch: WatchReport | None = None,
) -> Check:
    expect = scenario.expect
    problems: list[str] = []
    for want in expect.diagnostics:
        if not any(
            d.code == want.code
            and (want.tool is None or d.tool == want.tool)
            and (want.severity is None or str(d.severity) == want.severity)
            and (want.source is None or str(d.source) == want.source)
            and all(arena.substitute(text) in d.message for text in want.message_contains)
            for d in snapshot.diagnostics
        ):
            problems.append(f"missing diagnostic {want.describe()}")
    for key, want_status in expect.status.items():
        source, _, name = key.rpartition(":")
        records = [t for t in snapshot.tools if t.name == name and (not source or str(t.source) == source)]
        if want_status == "absent":
            if records:
                problems.append(f"{key} should be absent but is {', '.join(str(t.status) for t in records)}")
        elif not records:
            problems.append(f"{key} should be {want_status} but has no record")
        elif any(str(t.status) != want_status for t in records):
            problems.append(f"{key} should be {want_status} but is {', '.join(str(t.status) for t in records)}")
    for text in expect.never_mentioned:
        if any(text in (t.path or "") for t in snapshot.tools) or any(
            text in (d.path or "") or text in d.message for d in snapshot.diagnostics
        ):
            problems.append(f"{text!r} was looked at (it appears in a record or diagnostic)")
    problems.extend(call_problems(arena, outcomes))
    if storm is not None:
        problems.extend(storm.problems)
    if watch is not None:
        problems.extend(watch.problems)
    if expect.audit_verify is not None:
        ok, line, reason = ex.verify_audit(arena.state)
        verdict = expect.audit_verify
        if ok != verdict.ok or (verdict.broken_line is not None and line != verdict.broken_line):
            problems.append(
                f"audit verify reported ok={ok} line={line} ({reason}); "
                f"expected ok={verdict.ok} line={verdict.broken_line}"
            )
    if elapsed > expect.max_seconds:
        problems.append(f"the load took {elapsed:.1f} s; the bound is {expect.max_seconds} s")
    if problems:
        return Check("outcome", False, "; ".join(problems))
    return Check("outcome", True, f"as expected ({elapsed:.2f} s)")


def call_problems(arena: Arena, outcomes: Sequence[ex.CallOutcome]) -> list[str]:
    problems = []
    for o in outcomes:
        spec = o.spec
        if spec.error is None and not o.ok and o.code in spec.may_fail_with:
            pass  # an outcome the threat allows (e.g. refused rather than run)
        elif spec.error is None and not o.ok:
            problems.append(f"call {spec.tool} should succeed but failed with {o.code}: {o.message}")
        elif spec.error is not None and (o.ok or o.code != spec.error):
            got = "ok" if o.ok else f"{o.code}: {o.message}"
            problems.append(f"call {spec.tool} should fail with {spec.error} but got {got}")
        shown = json.dumps(o.content, ensure_ascii=False) + " " + (o.message or "")
        for text in spec.content_includes if o.ok else ():
            if arena.substitute(text) not in shown:
                problems.append(f"call {spec.tool}: output lacks {text!r}")
        for text in spec.message_includes if not o.ok else ():
            if arena.substitute(text) not in (o.message or ""):
                problems.append(f"call {spec.tool}: the refusal does not say {text!r}")
        for text in spec.content_excludes:
            if arena.substitute(text) in shown:
                problems.append(f"call {spec.tool}: output leaks {text!r}")
        if o.leftovers:
            problems.append(f"call {spec.tool}: processes left running: pids {', '.join(o.leftovers)}")
        if o.seconds > spec.max_seconds:
            problems.append(f"call {spec.tool} took {o.seconds:.1f} s; the bound is {spec.max_seconds} s")
        if o.connections:
            problems.append(f"call {spec.tool}: the host loopback listener accepted {o.connections} connection(s)")
    return problems


def check_audit(arena: Arena, outcomes: Sequence[ex.CallOutcome]) -> Check:
    lines = {line.get("id"): line for line in ex.audit_lines(arena.state)}
    problems = []
    for o in outcomes:
        if not o.spec.audit:
            continue
        tool = o.spec.tool
        if tool == "defer_execute_tool" and isinstance(o.spec.input.get("name"), str):
            tool = o.spec.input["name"]  # the guard tool forwards the call; the log names the real tool
        line = lines.get(o.audit_id) if o.audit_id else None
        if line is None:
            problems.append(f"no audit line for the call of {o.spec.tool} (audit_id {o.audit_id})")
        elif line.get("tool") != tool or line.get("error_code") != o.code:
            problems.append(
                f"audit line {o.audit_id} says tool={line.get('tool')} error={line.get('error_code')}, "
                f"the call was {tool} {o.code}"
            )
    if problems:
        return Check("audit", False, "; ".join(problems))
    return Check("audit", True, f"{sum(o.spec.audit for o in outcomes)} call(s) recorded in the audit log")


def check_canary(arena: Arena) -> Check:
    left = sorted(p.name for p in arena.canary_dir.iterdir())
    if left:
        return Check("canary", False, f"hostile code ran: the canary folder holds {', '.join(left)}")
    return Check("canary", True, "no canary was written")


def check_controls(scenario: Scenario, snapshot: Snapshot) -> Check:
    names = (*scenario.control.user, *scenario.control.project)
    bad = []
    for name in names:
        record = snapshot.get(name)
        if record is None or record.status is not Status.ACTIVE:
            statuses = sorted({str(t.status) for t in snapshot.records(name)}) or ["missing"]
            bad.append(f"{name} is {'/'.join(statuses)}")
    if bad:
        return Check("control", False, "good tools stopped loading: " + "; ".join(bad))
    return Check("control", True, f"{', '.join(names)} still active")


def check_state(before: dict[str, str], after: dict[str, str]) -> Check:
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        return Check("state", False, f"user-side files changed during the load: {', '.join(changed[:5])}")
    return Check("state", True, f"{len(before)} user-side entries unchanged")


def observed(scenario: Scenario, snapshot: Snapshot) -> str:
    controls = set(scenario.control.user) | set(scenario.control.project)
    parts = []
    for t in snapshot.tools:
        if t.name in controls and t.status is Status.ACTIVE:
            continue
        codes = sorted({d.code for d in t.diagnostics})
        parts.append(f"{t.source}:{t.name}={t.status}" + (f" [{', '.join(codes)}]" if codes else ""))
    loose: dict[str, set[str]] = {}
    for d in snapshot.diagnostics:
        if not any(d in t.diagnostics for t in snapshot.tools):
            loose.setdefault(f"{d.source or ''}:{d.tool or '(root)'}", set()).add(d.code)
    parts.extend(f"{where} [{', '.join(sorted(codes))}]" for where, codes in sorted(loose.items()))
    if len(parts) > 12:
        parts = [*parts[:6], f"... and {len(parts) - 6} more"]
    return "; ".join(parts) or "nothing loaded"
