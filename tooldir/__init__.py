"""tooldir: load LLM agent tools from directories on disk, safely.

Public surface only; everything not in ``__all__`` is private.

Importing the package is cheap: every public name is imported from its module on first use
(PEP 562 ``__getattr__``), so ``import tooldir`` or ``tooldir --help`` never pays for pydantic,
jsonschema, cryptography, watchdog, rich or the MCP SDK (tests/test_startup_imports.py).
"""

import importlib as _importlib
import typing as _typing  # private spellings: dir(tooldir) is exactly the public names and modules

# First, before anything else is imported: ``python -m tooldir`` takes the project off sys.path.
from ._internal import safepath as _safepath  # noqa: F401  # isort: split

if _typing.TYPE_CHECKING:
    from ._internal.gcpause import gc_paused
    from .deferred.catalog import DirectoryEntry, Match, ToolDef
    from .deferred.search import Bm25fParams, Hit, LexicalScores, ParsedQuery, Ranker, SearchDoc, SearchIndex
    from .deferred.session import IndexFollower, SearchResult, Session
    from .deferred.tokens import TokenCounter, TokenReport
    from .errors import (
        ConfigError,
        DiscoveryError,
        ExecutionError,
        PackageError,
        PermissionDeniedError,
        PolicyError,
        SandboxError,
        StateError,
        ToolDirError,
    )
    from .manage import (
        LockWritten,
        PackageRef,
        SignatureWritten,
        Verdict,
        approve,
        explain,
        locate,
        lock,
        review,
        revoke,
        sign,
    )
    from .model import (
        BuiltinSpec,
        Diagnostic,
        Grant,
        Manifest,
        PackageFile,
        Risk,
        ServerManifest,
        ServerSpec,
        Severity,
        Source,
        Status,
        ToolRecord,
        Trust,
        UpstreamRef,
    )
    from .netallow import AllowEntry, NetworkGrant
    from .policy import ManagedOverride, Policy, load_policy
    from .read.discover import RootSpec
    from .run.audit import AuditEvent, AuditSink
    from .run.hooks import Deny, Hook, HookCall, Redact, Rewrite
    from .run.permissions import PermissionCheck, PermissionRequest
    from .run.registry import CallError, CallGate, CallResult, Registry, UpstreamCaller
    from .sandbox import RunRequest, RunResult, Sandbox
    from .snapshot.loader import LoadConfig, Loader, SignatureCheckFactory, load, make_config, remember_load
    from .snapshot.store import Snapshot, SnapshotDiff, SnapshotStore
    from .snapshot.watch import Observer, Watcher, WatchProblem, WatchStatus
    from .state import Approval
    from .toolbox import Builtin, Toolbox, open

#: Every public name and the submodule (relative to this package) that defines it.
_LAZY: dict[str, str] = {
    "AllowEntry": "netallow",
    "NetworkGrant": "netallow",
    "Approval": "state",
    "AuditEvent": "run.audit",
    "AuditSink": "run.audit",
    "Bm25fParams": "deferred.search",
    "Builtin": "toolbox",
    "BuiltinSpec": "model",
    "CallError": "run.registry",
    "CallGate": "run.registry",
    "CallResult": "run.registry",
    "ConfigError": "errors",
    "Deny": "run.hooks",
    "Diagnostic": "model",
    "DirectoryEntry": "deferred.catalog",
    "DiscoveryError": "errors",
    "ExecutionError": "errors",
    "Grant": "model",
    "Hit": "deferred.search",
    "Hook": "run.hooks",
    "HookCall": "run.hooks",
    "IndexFollower": "deferred.session",
    "LexicalScores": "deferred.search",
    "LoadConfig": "snapshot.loader",
    "Loader": "snapshot.loader",
    "LockWritten": "manage",
    "Manifest": "model",
    "Match": "deferred.catalog",
    "Observer": "snapshot.watch",
    "PackageError": "errors",
    "PackageFile": "model",
    "PackageRef": "manage",
    "ParsedQuery": "deferred.search",
    "Ranker": "deferred.search",
    "PermissionCheck": "run.permissions",
    "PermissionDeniedError": "errors",
    "PermissionRequest": "run.permissions",
    "Policy": "policy",
    "PolicyError": "errors",
    "Redact": "run.hooks",
    "Registry": "run.registry",
    "Rewrite": "run.hooks",
    "Risk": "model",
    "RootSpec": "read.discover",
    "RunRequest": "sandbox",
    "RunResult": "sandbox",
    "Sandbox": "sandbox",
    "SandboxError": "errors",
    "SearchDoc": "deferred.search",
    "SearchIndex": "deferred.search",
    "SearchResult": "deferred.session",
    "ServerManifest": "model",
    "ServerSpec": "model",
    "Session": "deferred.session",
    "Severity": "model",
    "SignatureCheckFactory": "snapshot.loader",
    "SignatureWritten": "manage",
    "Snapshot": "snapshot.store",
    "SnapshotDiff": "snapshot.store",
    "SnapshotStore": "snapshot.store",
    "Source": "model",
    "StateError": "errors",
    "Status": "model",
    "TokenCounter": "deferred.tokens",
    "TokenReport": "deferred.tokens",
    "ToolDef": "deferred.catalog",
    "ToolDirError": "errors",
    "Toolbox": "toolbox",
    "ToolRecord": "model",
    "Trust": "model",
    "UpstreamCaller": "run.registry",
    "UpstreamRef": "model",
    "Verdict": "manage",
    "WatchProblem": "snapshot.watch",
    "WatchStatus": "snapshot.watch",
    "Watcher": "snapshot.watch",
    "approve": "manage",
    "explain": "manage",
    "gc_paused": "_internal.gcpause",
    "load": "snapshot.loader",
    "load_policy": "policy",
    "ManagedOverride": "policy",
    "locate": "manage",
    "lock": "manage",
    "make_config": "snapshot.loader",
    "open": "toolbox",
    "remember_load": "snapshot.loader",
    "review": "manage",
    "revoke": "manage",
    "sign": "manage",
}


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module on first use and then kept here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AllowEntry",
    "Approval",
    "AuditEvent",
    "AuditSink",
    "Bm25fParams",
    "Builtin",
    "BuiltinSpec",
    "CallError",
    "CallGate",
    "CallResult",
    "ConfigError",
    "Deny",
    "Diagnostic",
    "DirectoryEntry",
    "DiscoveryError",
    "ExecutionError",
    "Grant",
    "Hit",
    "Hook",
    "HookCall",
    "IndexFollower",
    "LexicalScores",
    "LoadConfig",
    "Loader",
    "LockWritten",
    "ManagedOverride",
    "Manifest",
    "Match",
    "NetworkGrant",
    "Observer",
    "PackageError",
    "PackageFile",
    "PackageRef",
    "ParsedQuery",
    "PermissionCheck",
    "PermissionDeniedError",
    "PermissionRequest",
    "Policy",
    "PolicyError",
    "Ranker",
    "Redact",
    "Registry",
    "Rewrite",
    "Risk",
    "RootSpec",
    "RunRequest",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "SearchDoc",
    "SearchIndex",
    "SearchResult",
    "ServerManifest",
    "ServerSpec",
    "Session",
    "Severity",
    "SignatureCheckFactory",
    "SignatureWritten",
    "Snapshot",
    "SnapshotDiff",
    "SnapshotStore",
    "Source",
    "StateError",
    "Status",
    "TokenCounter",
    "TokenReport",
    "ToolDef",
    "ToolDirError",
    "ToolRecord",
    "Toolbox",
    "Trust",
    "UpstreamCaller",
    "UpstreamRef",
    "Verdict",
    "WatchProblem",
    "WatchStatus",
    "Watcher",
    "approve",
    "explain",
    "gc_paused",
    "load",
    "load_policy",
    "locate",
    "lock",
    "make_config",
    "open",
    "remember_load",
    "review",
    "revoke",
    "sign",
]
