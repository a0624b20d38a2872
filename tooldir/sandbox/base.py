"""The types every sandbox backend shares: :class:`RunRequest`, :class:`RunResult` and the
:class:`Sandbox` protocol. A module of its own so the backends import it, not the package that
re-exports them (no import cycle)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..model import ToolRecord
from ..netallow import AllowEntry


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run of a verified, active directory tool."""

    record: ToolRecord
    stdin: bytes
    timeout_s: float
    env: Mapping[str, str]
    network: bool  # the host's network (an unrestricted grant)
    #: granted secrets (DESIGN §11): set in the tool's environment too, after ``env``; never in a
    #: repr, never in a spare sandbox made ahead (a run with secrets sets its own sandbox up)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    egress: tuple[AllowEntry, ...] | None = None
    """With a ``network.allow`` grant: the destinations tooldir's proxy lets the tool reach (the
    sandbox keeps its own network namespace; ``network`` is then False)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    exit_code: int | None  # None when the run was killed (timeout, output cap)
    signal: int | None  # the signal that ended the tool's main process, if any
    stdout: bytes  # at most the cap
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_ms: float
    started: bool = True  # False when the sandbox never started the tool (set-up failed)
    memory_exceeded: bool = False  # the run's cgroup memory limit made the kernel kill it
    network: tuple[dict[str, Any], ...] | None = None
    """With an egress proxy: every connection the tool asked for (``Connection.to_json``)."""


class Sandbox(Protocol):
    """Runs one tool. Raises :class:`tooldir.SandboxError` when it cannot start the run (code
    ``sandbox-failed``) or the package no longer matches its verified hashes (``changed-since-verification``);
    a tool that runs and fails is a :class:`RunResult`, not an exception."""

    name: str

    def run(self, request: RunRequest) -> RunResult: ...
