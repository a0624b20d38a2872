"""Frozen value types shared by every stage.

The type name records how far data has been checked::

    PackageScan (discover)  ->  Candidate (validate)  ->  ToolRecord (resolve)  ->  Snapshot

Trust is a type, not a flag: a :class:`ToolRecord` is ``active`` only if it carries a
:class:`Grant` for exactly its name, source and digest, and only the trust stage
(:mod:`tooldir.trust`, which holds the seal) can make a Grant. The registry runs nothing else.

Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._internal.strictjson import FrozenDict
from .names import NAME_RE


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
    code: str
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


def error(code: str, message: str, **where: Any) -> Diagnostic:
    return Diagnostic(Severity.ERROR, code, message, **where)


def warning(code: str, message: str, **where: Any) -> Diagnostic:
    return Diagnostic(Severity.WARNING, code, message, **where)


def info(code: str, message: str, **where: Any) -> Diagnostic:
    return Diagnostic(Severity.INFO, code, message, **where)


# ---------------------------------------------------------------------------------------------
# The manifest (schema.json). The published JSON Schema is generated from these models
# (tooldir/manifest.schema.json, kept in sync by a test).


class ExecuteSpec(BaseModel):
    """How to run the tool: an argv array, never a shell string."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: tuple[str, ...] = Field(
        min_length=1, max_length=64, description="argv; argv[0] is a package file or an allowed interpreter"
    )
    timeout_s: float | None = Field(default=None, gt=0, le=3600, description="wall-clock limit; capped by policy")
    network: bool = Field(default=False, description="the tool needs network access (policy decides)")
    env: tuple[str, ...] = Field(
        default=(), max_length=64, description="environment variable names to pass through, if policy allows"
    )


class Manifest(BaseModel):
    """A validated schema.json. ``input_schema`` is a deep-frozen JSON object."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(min_length=1, max_length=64, pattern=NAME_RE.pattern)
    description: str = Field(min_length=1, max_length=4096)
    input_schema: FrozenDict
    risk: Risk
    keywords: tuple[str, ...] = Field(default=(), max_length=32)
    execute: ExecuteSpec


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
    """The token a :class:`Grant` is made with; handed out once, to :mod:`tooldir.trust` (which
    takes it when it is imported, before anything else can ask)."""
    if _SEAL:
        raise RuntimeError("the grant seal belongs to tooldir.trust; only the trust stage makes a Grant")
    _SEAL.append(object())
    return _SEAL[0]


class Grant(tuple[str, Source, str | None, str, object]):
    """The trust stage's word that one exact tool (name, source, digest) may run, and how it
    earned that (``method``). A private constructor: only :mod:`tooldir.trust` can make one
    (anything else raises ``TypeError``), so no caller can mint a runnable record. Immutable (a
    tuple underneath, so a load of 10,000 tools pays next to nothing for it)."""

    __slots__ = ()

    def __new__(cls, name: str, source: Source, digest: str | None, method: str, *, seal: object = None) -> Grant:
        if not _SEAL or seal is not _SEAL[0]:
            raise TypeError("a Grant is made only by the trust stage (tooldir.trust)")
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
    deferred: bool
    manifest: Manifest | None
    files: tuple[PackageFile, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    shadowed_by: str | None = None  # path (or "builtin:<name>") of the winner, when shadowed
    grant: Grant | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.status is _ACTIVE:
            if not is_runnable(self):
                raise ValueError(
                    f"tool {self.name!r}: an active record needs the trust stage's Grant for its name, source and digest"
                )
        elif self.grant is not None:
            raise ValueError(f"tool {self.name!r}: a {self.status} record carries no Grant")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": str(self.source),
            "path": self.path,
            "status": str(self.status),
            "trust": self.trust.method,
            "digest": self.digest,
            "risk": None if self.risk is None else str(self.risk),
            "deferred": self.deferred,
        }


@dataclass(frozen=True, slots=True)
class BuiltinSpec:
    """A tool registered in Python by the host application (its name is reserved)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    risk: Risk = Risk.READ
    extra: Mapping[str, Any] = field(default_factory=dict)
