"""Frozen value types shared by every stage.

The type name records how far data has been checked::

    PackageScan (discover)  ->  Candidate (validate)  ->  ToolRecord (resolve)  ->  Snapshot

Trust is a type, not a flag: a :class:`ToolRecord` is ``active`` only if it carries a
:class:`Grant` for exactly its name, source and digest, and only the trust stage
(:mod:`tooldir.trust.assess`, which holds the seal) can make a Grant. The registry runs nothing else.

Nothing here does I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)

from ._internal.strictjson import FrozenDict
from .codes import DiagnosticCode
from .names import NAME_FORBIDDEN, NAME_JSON_SCHEMA, NAME_MAX_LENGTH, explain_invalid
from .netallow import ENTRY_PATTERN, parse_entry


class Source(enum.StrEnum):
    """Where a tool comes from, lowest precedence first."""

    BUILTIN = "builtin"
    USER = "user"
    PROJECT = "project"

    @property
    def rank(self) -> int:
        return _SOURCE_RANK[self]


_SOURCE_RANK = {Source.BUILTIN: 0, Source.USER: 1, Source.PROJECT: 2}


class Risk(enum.StrEnum):
    """What a tool may do, ordered by danger."""

    READ = "read"
    WRITE = "write"
    EXTERNAL_READ = "external-read"
    EXTERNAL_WRITE = "external-write"
    EXEC = "exec"

    @property
    def rank(self) -> int:
        return _RISK_ORDER.index(self)


_RISK_ORDER = [Risk.READ, Risk.WRITE, Risk.EXTERNAL_READ, Risk.EXTERNAL_WRITE, Risk.EXEC]


class Status(enum.StrEnum):
    ACTIVE = "active"
    PENDING = "pending"
    SHADOWED = "shadowed"
    REJECTED = "rejected"


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found while loading, in the shape of DESIGN §3."""

    severity: Severity
    code: DiagnosticCode
    message: str
    tool: str | None = None
    source: Source | None = None
    path: str | None = None
    pointer: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": str(self.severity),
            "code": self.code,
            "tool": self.tool,
            "source": None if self.source is None else str(self.source),
            "path": self.path,
            "pointer": self.pointer,
            "message": self.message,
        }


def error(code: DiagnosticCode, message: str, **where: Any) -> Diagnostic:
    return Diagnostic(Severity.ERROR, code, message, **where)


def warning(code: DiagnosticCode, message: str, **where: Any) -> Diagnostic:
    return Diagnostic(Severity.WARNING, code, message, **where)


def info(code: DiagnosticCode, message: str, **where: Any) -> Diagnostic:
    return Diagnostic(Severity.INFO, code, message, **where)


# ---------------------------------------------------------------------------------------------
# The manifest (schema.json). The published JSON Schema is generated from these models
# (tooldir/manifest.schema.json, kept in sync by a test).


def _name_chars_only(value: str) -> str:
    if _NAME_FORBIDDEN.search(value) is not None:
        raise ValueError(explain_invalid(value))
    return value


def _env_chars_only(value: str) -> str:
    if _ENV_FORBIDDEN.search(value) is not None:
        raise ValueError("a variable name uses only ASCII letters, digits and '_'")
    return value


def _secret_chars_only(value: str) -> str:
    if _SECRET_FORBIDDEN.search(value) is not None:
        raise ValueError("a secret name uses only ASCII capital letters, digits and '_' ([A-Z][A-Z0-9_]*)")
    return value


def _object_schema(value: FrozenDict) -> FrozenDict:
    if value.get("type") != "object":
        raise ValueError('input_schema must have "type": "object"')
    return value


_NAME_FORBIDDEN = re.compile(NAME_FORBIDDEN)
_ENV_FORBIDDEN_CLASS = "[^A-Za-z0-9_]"
_ENV_FORBIDDEN = re.compile(_ENV_FORBIDDEN_CLASS)
_SECRET_FORBIDDEN_CLASS = "[^A-Z0-9_]"  # noqa: S105 - a character class, not a password
_SECRET_FORBIDDEN = re.compile(_SECRET_FORBIDDEN_CLASS)
#: At most this many secrets per tool (DESIGN §11).
MAX_SECRETS = 16

#: A tool name (:mod:`tooldir.names` holds the rule); the schema never uses an anchored pattern.
ToolName = Annotated[
    StrictStr,
    StringConstraints(min_length=1, max_length=NAME_MAX_LENGTH),
    AfterValidator(_name_chars_only),
    WithJsonSchema({"type": "string", **NAME_JSON_SCHEMA}),
]
EnvName = Annotated[
    StrictStr,
    StringConstraints(min_length=1, max_length=128, pattern="^[A-Za-z_]"),
    AfterValidator(_env_chars_only),
    WithJsonSchema(
        {
            "$comment": "A variable name: a letter or '_', then letters, digits, '_'; at most 128. "
            "No regex '$' (see name).",
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": "^[A-Za-z_]",
            "not": {"pattern": _ENV_FORBIDDEN_CLASS},
        }
    ),
]
#: A secret's name (DESIGN §11): ``[A-Z][A-Z0-9_]*``, at most 128 characters.
SecretName = Annotated[
    StrictStr,
    StringConstraints(min_length=1, max_length=128, pattern="^[A-Z]"),
    AfterValidator(_secret_chars_only),
    WithJsonSchema(
        {
            "$comment": "A secret's name: a capital letter, then capitals, digits, '_'; at most 128. "
            "No regex '$' (see name).",
            "type": "string",
            "minLength": 1,
            "maxLength": 128,
            "pattern": "^[A-Z]",
            "not": {"pattern": _SECRET_FORBIDDEN_CLASS},
        }
    ),
]
InputSchema = Annotated[
    FrozenDict,
    AfterValidator(_object_schema),
    WithJsonSchema({"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}}}),
]


def _allow_entry(text: str) -> str:
    parse_entry(text)  # the schema checks the shape; this the rest (port range, labels, addresses)
    return text


AllowText = Annotated[
    StrictStr,
    StringConstraints(min_length=3, max_length=262, pattern=ENTRY_PATTERN),
    AfterValidator(_allow_entry),
]


class NetworkAllow(BaseModel):
    """``execute.network = {"allow": ["HOST:PORT", ...]}``: the only destinations the tool may
    reach, through tooldir's proxy (exact names, ``*.domain``, IPv4 and bracketed IPv6 literals;
    a port is required). The policy's ``sandbox.network_allow`` may narrow it, never widen it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)

    allow: tuple[AllowText, ...] = Field(
        max_length=64,
        strict=False,
        description="HOST:PORT destinations: api.example.com:443, *.example.com:443, 127.0.0.1:8080, [::1]:8080",
    )


Network = Annotated[
    bool | NetworkAllow,
    Field(
        description='false (no network), {"allow": ["HOST:PORT", ...]} (only these, through tooldir\'s '
        "proxy), or true (anything; only if the policy sets sandbox.network_unrestricted)"
    ),
]


class ExecuteSpec(BaseModel):
    """How to run the tool: an argv array, never a shell string."""

    # strict: no coercion ("yes" is not True, "3" is not 3); arrays arrive as JSON lists, so the
    # tuple fields alone take a list (their items stay strict)
    # defer_build: a load builds these from schema-checked data (manifest_from_checked) and never
    # needs pydantic's validators; they are built on first model_validate/model_dump/schema use
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, defer_build=True)

    command: tuple[Annotated[StrictStr, StringConstraints(min_length=1, max_length=1024)], ...] = Field(
        min_length=1,
        max_length=64,
        strict=False,
        description="argv array; argv[0] is a package file or an interpreter the policy allows. No shell.",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, le=3600, description="wall-clock limit in seconds; capped by policy"
    )
    network: Network = False
    env: tuple[EnvName, ...] = Field(
        default=(),
        max_length=64,
        strict=False,
        description="environment variable names to pass through, if policy allows",
    )
    secrets: tuple[SecretName, ...] = Field(
        default=(),
        max_length=MAX_SECRETS,
        strict=False,
        description="names of secrets (values in the user's secrets.toml) the tool needs, if the user's policy "
        "grants them; each arrives as that environment variable",
    )

    def declared_network(self) -> bool | tuple[str, ...]:
        """``network`` as :meth:`tooldir.policy.SandboxPolicy.network_grant` takes it."""
        return self.network if isinstance(self.network, bool) else self.network.allow

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _no_null_timeout(cls, value: Any) -> Any:
        # the default (no limit of its own) is written by leaving the key out; JSON null is refused
        if value is None:
            raise ValueError("timeout_s must be a number; leave it out for the policy's limit")
        return value


class Manifest(BaseModel):
    """A validated schema.json. ``input_schema`` is a deep-frozen JSON object.

    The source of truth of the published ``tooldir/manifest.schema.json``
    (``python -m tooldir.read.genschema`` writes it; a test keeps them equal).
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        defer_build=True,  # see ExecuteSpec
        arbitrary_types_allowed=True,
        title="tooldir tool manifest (schema.json)",
        json_schema_extra={"description": "A static description of one tool package. Unknown keys are errors."},
    )

    name: ToolName = Field(
        description="ASCII tool name, valid for Anthropic, OpenAI and MCP; equal to the folder name."
    )
    description: StrictStr = Field(
        min_length=1, max_length=4096, description="What the tool does, for the model and the reviewer."
    )
    input_schema: InputSchema = Field(
        description="JSON Schema (draft 2020-12) of the tool's input; its type is object."
    )
    risk: Risk = Field(strict=False, description="What the tool may do, ordered by danger.")  # a value of the enum
    keywords: tuple[Annotated[StrictStr, StringConstraints(min_length=1, max_length=64)], ...] = Field(
        default=(), max_length=32, strict=False, description="Extra search terms."
    )
    execute: ExecuteSpec


_M = TypeVar("_M", bound=BaseModel)
_S = TypeVar("_S", bound=ExecuteSpec)


class ServerSpec(ExecuteSpec):
    """How to start an MCP server package (``server.json``): an argv array run over stdio, never a
    shell string; the fields and rules of :class:`ExecuteSpec` (DESIGN §10), with ``timeout_s``
    also bounding the server's start-up."""

    timeout_s: float | None = Field(
        default=None, gt=0, le=3600, description="limit in seconds for start-up and for each call; capped by policy"
    )
    network: Network = False


class ServerManifest(BaseModel):
    """A validated server.json: an MCP server package whose tools tooldir offers as
    ``<name>__<tool>`` once the package is trusted.

    The source of truth of the published ``tooldir/server.schema.json``
    (``python -m tooldir.read.genschema`` writes it; a test keeps them equal).
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        strict=True,
        defer_build=True,  # see ExecuteSpec
        title="tooldir MCP server package manifest (server.json)",
        json_schema_extra={"description": "A static description of one MCP server package. Unknown keys are errors."},
    )

    name: ToolName = Field(description="ASCII package name; equal to the folder name; prefixes its tools' names.")
    description: StrictStr = Field(
        min_length=1, max_length=4096, description="What the server offers, for the reviewer."
    )
    risk: Risk = Field(strict=False, description="The highest risk of any of its tools (a ceiling).")
    keywords: tuple[Annotated[StrictStr, StringConstraints(min_length=1, max_length=64)], ...] = Field(
        default=(), max_length=32, strict=False, description="Extra search terms."
    )
    server: ServerSpec


#: One ``model_fields_set`` object per distinct set of given keys (at most 2**6 for a manifest, 2**5
#: for its execute spec), shared by every model built from checked data: a pydantic model keeps
#: its own set (~0.9 KB a tool, 9 MB at 10k) and a frozen one never changes it.
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}


def _built(cls: type[_M], values: dict[str, Any], given: Mapping[str, Any]) -> _M:
    """What ``cls.model_construct(**values)`` makes -- pydantic's own last steps: the field values
    as ``__dict__`` (every field, in declaration order), the given keys as the fields set, no
    extra and no private values -- without its Python loop over every field (which costs more
    than validating; tests/unit/validate/test_model_construct.py checks these models have no
    extra, private attributes or post-init, and that the result equals ``model_validate``)."""
    keys = frozenset(given)
    fields_set = _FIELDS_SETS.get(keys)
    if fields_set is None:
        fields_set = _FIELDS_SETS.setdefault(keys, set(keys))
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", values)
    object.__setattr__(model, "__pydantic_fields_set__", fields_set)
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    return model


def _spec(cls: type[_S], raw: Mapping[str, Any]) -> _S:
    """An ExecuteSpec/ServerSpec from its checked JSON object: defaults for the keys not given."""
    values = {
        "command": tuple(raw["command"]),
        "timeout_s": float(raw["timeout_s"]) if "timeout_s" in raw else None,  # strict float: an int becomes a float
        "network": _network(raw.get("network", False)),
        "env": tuple(raw["env"]) if "env" in raw else (),
        "secrets": tuple(raw["secrets"]) if "secrets" in raw else (),
    }
    return _built(cls, values, raw)


def _network(raw: Any) -> bool | NetworkAllow:
    """``execute.network`` / ``server.network`` from checked JSON."""
    if isinstance(raw, bool):
        return raw
    return _built(NetworkAllow, {"allow": tuple(raw["allow"])}, raw)


def manifest_from_checked(data: Mapping[str, Any]) -> Manifest:
    """``Manifest.model_validate(data)`` for a ``data`` the published schema
    (``tooldir/manifest.schema.json``) already accepted, without validating it again: the same
    values, types (tuples, the enum, a float timeout, the very input_schema object) and set fields.

    The schema is generated from the model and enforces every one of its constraints, custom
    validators included (tests/unit/validate/test_model_construct.py feeds each violation through
    the scan path and compares with the model); so a load never builds the pydantic validators
    (``defer_build``). Anything else must go through ``model_validate``."""
    values = {
        "name": data["name"],
        "description": data["description"],
        "input_schema": data["input_schema"],
        "risk": Risk(data["risk"]),
        "keywords": tuple(data["keywords"]) if "keywords" in data else (),
        "execute": _spec(ExecuteSpec, data["execute"]),
    }
    return _built(Manifest, values, data)


def server_manifest_from_checked(data: Mapping[str, Any]) -> ServerManifest:
    """:func:`manifest_from_checked` for server.json: ``ServerManifest.model_validate(data)`` of a
    ``data`` the published server schema (``tooldir/server.schema.json``) already accepted."""
    values = {
        "name": data["name"],
        "description": data["description"],
        "risk": Risk(data["risk"]),
        "keywords": tuple(data["keywords"]) if "keywords" in data else (),
        "server": _spec(ServerSpec, data["server"]),
    }
    return _built(ServerManifest, values, data)


@dataclass(frozen=True, slots=True)
class UpstreamRef:
    """What makes a record an upstream MCP tool: its server package and the pinned definition."""

    package: str  # the server package's name
    package_path: str
    package_digest: str
    tool: str  # the tool's name upstream
    definition_digest: str  # "sha256:<hex>" of the definition as pinned
    listed_at: str  # ISO time of the listing it came from
    title: str = ""  # the tool's ``title`` upstream (indexed for search beside its description)
    server_description: str = ""  # the package's own server.json description (indexed for search)


# ---------------------------------------------------------------------------------------------
# Discovery and evaluation results


@dataclass(frozen=True, slots=True)
class PackageFile:
    """One regular file of a tool package, as read during discovery."""

    path: str  # relative, '/'-separated
    sha256: str  # hex
    size: int
    executable: bool


@dataclass(frozen=True, slots=True)
class Trust:
    """How a tool earned (or failed to earn) trust. ``method`` is a short label for people."""

    trusted: bool
    method: str  # "none-required" | "approved" | "pinned" | "signed:<key id>" | "unverified" | ...
    signer: str | None = None
    version: int | None = None
    signers: tuple[str, ...] = ()  # every key whose signature verified; each keeps a high-water mark


_SEAL: list[object] = []  # filled once, by _issue_seal


def _issue_seal() -> object:
    """The token a :class:`Grant` is made with; handed out once, to :mod:`tooldir.trust.assess` (which
    takes it when it is imported, before anything else can ask)."""
    if _SEAL:
        raise RuntimeError("the grant seal belongs to tooldir.trust.assess; only the trust stage makes a Grant")
    _SEAL.append(object())
    return _SEAL[0]


class Grant(tuple[str, Source, str | None, str, object]):
    """The trust stage's word that one exact tool (name, source, digest) may run, and how it
    earned that (``method``). A private constructor: only :mod:`tooldir.trust.assess` can make one
    (anything else raises ``TypeError``), so no caller can mint a runnable record. Immutable (a
    tuple underneath, so a load of 10,000 tools pays next to nothing for it)."""

    __slots__ = ()

    def __new__(cls, name: str, source: Source, digest: str | None, method: str, *, seal: object = None) -> Grant:
        if not _SEAL or seal is not _SEAL[0]:
            raise TypeError("a Grant is made only by the trust stage (tooldir.trust.assess)")
        return tuple.__new__(cls, (name, source, digest, method, seal))

    @property
    def name(self) -> str:
        return self[0]

    @property
    def source(self) -> Source:
        return self[1]

    @property
    def digest(self) -> str | None:
        return self[2]

    @property
    def method(self) -> str:
        return self[3]

    def __repr__(self) -> str:
        return f"Grant({self[0]!r}, {self[1]}, {self[2]!r}, {self[3]!r})"

    def __copy__(self) -> Grant:
        return self  # immutable

    def __deepcopy__(self, memo: Any) -> Grant:
        return self

    def __reduce__(self) -> Any:
        raise TypeError("a Grant cannot be pickled: it is valid only in the process whose trust stage made it")


_ACTIVE = Status.ACTIVE  # a module constant: enum member lookups cost, once per record


def is_runnable(record: ToolRecord) -> bool:
    """An active record with the trust stage's grant for exactly it (what the registry runs)."""
    grant = record.grant
    return (
        record.status is _ACTIVE
        and type(grant) is Grant
        and len(grant) == 5
        and grant[4] is _SEAL[0]
        and grant[0] == record.name
        and grant[1] is record.source
        and grant[2] == record.digest
    )


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """One tool in a snapshot, whatever its status. ``status=ACTIVE`` needs ``grant``, a
    :class:`Grant` from the trust stage for this very name, source and digest (else ``ValueError``);
    a record of any other status carries none."""

    name: str
    source: Source
    path: str | None  # absolute package directory; None for builtins
    status: Status
    trust: Trust
    digest: str | None  # "sha256:<hex>" over the whole package
    risk: Risk | None
    #: what the ``[defer]`` rules say for this name (:func:`tooldir.deferred.defer.rules_defer`): a candidate
    #: only. Whether the tool starts deferred is the :class:`tooldir.deferred.defer.DeferralPlan`'s answer
    #: (in ``auto`` mode it also weighs tokens), the one that :meth:`to_json` reports.
    defer_candidate: bool
    manifest: Manifest | None
    files: tuple[PackageFile, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    shadowed_by: str | None = None  # path (or "builtin:<name>") of the winner, when shadowed
    grant: Grant | None = field(default=None, repr=False)
    #: a server.json package (DESIGN §10): never offered itself; its tools are upstream records
    server: ServerManifest | None = None
    #: an upstream MCP tool (``<package>__<tool>``), run through its package's sandboxed session
    upstream: UpstreamRef | None = None

    def __post_init__(self) -> None:
        if self.status is _ACTIVE:
            if not is_runnable(self):
                raise ValueError(
                    f"tool {self.name!r}: an active record needs the trust stage's Grant for its name, source and digest"
                )
        elif self.grant is not None:
            raise ValueError(f"tool {self.name!r}: a {self.status} record carries no Grant")

    def to_json(self, deferred: Callable[[str], bool] | None = None) -> dict[str, Any]:
        """The record as ``scan --json`` prints it; ``deferred`` is the deferral plan's answer
        (pass ``plan.is_deferred`` of the :class:`tooldir.deferred.defer.DeferralPlan` a fresh session over
        the snapshot starts from: :func:`tooldir.deferred.session.initial_plan`), and absent without one:
        the record alone cannot say."""
        data: dict[str, Any] = {
            "name": self.name,
            "source": str(self.source),
            "path": self.path,
            "status": str(self.status),
            "trust": self.trust.method,
            "digest": self.digest,
            "risk": None if self.risk is None else str(self.risk),
        }
        if deferred is not None:
            data["deferred"] = deferred(self.name)
        return data


_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


def why_not_runnable(name: str, record: ToolRecord | None, *, for_model: bool = False) -> str:
    """The one phrasing of "this cannot run" (every refusal of a tool that is not
    :func:`is_runnable`: ``tooldir run``, the registry, a session, ``tool_search``'s
    ``unavailable``, ``allow`` of a server package). ``name`` is the name asked for; ``record``
    the record found under it (None: none is).

    ``for_model``: the text may reach the model, so only the status and diagnostic codes are
    kept: a diagnostic's message (and a shadowing path) may quote the tool's own text, and nothing
    of a pending or rejected tool may reach the model (trust:listing). Otherwise the first
    error's (else warning's) ``code: message`` says why."""
    advice = f"it cannot run until the user trusts it (see `tooldir show {name}`)"
    if record is None:
        return f"tool {name!r} is not active; {advice}"
    subject = f"MCP server package {record.name!r}" if record.server is not None else f"tool {name!r}"
    if record.server is not None and is_runnable(record):  # trusted, but never offered itself
        return f"{subject} is not a tool itself: its tools are called as {record.name}__<tool>"
    if record.status is _ACTIVE:  # marked active, but not by the trust stage (hand-made or altered)
        return f"{subject} has no grant from the trust stage for its digest; {advice}"
    if for_model:
        why: str | None = ", ".join(sorted({d.code for d in record.diagnostics})) or None
    else:
        ranked = sorted(record.diagnostics, key=lambda d: _SEVERITY_RANK.get(str(d.severity), 3))
        why = next((f"{d.code}: {d.message}" for d in ranked if str(d.severity) != "info"), None)
        if why is None and record.shadowed_by:
            why = f"shadowed by {record.shadowed_by}"
    return f"{subject} is {record.status}" + (f" ({why})" if why else "") + f"; {advice}"


@dataclass(frozen=True, slots=True)
class BuiltinSpec:
    """A tool registered in Python by the host application (its name is reserved)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    risk: Risk = Risk.READ
    extra: Mapping[str, Any] = field(default_factory=dict)
