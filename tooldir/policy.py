"""The user's policy: the only home of trust requirements, limits and permission rules.

A policy comes from ``--policy FILE`` or ``$XDG_CONFIG_HOME/tooldir/policy.toml``; never from a
project. Every field has a safe default, so ``Policy()`` is the default policy and
``policies/default.toml`` spells the same values out with comments (a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import json
import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from ._internal.ownership import path_problem, refusal
from ._internal.smallfile import MAX_POLICY_BYTES, Unreadable, read_small_file
from ._internal.tomllines import key_lines, line_of
from .codes import DiagnosticCode
from .errors import PolicyError
from .model import Diagnostic, Risk, Source, warning
from .names import GUARD_TOOLS
from .netallow import MAX_ENTRIES, AllowEntry, NetworkGrant, grant, parse_entries

TrustMethod = Literal["approval", "signature", "pin"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourcePolicy(_Frozen):
    """What one source's tools need. No field has a default here: each source's defaults are
    declared once, on its own subclass below (a partial ``[sources.X]`` table is completed from
    them key by key)."""

    require: tuple[TrustMethod, ...]
    """Trust methods of which any one suffices; empty means the source needs no trust."""
    max_risk: Risk
    may_shadow: StrictBool
    """May a tool of this source shadow a same-named tool of a lower source?"""


class ProjectSourcePolicy(SourcePolicy):
    """``[sources.project]``: untrusted until approved, signed or pinned; at most ``write``."""

    require: tuple[TrustMethod, ...] = ("approval", "signature", "pin")
    max_risk: Risk = Risk.WRITE
    may_shadow: StrictBool = True


class UserSourcePolicy(SourcePolicy):
    """``[sources.user]``: the user's own tools need no trust."""

    require: tuple[TrustMethod, ...] = ()
    max_risk: Risk = Risk.EXEC
    may_shadow: StrictBool = True


#: Builtins are the host application's own code, registered in Python: nothing to verify.
_BUILTIN_RULES = SourcePolicy(require=(), max_risk=Risk.EXEC, may_shadow=True)


class SourcesPolicy(_Frozen):
    project: ProjectSourcePolicy = Field(default_factory=ProjectSourcePolicy)
    user: UserSourcePolicy = Field(default_factory=UserSourcePolicy)

    def for_source(self, source: Source) -> SourcePolicy:
        if source is Source.PROJECT:
            return self.project
        if source is Source.USER:
            return self.user
        return _BUILTIN_RULES


class KeysPolicy(_Frozen):
    minisign: tuple[str, ...] = ()
    """Trusted minisign public keys: the base64 line of a .pub file (``RW...``)."""
    allowed_signers: str | None = None
    """OpenSSH allowed_signers file (``~`` is expanded); keys trusted for the ``tooldir`` namespace."""
    revoked: tuple[str, ...] = ()
    """Revoked keys: minisign public keys or key ids, or SSH ``SHA256:...`` fingerprints."""

    @field_validator("minisign")
    @classmethod
    def _minisign_keys_parse(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        from .signatures import SignatureFormatError, parse_minisign_public_key

        for index, key in enumerate(keys):
            try:
                parse_minisign_public_key(key)
            except SignatureFormatError as exc:
                raise ValueError(f"entry {index}: {exc}") from None
        return keys

    @field_validator("allowed_signers")
    @classmethod
    def _allowed_signers_is_absolute(cls, path: str | None) -> str | None:
        # a relative path would be read from the current directory: usually the untrusted project
        if path is not None and not (path.startswith("~") or os.path.isabs(path)):
            raise ValueError(f"{path!r} must be an absolute path or start with '~'")
        return path

    @field_validator("revoked")
    @classmethod
    def _revocations_parse(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        from .signatures import SignatureFormatError, key_ident

        for index, entry in enumerate(entries):
            try:
                key_ident(entry)
            except SignatureFormatError as exc:
                raise ValueError(f"entry {index} is not a minisign key, key id or SSH fingerprint: {exc}") from None
        return entries


class ReservedPolicy(_Frozen):
    names: tuple[str, ...] = ("read_file", "write_file", "shell")


class DeferPolicy(_Frozen):
    mode: Literal["auto", "on", "off"] = "auto"
    rules: tuple[str, ...] = ("Defer(*)",)
    # Per-turn budgets of a session (tooldir.deferred.session).
    max_searches_per_turn: int = Field(default=8, ge=1, le=1000)
    max_working_set: int = Field(default=32, ge=1, le=10000)
    """Deferred tools a session may hold loaded at once."""
    max_schema_tokens_per_turn: int = Field(default=20000, ge=100)
    """Schema tokens tool_search may load in one turn."""
    # Re-deferral of idle loaded tools by a discounted Beta usage model.
    redefer: StrictBool = True
    discount: float = Field(default=0.8, gt=0, le=1)
    """Per-turn discount of past usage evidence."""
    prior_strength: float = Field(default=2.0, gt=0, le=100)
    """Pseudo-turns of evidence the usage prior counts for."""
    default_prior: float = Field(default=0.2, ge=0, le=1)
    """Prior probability a loaded tool is used in a turn, before any history."""
    min_idle_turns: int = Field(default=3, ge=1, le=1000)
    search_cost_tokens: int = Field(default=80, ge=0)
    """Tokens one tool_search round trip costs besides the schema it returns."""
    usage_ewma: float = Field(default=0.3, gt=0, le=1)
    """Weight of one session's observed usage when updating the persisted prior."""

    @field_validator("rules")
    @classmethod
    def _rules_are_well_formed(cls, rules: tuple[str, ...]) -> tuple[str, ...]:
        for rule in rules:
            parse_defer_rule(rule)
        return rules

    def is_deferred(self, name: str) -> bool:
        """What these rules say for ``name``: ordered globs, any matching ``NoDefer`` beats every
        ``Defer``; ``mode = "off"`` and the guard tools are never deferred. A candidate only.
        Whether a tool is deferred is the :class:`tooldir.deferred.defer.DeferralPlan` (in ``auto`` mode it
        also weighs the token cost)."""
        if self.mode == "off" or name in GUARD_TOOLS:
            return False
        deferred = False
        for rule in self.rules:
            kind, pattern = parse_defer_rule(rule)
            if fnmatch.fnmatchcase(name, pattern):
                if kind == "NoDefer":
                    return False
                deferred = True
        return deferred


@cache  # pure; is_deferred parses every rule once per tool name on each load
def parse_defer_rule(rule: str) -> tuple[str, str]:
    for kind in ("NoDefer", "Defer"):
        if rule.startswith(kind + "(") and rule.endswith(")") and len(rule) > len(kind) + 2:
            return kind, rule[len(kind) + 1 : -1]
    raise ValueError(f"defer rule {rule!r} is not Defer(pattern) or NoDefer(pattern)")


class PermissionsPolicy(_Frozen):
    mode: Literal["default", "plan"] = "default"
    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    max_risk: Risk | None = None
    """Highest risk any tool (builtins included) may have to run; None means no extra cap."""


class SandboxPolicy(_Frozen):
    network: StrictBool = False
    """The master switch: may a tool that declares network get any?"""
    network_allow: tuple[str, ...] | None = None
    """The ceiling of every tool's ``network.allow`` (``HOST:PORT`` entries): a tool gets the part
    of what it declares that this list allows too. None: no ceiling beyond ``network``."""
    network_unrestricted: StrictBool = False
    """May a tool that declares ``network: true`` (any host, no proxy) get the host's network?"""
    timeout_s: float = Field(default=30, gt=0, le=3600)
    memory_mb: int = Field(default=512, ge=16, le=65536)
    max_processes: int = Field(default=64, ge=1, le=4096)
    max_output_bytes: int = Field(default=1 << 20, ge=1024)
    scratch_mb: int = Field(default=64, ge=1, le=4096)
    env_allow: tuple[str, ...] = ()
    """Environment variable names a tool may receive if it declares them."""
    unsafe_allow_unsandboxed: StrictBool = False
    cpu_s: int = Field(default=30, ge=1, le=3600)
    """CPU seconds (RLIMIT_CPU) per tool run."""
    max_file_mb: int = Field(default=64, ge=1, le=65536)
    """Largest file a tool may write (RLIMIT_FSIZE)."""
    run_as_uid: int = Field(default=65534, ge=1, lt=1 << 31)
    """When tooldir runs as root, the sandbox is started as this unprivileged uid (and gid)."""
    max_input_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest tool input (as compact JSON) the registry accepts."""
    memory_bound: Literal["auto", "cgroup", "rlimit+seccomp"] = "auto"
    """How ``memory_mb`` is enforced: ``cgroup`` (a cgroup memory limit on everything the run
    holds -- per-run cgroups v2, per-run cgroups v1 on a v1 host, or a ``systemd-run --user`` scope;
    refuse to run without one),
    ``rlimit+seccomp`` (per-process RLIMIT_AS, memfd/SysV/POSIX shared memory denied), ``auto``
    (a cgroup limit where one can be had, else rlimit+seccomp)."""
    cgroup_parent: str | None = None
    """A cgroup v2 directory delegated to this user (``memory`` and ``pids`` in its
    cgroup.subtree_control) under which each run gets its own cgroup; default: the caller's cgroup."""
    address_space_slack_mb: int = Field(default=512, ge=0, le=65536)
    """Without a cgroup, RLIMIT_AS is memory_mb plus this: address space runtimes reserve without
    using it (node's V8 needs ~700 MiB at start). 0 = RLIMIT_AS exactly memory_mb."""
    unsafe_allow_no_seccomp: StrictBool = False
    """On an architecture with no tabulated seccomp filter (not x86-64 or aarch64), run sandboxed
    tools without one (logged on every run) instead of refusing them."""
    runtime_roots: tuple[str, ...] = ()
    """Absolute host folders bound read-only, at the same path, into every MCP server package's
    sandbox (DESIGN §10): the runtimes and dependencies a server needs that the sandbox's system
    binds lack (a virtualenv, a node installation). Only the user's policy can name them."""

    @field_validator("network_allow")
    @classmethod
    def _network_allow_entries(cls, entries: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if entries is not None:
            if len(entries) > MAX_ENTRIES:
                raise ValueError(f"at most {MAX_ENTRIES} entries")
            parse_entries(entries)  # AllowEntryError (a ValueError) names the entry and what is wrong
        return entries

    def network_ceiling(self) -> tuple[AllowEntry, ...] | None:
        return None if self.network_allow is None else parse_entries(self.network_allow)

    def network_grant(self, declared: bool | Sequence[str]) -> NetworkGrant:
        """The network a tool declaring ``declared`` (``execute.network``) gets under this policy."""
        return grant(
            declared, master=self.network, unrestricted=self.network_unrestricted, ceiling=self.network_ceiling()
        )

    @field_validator("runtime_roots")
    @classmethod
    def _runtime_roots_are_absolute(cls, roots: tuple[str, ...]) -> tuple[str, ...]:
        for root in roots:
            if not root.startswith("/") or "\0" in root or ".." in root.split("/") or root == "/":
                raise ValueError(f"runtime root {root!r} must be an absolute folder path without '..' (not '/')")
        return roots


class ExecPolicy(_Frozen):
    interpreters: tuple[str, ...] = ("python3", "node", "bash", "sh")
    """Bare names allowed as argv[0]; argv[1] must then be a file in the package."""


class AuditPolicy(_Frozen):
    durability: Literal["fsync", "interval", "buffered"] = "fsync"
    """``fsync``: every call returns only once its audit line is on disk (``fdatasync``; lines of
    concurrent calls share one sync). ``interval``: the line is handed to the kernel before the call
    returns (it survives a crash of tooldir) and synced at most ``sync_interval_ms`` later (and at
    exit), so a power cut or OS crash can lose the lines of that last interval -- weaker, reported
    as ``policy-weakened``, logged at start and written into every line. ``buffered``: handed to the
    kernel, never synced by tooldir, so a power cut can lose the newest lines -- weaker still."""
    sync_interval_ms: int = Field(default=100, ge=50, le=200)
    """With ``durability = "interval"``: the longest an audit line stays unsynced (50 to 200 ms)."""


class SecretsPolicy(_Frozen):
    """``[secrets]``: which tool receives which secret (DESIGN §11). Only the user's policy grants;
    the values live in ``secrets.toml`` beside it (:mod:`tooldir.run.secrets`)."""

    grants: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """tool name -> names of the secrets it receives (each as that environment variable)."""
    project_tools: StrictBool = False
    """A granted secret also reaches a *project* tool of that name (WEAKER: by default only tools
    from your own folders get secrets, so a repository's tool that takes a granted name, even
    once approved for its code, never receives your token without this)."""

    @field_validator("grants")
    @classmethod
    def _grants_are_names(cls, grants: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        from .names import is_valid_name

        for tool, names in grants.items():
            if not is_valid_name(tool):
                raise ValueError(f"grant for {tool!r}: not a valid tool name")
            for name in names:
                if _SECRET_NAME.fullmatch(name) is None:
                    raise ValueError(
                        f"grant for {tool!r}: {name!r} is not a secret name ([A-Z][A-Z0-9_]*, at most 128)"
                    )
        return grants


_SECRET_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,127}")


class Limits(_Frozen):
    max_manifest_bytes: int = Field(default=256 * 1024, ge=1024)
    max_file_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_package_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_package_files: int = Field(default=256, ge=1)
    max_package_depth: int = Field(default=8, ge=1)
    max_root_entries: int = Field(default=120_000, ge=1)
    max_json_depth: int = Field(default=32, ge=4, le=256)


class Policy(_Frozen):
    sources: SourcesPolicy = Field(default_factory=SourcesPolicy)
    keys: KeysPolicy = Field(default_factory=KeysPolicy)
    pins: dict[str, str] = Field(default_factory=dict)
    reserved: ReservedPolicy = Field(default_factory=ReservedPolicy)
    defer: DeferPolicy = Field(default_factory=DeferPolicy)
    permissions: PermissionsPolicy = Field(default_factory=PermissionsPolicy)
    sandbox: SandboxPolicy = Field(default_factory=SandboxPolicy)
    exec: ExecPolicy = Field(default_factory=ExecPolicy)
    audit: AuditPolicy = Field(default_factory=AuditPolicy)
    secrets: SecretsPolicy = Field(default_factory=SecretsPolicy)
    limits: Limits = Field(default_factory=Limits)

    @field_validator("pins")
    @classmethod
    def _pins_are_digests(cls, pins: dict[str, str]) -> dict[str, str]:
        for name, digest in pins.items():
            hexpart = digest.removeprefix("sha256:")
            if (
                not digest.startswith("sha256:")
                or len(hexpart) != 64
                or not all(c in "0123456789abcdef" for c in hexpart)
            ):
                raise ValueError(f"pin for {name!r} must be 'sha256:' followed by 64 lowercase hex digits")
        return pins


def config_home() -> str:
    """``$XDG_CONFIG_HOME``, or ``~/.config`` when it is unset or relative."""
    config = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):  # XDG: a relative value is invalid (it would name the project) and ignored
        config = str(Path.home() / ".config")
    return config


def default_policy_path() -> Path:
    return Path(config_home()) / "tooldir" / "policy.toml"


# -- reading a policy file: per-key merge over the defaults, with the origin of every value ------


PRESET_KEY = "preset"
"""Top-level key of a policy file naming a bundled preset the file starts from (``preset = "strict"``)."""

KeyPath = tuple[str, ...]


def preset_names() -> tuple[str, ...]:
    """The bundled presets (``tooldir/_data/policies/*.toml``), by name."""
    from ._data import PRESETS

    return tuple(sorted(p.stem for p in PRESETS.glob("*.toml")))


@dataclass(frozen=True, slots=True)
class Weakening:
    """One value that allows something its default refuses (DESIGN §9, ``policy-weakened``)."""

    key: str  # dotted: "sources.project.max_risk"
    value: Any  # as JSON
    default: Any
    why: str
    origin: str | None = None  # "FILE:LINE", "preset:NAME"; None when only the values are known

    @property
    def pointer(self) -> str:
        """JSON Pointer into the policy document."""
        return "/" + self.key.replace(".", "/")

    def message(self) -> str:
        where = f" (set at {self.origin})" if self.origin else ""
        return (
            f"{self.key} = {json.dumps(self.value)} weakens the default {json.dumps(self.default)}{where}: {self.why}"
        )

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "default": self.default, "why": self.why, "origin": self.origin}


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """The policy in force and where each of its values came from."""

    policy: Policy
    file: str | None = None
    preset: str | None = None
    origins: Mapping[str, str] = field(default_factory=dict)
    """Dotted key -> ``FILE:LINE``, ``preset:NAME`` or ``managed:FILE:LINE``; keys not listed have
    their ``default``."""
    managed_file: str | None = None
    """The managed policy (:data:`MANAGED_POLICY_PATH`) whose keys are floors here, if any."""
    overridden: tuple[ManagedOverride, ...] = ()
    """User values ignored because they would weaken a managed key (``policy-managed``)."""

    def origin(self, key: str) -> str:
        return self.origins.get(key, "default")

    def values(self) -> list[tuple[str, Any, str]]:
        """(dotted key, value as JSON, origin) of every key, in declaration order."""
        return [
            (_dotted(path), value, self.origin(_dotted(path)))
            for path, value in _leaves(self.policy.model_dump(mode="json")).items()
        ]

    def weakenings(self) -> tuple[Weakening, ...]:
        return weakenings(self.policy, self.origins)

    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """``policy-weakened`` per weakened key, then ``policy-managed`` per ignored user value."""
        return policy_diagnostics(self.policy, self.file, self.overridden)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "preset": self.preset,
            "managed_file": self.managed_file,
            "policy": self.policy.model_dump(mode="json"),
            "origins": {key: origin for key, _, origin in self.values()},
            "weakened": [w.to_json() for w in self.weakenings()],
            "managed": [o.to_json() for o in self.overridden],
        }


@dataclass(frozen=True, slots=True)
class ManagedOverride:
    """A user value ignored because it would weaken the managed policy's value of that key (by the
    rule that reports ``policy-weakened`` against a default): the managed value stays in force."""

    key: str
    value: Any  # the user's value, as JSON (ignored)
    kept: Any  # the managed value in force
    why: str
    origin: str  # where the user set it: "FILE:LINE" or "preset:NAME"
    managed_origin: str  # "managed:FILE:LINE"

    @property
    def pointer(self) -> str:
        return "/" + self.key.replace(".", "/")

    def message(self) -> str:
        return (
            f"{self.key} = {json.dumps(self.value)} (set at {self.origin}) is ignored: it would weaken the managed "
            f"value {json.dumps(self.kept)} (set at {self.managed_origin.removeprefix(MANAGED_ORIGIN)}): {self.why}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "kept": self.kept,
            "why": self.why,
            "origin": self.origin,
            "managed_origin": self.managed_origin,
        }


def load_policy(
    path: str | os.PathLike[str] | None = None, *, managed: str | os.PathLike[str] | None = None
) -> tuple[Policy, str | None]:
    """Load the user's policy. Returns (policy, the file it came from or None for the default).

    An explicit ``path`` must exist. Without one, the user's config file is used if present.
    Every key the file leaves out keeps its default, key by key (DESIGN §9). The machine's managed
    policy (``/etc/tooldir/policy.toml``, see :func:`read_policy`) is a floor under it.

    Raises:
        PolicyError: the file is unreadable, not TOML, or breaks the policy schema.
    """
    effective = read_policy(path, managed=managed)
    return effective.policy, effective.file


def read_policy(
    path: str | os.PathLike[str] | None = None, *, managed: str | os.PathLike[str] | None = None
) -> EffectivePolicy:
    """Like :func:`load_policy`, with the origin of every value.

    The machine's managed policy (``managed``; None: :data:`MANAGED_POLICY_PATH`, never taken from
    the environment) is read first, if it exists: every key it sets is a floor the user's file
    cannot weaken (:func:`floor_policy`)."""
    floor = read_managed_policy(managed)
    if path is None:
        candidate = default_policy_path()
        if not candidate.exists():
            return floor if floor is not None else EffectivePolicy(Policy())
        path = candidate
    file = Path(path)
    text = _read_policy_file(file)  # what kind of file it is first: a FIFO or device is refused as such
    check_trusted(file, "policy file")
    user = effective_policy(text, path=str(file))
    return user if floor is None else floor_policy(floor, user)


def managed_defaults(managed: str | os.PathLike[str] | None = None) -> EffectivePolicy:
    """The policy with no user file: the managed policy's floors over the defaults, if there is one."""
    floor = read_managed_policy(managed)
    return floor if floor is not None else EffectivePolicy(Policy())


MANAGED_POLICY_PATH = Path("/etc/tooldir/policy.toml")
"""The machine-wide managed policy (DESIGN §13). A constant: no environment variable or option
moves it (a test, or the drill runner's arena, passes ``managed=`` or replaces this constant)."""
MANAGED_ORIGIN = "managed:"


def read_managed_policy(managed: str | os.PathLike[str] | None = None) -> EffectivePolicy | None:
    """The managed policy file, or None when there is none (nothing at that path).

    It is used only if it is a regular file (not a link) owned by root, not writable by group or
    others, in folders only root may change; anything else fails closed, with the reason.

    Raises:
        PolicyError: the file is there but not root's own, unreadable, not TOML or invalid.
    """
    file = Path(managed) if managed is not None else MANAGED_POLICY_PATH
    try:
        os.lstat(file)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PolicyError(f"cannot read the managed policy: {exc.strerror or exc}", path=str(file)) from None
    problem = path_problem(file.parent, euid=0, home="/")
    if problem is not None:
        raise PolicyError(_managed_refusal(file, f"{problem[0]} is {problem[1]}"), path=str(file))
    text = _read_policy_file(file, managed=True)
    effective = effective_policy(text, path=str(file))
    return dataclasses.replace(
        effective,
        file=None,  # the user's file: none yet
        origins={key: MANAGED_ORIGIN + origin for key, origin in effective.origins.items()},
        managed_file=str(file),
    )


def _managed_refusal(file: Path, why: str) -> str:
    return (
        f"refused: the managed policy {file} is used only as a regular file owned by root and not writable by "
        f"group or others, in folders only root can change: {why} (fix it as root: chown root:root, chmod 644)"
    )


def _managed_file_problem(info: os.stat_result) -> str | None:
    if info.st_uid != 0:
        return f"it is owned by uid {info.st_uid}, not root"
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by {'group' if mode & stat.S_IWGRP else 'others'} (mode {mode:o})"
    return None


def _read_policy_file(file: Path, *, managed: bool = False) -> str:
    """The text of the policy file: a regular file of at most :data:`MAX_POLICY_BYTES`, opened
    without blocking (a FIFO or a device is refused, never waited on or read until memory runs
    out) and valid UTF-8; anything else is a one-line :class:`PolicyError` naming the file. The
    managed policy is never read through a link, and must be root's own (checked on the
    descriptor that is read)."""
    where = str(file)
    refused: list[str] = []

    def roots_own(info: os.stat_result) -> str | None:
        problem = _managed_file_problem(info)
        if problem is not None:
            refused.append(problem)
        return problem

    try:
        read = read_small_file(
            file, MAX_POLICY_BYTES, what="a policy file", follow_links=not managed, check=roots_own if managed else None
        )
    except Unreadable as exc:
        if managed and (refused or exc.why == "it is a symbolic link"):
            raise PolicyError(_managed_refusal(file, exc.why), path=where) from None
        raise PolicyError(f"cannot read policy: {exc.why}", path=where) from None
    if read is None:
        raise PolicyError(f"cannot read policy: {os.strerror(errno.ENOENT)}", path=where)
    try:
        return read.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"cannot read policy: invalid UTF-8 at byte {exc.start}", path=where) from None


def check_trusted(file: str | os.PathLike[str], what: str, *, key: str | None = None) -> None:
    """Refuse a file of the policy (the policy file itself, ``keys.allowed_signers``) that another
    user could have changed: the ownership rule of discovery, for the file and the folders on the
    way to it (:func:`tooldir._internal.ownership.path_problem`).

    Raises:
        PolicyError: naming the file and why.
    """
    problem = path_problem(file)
    if problem is not None:
        raise PolicyError(refusal(file, problem, what), path=str(file), key=key)


def parse_policy(text: str, *, path: str = "<policy>") -> Policy:
    """The policy a file with this text means (see :func:`effective_policy`)."""
    return effective_policy(text, path=path).policy


def effective_policy(text: str, *, path: str = "<policy>") -> EffectivePolicy:
    """Parse a policy file: its keys, over its ``preset`` if it names one, over the defaults.

    Merging is per key at every level: a table the file names replaces nothing but the keys it
    sets; each key it leaves out keeps the preset's value or else the field's default (declared
    once, on the model). Arrays and strings are values, replaced whole.

    Raises:
        PolicyError: not TOML, an unknown key, a bad value or an unknown preset (with the key
            and, where known, the line).
    """
    data = _parse_toml(text, path)
    lines = key_lines(text)
    preset_name = data.pop(PRESET_KEY, None)
    base: dict[str, Any] = {}
    if preset_name is not None:
        if not isinstance(preset_name, str) or preset_name not in preset_names():
            raise PolicyError(
                f"{PRESET_KEY} = {json.dumps(preset_name)} is not a bundled preset ({', '.join(preset_names())})",
                path=path,
                key=PRESET_KEY,
                line=line_of(lines, (PRESET_KEY,)),
            )
        base = _preset_data(preset_name)
    merged = _merge(base, data)
    try:
        policy = Policy.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
        keys = tuple(str(part) for part in loc if not isinstance(part, int))
        if first["type"] == "extra_forbidden":
            message = f"unknown key {key}"
        else:  # pydantic speaks Python; the file is TOML
            text = (
                first["msg"]
                .removeprefix("Value error, ")
                .replace("a valid tuple", "an array")
                .replace("a valid dictionary", "a table")
            )
            text = re.sub(r" or instance of \w+", "", text)
            message = f"{key}: {text}"
        raise PolicyError(message, path=path, key=key, line=line_of(lines, keys)) from None
    origins: dict[str, str] = {}
    for leaf in _leaves(policy.model_dump(mode="json")):
        if _present(data, leaf):
            line = line_of(lines, leaf)
            origins[_dotted(leaf)] = f"{path}:{line}" if line is not None else path
        elif _present(base, leaf):
            origins[_dotted(leaf)] = f"preset:{preset_name}"
    return EffectivePolicy(policy, path, preset_name, origins)


def _parse_toml(text: str, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise PolicyError("not valid TOML: arrays or tables nested too deeply", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        line = int(found.group(1)) if found else None
        raise PolicyError(f"not valid TOML: {exc}", path=path, line=line) from None


@cache
def _preset_text(name: str) -> str:
    from ._data import PRESETS

    return (PRESETS / f"{name}.toml").read_text(encoding="utf-8")


def _preset_data(name: str) -> dict[str, Any]:
    data = _parse_toml(_preset_text(name), f"preset:{name}")
    data.pop(PRESET_KEY, None)  # presets stand on the defaults; they never chain
    return data


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on ``base``, key by key: tables merge recursively, everything else replaces."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        out[key] = _merge(below, value) if isinstance(below, dict) and isinstance(value, dict) else value
    return out


def _leaves(data: Mapping[str, Any], prefix: KeyPath = ()) -> dict[KeyPath, Any]:
    """Every key that holds a value (a non-empty table is not a value; an empty one is)."""
    out: dict[KeyPath, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def _present(data: Mapping[str, Any], path: KeyPath) -> bool:
    node: Any = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _dotted(path: KeyPath) -> str:
    return ".".join(path)


# -- what counts as weakening a default ----------------------------------------------------------
# A value *weakens* its default when it lets run, load or reach something the default refuses.
# Each rule takes (value, default) as JSON and says why, or returns None. Keys in _NEUTRAL are not
# protections (budgets, the user's own trust anchors and pins); a test keeps every key classified.

_Rule = Callable[[Any, Any], str | None]


def _higher(why: str) -> _Rule:
    return lambda value, default: why if value > default else None


def _turned_on(why: str) -> _Rule:
    return lambda value, default: why if value is True and default is False else None


def _adds(why: str) -> _Rule:
    return lambda value, default: why if set(value) - set(default) else None


def _drops(why: str) -> _Rule:
    return lambda value, default: why if set(default) - set(value) else None


def _higher_risk(value: Any, default: Any) -> str | None:
    if Risk(value).rank > Risk(default).rank:
        return f"tools of this source may now declare risk up to {value}"
    return None


def _require(value: Any, default: Any) -> str | None:
    # any one listed method suffices: fewer methods is stricter; none, or one the default lacks, is looser
    if default and not value:
        return "tools of this source need no trust at all (no approval, signature or pin)"
    if default and set(value) - set(default):
        return f"tools of this source may now be trusted by {', '.join(sorted(set(value) - set(default)))}"
    return None


def _mode(value: Any, default: Any) -> str | None:
    return "tools that write may run again (plan mode is off)" if default == "plan" and value != "plan" else None


def _allow(value: Any, default: Any) -> str | None:
    return "more tool names are allowed to run" if "*" not in default and set(value) - set(default) else None


def _risk_cap(value: Any, default: Any) -> str | None:
    if default is not None and (value is None or Risk(value).rank > Risk(default).rank):
        return "a higher risk may run"
    return None


def _ceiling_lifted(value: Any, default: Any) -> str | None:
    # a list narrows what tools may reach; only dropping a default list would widen it
    return "tools reach whatever they declare" if value is None and default is not None else None


def _memory_bound(value: Any, default: Any) -> str | None:
    # "auto" takes a cgroup limit where one works; forcing the per-process fallback gives that up
    if value == "rlimit+seccomp" and default != "rlimit+seccomp":
        return "memory is bounded per process only, even where a cgroup limit would work"
    return None


def _audit_durability(value: Any, default: Any) -> str | None:
    if value == "buffered" and default != "buffered":
        return "audit lines are not synced to disk before a call returns: a power cut or OS crash can lose the newest"
    if value == "interval" and default == "fsync":
        return (
            "audit lines are synced to disk up to audit.sync_interval_ms after their call returns: a power cut or "
            "OS crash can lose the lines of that last interval"
        )
    return None


_SOURCE_RULES: dict[str, _Rule] = {
    "require": _require,
    "max_risk": _higher_risk,
    "may_shadow": _turned_on("tools of this source may shadow same-named tools of lower sources"),
}
_LARGER = "a larger limit on untrusted input or on what a tool may use"
WEAKENING_RULES: Mapping[str, _Rule] = MappingProxyType(
    {
        **{f"sources.{source}.{key}": rule for source in ("project", "user") for key, rule in _SOURCE_RULES.items()},
        "keys.revoked": _drops("a revoked key is trusted again"),
        "reserved.names": _drops("a directory tool may take a reserved name"),
        "permissions.mode": _mode,
        "permissions.allow": _allow,
        "permissions.deny": _drops("a denied tool name may run"),
        "permissions.max_risk": _risk_cap,
        "sandbox.network": _turned_on(
            "a tool that declares network destinations reaches them (within sandbox.network_allow)"
        ),
        "sandbox.network_unrestricted": _turned_on(
            "a tool that declares network: true reaches any host and address, with no proxy and no report"
        ),
        "sandbox.network_allow": _ceiling_lifted,
        "secrets.project_tools": _turned_on("a project tool with a granted name gets the secret"),
        "sandbox.unsafe_allow_unsandboxed": _turned_on("tools run WITHOUT a sandbox when none works"),
        "sandbox.unsafe_allow_no_seccomp": _turned_on("tools run without a seccomp filter on this architecture"),
        "sandbox.memory_bound": _memory_bound,
        "sandbox.env_allow": _adds("tools may receive these variables of your environment"),
        "sandbox.runtime_roots": _adds("MCP server sandboxes may read these host folders"),
        "exec.interpreters": _adds("more programs may be argv[0] of a tool"),
        "audit.durability": _audit_durability,
        **{
            f"sandbox.{key}": _higher(_LARGER)
            for key in (
                "timeout_s",
                "memory_mb",
                "max_processes",
                "max_output_bytes",
                "scratch_mb",
                "cpu_s",
                "max_file_mb",
                "max_input_bytes",
                "address_space_slack_mb",
            )
        },
        **{f"limits.{key}": _higher(_LARGER) for key in Limits.model_fields},
    }
)
#: Keys that are not protections: the user's own trust anchors, pins and secret grants (adding one
#: is how trust or a secret is granted, and it is always explicit), deferral budgets, and the
#: sandbox uid (another unused uid is as good or better).
NEUTRAL_KEYS: frozenset[str] = frozenset(
    # audit.sync_interval_ms is bounded (50-200 ms) and matters only under durability = "interval",
    # which is itself reported
    {"keys.minisign", "keys.allowed_signers", "pins", "secrets.grants", "sandbox.run_as_uid", "sandbox.cgroup_parent"}
    | {"audit.sync_interval_ms"}
    | {f"defer.{key}" for key in DeferPolicy.model_fields}
)


def weakenings(policy: Policy, origins: Mapping[str, str] | None = None) -> tuple[Weakening, ...]:
    """Every value of ``policy`` that is weaker than its default, in key order."""
    defaults = _leaves(Policy().model_dump(mode="json"))
    found = []
    for path, value in _leaves(policy.model_dump(mode="json")).items():
        key = _dotted(path)
        rule = WEAKENING_RULES.get(key)
        if rule is None or path not in defaults:
            continue
        why = rule(value, defaults[path])
        if why is not None:
            found.append(Weakening(key, value, defaults[path], why, (origins or {}).get(key)))
    return tuple(found)


def policy_diagnostics(
    policy: Policy, path: str | None = None, overridden: tuple[ManagedOverride, ...] = ()
) -> tuple[Diagnostic, ...]:
    """A ``policy-weakened`` warning per weakened key (``pointer``: JSON Pointer into the policy),
    then a ``policy-managed`` warning per user value the managed policy overrode."""
    weakened = tuple(
        warning(
            DiagnosticCode.POLICY_WEAKENED,
            w.message(),
            path=path,
            pointer=w.pointer,
            source=Source(w.key.split(".")[1]) if w.key.startswith("sources.") else None,
        )
        for w in weakenings(policy)
    )
    return weakened + tuple(
        warning(DiagnosticCode.POLICY_MANAGED, o.message(), path=path, pointer=o.pointer) for o in overridden
    )


# -- the managed policy: a floor under the user's ------------------------------------------------

#: Keys whose managed and user values are both kept: the managed trusted signers are trusted for
#: every user, beside the user's own.
_UNION_KEYS = frozenset({"keys.minisign"})
#: Tables of entries (name -> value) merged entry by entry; on the same name the managed entry wins.
_TABLE_KEYS = frozenset({"pins", "secrets.grants"})
#: Neutral keys the managed value of which is kept when both set one (only one file can be named).
_MANAGED_WINS = frozenset({"keys.allowed_signers"})


def _policy_keys() -> tuple[str, ...]:
    return tuple(sorted(set(WEAKENING_RULES) | NEUTRAL_KEYS))


def _get(data: Mapping[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        node = node[part]
    return node


def _put(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node[part]
    node[last] = value


def _origin_of(origins: Mapping[str, str], key: str) -> str | None:
    """Where a layer set ``key`` (or, for a table, its first entry), or None if it did not."""
    if key in origins:
        return origins[key]
    return next((o for k, o in origins.items() if k.startswith(key + ".")), None)


def floor_policy(managed: EffectivePolicy, user: EffectivePolicy) -> EffectivePolicy:
    """The user's policy over the managed one, where every key the managed file sets is a floor.

    A user value the per-key rule of :data:`WEAKENING_RULES` finds weaker than the managed value
    is ignored (a :class:`ManagedOverride`); a stricter or neutral one is used. The managed
    ``keys.minisign`` are kept beside the user's, ``pins`` and ``secrets.grants`` are merged entry
    by entry (the managed entry wins on a name both set), and a managed ``keys.allowed_signers``
    is kept. Keys the managed file leaves out are the user's as usual."""
    mvalues = managed.policy.model_dump(mode="json")
    uvalues = user.policy.model_dump(mode="json")
    merged = managed.policy.model_dump(mode="json")
    from_user: set[str] = set()
    overridden: list[ManagedOverride] = []
    for key in _policy_keys():
        uorigin = _origin_of(user.origins, key)
        if uorigin is None:
            continue
        morigin = _origin_of(managed.origins, key)
        uvalue = _get(uvalues, key)
        if morigin is None:
            _put(merged, key, uvalue)
            from_user.add(key)
            continue
        mvalue = _get(mvalues, key)
        if key in _UNION_KEYS:
            _put(merged, key, [*mvalue, *(v for v in uvalue if v not in mvalue)])
            continue
        if key in _TABLE_KEYS:
            clashes = sorted(name for name in set(uvalue) & set(mvalue) if uvalue[name] != mvalue[name])
            _put(merged, key, {**uvalue, **mvalue})
            for name in clashes:
                entry = f"{key}.{name}"
                overridden.append(
                    ManagedOverride(
                        entry,
                        uvalue[name],
                        mvalue[name],
                        "the managed policy sets this entry",
                        _origin_of(user.origins, entry) or uorigin,
                        _origin_of(managed.origins, entry) or morigin,
                    )
                )
            continue
        rule = WEAKENING_RULES.get(key)
        if key in _MANAGED_WINS:
            why = "the managed policy names this file" if uvalue != mvalue else None
        else:
            why = rule(uvalue, mvalue) if rule is not None else None
        if why is not None:
            overridden.append(ManagedOverride(key, uvalue, mvalue, why, uorigin, morigin))
            continue
        _put(merged, key, uvalue)
        from_user.add(key)
    policy = Policy.model_validate(merged)
    origins: dict[str, str] = {}
    for leaf in _leaves(policy.model_dump(mode="json")):
        dotted = _dotted(leaf)
        owner = next((k for k in _policy_keys() if dotted == k or dotted.startswith(k + ".")), dotted)
        layers = (user.origins, managed.origins) if owner in from_user else (managed.origins, user.origins)
        found = next((layer[dotted] for layer in layers if dotted in layer), None)
        if owner in _UNION_KEYS and dotted in managed.origins and dotted in user.origins:
            found = f"{managed.origins[dotted]} + {user.origins[dotted]}"
        if found is not None:
            origins[dotted] = found
    return EffectivePolicy(policy, user.file, user.preset, origins, managed.managed_file, tuple(overridden))
