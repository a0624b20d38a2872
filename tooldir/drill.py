"""Poisoned-directory drills: plant a hostile tool tree, run tooldir on it, prove nothing bad happened.

A scenario is a folder with ``scenario.toml`` and an optional ``tree/`` (format: fixtures/poisoned/
README.md). :func:`load_scenarios` parses a scenario directory; :func:`run_drill` materialises one
scenario into a fresh temporary directory with an isolated HOME / XDG_CONFIG_HOME / XDG_STATE_HOME,
applies the user's setup and the project's mutations in order, loads exactly as ``tooldir scan``
would from inside the project (default user root, user policy and state), attempts any declared tool
calls, and checks:

- ``outcome``: the expected diagnostic codes, tool statuses or refusal codes were observed;
- ``canary``: no hostile script ran (the canary folder it would write into is still empty);
- ``control``: the scenario's good tools, planted beside the hostile ones, are still active;
- ``state``: the user's home, config and state, and everything outside the project, are byte-for-byte
  unchanged by the load (the audit log excepted: tooldir itself appends to it);
- ``audit``: for execution drills, the audit log recorded each attempted call.

A drill whose machinery does not exist in this build fails with "not runnable yet: <what is
missing>"; it never passes by default.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import _drill_checks as ck
from . import _drill_exec as ex
from ._drill_checks import Check
from ._drill_plant import (
    Arena,
    NotRunnableError,
    ScenarioError,
    UnavailableError,
    apply_plant,
    fingerprint,
    isolated,
    make_arena,
    make_removable,
    write_control,
)
from ._drill_storm import plant_storm, run_storm
from ._drill_watch import run_watch
from .errors import ConfigError
from .model import BuiltinSpec, Risk

SCENARIO_FILE = "scenario.toml"
TREE = "tree"

__all__ = [
    "Check",
    "DrillResult",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "load_scenarios",
    "run_drill",
    "run_drills",
    "select",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


PlantKind = Literal[
    "symlink", "fifo", "socket", "device", "hardlink", "mode", "owner", "file", "big-file", "many-entries", "deep-json"
]


class Plant(_Frozen):
    """Something git cannot store, created at materialisation (see fixtures/poisoned/README.md)."""

    kind: PlantKind
    path: str
    target: str | None = None  # symlink: link text (placeholders allowed); hardlink: arena path of the file
    mode: str | None = None  # octal, e.g. "0777"
    uid: int | None = None
    text: str | None = None
    hex: str | None = None
    size: int | None = Field(default=None, ge=0)
    count: int | None = Field(default=None, ge=1, le=1_000_000)
    entry: Literal["file", "dir"] = "file"
    depth: int | None = Field(default=None, ge=1, le=10_000_000)
    shape: Literal["array", "object"] = "array"
    template: str | None = None  # deep-json: the document, with {deep} where the nesting goes

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Plant:
        need = {
            "symlink": ("target",),
            "hardlink": ("target",),
            "mode": ("mode",),
            "owner": ("uid",),
            "big-file": ("size",),
            "many-entries": ("count",),
            "deep-json": ("depth", "template"),
        }.get(self.kind, ())
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.kind!r} plant needs {', '.join(missing)}")
        if self.kind == "file" and (self.text is None) == (self.hex is None):
            raise ValueError("a 'file' plant needs exactly one of text, hex")
        if self.mode is not None:
            try:
                int(self.mode, 8)
            except ValueError:
                raise ValueError(f"mode {self.mode!r} is not an octal number") from None
        return self


StepKind = Literal[
    "approve",
    "pin",
    "forge-approval",
    "write",
    "remove",
    "copy",
    "replace",
    "corrupt",
    "delete-line",
    "plant",
    "policy",
    "tooldir",
    "sign-ssh",
    "reload",
]

_STEP_NEEDS: dict[str, tuple[str, ...]] = {
    "approve": ("tool",),
    "pin": ("tool",),
    "forge-approval": ("tool", "into"),
    "write": ("path",),
    "remove": ("path",),
    "copy": ("path", "to"),
    "replace": ("path", "old", "text"),
    "corrupt": ("path", "line", "column"),
    "delete-line": ("path", "line"),
    "plant": ("plant",),
    "policy": ("text",),
    "tooldir": (),
    "sign-ssh": ("key", "path"),
    "reload": (),
}


class Step(_Frozen):
    """One ordered action: the user's (approve, policy, tooldir ...) or the attacker's (write, ...)."""

    do: StepKind
    tool: str | None = None  # arena path of a tool package
    path: str | None = None
    to: str | None = None  # copy: destination arena path
    old: str | None = None  # replace: the text to replace (first occurrence)
    text: str | None = None
    hex: str | None = None
    into: str | None = None  # forge-approval: arena folder that receives approvals.json
    plant: Plant | None = None
    args: tuple[str, ...] = ()  # tooldir: the command line after "tooldir" (placeholders allowed)
    exit: int = 0  # tooldir: the expected exit code
    line: int | None = Field(default=None, ge=1)  # corrupt: 1-based line of the character to change
    column: int | None = Field(default=None, ge=1)  # corrupt: 1-based column
    key: str | None = None  # sign-ssh: arena path of the OpenSSH private key
    namespace: str = "tooldir"  # sign-ssh: the SSHSIG namespace

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Step:
        missing = [name for name in _STEP_NEEDS[self.do] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.do!r} step needs {', '.join(missing)}")
        if self.do == "write" and (self.text is None) == (self.hex is None):
            raise ValueError("a 'write' step needs exactly one of text, hex")
        if self.do == "tooldir" and not self.args:
            raise ValueError('a \'tooldir\' step needs args, e.g. ["lock", "project/..."]')
        return self


class CallSpec(_Frozen):
    """One attempt to run a tool through ``Registry.call`` after the load."""

    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    via: Literal["registry", "session"] = "registry"
    """``session``: the model's call inside one conversation (``Session.call``), so guard tools
    (``tool_search``, ``defer_execute_tool``) and the session gate apply."""
    before: tuple[Step, ...] = ()
    """Steps right before this call (e.g. swap a file between verification and execution)."""
    error: str | None = None
    """The expected error code (a refusal or a contained failure); None expects ok."""
    message_includes: tuple[str, ...] = ()
    """Substrings the error message must hold when the call fails (e.g. a hint)."""
    may_fail_with: tuple[str, ...] = ()
    """With ``error`` unset: error codes that are acceptable instead of ok (the threat allows both)."""
    max_seconds: float = Field(default=60.0, gt=0)
    """Bound on the call's wall-clock time (timeouts and caps must hold)."""
    listen: bool = False
    """Open a TCP listener on 127.0.0.1 ({port} in the input) that must receive no connection."""
    content_includes: tuple[str, ...] = ()
    content_excludes: tuple[str, ...] = ()
    """Substrings (placeholders substituted) that must not appear in the content or message."""
    check_processes: bool = False
    """After the call, no process may still carry the drill's {marker} on its command line."""
    audit: bool = True


class Storm(_Frozen):
    """watch:storm: generated packages churned while the watcher rebuilds (see _drill_storm)."""

    packages: int = Field(default=40, ge=1, le=1000)
    changes: int = Field(default=2000, ge=1, le=100_000)
    settle_s: float = Field(default=30.0, gt=0, le=300)


class WatchSpec(_Frozen):
    """watch:exhaust: run the watcher over the arena (see _drill_watch)."""

    max_inotify_watches: int = Field(ge=1)
    """Bound on the inotify watches the running watcher may hold."""
    edit: str | None = None
    """Arena path of a file of ``tool`` that is edited (and restored): the watcher must publish both."""
    tool: str | None = None
    settle_s: float = Field(default=20.0, gt=0, le=300)


class AuditVerify(_Frozen):
    ok: bool
    broken_line: int | None = None


class DiagnosticExpectation(_Frozen):
    code: str
    tool: str | None = None
    severity: Literal["error", "warning", "info"] | None = None
    source: Literal["builtin", "user", "project"] | None = None
    message_contains: tuple[str, ...] = ()
    """Substrings of the message (placeholders such as {project} are substituted)."""

    def describe(self) -> str:
        return self.code + (f"({self.tool})" if self.tool else "")


class Expect(_Frozen):
    diagnostics: tuple[DiagnosticExpectation, ...] = ()
    status: dict[str, Literal["active", "pending", "shadowed", "rejected", "absent"]] = Field(default_factory=dict)
    """``name`` or ``source:name`` -> status; ``absent`` means no record at all."""
    never_mentioned: tuple[str, ...] = ()
    """Substrings that no record path and no diagnostic may contain (e.g. a sibling folder)."""
    max_seconds: float = Field(default=30.0, gt=0)
    audit_verify: AuditVerify | None = None
    """After the calls and the after_calls steps, what ``tooldir.audit.verify`` must report."""


class Controls(_Frozen):
    user: tuple[str, ...] = ()
    project: tuple[str, ...] = ()


class Builtin(_Frozen):
    name: str
    description: str = "A builtin registered by the host application."
    risk: Risk = Risk.READ


class Scenario(_Frozen):
    """One parsed ``scenario.toml``. ``folder`` is where it was read from."""

    threat: str = Field(pattern=r"^[a-z]+:[a-z][a-z-]*$")
    variant: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    plants: str = Field(min_length=1, description="what the scenario plants, for people")
    expected: str = Field(min_length=1, description="the expected outcome, for people")
    requires: tuple[Literal["root", "sandbox"], ...] = ()
    needs: tuple[str, ...] = ()
    """tooldir machinery the drill uses, as "module.attribute" (e.g. "session.Session"); a build
    without it fails the drill as "not runnable yet"."""
    policy: str | None = None  # the user's policy.toml
    builtins: tuple[Builtin, ...] = ()
    control: Controls = Field(default_factory=Controls)
    plant: tuple[Plant, ...] = ()
    steps: tuple[Step, ...] = ()
    after_load: tuple[Step, ...] = ()
    calls: tuple[CallSpec, ...] = ()
    after_calls: tuple[Step, ...] = ()
    storm: Storm | None = None
    watch: WatchSpec | None = None
    expect: Expect = Field(default_factory=Expect)
    folder: str = ""

    @model_validator(mode="after")
    def _has_a_control(self) -> Scenario:
        if not (self.control.user or self.control.project):
            raise ValueError("[control] must name at least one good tool (user or project) that must still load")
        return self

    @property
    def drill_id(self) -> str:
        return self.threat + (f"/{self.variant}" if self.variant else "")

    @property
    def name(self) -> str:
        return Path(self.folder).name


@dataclass(frozen=True, slots=True)
class DrillResult:
    scenario: Scenario
    observed: str
    checks: tuple[Check, ...]
    seconds: float
    unavailable: str | None = None  # a system facility this machine lacks (not a tooldir gap)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.scenario.drill_id,
            "scenario": self.scenario.name,
            "expected": self.scenario.expected,
            "observed": self.observed,
            "passed": self.passed,
            "details": [c.to_json() for c in self.checks],
        }


# ---------------------------------------------------------------------------------------------
# Loading scenarios


def load_scenario(folder: str | os.PathLike[str]) -> Scenario:
    """Parse ``folder/scenario.toml``.

    Raises:
        ScenarioError: missing, not TOML, or not a valid scenario (the message names the key).
    """
    path = Path(folder) / SCENARIO_FILE
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ScenarioError(f"no {SCENARIO_FILE}", path=str(path)) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"cannot read it: {exc}", path=str(path)) from None
    if "folder" in data:
        raise ScenarioError("'folder' is set by the loader, not the file", path=str(path))
    try:
        scenario = Scenario.model_validate({**data, "folder": str(Path(folder))})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise ScenarioError(f"{key}: {first['msg']}", path=str(path)) from None
    tree = Path(folder) / TREE
    if tree.exists() and not tree.is_dir():
        raise ScenarioError(f"{TREE} must be a folder", path=str(tree))
    return scenario


def load_scenarios(directory: str | os.PathLike[str]) -> list[Scenario]:
    """Every scenario folder directly under ``directory`` (folders without scenario.toml are
    skipped), sorted by folder name. Folder names must be unique per drill id.

    Raises:
        ScenarioError: the directory is missing or a scenario is invalid.
    """
    base = Path(directory)
    if not base.is_dir():
        raise ScenarioError("not a directory", path=str(base))
    scenarios = [load_scenario(p) for p in sorted(base.iterdir()) if (p / SCENARIO_FILE).is_file()]
    seen: dict[str, str] = {}
    for s in scenarios:
        if s.drill_id in seen:
            raise ScenarioError(f"drill id {s.drill_id!r} is also used by {seen[s.drill_id]}", path=s.folder)
        seen[s.drill_id] = s.folder
    return scenarios


def select(scenarios: Sequence[Scenario], only: Sequence[str]) -> list[Scenario]:
    """Scenarios whose threat id, drill id or folder name matches one of ``only`` (globs allowed).

    Raises:
        ValueError: a pattern matches nothing.
    """
    if not only:
        return list(scenarios)
    chosen: list[Scenario] = []
    for pattern in only:
        hits = [
            s for s in scenarios if any(fnmatch.fnmatchcase(key, pattern) for key in (s.threat, s.drill_id, s.name))
        ]
        if not hits:
            raise ValueError(f"no scenario matches {pattern!r}")
        chosen.extend(s for s in hits if s not in chosen)
    return sorted(chosen, key=lambda s: s.name)


# ---------------------------------------------------------------------------------------------
# Running


def run_drills(scenarios: Sequence[Scenario]) -> list[DrillResult]:
    return [run_drill(s) for s in scenarios]


def run_drill(scenario: Scenario) -> DrillResult:
    """Materialise, act, load and check one scenario. Never raises for a drill failure."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tooldir-drill-") as tmp:
        try:
            arena = make_arena(Path(tmp).resolve(), scenario.folder)
            with isolated(arena):
                return _run(scenario, arena, started)
        except UnavailableError as exc:
            return _failed(scenario, started, "runnable", f"unavailable on this machine: {exc}", unavailable=str(exc))
        except NotRunnableError as exc:
            return _failed(scenario, started, "runnable", f"not runnable yet: {exc}")
        except ScenarioError as exc:
            return _failed(scenario, started, "runnable", exc.diagnostics())
        finally:
            make_removable(Path(tmp))


def _failed(
    scenario: Scenario, started: float, check: str, message: str, unavailable: str | None = None
) -> DrillResult:
    return DrillResult(
        scenario, message, (Check(check, False, message),), time.monotonic() - started, unavailable=unavailable
    )


def _run(scenario: Scenario, arena: Arena, started: float) -> DrillResult:
    if "root" in scenario.requires and os.geteuid() != 0:
        raise UnavailableError("this scenario needs root (chown/mknod)")
    for item in scenario.needs:
        module, _, attribute = item.rpartition(".")
        ex.need(module, attribute)
    _materialise(scenario, arena)
    builtins = tuple(BuiltinSpec(b.name, b.description, {"type": "object"}, b.risk) for b in scenario.builtins)
    for name in scenario.control.project:
        ex.approve(arena, arena.resolve(f"project/.tooldir/tools/{name}"), builtins)
    for i, step in enumerate(scenario.steps):
        ex.apply_step(step, arena, builtins, f"steps[{i}] ({step.do})", None)
    before = fingerprint(arena)
    t0 = time.monotonic()
    try:
        snapshot = ex.load(builtins)
    except ConfigError as exc:
        raise ScenarioError(exc.diagnostics(), path=scenario.folder) from None
    elapsed = time.monotonic() - t0
    runtime = ex.Runtime(snapshot, arena.state, builtins)
    for i, step in enumerate(scenario.after_load):
        ex.apply_step(step, arena, builtins, f"after_load[{i}] ({step.do})", runtime)
    outcomes: list[ex.CallOutcome] = []
    if scenario.calls and "sandbox" in scenario.requires:
        problem = ex.sandbox_problem(ex.user_policy())
        if problem is not None:
            raise UnavailableError(f"no working sandbox: {problem}")
    for i, spec in enumerate(scenario.calls):
        for j, step in enumerate(spec.before):
            ex.apply_step(step, arena, builtins, f"calls[{i}].before[{j}] ({step.do})", runtime)
        outcomes.append(ex.call(runtime, spec, arena))
    storm = None
    if scenario.storm is not None:
        storm = run_storm(
            arena,
            ex.user_policy(),
            builtins,
            packages=scenario.storm.packages,
            changes=scenario.storm.changes,
            settle_s=scenario.storm.settle_s,
        )
        snapshot = ex.load(builtins)  # controls are checked after the storm
    watched = None
    if scenario.watch is not None:
        wspec = scenario.watch
        watched = run_watch(
            arena,
            ex.user_policy(),
            builtins,
            max_inotify_watches=wspec.max_inotify_watches,
            edit=wspec.edit,
            tool=wspec.tool,
            settle_s=wspec.settle_s,
        )
        snapshot = ex.load(builtins)
    audit = ck.check_audit(arena, outcomes) if outcomes else None  # before any tampering below
    for i, step in enumerate(scenario.after_calls):
        ex.apply_step(step, arena, builtins, f"after_calls[{i}] ({step.do})", runtime)
    after = fingerprint(arena)

    checks = [
        ck.check_outcome(scenario, arena, snapshot, elapsed, outcomes, storm=storm, watch=watched),
        ck.check_canary(arena),
        ck.check_controls(scenario, snapshot),
        ck.check_state(before, after),
    ]
    if audit is not None:
        checks.append(audit)
    observed = ck.observed(scenario, snapshot)
    if outcomes:
        observed = "; ".join([*(o.describe() for o in outcomes), observed])
    if storm is not None:
        observed = f"{storm.describe()}; {observed}"
    if watched is not None:
        observed = f"{watched.describe()}; {observed}"
    return DrillResult(scenario, observed, tuple(checks), time.monotonic() - started)


def _materialise(scenario: Scenario, arena: Arena) -> None:
    tree = Path(scenario.folder) / TREE
    if tree.is_dir():
        arena.copy_tree(tree)
    for name in scenario.control.user:
        write_control(arena.resolve(f"user/{name}"), name)
    for name in scenario.control.project:
        write_control(arena.resolve(f"project/.tooldir/tools/{name}"), name)
    if scenario.policy is not None:
        ex.write_policy(arena, scenario.policy)
    if scenario.storm is not None:
        plant_storm(arena, scenario.storm.packages)
    for plant in scenario.plant:
        apply_plant(plant, arena)
