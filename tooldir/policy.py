"""The user's policy: the only home of trust requirements, limits and permission rules.

A policy comes from ``--policy FILE`` or ``$XDG_CONFIG_HOME/tooldir/policy.toml``; never from a
project. Every field has a safe default, so ``Policy()`` is the default policy and
``policies/default.toml`` spells the same values out with comments (a test keeps them equal).
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import PolicyError
from .model import Risk, Source

TrustMethod = Literal["approval", "signature", "pin"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourcePolicy(_Frozen):
    require: tuple[TrustMethod, ...] = ()
    """Trust methods of which any one suffices; empty means the source needs no trust."""
    max_risk: Risk = Risk.EXEC
    may_shadow: bool = True
    """May a tool of this source shadow a same-named tool of a lower source?"""


def _default_project() -> SourcePolicy:
    return SourcePolicy(require=("approval", "signature", "pin"), max_risk=Risk.WRITE)


class SourcesPolicy(_Frozen):
    project: SourcePolicy = Field(default_factory=_default_project)
    user: SourcePolicy = Field(default_factory=SourcePolicy)

    def for_source(self, source: Source) -> SourcePolicy:
        if source is Source.PROJECT:
            return self.project
        if source is Source.USER:
            return self.user
        return SourcePolicy()


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
    # Per-turn budgets of a session (tooldir.session).
    max_searches_per_turn: int = Field(default=8, ge=1, le=1000)
    max_working_set: int = Field(default=32, ge=1, le=10000)
    """Deferred tools a session may hold loaded at once."""
    max_schema_tokens_per_turn: int = Field(default=20000, ge=100)
    """Schema tokens tool_search may load in one turn."""
    # Re-deferral of idle loaded tools by a discounted Beta usage model.
    redefer: bool = True
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
        """Ordered glob rules; any matching ``NoDefer`` beats every ``Defer``."""
        if self.mode == "off":
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
    network: bool = False
    timeout_s: float = Field(default=30, gt=0, le=3600)
    memory_mb: int = Field(default=512, ge=16, le=65536)
    max_processes: int = Field(default=64, ge=1, le=4096)
    max_output_bytes: int = Field(default=1 << 20, ge=1024)
    scratch_mb: int = Field(default=64, ge=1, le=4096)
    env_allow: tuple[str, ...] = ()
    """Environment variable names a tool may receive if it declares them."""
    unsafe_allow_unsandboxed: bool = False
    cpu_s: int = Field(default=30, ge=1, le=3600)
    """CPU seconds (RLIMIT_CPU) per tool run."""
    max_file_mb: int = Field(default=64, ge=1, le=65536)
    """Largest file a tool may write (RLIMIT_FSIZE)."""
    run_as_uid: int = Field(default=65534, ge=1, lt=1 << 31)
    """When tooldir runs as root, the sandbox is started as this unprivileged uid (and gid)."""
    max_input_bytes: int = Field(default=1 << 20, ge=1024)
    """Largest tool input (as compact JSON) the registry accepts."""
    memory_bound: Literal["auto", "cgroup", "rlimit+seccomp"] = "auto"
    """How ``memory_mb`` is enforced: ``cgroup`` (a cgroup v2 memory limit on everything the run
    holds -- per-run cgroups, or a ``systemd-run --user`` scope; refuse to run without one),
    ``rlimit+seccomp`` (per-process RLIMIT_AS, memfd/SysV/POSIX shared memory denied), ``auto``
    (a cgroup limit where one can be had, else rlimit+seccomp)."""
    cgroup_parent: str | None = None
    """A cgroup v2 directory delegated to this user (``memory`` and ``pids`` in its
    cgroup.subtree_control) under which each run gets its own cgroup; default: the caller's cgroup."""
    address_space_slack_mb: int = Field(default=512, ge=0, le=65536)
    """Without a cgroup, RLIMIT_AS is memory_mb plus this: address space runtimes reserve without
    using it (node's V8 needs ~700 MiB at start). 0 = RLIMIT_AS exactly memory_mb."""
    unsafe_allow_no_seccomp: bool = False
    """On an architecture with no tabulated seccomp filter (not x86-64 or aarch64), run sandboxed
    tools without one (logged on every run) instead of refusing them."""


class ExecPolicy(_Frozen):
    interpreters: tuple[str, ...] = ("python3", "node", "bash", "sh")
    """Bare names allowed as argv[0]; argv[1] must then be a file in the package."""


class Limits(_Frozen):
    max_manifest_bytes: int = Field(default=256 * 1024, ge=1024)
    max_file_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_package_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    max_package_files: int = Field(default=256, ge=1)
    max_package_depth: int = Field(default=8, ge=1)
    max_root_entries: int = Field(default=20_000, ge=1)
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


def load_policy(path: str | os.PathLike[str] | None = None) -> tuple[Policy, str | None]:
    """Load the user's policy. Returns (policy, the file it came from or None for the default).

    An explicit ``path`` must exist. Without one, the user's config file is used if present.

    Raises:
        PolicyError: the file is unreadable, not TOML, or breaks the policy schema.
    """
    if path is None:
        candidate = default_policy_path()
        if not candidate.exists():
            return Policy(), None
        path = candidate
    file = Path(path)
    try:
        text = file.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read policy: {exc}", path=str(file)) from None
    return parse_policy(text, path=str(file)), str(file)


def parse_policy(text: str, *, path: str = "<policy>") -> Policy:
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"not valid TOML: {exc}", path=path) from None
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise PolicyError(f"{key}: {first['msg']}", path=path, key=key) from None
