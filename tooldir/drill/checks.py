"""The checking half of a drill: outcome (codes, statuses, calls, audit verify, storm), canary,
control tools, user state and the audit record of each call. Pure functions of what the run saw."""

from __future__ import annotations

import hashlib
import os
import re
import resource
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model import is_runnable
from ..snapshot.store import Snapshot
from . import execute as ex
from .plant import DRILL_ENV_PREFIX, Arena, ArenaEscapeError, Planted
from .storm import StormReport
from .watch import WatchReport

if TYPE_CHECKING:
    from ..errors import ConfigError
    from . import CallSpec, Scenario


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # "runnable" | "planted" | "outcome" | "canary" | "control" | "state" | "audit" | "arena" ...
    passed: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.name, "passed": self.passed, "message": self.message}


_KINDS = {
    "file": stat.S_ISREG,
    "dir": stat.S_ISDIR,
    "symlink": stat.S_ISLNK,
    "fifo": stat.S_ISFIFO,
    "socket": stat.S_ISSOCK,
    "device": stat.S_ISCHR,
}


def _kind_of(mode: int) -> str:
    return next((kind for kind, test in _KINDS.items() if test(mode)), "something else")


def planted_problem(item: Planted, arena: Arena) -> str | None:
    """Why the arena does not hold ``item`` as planted, or None (read without following a link
    on the way: :attr:`Arena.fs`)."""
    base = arena.base
    where = str(item.path.relative_to(base))
    try:
        st = arena.fs.lstat(item.path, "the planted check")
    except ArenaEscapeError as exc:
        return f"{where} is not in the arena as planted ({exc.message})"
    except OSError as exc:
        return f"{where} is missing ({exc.strerror})"
    if st is None:
        return f"{where} is missing (No such file or directory)"
    if item.kind and not _KINDS[item.kind](st.st_mode):
        return f"{where} should be a {item.kind} but is a {_kind_of(st.st_mode)}"
    if item.mode is not None and stat.S_IMODE(st.st_mode) != item.mode:
        return f"{where} has mode {stat.S_IMODE(st.st_mode):04o}, planted {item.mode:04o}"
    if item.uid is not None and st.st_uid != item.uid:
        return f"{where} is owned by uid {st.st_uid}, planted {item.uid}"
    if item.gid is not None and st.st_gid != item.gid:
        return f"{where} has group gid {st.st_gid}, planted {item.gid}"
    if item.size is not None and st.st_size != item.size:
        return f"{where} holds {st.st_size} bytes, planted {item.size}"
    if item.target is not None and os.readlink(item.path) != item.target:
        return f"{where} points to {os.readlink(item.path)!r}, planted {item.target!r}"
    inside = item.target is not None and os.path.isabs(item.target) and base in Path(item.target).parents
    if inside and item.target is not None and not os.path.lexists(item.target):  # into the arena: must be planted
        return f"{where} points to {Path(item.target).relative_to(base)}, which nothing planted"
    if item.same_as is not None:
        other = item.same_as.lstat()
        if (st.st_dev, st.st_ino) != (other.st_dev, other.st_ino):
            return f"{where} is not a hard link of {item.same_as.relative_to(base)}"
    if (
        item.sha256 is not None
        and hashlib.sha256(arena.fs.read(item.path, "the planted check")).hexdigest() != item.sha256
    ):
        return f"{where} does not hold the planted content"
    if item.entries is not None:
        with os.scandir(item.path) as entries:
            count = sum(1 for _ in entries)
        if count < item.entries:
            return f"{where} holds {count} entries, planted {item.entries}"
    return None


def check_planted(arena: Arena, planted: Mapping[Path, Planted]) -> Check:
    """Everything the scenario's tree/ and plants put into the arena is there, as planted."""
    problems = [p for item in planted.values() if (p := planted_problem(item, arena)) is not None]
    if not planted:
        return Check("planted", True, "the scenario plants nothing but its control tools")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return Check("planted", False, "the hostile tree was not planted: " + "; ".join(problems[:3]) + more)
    return Check("planted", True, f"{len(planted)} planted entries in place")


# a load's bound is CPU time; the wall clock only backstops it at this many times the bound (a load
# blocked without using the CPU, or starved of it for that long)
LOAD_WALL_BACKSTOP = 10


@dataclass(frozen=True, slots=True)
class LoadTime:
    cpu: float  # seconds of CPU time: this process and the children it reaped
    wall: float


def cpu_seconds() -> float:
    """CPU time so far of this process (all threads) and of the children it has reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def check_outcome(
    scenario: Scenario,
    arena: Arena,
    snapshot: Snapshot,
    elapsed: LoadTime,
    outcomes: Sequence[ex.CallOutcome],
    *,
    storm: StormReport | None = None,
    connections: int = 0,
    watch: WatchReport | None = None,
) -> Check:
    expect = scenario.expect
    problems: list[str] = []
    if connections:
        problems.append(f"the scenario's 127.0.0.1 listener accepted {connections} connection(s)")
    for want in expect.diagnostics:
        if not any(
            d.code == want.code
            and (want.tool is None or d.tool == want.tool)
            and (want.severity is None or str(d.severity) == want.severity)
            and (want.source is None or str(d.source) == want.source)
            and (want.pointer is None or d.pointer == want.pointer)
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
        ok, line, reason, lines = ex.verify_audit(arena.state)
        verdict = expect.audit_verify
        if ok != verdict.ok or (verdict.broken_line is not None and line != verdict.broken_line):
            problems.append(
                f"audit verify reported ok={ok} line={line} ({reason}); "
                f"expected ok={verdict.ok} line={verdict.broken_line}"
            )
        if verdict.lines is not None and lines != verdict.lines:
            problems.append(f"audit verify found {lines} intact lines; expected {verdict.lines}")
    if elapsed.cpu > expect.max_seconds:
        problems.append(f"the load took {elapsed.cpu:.1f} s of CPU time; the bound is {expect.max_seconds} s")
    elif elapsed.wall > LOAD_WALL_BACKSTOP * expect.max_seconds:
        problems.append(
            f"the load took {elapsed.wall:.1f} s (wall clock); the bound is {LOAD_WALL_BACKSTOP * expect.max_seconds:g} s"
        )
    if problems:
        return Check("outcome", False, "; ".join(problems))
    return Check("outcome", True, f"as expected ({elapsed.cpu:.2f} s of CPU time, {elapsed.wall:.2f} s)")


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
        shown = o.shown()
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
        if spec.network is not None:
            problem = network_problem(arena, spec, o.network)
            if problem:
                problems.append(f"call {spec.tool}: {problem}")
        if spec.served is not None and o.served != spec.served:
            problems.append(
                f"call {spec.tool}: the scenario's HTTP server got {o.served} request(s), not {spec.served}"
            )
        if spec.max_live_runs is not None and o.most_live > spec.max_live_runs:
            problems.append(
                f"call {spec.tool}: {o.most_live} runs were live at once; the bound is {spec.max_live_runs}"
            )
        elif spec.max_live_runs is not None and o.most_live == 0:
            problems.append(f"call {spec.tool}: no run with the marker was ever seen (the attack never ran)")
    return problems


def network_problem(arena: Arena, spec: CallSpec, network: Any) -> str | None:
    """What differs between the connections a call's run made through the egress proxy
    (``CallResult.network`` or its audit line's ``network``) and ``spec.network``; None if nothing."""
    assert spec.network is not None  # noqa: S101 - only asked for calls that expect connections
    expected = [(arena.substitute(e.host), arena.substitute(e.port), e.refused) for e in spec.network]
    if not isinstance(network, (list, tuple)):
        return f"no connections were reported (network = {network!r}); expected {len(expected)}"
    got = []
    for c in network:
        refused = c.get("refused") if isinstance(c, Mapping) else None
        host = c.get("host") if isinstance(c, Mapping) else None
        port = c.get("port") if isinstance(c, Mapping) else None
        got.append((str(host), str(port), refused.split(":", 1)[0] if isinstance(refused, str) else None))
    if got != expected:
        return f"the proxy reported connections {got}, expected {expected}"
    return None


SECRET_NAME = re.compile(r"(?i)secret|token|passw|credential|private|api_?key|access_?key|auth|session|cookie")
"""Names of the caller's environment variables whose values must never reach a drill's tool."""


def caller_secrets(caller: Mapping[str, str]) -> dict[str, str]:
    """The caller's secret-looking variables (name matches :data:`SECRET_NAME`, value of 8+ chars),
    except the drill's own token (the ``{secret}`` every scenario already checks)."""
    return {
        name: value
        for name, value in caller.items()
        if SECRET_NAME.search(name) and len(value) >= 8 and not name.startswith(DRILL_ENV_PREFIX)
    }


def check_isolation(caller: Mapping[str, str], outcomes: Sequence[ex.CallOutcome], taken_back: Sequence[str]) -> Check:
    """drill:isolation: nothing of the caller's environment reached a tool's output, and the
    scenario's policy did not loosen the drill's ceiling (what it tried is named)."""
    secrets = caller_secrets(caller)
    leaked = sorted({name for o in outcomes for name, value in secrets.items() if value in o.shown()})
    ceiling = f"; the drill's ceiling took back {', '.join(taken_back)}" if taken_back else ""
    if leaked:
        return Check("isolation", False, f"the caller's {', '.join(leaked)} reached a tool's output{ceiling}")
    names = f" ({', '.join(sorted(secrets))})" if secrets else ""
    return Check(
        "isolation", True, f"{len(secrets)} secret-named variable(s) of the caller{names} reached no tool{ceiling}"
    )


SECRETS_FILE = "home/.config/tooldir/secrets.toml"
"""The arena's user secrets file (DESIGN §11): when a scenario has one, the ``secrets`` check runs."""


def check_secrets(arena: Arena, outcomes: Sequence[ex.CallOutcome], report: str) -> Check | None:
    """secrets:leak: no value of the arena's secrets file -- raw, base64 or URL-encoded -- in any
    call's output or error text, in any file of the state dir (audit log, approvals, index, scan
    memo, verified copies) or in the drill's report. None when the scenario has no secrets file."""
    from ..run.secrets import SecretsFileError, encoded_forms, parse_secrets

    path = arena.resolve(SECRETS_FILE)
    if path.is_symlink() or not path.is_file():
        return None
    try:
        entries = parse_secrets(path.read_text("utf-8"), path=SECRETS_FILE)
    except (SecretsFileError, UnicodeDecodeError, OSError):
        return None  # a scenario about a broken secrets file: its outcome check says what was refused
    forms = {n: encoded_forms(e.value) for n, e in sorted(entries.items()) if e.value is not None and len(e.value) >= 8}
    forms.setdefault("the drill's token", encoded_forms(arena.secret))  # what a command secret would print
    leaks: list[str] = []
    for o in outcomes:
        shown = o.shown()
        leaks += [
            f"the call of {o.spec.tool[:80]} showed {n}" for n, fs in forms.items() if any(f in shown for f in fs)
        ]
    for file in sorted(arena.state.rglob("*")) if arena.state.is_dir() else []:
        if file.is_file() and not file.is_symlink():
            data = file.read_bytes()
            rel = file.relative_to(arena.state)
            leaks += [
                f"the state file {rel} holds {n}" for n, fs in forms.items() if any(f.encode() in data for f in fs)
            ]
    leaks += [f"the drill report holds {n}" for n, fs in forms.items() if any(f in report for f in fs)]
    if leaks:
        return Check("secrets", False, "; ".join(sorted(set(leaks))))
    return Check(
        "secrets",
        True,
        f"{len(forms)} secret value(s) ({', '.join(forms)}) of {SECRETS_FILE} in no call's output, state file or report",
    )


def check_audit(arena: Arena, outcomes: Sequence[ex.CallOutcome]) -> Check:
    lines = {line.get("id"): line for line in ex.audit_lines(arena.state)}
    problems = []
    for o in outcomes:
        if not o.spec.audit:
            continue
        tool = o.spec.name
        if tool == "defer_execute_tool" and isinstance(o.spec.input.get("name"), str):
            tool = o.spec.input["name"]  # the guard tool forwards the call; the log names the real tool
        line = lines.get(o.audit_id) if o.audit_id else None
        if line is None:
            problems.append(f"no audit line for the call of {o.spec.tool} (audit_id {o.audit_id})")
        elif not _logs_tool(line, tool) or line.get("error_code") != o.code:
            problems.append(
                f"audit line {o.audit_id} says tool={line.get('tool')} error={line.get('error_code')}, "
                f"the call was {tool[:80]} {o.code}"
            )
        elif o.spec.network is not None and (problem := network_problem(arena, o.spec, line.get("network"))):
            problems.append(f"audit line {o.audit_id}: {problem}")
    if problems:
        return Check("audit", False, "; ".join(problems))
    return Check("audit", True, f"{sum(o.spec.audit for o in outcomes)} call(s) recorded in the audit log")


def _logs_tool(line: dict[str, Any], tool: str) -> bool:
    """The line names ``tool``: as it is, or (capped or repaired) by the sha256 of the full name."""
    import hashlib

    if line.get("tool") == tool:
        return True
    return line.get("tool_sha256") == "sha256:" + hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()


def check_refusal(scenario: Scenario, arena: Arena, refusal: ArenaEscapeError | None) -> Check:
    """drill:arena-escape: the runner refused exactly the plant or step ``expect.refused`` names,
    saying what it must (``refusal`` None: it refused nothing)."""
    want = scenario.expect.refused
    if want is None:  # the caller only asks for drills that expect a refusal
        raise ValueError("check_refusal needs a scenario with expect.refused")
    if refusal is None:
        return Check(
            "outcome", False, f"expected the runner to refuse {want.at}, but it carried out every plant and step"
        )
    if refusal.where.split(" ", 1)[0] != want.at:
        return Check("outcome", False, f"expected the runner to refuse {want.at}, but it refused {refusal.message}")
    missing = [text for text in want.message_contains if arena.substitute(text) not in refusal.message]
    if missing:
        return Check("outcome", False, f"the refusal does not say {', '.join(map(repr, missing))}: {refusal.message}")
    return Check("outcome", True, f"refused as expected: {refusal.message}")


def check_load_error(scenario: Scenario, arena: Arena, error: ConfigError | None) -> Check:
    """trust:foreign-files: the load was refused with exactly the error ``expect.load_error``
    names, saying what it must (``error`` None: it loaded)."""
    want = scenario.expect.load_error
    if want is None:  # the caller only asks for drills that expect a refused load
        raise ValueError("check_load_error needs a scenario with expect.load_error")
    if error is None:
        return Check("outcome", False, f"expected the load to be refused with {want.error}, but it loaded")
    shown = error.diagnostics()
    if type(error).__name__ != want.error:
        return Check("outcome", False, f"expected {want.error}, but the load raised {type(error).__name__}: {shown}")
    missing = [text for text in want.message_contains if arena.substitute(text) not in shown]
    if missing:
        return Check("outcome", False, f"the error does not say {', '.join(map(repr, missing))}: {shown}")
    return Check("outcome", True, f"load refused as expected: {shown}")


def tree_state(top: Path) -> dict[str, str]:
    """(type and mode, owner, content hash or link text) of ``top`` and everything below it,
    links not followed."""
    result: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        for path in [here] if here == top else []:
            result["."] = _entry_state(path)
        for name in dirnames + filenames:
            result[str((here / name).relative_to(top))] = _entry_state(here / name)
    return result


def _entry_state(path: Path) -> str:
    st = path.lstat()
    digest = ""
    if stat.S_ISREG(st.st_mode):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    elif stat.S_ISLNK(st.st_mode):
        digest = os.readlink(path)
    return f"{st.st_mode:o}:{st.st_uid}:{st.st_gid}:{digest}"


def check_beyond(before: Mapping[str, str], after: Mapping[str, str]) -> Check:
    """drill:arena-escape: ``{beyond}``, the world outside the arena, is as the drill found it."""
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        more = f" (and {len(changed) - 5} more)" if len(changed) > 5 else ""
        return Check("arena", False, f"files outside the arena changed: {', '.join(changed[:5])}{more}")
    return Check("arena", True, f"nothing outside the arena changed ({len(before)} entries)")


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
        if record is None or not is_runnable(record):
            statuses = sorted({str(t.status) for t in snapshot.records(name)}) or ["missing"]
            bad.append(f"{name} is {'/'.join(statuses)}")
    if bad:
        return Check("control", False, "good tools stopped loading: " + "; ".join(bad))
    return Check("control", True, f"{', '.join(names)} still active")


def check_state(
    before: dict[str, str],
    after: dict[str, str],
    marks: tuple[str, Mapping[tuple[str, str], int] | None, Mapping[tuple[str, str], int] | None] | None = None,
) -> Check:
    """User-side files are unchanged, except that loads may raise signature high-water marks
    (``marks``: the fingerprint key of versions.json, the marks before and after): every load
    records the signed versions it verified. A mark that was lowered or removed is a change."""
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if marks is not None:
        key, old, new = marks
        if key in changed and old is not None and new is not None and all(new.get(k, -1) >= v for k, v in old.items()):
            changed.remove(key)
    if changed:
        return Check("state", False, f"user-side files changed during the load: {', '.join(changed[:5])}")
    return Check("state", True, f"{len(before)} user-side entries unchanged")


def observed(scenario: Scenario, snapshot: Snapshot) -> str:
    controls = set(scenario.control.user) | set(scenario.control.project)
    parts = []
    for t in snapshot.tools:
        if t.name in controls and is_runnable(t):
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
