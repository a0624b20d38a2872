"""Frozen value types shared by every stage.

The type name records how far data has been checked::

    PackageScan (discover)  ->  Candidate (validate)  ->  ToolRecord (resolve)  ->  Snapshot

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


@dataclass(frozen=True, slots=True)
class ToolRecord:
    """One tool in a snapshot, whatever its status."""

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
