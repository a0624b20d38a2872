"""Poisoned-directory drills: plant a hostile tool tree, run tooldir on it, prove nothing bad happened.

A scenario is a folder with ``scenario.toml`` and an optional ``tree/`` (format: tooldir/_data/
scenarios/README.md). :func:`load_scenarios` parses a scenario directory (resolved to an absolute
path; a named tool that nothing provides is a :class:`ScenarioError`); :func:`run_drill`
materialises one scenario into a fresh temporary directory with an isolated HOME / XDG dirs and a
scrubbed environment, applies the user's setup and the project's mutations in order, loads exactly
as ``tooldir scan`` would from inside the project (default user root, user policy and state),
attempts any declared tool calls under the drill's ceiling (no network, no unsandboxed runs, no
variable of the caller's), and checks:

- ``planted``: before anything else, every file of tree/ and every plant is in the arena as planted;
- ``outcome``: the expected diagnostic codes, tool statuses or refusal codes were observed;
- ``canary``: no hostile script ran (the canary folder it would write into is still empty);
- ``control``: the scenario's good tools, planted beside the hostile ones, are still active;
- ``state``: the user's home, config and state, and everything outside the project, are byte-for-byte
  unchanged by the load (the audit log excepted: tooldir itself appends to it);
- ``audit``: for execution drills, the audit log recorded each attempted call;
- ``isolation``: for execution drills, no secret-named variable of the caller reached a tool;
- ``arena``: nothing outside the arena changed (``{beyond}``, a stand-in for the user's own files).

A scenario is downloaded content: it never acts outside its arena (:mod:`tooldir.drill.confine`,
:mod:`tooldir.drill.cliargs`). A plant or step that tries is an :class:`ArenaEscapeError`, a
scenario error, never a pass; a drill about the runner itself declares ``expect.refused`` (the
plant or step that must be refused), and then passes only when exactly that happened.

A drill whose machinery does not exist in this build fails with "not runnable yet: <what is
missing>"; it never passes by default. A drill that needs what this machine lacks (root, a working
sandbox) is ``not-runnable`` (:attr:`DrillResult.status`), which is neither a pass nor a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import os
import socket
import stat
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..codes import CallErrorCode, DiagnosticCode
from ..errors import ConfigError
from ..model import BuiltinSpec, Risk
from . import checks as ck
from . import execute as ex
from .checks import Check
from .cliargs import CommandLine
from .plant import (
    Arena,
    ArenaEscapeError,
    NotRunnableError,
    Planted,
    ScenarioError,
    UnavailableError,
    apply_plant,
    fingerprint,
    isolated,
    make_arena,
    make_beyond,
    make_removable,
    record,
    write_control,
)
from .storm import plant_storm, run_storm, storm_name
from .watch import run_watch

SCENARIO_FILE = "scenario.toml"
TREE = "tree"
GUARD_TOOLS = ("tool_search", "defer_execute_tool")
"""Tools a Session provides itself; a scenario may call them without planting them."""
PROVIDING_STEPS: dict[str, tuple[str, ...]] = {"write": ("path", "text", "hex"), "copy": ("to",)}
"""Steps that create content, and the fields that say what: with tree/ and [[plant]], the only
places a tool the scenario names may come from (a step that approves or edits a tool does not
provide it). ``plant`` steps count like ``[[plant]]`` entries."""
CHANGING_PLANTS = ("mode", "owner")
"""Plants that change an entry that is already there instead of creating one."""

__all__ = [
    "ArenaEscapeError",
    "Check",
    "DrillResult",
    "DrillStatus",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "load_scenarios",
    "run_drill",
    "run_drills",
    "select",
    "verdict",
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
    gid: int | None = None  # owner: the group (a shared one: a user-private group may write)
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
            "big-file": ("size",),
            "many-entries": ("count",),
            "deep-json": ("depth", "template"),
        }.get(self.kind, ())
        missing = [name for name in need if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.kind!r} plant needs {', '.join(missing)}")
        if self.kind == "owner" and self.uid is None and self.gid is None:
            raise ValueError("an 'owner' plant needs uid, gid or both")
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
    "tamper-line",
    "truncate",
    "plant",
    "policy",
    "tooldir",
    "sign-ssh",
    "reload",
    "add-key",
    "python-m-tooldir",
    "setenv",
    "forge-index",
    "forge-scanmemo",
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
    "tamper-line": ("path", "line", "how"),
    "truncate": ("path", "line"),
    "plant": ("plant",),
    "policy": ("text",),
    "tooldir": (),
    "sign-ssh": ("key", "path"),
    "reload": (),
    "add-key": ("text",),
    "python-m-tooldir": (),
    "setenv": ("text",),
    "forge-index": ("tool",),
    "forge-scanmemo": (),
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
    args: tuple[str, ...] = ()  # tooldir, python-m-tooldir: the command line after "tooldir" (placeholders allowed)
    exit: int = 0  # tooldir, python-m-tooldir: the expected exit code
    line: int | None = Field(default=None, ge=1)  # corrupt: 1-based line of the character to change
    column: int | None = Field(default=None, ge=1)  # corrupt: 1-based column
    key: str | None = None  # sign-ssh: arena path of the OpenSSH private key
    how: Literal["whitespace", "reorder", "duplicate-key", "escape"] | None = None  # tamper-line: how
    namespace: str = "tooldir"  # sign-ssh: the SSHSIG namespace
    keep_times: bool = False  # write, replace: the file keeps its access and modification times
    stdout_includes: tuple[str, ...] = ()  # tooldir, python-m-tooldir: text its stdout must hold
    stdout_excludes: tuple[str, ...] = ()  # tooldir, python-m-tooldir: text its stdout must not hold
    max_rss_mb: int | None = Field(default=None, ge=1)  # python-m-tooldir: bound on its peak resident memory

    @model_validator(mode="after")
    def _fields_for_kind(self) -> Step:
        missing = [name for name in _STEP_NEEDS[self.do] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.do!r} step needs {', '.join(missing)}")
        if self.do == "write" and (self.text is None) == (self.hex is None):
            raise ValueError("a 'write' step needs exactly one of text, hex")
        if self.do in ("tooldir", "python-m-tooldir", "forge-scanmemo") and not self.args:
            raise ValueError(f'a {self.do!r} step needs args, e.g. ["scan", "--json"]')
        if self.max_rss_mb is not None and self.do != "python-m-tooldir":
            raise ValueError("max_rss_mb is measured only for a 'python-m-tooldir' step (a process of its own)")
        return self


class CallSpec(_Frozen):
    """One attempt to run a tool through ``Registry.call`` after the load."""

    tool: str
    repeat: int = Field(default=1, ge=1, le=1_000_000)
    """The name called is ``tool`` repeated this many times (an oversized name)."""
    input: dict[str, Any] = Field(default_factory=dict)
    via: Literal["registry", "session", "listing", "mcp"] = "registry"
    """``session``: the model's call inside one conversation (``Session.call``), so guard tools
    (``tool_search``, ``defer_execute_tool``) and the session gate apply. ``mcp``: through
    tooldir's MCP front (``ToolServer.call_tool``, as ``tooldir serve`` answers ``tools/call``,
    its cap on runs at once included) on an event loop of the drill's own. ``listing``: no call;
    the content is everything the session shows the model besides call results (its tools in
    every format, the compact directory, the native deferral list, the token report and, when
    the MCP server is available, its tools/list), for ``content_includes``/``content_excludes``."""
    before: tuple[Step, ...] = ()
    """Steps right before this call (e.g. swap a file between verification and execution)."""
    error: CallErrorCode | None = None
    """The expected error code (a refusal or a contained failure); None expects ok."""
    message_includes: tuple[str, ...] = ()
    """Substrings the error message must hold when the call fails (e.g. a hint)."""
    may_fail_with: tuple[CallErrorCode, ...] = ()
    """With ``error`` unset: error codes that are acceptable instead of ok (the threat allows both)."""
    max_seconds: float = Field(default=60.0, gt=0)
    """Bound on the call's wall-clock time (timeouts and caps must hold)."""
    listen: bool = False
    """Open a TCP listener on 127.0.0.1 ({port} in the input) that must receive no connection."""
    network: tuple[NetworkExpect, ...] | None = None
    """The connections the call's run asked tooldir's egress proxy for, in order (``host``,
    ``port`` with placeholders, ``refused``: the reason's code or absent for one made); the same
    list must be in the call's audit line."""
    served: int | None = None
    """Requests the scenario's HTTP server (``serve = true``) got during the call."""
    content_includes: tuple[str, ...] = ()
    content_excludes: tuple[str, ...] = ()
    """Substrings (placeholders substituted) that must not appear in the content or message."""
    check_processes: bool = False
    """After the call, no process may still carry the drill's {marker} on its command line."""
    audit: bool = True
    cancelled: int = Field(default=0, ge=0, le=256)
    """With ``via = "mcp"``: first this many calls of ``tool`` with ``cancel_input``, one after
    another, each cancelled (as ``notifications/cancelled`` does) as soon as the server holds it;
    then the call itself, and then the drill waits until every run has ended (``max_seconds``)."""
    cancel_input: dict[str, Any] | None = None
    """The input of the cancelled calls (default: ``input``)."""
    max_live_runs: int | None = Field(default=None, ge=0)
    """No more processes carrying ``{marker}`` on their command line at once than this, from the
    first cancelled call until every run has ended (sampled every 20 ms)."""
    disk_free: int | None = Field(default=None, ge=0, le=1 << 30)
    """audit:disk-full: the state dir has only this many bytes left for the call. The drill makes
    it so with the file-size limit (RLIMIT_FSIZE, soft) set, for this call only, to the audit log's
    size plus ``disk_free``: no file may grow past it (EFBIG), which needs no privilege."""

    @model_validator(mode="after")
    def _cancelling_goes_through_mcp(self) -> CallSpec:
        if (self.cancelled or self.cancel_input is not None) and self.via != "mcp":
            raise ValueError('cancelled and cancel_input need via = "mcp"')
        return self

    @property
    def name(self) -> str:
        """The tool name as called (``tool`` times ``repeat``)."""
        return self.tool * self.repeat


class NetworkExpect(_Frozen):
    """One expected connection of a call's run through the egress proxy."""

    host: str
    port: str
    refused: str | None = None


class Storm(_Frozen):
    """watch:storm: generated packages churned while the watcher rebuilds (see drill.storm)."""

    packages: int = Field(default=40, ge=1, le=1000)
    changes: int = Field(default=2000, ge=1, le=100_000)
    settle_s: float = Field(default=30.0, gt=0, le=300)


class WatchSpec(_Frozen):
    """watch:exhaust: run the watcher over the arena (see drill.watch)."""

    max_inotify_watches: int = Field(ge=1)
    """Bound on the inotify watches the running watcher may hold."""
    edit: str | None = None
    """Arena path of a file of ``tool`` that is edited (and restored): the watcher must publish both."""
    tool: str | None = None
    settle_s: float = Field(default=20.0, gt=0, le=300)


class AuditVerify(_Frozen):
    ok: bool
    broken_line: int | None = None
    lines: int | None = None
    """The number of intact lines the log must hold (e.g. no line for a call that was refused
    because its line could not be written)."""


class DiagnosticExpectation(_Frozen):
    code: DiagnosticCode
    tool: str | None = None
    severity: Literal["error", "warning", "info"] | None = None
    source: Literal["builtin", "user", "project"] | None = None
    message_contains: tuple[str, ...] = ()
    """Substrings of the message (placeholders such as {project} are substituted)."""
    pointer: str | None = None
    """The JSON Pointer into the manifest the diagnostic must carry, exactly."""

    def describe(self) -> str:
        return self.code + (f"({self.tool})" if self.tool else "") + (f" at {self.pointer}" if self.pointer else "")


class Refusal(_Frozen):
    """The plant or step the runner must refuse as acting outside the arena (drill:arena-escape)."""

    at: str = Field(pattern=r"^(plant|steps)\[[0-9]+\]$")
    """``plant[N]`` or ``steps[N]`` (0-based, as errors name them)."""
    message_contains: tuple[str, ...] = ()
    """Substrings of the refusal (placeholders substituted)."""


class LoadRefusal(_Frozen):
    """The error the load must raise (trust:foreign-files): a ``ConfigError`` subclass by name."""

    error: Literal["PolicyError", "StateError", "StateDirError"]
    message_contains: tuple[str, ...] = ()
    """Substrings of the error as the user sees it (``diagnostics()``; placeholders substituted)."""


class Expect(_Frozen):
    refused: Refusal | None = None
    """The drill is about the runner: it must refuse this plant or step (and stops there; the
    load, calls and the other expectations do not apply)."""
    diagnostics: tuple[DiagnosticExpectation, ...] = ()
    status: dict[str, Literal["active", "pending", "shadowed", "rejected", "absent"]] = Field(default_factory=dict)
    """``name`` or ``source:name`` -> status; ``absent`` means no record at all."""
    never_mentioned: tuple[str, ...] = ()
    """Substrings that no record path and no diagnostic may contain (e.g. a sibling folder)."""
    max_seconds: float = Field(default=30.0, gt=0)
    """Bound on the load's CPU time (this process and the children it reaped); the wall clock
    bounds it only at ``LOAD_WALL_BACKSTOP`` times that, so a loaded machine slows a drill
    without failing it."""
    load_error: LoadRefusal | None = None
    """The load must be refused with this error (nothing loads; the calls and the other
    expectations do not apply)."""
    audit_verify: AuditVerify | None = None
    """After the calls and the after_calls steps, what ``tooldir.run.audit.verify`` must report."""


class Controls(_Frozen):
    user: tuple[str, ...] = ()
    project: tuple[str, ...] = ()


class Builtin(_Frozen):
    name: str
    description: str = "A builtin registered by the host application."
    risk: Risk = Risk.READ
    handler: Literal["none", "canary", "echo"] = "none"
    """``none``: only its name is reserved (the host registers no handler the drill can call);
    ``canary``: registered with a handler that writes the canary (it must never run); ``echo``:
    registered with a handler that returns its input."""


class Scenario(_Frozen):
    """One parsed ``scenario.toml``. ``folder`` is where it was read from."""

    threat: str = Field(pattern=r"^[a-z]+:[a-z][a-z-]*$")
    variant: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    plants: str = Field(min_length=1, description="what the scenario plants, for people")
    expected: str = Field(min_length=1, description="the expected outcome, for people")
    requires: tuple[Literal["root", "sandbox", "memory-bound"], ...] = ()
    needs: tuple[str, ...] = ()
    """tooldir machinery the drill uses, as "module.attribute" (e.g. "session.Session"); a build
    without it fails the drill as "not runnable yet"."""
    policy: str | None = None  # the user's policy.toml
    managed_policy: str | None = None
    """The machine's managed policy (``/etc/tooldir/policy.toml``) as the drill's tooldir sees it:
    written root-owned, 0644, to ``etc/tooldir/policy.toml`` beside the arena's namespaces (no plant
    or step can reach it; needs root). Without it the drill's tooldir sees no managed policy: the
    real one is never read."""
    builtins: tuple[Builtin, ...] = ()
    control: Controls = Field(default_factory=Controls)
    plant: tuple[Plant, ...] = ()
    steps: tuple[Step, ...] = ()
    after_load: tuple[Step, ...] = ()
    calls: tuple[CallSpec, ...] = ()
    after_calls: tuple[Step, ...] = ()
    storm: Storm | None = None
    listen: bool = False
    """A 127.0.0.1 listener open from materialisation to the end: ``{port}`` in tree files, plants,
    steps, the policy and call inputs; it must accept no connection (load, calls, everything)."""
    serve: bool = False
    """A 127.0.0.1 HTTP server open from materialisation to the end (``{serve_port}``, substituted
    like ``{port}``): it answers every GET with ``served <path>``; a call's ``served`` counts them."""
    watch: WatchSpec | None = None
    host: bool = False
    """The load is a host's: ``tooldir.make_config(project=".")`` with every other default the
    library's own (policy file, user root, state), instead of the CLI's ``tooldir scan``."""
    expect: Expect = Field(default_factory=Expect)
    folder: str = ""

    @field_validator("folder")
    @classmethod
    def _absolute_folder(cls, folder: str) -> str:
        # resolved once, here: the drill later runs with the arena as its working directory
        return str(Path(folder).resolve()) if folder else folder

    @model_validator(mode="after")
    def _has_a_control(self) -> Scenario:
        if not (self.control.user or self.control.project):
            raise ValueError("[control] must name at least one good tool (user or project) that must still load")
        return self

    @model_validator(mode="after")
    def _refusal_stops_the_drill(self) -> Scenario:
        refused = self.expect.refused
        if refused is None:
            return self
        kind, _, index = refused.at.rstrip("]").partition("[")
        if int(index) >= len(self.plant if kind == "plant" else self.steps):
            raise ValueError(f"expect.refused: {refused.at} does not exist")
        later = {
            "after_load": self.after_load,
            "calls": self.calls,
            "after_calls": self.after_calls,
            "storm": self.storm,
            "watch": self.watch,
            "expect.diagnostics": self.expect.diagnostics,
            "expect.status": self.expect.status,
            "expect.never_mentioned": self.expect.never_mentioned,
            "expect.audit_verify": self.expect.audit_verify,
        }
        if named := [key for key, value in later.items() if value]:
            raise ValueError(
                f"expect.refused: the drill stops at {refused.at}, so {', '.join(named)} would never be checked"
            )
        return self

    @model_validator(mode="after")
    def _managed_policy_needs_root_and_in_process_steps(self) -> Scenario:
        if self.managed_policy is None:
            return self
        if "root" not in self.requires:
            raise ValueError('managed_policy: a managed policy is root\'s own file; add requires = ["root"]')
        if any(s.do == "python-m-tooldir" for s in (*self.steps, *self.after_load, *self.after_calls)):
            raise ValueError("managed_policy: a python-m-tooldir step would read the machine's own managed policy")
        return self

    @model_validator(mode="after")
    def _load_error_stops_the_drill(self) -> Scenario:
        if self.expect.load_error is None:
            return self
        later = {
            "expect.refused": self.expect.refused,
            "after_load": self.after_load,
            "calls": self.calls,
            "after_calls": self.after_calls,
            "storm": self.storm,
            "watch": self.watch,
            "expect.diagnostics": self.expect.diagnostics,
            "expect.status": self.expect.status,
            "expect.never_mentioned": self.expect.never_mentioned,
            "expect.audit_verify": self.expect.audit_verify,
        }
        if named := [key for key, value in later.items() if value]:
            raise ValueError(f"expect.load_error: the load is refused, so {', '.join(named)} would never be checked")
        return self

    @property
    def drill_id(self) -> str:
        return self.threat + (f"/{self.variant}" if self.variant else "")

    @property
    def name(self) -> str:
        return Path(self.folder).name


DrillStatus = Literal["passed", "failed", "not-runnable"]


@dataclass(frozen=True, slots=True)
class DrillResult:
    scenario: Scenario
    observed: str
    checks: tuple[Check, ...]
    seconds: float
    unavailable: str | None = None  # a system facility this machine lacks (not a tooldir gap)

    @property
    def passed(self) -> bool:
        return self.unavailable is None and bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def status(self) -> DrillStatus:
        """``not-runnable``: this machine lacks what the drill needs (root, a sandbox), which is
        not a failure of tooldir; a drill whose tooldir machinery is missing is ``failed``."""
        if self.unavailable is not None:
            return "not-runnable"
        return "passed" if self.passed else "failed"

    @property
    def reason(self) -> str | None:
        """Why the drill did not pass: what it needs (not-runnable) or the failed checks."""
        if self.unavailable is not None:
            return f"not runnable here ({self.unavailable})"
        failed = [f"{c.name}: {c.message}" for c in self.checks if not c.passed]
        return "; ".join(failed) if failed else None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.scenario.drill_id,
            "scenario": self.scenario.name,
            "expected": self.scenario.expected,
            "observed": self.observed,
            "status": self.status,
            "reason": self.reason,
            "passed": self.passed,
            "details": [c.to_json() for c in self.checks],
        }


def verdict(results: Sequence[DrillResult], *, require_all: bool = False) -> bool:
    """Whether a run counts as passed: every drill that could run here passed (and, with
    ``require_all``, every drill could run). A run in which no drill could run never passes."""
    ran = [r for r in results if r.status != "not-runnable"]
    if not ran or (require_all and len(ran) != len(results)):
        return False
    return all(r.passed for r in ran)


# ---------------------------------------------------------------------------------------------
# Loading scenarios


def load_scenario(folder: str | os.PathLike[str]) -> Scenario:
    """Parse ``folder/scenario.toml``.

    The folder is resolved to an absolute path first (a drill runs in its arena, not the caller's
    working directory). Besides the format, the scenario's declared content must exist: a
    ``tree/`` that is present holds at least one file, and every tool the scenario names in
    ``expect.status``, ``expect.diagnostics`` or ``calls`` (other than its control tools, its
    builtins and the session's guard tools) is provided by its content (a path or a file of
    ``tree/``, a ``[[plant]]``, or a step that creates content, see ``PROVIDING_STEPS``): a
    scenario whose hostile tree is missing is an error, never a vacuous pass.

    Raises:
        ScenarioError: missing, not TOML, not a valid scenario (the message names the key), or
            its declared content is missing.
    """
    folder = Path(folder).resolve()
    path = folder / SCENARIO_FILE
    try:
        data = tomllib.loads(_read_regular(path, follow=True).decode("utf-8"))
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
    tree = folder / TREE
    if tree.exists() and not tree.is_dir():
        raise ScenarioError(f"{TREE} must be a folder", path=str(tree))
    _check_declared_content(scenario, tree)
    return scenario


def _read_regular(path: Path, *, follow: bool) -> bytes:
    """The bytes of the regular file ``path``, never blocking on a FIFO (and, without ``follow``,
    never through a link): a scenario folder is downloaded content too."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return fh.read()


def _named_tools(scenario: Scenario) -> list[tuple[str, str]]:
    """(key, tool name) of every tool the scenario expects something of or calls."""
    named = [(f"expect.status.{key}", key.rpartition(":")[2]) for key in scenario.expect.status]
    named += [(f"expect.diagnostics.{i}", d.tool) for i, d in enumerate(scenario.expect.diagnostics) if d.tool]
    named += [(f"calls.{i}.tool", c.tool) for i, c in enumerate(scenario.calls) if c.via != "listing"]  # no call
    provided = {*scenario.control.user, *scenario.control.project, *(b.name for b in scenario.builtins), *GUARD_TOOLS}
    if scenario.storm is not None:
        provided |= {storm_name(i) for i in range(scenario.storm.packages)}
    return [(key, name) for key, name in named if name not in provided]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _check_declared_content(scenario: Scenario, tree: Path) -> None:
    """The rule of :func:`load_scenario`: a present tree/ is not empty, and every named tool is
    provided by the tree, a plant or a step (raw, or JSON-escaped as a manifest may spell it)."""
    blobs: list[bytes] = []
    if tree.is_dir():
        for dirpath, _, filenames in os.walk(tree):
            here = Path(dirpath)
            blobs.append(str(here.relative_to(tree)).encode())
            for name in filenames:
                blobs.append(name.encode())
                with contextlib.suppress(OSError):  # unreadable files are copy_tree's to report
                    blobs.append(_read_regular(here / name, follow=False))
        if not any(files for _, _, files in os.walk(tree)):
            raise ScenarioError(f"{TREE}/ holds no files: an empty or incomplete copy of the scenario?", path=str(tree))
    steps = [*scenario.steps, *scenario.after_load, *scenario.after_calls]
    steps += [step for call in scenario.calls for step in call.before]
    plants = [*scenario.plant, *(step.plant for step in steps if step.plant is not None)]
    sources: list[Any] = [plant.model_dump() for plant in plants if plant.kind not in CHANGING_PLANTS]
    sources += [step.model_dump(include=set(PROVIDING_STEPS[step.do])) for step in steps if step.do in PROVIDING_STEPS]
    for text in _strings(sources):
        blobs.append(text.encode())
        with contextlib.suppress(ValueError):
            blobs.append(bytes.fromhex(text))
    content = b"\0".join(blobs)
    for key, name in _named_tools(scenario):
        forms = {name.encode(), json.dumps(name).strip('"').encode()}
        if not any(form in content for form in forms):
            raise ScenarioError(
                f"{key}: names the tool {name!r}, but neither {TREE}/ nor any plant or step provides it "
                f"(is {TREE}/ missing?)",
                path=scenario.folder,
            )


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


def run_drills(scenarios: Sequence[Scenario], *, cli: CommandLine) -> list[DrillResult]:
    return [run_drill(s, cli=cli) for s in scenarios]


def run_drill(scenario: Scenario, *, cli: CommandLine) -> DrillResult:
    """Materialise, act, load and check one scenario. Never raises for a drill failure.

    ``cli``: the ``tooldir`` command line its steps run through (the CLI's own:
    :func:`tooldir._cli.command_line`).

    The temporary folder holds the arena and, beside it, ``{beyond}``: the world outside the
    arena, which must be unchanged at the end (the ``arena`` check; an early failure gets it only
    when it failed)."""
    started = time.monotonic()
    progress = _Progress()
    with tempfile.TemporaryDirectory(prefix="tooldir-drill-") as tmp:
        top = Path(tmp).resolve()
        try:
            beyond = make_beyond(top / "beyond")
            world = ck.tree_state(beyond)
            result = _attempt(scenario, top / "arena", beyond, started, progress, cli=cli)
            outside = ck.check_beyond(world, ck.tree_state(beyond))
        finally:
            make_removable(top)
    if outside.passed and result.checks and result.checks[0].name == "runnable":
        return result
    return dataclasses.replace(result, checks=(*result.checks, outside))


@dataclass
class _Progress:
    """How far a drill got, for the result of a refusal."""

    arena: Arena | None = None
    planted: dict[Path, Planted] = dataclasses.field(default_factory=dict)
    planted_check: Check | None = None  # made once materialisation is done


def _attempt(
    scenario: Scenario, base: Path, beyond: Path, started: float, progress: _Progress, *, cli: CommandLine
) -> DrillResult:
    try:
        arena = make_arena(base, scenario.folder, beyond, cli=cli)
        progress.arena = arena
        with isolated(arena) as caller, contextlib.ExitStack() as stack:
            listener = None
            if scenario.listen:
                listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
                listener.setblocking(False)
                arena = dataclasses.replace(arena, port=str(listener.getsockname()[1]))
                progress.arena = arena
            if scenario.serve:
                server = stack.enter_context(ex.served())
                arena = dataclasses.replace(arena, serve_port=str(server.port), server=server)
                progress.arena = arena
            return _run(scenario, arena, started, caller, listener, progress=progress)
    except ArenaEscapeError as exc:
        if scenario.expect.refused is not None and progress.arena is not None:
            return _refusal(scenario, progress.arena, progress, started, exc)
        return _failed(scenario, started, "runnable", exc.diagnostics())
    except UnavailableError as exc:
        return _failed(scenario, started, "runnable", f"not runnable here ({exc})", unavailable=str(exc))
    except NotRunnableError as exc:
        return _failed(scenario, started, "runnable", f"not runnable yet: {exc}")
    except ScenarioError as exc:
        return _failed(scenario, started, "runnable", exc.diagnostics())


def _refusal(
    scenario: Scenario, arena: Arena, progress: _Progress, started: float, exc: ArenaEscapeError | None
) -> DrillResult:
    """The result of a drill that expects a refusal (``expect.refused``), refused by ``exc`` or
    (None) carried out to the end of its steps."""
    planted = progress.planted_check or ck.check_planted(arena, progress.planted)
    outcome = ck.check_refusal(scenario, arena, exc)
    observed = f"refused {exc.where}" if exc is not None else "nothing was refused"
    return DrillResult(scenario, observed, (planted, outcome, ck.check_canary(arena)), time.monotonic() - started)


def _load_refused(
    scenario: Scenario,
    arena: Arena,
    *,
    planted: Check,
    before: dict[str, str],
    marks_before: dict[tuple[str, str], int] | None,
    exc: ConfigError | None,
    started: float,
) -> DrillResult:
    """The result of a drill whose load must be refused (``expect.load_error``): refused by ``exc``,
    or (None) loaded."""
    outcome = ck.check_load_error(scenario, arena, exc)
    state = ck.check_state(before, fingerprint(arena), (ex.high_water_key(arena), marks_before, ex.high_water(arena)))
    observed = f"load refused: {exc.diagnostics()}" if exc is not None else "the load was not refused"
    checks = (planted, outcome, ck.check_canary(arena), state)
    return DrillResult(scenario, observed, checks, time.monotonic() - started)


def _failed(
    scenario: Scenario, started: float, check: str, message: str, unavailable: str | None = None
) -> DrillResult:
    return DrillResult(
        scenario, message, (Check(check, False, message),), time.monotonic() - started, unavailable=unavailable
    )


def _run(
    scenario: Scenario,
    arena: Arena,
    started: float,
    caller: dict[str, str],
    listener: socket.socket | None = None,
    *,
    progress: _Progress | None = None,
) -> DrillResult:
    progress = progress or _Progress(arena)
    if "root" in scenario.requires and os.geteuid() != 0:
        if scenario.managed_policy is not None:
            raise UnavailableError("needs root: the scenario's managed policy is root's own file")
        raise UnavailableError("needs root: the scenario plants files with chown/mknod")
    for item in scenario.needs:
        module, _, attribute = item.rpartition(".")
        ex.need(module, attribute)
    planted = ck.check_planted(arena, _materialise(scenario, arena, progress.planted))
    progress.planted_check = planted
    if not planted.passed:  # the drill would test nothing: stop before the load
        return DrillResult(scenario, planted.message, (planted,), time.monotonic() - started)
    if "sandbox" in scenario.requires:  # before the steps: a step may run a tool (tooldir run)
        problem = ex.sandbox_problem(ex.user_policy())
        if problem is not None:
            raise UnavailableError(f"needs a working sandbox: {problem}")
    if "memory-bound" in scenario.requires:
        problem = ex.memory_bound_problem(ex.user_policy())
        if problem is not None:
            raise UnavailableError(
                f"needs a memory bound on a whole process tree (a cgroup or systemd scope): {problem}"
            )
    builtins = tuple(BuiltinSpec(b.name, b.description, {"type": "object"}, b.risk) for b in scenario.builtins)
    for name in scenario.control.project:
        ex.approve(arena, arena.resolve(f"project/.tooldir/tools/{name}"), builtins)
    for i, step in enumerate(scenario.steps):
        ex.apply_step(step, arena, builtins, f"steps[{i}] ({step.do})", None)
    if scenario.expect.refused is not None:  # a drill about the runner: it never gets to the load
        return _refusal(scenario, arena, progress, started, None)
    before = fingerprint(arena)
    marks_before = ex.high_water(arena)
    t0, cpu0 = time.monotonic(), ck.cpu_seconds()
    want_error = scenario.expect.load_error
    try:
        snapshot = ex.load(builtins, host=scenario.host)
    except ConfigError as exc:
        if want_error is None:
            raise ScenarioError(exc.diagnostics(), path=scenario.folder) from None
        return _load_refused(
            scenario, arena, planted=planted, before=before, marks_before=marks_before, exc=exc, started=started
        )
    if want_error is not None:
        return _load_refused(
            scenario, arena, planted=planted, before=before, marks_before=marks_before, exc=None, started=started
        )
    elapsed = ck.LoadTime(cpu=ck.cpu_seconds() - cpu0, wall=time.monotonic() - t0)
    runtime = ex.Runtime(snapshot, arena.state, builtins, _handlers(scenario, arena))
    outcomes: list[ex.CallOutcome] = []
    taken_back = ex.clamped(ex.raw_user_policy()) if scenario.calls else []
    try:
        for i, step in enumerate(scenario.after_load):
            ex.apply_step(step, arena, builtins, f"after_load[{i}] ({step.do})", runtime)
        for i, spec in enumerate(scenario.calls):
            for j, step in enumerate(spec.before):
                ex.apply_step(step, arena, builtins, f"calls[{i}].before[{j}] ({step.do})", runtime)
            outcomes.append(ex.call(runtime, spec, arena))
    finally:  # a step that stops the drill still ends the servers and sandboxes its calls started
        runtime.close()
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
    connections = ex.accepted(listener) if listener is not None else 0

    checks = [
        planted,
        ck.check_outcome(
            scenario, arena, snapshot, elapsed, outcomes, storm=storm, watch=watched, connections=connections
        ),
        ck.check_canary(arena),
        ck.check_controls(scenario, snapshot),
        ck.check_state(before, after, (ex.high_water_key(arena), marks_before, ex.high_water(arena))),
    ]
    if audit is not None:
        checks.append(audit)
    if outcomes:
        checks.append(ck.check_isolation(caller, outcomes, taken_back))
    observed = ck.observed(scenario, snapshot)
    if outcomes:
        observed = "; ".join([*(o.describe() for o in outcomes), observed])
    if storm is not None:
        observed = f"{storm.describe()}; {observed}"
    if watched is not None:
        observed = f"{watched.describe()}; {observed}"
    report = " ".join([observed, *(c.message for c in checks)])
    secrets = ck.check_secrets(arena, outcomes, report)
    if secrets is not None:
        checks.append(secrets)
    return DrillResult(scenario, observed, tuple(checks), time.monotonic() - started)


def _handlers(scenario: Scenario, arena: Arena) -> dict[str, Any]:
    """The handlers of the scenario's builtins that have one (``Builtin.handler``)."""

    def canary(*, input: Any, context: Any) -> str:
        arena.canary.write_text("ran: a canary builtin")
        return "ran"

    def echo(*, input: Any, context: Any) -> Any:
        return input

    chosen = {"canary": canary, "echo": echo}
    return {b.name: chosen[b.handler] for b in scenario.builtins if b.handler != "none"}


def _materialise(scenario: Scenario, arena: Arena, planted: dict[Path, Planted]) -> dict[Path, Planted]:
    """tree/, control tools, the user's policy, storm packages and plants; records into (and
    returns) ``planted`` what the tree and the plants put where (for the ``planted`` check)."""
    tree = Path(scenario.folder) / TREE
    if tree.is_dir():
        for item in arena.copy_tree(tree):
            record(planted, item)
    for name in scenario.control.user:
        write_control(arena.fs, arena.resolve(f"user/{name}"), name)
    for name in scenario.control.project:
        write_control(arena.fs, arena.resolve(f"project/.tooldir/tools/{name}"), name)
    if scenario.policy is not None:
        ex.write_policy(arena, scenario.policy, "policy")
    if scenario.managed_policy is not None:
        ex.write_managed_policy(arena, scenario.managed_policy)
    if scenario.storm is not None:
        plant_storm(arena, scenario.storm.packages)
    for i, plant in enumerate(scenario.plant):
        record(planted, apply_plant(plant, arena, f"plant[{i}] ({plant.kind})"))
    return planted
