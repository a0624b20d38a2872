"""Assessed candidates + builtins -> ToolRecords: precedence, collisions, shadowing, reserved and
confusable names. Pure.

Rules (DESIGN §1, §3):
- builtin < user < project. Builtin, guard and policy-reserved names can never be taken
  (``reserved-name``), nor anything that looks like them (``confusable-name``).
- Two packages of one source whose names are equal ignoring case: ``collision``, **both** rejected.
  Two of one source whose names merely look alike: ``confusable-name``, both rejected.
- A live (active or pending) tool of a higher source shadows a same-named one of a lower source,
  unless the policy says that source may not shadow (then the lower one wins). A higher-source tool
  that only looks like a lower-source tool's name is rejected as ``confusable-name``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from ..codes import DiagnosticCode
from ..model import BuiltinSpec, Diagnostic, Source, Status, ToolRecord, error, warning
from ..names import GUARD_TOOLS, is_valid_name, skeleton
from ..policy import Policy
from ..read.validate import Candidate
from ..trust.assess import Assessment, builtin_record


@dataclass(frozen=True, slots=True)
class Assessed:
    candidate: Candidate
    assessment: Assessment


def resolve(assessed: Sequence[Assessed], builtins: Iterable[BuiltinSpec], policy: Policy) -> list[ToolRecord]:
    records: list[ToolRecord] = []
    builtin_names = set()
    for spec in builtins:
        builtin_names.add(spec.name)
        records.append(
            builtin_record(spec, defer_candidate=spec.name not in GUARD_TOOLS and policy.defer.is_deferred(spec.name))
        )
    reserved = builtin_names | GUARD_TOOLS | set(policy.reserved.names)
    reserved_skeletons = {skeleton(n): n for n in reserved}

    tools = [_initial(a, policy) for a in assessed]
    alive = [i for i, t in enumerate(tools) if t.status in (Status.ACTIVE, Status.PENDING)]

    def reject(i: int, diag: Diagnostic) -> None:
        tools[i] = replace(tools[i], status=Status.REJECTED, diagnostics=(*tools[i].diagnostics, diag), grant=None)

    def where(t: ToolRecord) -> dict[str, object]:
        return {"tool": t.name, "source": t.source, "path": t.path}

    # reserved and confusable-with-reserved names
    for i in alive:
        t = tools[i]
        if t.name in reserved:
            reject(
                i,
                error(
                    DiagnosticCode.RESERVED_NAME,
                    f"{t.name!r} is reserved for a builtin or guard tool",
                    pointer="/name",
                    **where(t),
                ),
            )
        elif skeleton(t.name) in reserved_skeletons:
            other = reserved_skeletons[skeleton(t.name)]
            reject(
                i,
                error(
                    DiagnosticCode.CONFUSABLE_NAME,
                    f"{t.name!r} looks like the reserved name {other!r}",
                    pointer="/name",
                    **where(t),
                ),
            )

    # collisions and confusables within one source (never "first wins": all are rejected)
    by_source: dict[Source, list[int]] = defaultdict(list)
    for i in alive:
        if tools[i].status is not Status.REJECTED:
            by_source[tools[i].source].append(i)
    for members in by_source.values():
        groups: dict[str, list[int]] = defaultdict(list)
        for i in members:
            groups[skeleton(tools[i].name)].append(i)
        for group in groups.values():
            if len(group) < 2:
                continue
            folded = {tools[i].name.casefold() for i in group}
            paths = ", ".join(sorted(str(tools[i].path) for i in group))
            for i in group:
                t = tools[i]
                if len(folded) == 1:
                    reject(
                        i,
                        error(
                            DiagnosticCode.COLLISION,
                            f"{len(group)} packages of the {t.source} source are named {t.name!r}: {paths}",
                            **where(t),
                        ),
                    )
                else:
                    others = sorted({tools[j].name for j in group} - {t.name})
                    reject(
                        i,
                        error(
                            DiagnosticCode.CONFUSABLE_NAME,
                            f"{t.name!r} looks like {', '.join(map(repr, others))} in the same source: {paths}",
                            **where(t),
                        ),
                    )

    # across sources: shadowing and confusables
    live = [i for i in alive if tools[i].status is not Status.REJECTED]
    by_skeleton: dict[str, list[int]] = defaultdict(list)
    for i in live:
        by_skeleton[skeleton(tools[i].name)].append(i)
    for group in by_skeleton.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda i: tools[i].source.rank)
        low, high = group[0], group[-1]  # at most one per source survives the step above
        lo, hi = tools[low], tools[high]
        if lo.name != hi.name:
            reject(
                high,
                error(
                    DiagnosticCode.CONFUSABLE_NAME,
                    f"{hi.name!r} looks like the {lo.source} tool {lo.name!r} ({lo.path})",
                    pointer="/name",
                    **where(hi),
                ),
            )
            continue
        if policy.sources.for_source(hi.source).may_shadow:
            winner, loser = high, low
        else:
            winner, loser = low, high
        w, lz = tools[winner], tools[loser]
        tools[loser] = replace(
            lz,
            status=Status.SHADOWED,
            grant=None,
            shadowed_by=w.path,
            diagnostics=(
                *lz.diagnostics,
                warning(
                    DiagnosticCode.SHADOWED,
                    f"{lz.source} tool {lz.name!r} at {lz.path} is shadowed by the {w.source} tool at {w.path}",
                    **where(lz),
                ),
            ),
        )
        tools[winner] = replace(
            w,
            diagnostics=(
                *w.diagnostics,
                warning(
                    DiagnosticCode.SHADOWED,
                    f"{w.source} tool {w.name!r} at {w.path} shadows the {lz.source} tool at {lz.path}",
                    **where(w),
                ),
            ),
        )
    return records + tools


def _initial(a: Assessed, policy: Policy) -> ToolRecord:
    c = a.candidate
    manifest = c.manifest
    declared = c.declared
    name = c.name
    status, grant = a.assessment.status, a.assessment.grant
    if not is_valid_name(name):
        status, grant = Status.REJECTED, None
    return ToolRecord(
        name=name,
        source=c.scan.source,
        path=c.scan.path,
        status=status,
        trust=a.assessment.trust,
        digest=c.scan.digest,
        risk=declared.risk if declared is not None else None,
        defer_candidate=name not in GUARD_TOOLS and policy.defer.is_deferred(name),
        manifest=manifest,
        files=c.scan.files,
        diagnostics=c.diagnostics + a.assessment.diagnostics,
        grant=grant if status is Status.ACTIVE else None,
        server=c.server,
    )
