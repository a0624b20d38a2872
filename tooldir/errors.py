"""Every exception tooldir raises on purpose, grouped by who is at fault::

    ToolDirError                      .diagnostics() -> str
    ├── ConfigError                   the user's own configuration (exit code 2)
    │   ├── PolicyError               .path, .key, .line
    │   ├── StateError                .path
    │   ├── StateDirError             .setting, .value (a relative state location)
    │   ├── EvalDataError             .path, .line (tooldir.deferred.evaluate)
    │   ├── ScenarioError             .path (tooldir.drill.confine)
    │   │   └── ArenaEscapeError      .where, .target: a plant or step acting outside its arena
    │   ├── HttpSetupError            --http / --token-file unusable (tooldir.mcp.http)
    │   ├── SecretsFileError          .path: the user's secrets.toml cannot be used (tooldir.run.secrets)
    │   ├── ConfigFileError           an MCP client's config file cannot be merged (tooldir.mcp.clientfile)
    │   └── AdoptConfigError          .path, .line: a client's config file cannot be read (tooldir.adopt.entries)
    ├── DiscoveryError                a tool root cannot be opened
    ├── PackageError                  .path, .reason, .found (tooldir.manage: approve, lock, sign, ...)
    └── ExecutionError                .code
        ├── PermissionDeniedError
        └── SandboxError

Internal signals: raised and caught inside tooldir, never raised to a caller of the public API
(each becomes a diagnostic, a result, a ``ToolDirError`` or an exit code first)::

    ValueError
    ├── SignatureFormatError          tooldir.signatures: malformed key or signature text
    ├── LockError                     tooldir.trust.lockfile: malformed tool.lock (-> diagnostic)
    │   └── _DuplicateKeyError        private to the lock parser
    ├── StrictJSONError               tooldir._internal.strictjson (-> diagnostic)
    ├── RetrievalRefusedError         tooldir._internal.inputschema: a $ref that would fetch
    └── AllowEntryError               tooldir.netallow: a malformed HOST:PORT entry (-> diagnostic)
    Exception
    ├── BudgetExceededError           tooldir._internal.schema_worker (-> invalid-input result)
    ├── WorkerFailedError             tooldir._internal.schema_worker
    │   └── MemoryBoundError          tooldir._internal.schema_worker (-> invalid-input result)
    ├── SchemaCompileError            tooldir._internal.schema_worker
    ├── SecretUnavailableError        tooldir.run.secrets (-> secret-unavailable result)
    ├── Unreadable                    tooldir._internal.smallfile (-> PolicyError, SecretsFileError, ...)
    ├── NotRunnableError              tooldir.drill.confine: a drill that cannot run here
    ├── UnavailableError              tooldir.drill.confine
    ├── CommandError                  tooldir._cli.common: the CLI's exit code and message
    ├── AdoptError                    tooldir.adopt.install: one client entry not adopted (-> a reported adopt-* finding)
    ├── _Stop                         private to tooldir.run.registry (-> a call result)
    └── _Refused                      private to tooldir.sandbox.egress (-> a refused, recorded connection)
    RuntimeError
    └── SemanticUnavailable           tooldir.deferred.semantic: the optional model is missing (-> BM25F)

Bad manifests and untrusted packages are not exceptions: the loader reports them as diagnostics
on the snapshot.
Programmer misuse raises ``ValueError``/``RuntimeError`` so ``except ToolDirError`` never hides a bug.
Tool-side failures during ``Registry.call`` come back as results, not exceptions.
"""

from __future__ import annotations

from .codes import CallErrorCode
from .model import Diagnostic


class ToolDirError(Exception):
    """Base class. ``diagnostics()`` renders the error for people."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def diagnostics(self) -> str:
        return self.message


class ConfigError(ToolDirError):
    """The user's configuration (policy, state, CLI arguments) is unusable."""


class PolicyError(ConfigError):
    def __init__(self, message: str, *, path: str, key: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.key = key
        self.line = line

    def diagnostics(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"invalid policy {where}: {self.message}"


class StateError(ConfigError):
    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path

    def diagnostics(self) -> str:
        return f"invalid state file {self.path}: {self.message}"


class StateDirError(ConfigError):
    """The user's state location is unusable (relative: it would resolve inside the project)."""

    def __init__(self, message: str, *, setting: str, value: str) -> None:
        super().__init__(message)
        self.setting = setting
        self.value = value


class DiscoveryError(ToolDirError):
    """Bad directory contents."""


class PackageError(ToolDirError):
    """One package cannot be approved, locked, signed or explained (:mod:`tooldir.manage`).

    ``reason``: ``not-found``, ``ambiguous`` (a name in several roots), ``not-a-package``,
    ``invalid`` (``found`` holds its diagnostics), ``rejected`` (no approval overrides it),
    ``changed`` (since it was reviewed), ``no-lock``, ``stale-lock``."""

    def __init__(self, message: str, *, path: str, reason: str, found: tuple[Diagnostic, ...] = ()) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason
        self.found = found


class ExecutionError(ToolDirError):
    def __init__(self, message: str, *, code: CallErrorCode) -> None:
        super().__init__(message)
        self.code = code


class PermissionDeniedError(ExecutionError):
    pass


class SandboxError(ExecutionError):
    pass
