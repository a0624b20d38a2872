"""tooldir: load LLM agent tools from directories on disk, safely.

Public surface only; everything not in ``__all__`` is private.

Importing the package is cheap: every public name is imported from its module on first use
(PEP 562 ``__getattr__``), so ``import tooldir`` or ``tooldir --help`` never pays for pydantic,
jsonschema, cryptography, watchdog, rich or the MCP SDK (tests/test_startup_imports.py).
"""

import importlib as _importlib
import typing as _typing  # private spellings: dir(tooldir) is exactly the public names and modules

# First, before anything else is imported: ``python -m tooldir`` takes the project off sys.path.
from . import _safepath  # noqa: F401  # isort: split

if _typing.TYPE_CHECKING:
    from ._internal.gcpause import gc_paused
    from .audit import AuditEvent, AuditSink
    from .catalog import DirectoryEntry, Match, ToolDef
    from .discover import RootSpec
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
    from .hooks import Deny, Hook, HookCall, Redact, Rewrite
    from .loader import LoadConfig, Loader, SignatureCheckFactory, load, make_config, remember_load
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
    from .permissions import PermissionCheck, PermissionRequest
    from .policy import ManagedOverride, Policy, load_policy
    from .registry import CallError, CallGate, CallResult, Registry, UpstreamCaller
    from .sandbox import RunRequest, RunResult, Sandbox
    from .search import Bm25fParams, Hit, LexicalScores, ParsedQuery, Ranker, SearchDoc, SearchIndex
    from .session import IndexFollower, SearchResult, Session
    from .snapshot import Snapshot, SnapshotDiff, SnapshotStore
    from .state import Approval
    from .tokens import TokenCounter, TokenReport
    from .toolbox import Builtin, Toolbox, open
    from .watch import Observer, Watcher, WatchProblem, WatchStatus

#: Every public name and the submodule (relative to this package) that defines it.
_LAZY: dict[str, str] = {
    "AllowEntry": "netallow",
    "NetworkGrant": "netallow",
    "Approval": "state",
    "AuditEvent": "audit",
    "AuditSink": "audit",
    "Bm25fParams": "search",
    "Builtin": "toolbox",
    "BuiltinSpec": "model",
    "CallError": "registry",
    "CallGate": "registry",
    "CallResult": "registry",
    "ConfigError": "errors",
    "Deny": "hooks",
    "Diagnostic": "model",
    "DirectoryEntry": "catalog",
    "DiscoveryError": "errors",
    "ExecutionError": "errors",
    "Grant": "model",
    "Hit": "search",
    "Hook": "hooks",
    "HookCall": "hooks",
    "IndexFollower": "session",
    "LexicalScores": "search",
    "LoadConfig": "loader",
    "Loader": "loader",
    "LockWritten": "manage",
    "Manifest": "model",
    "Match": "catalog",
    "Observer": "watch",
    "PackageError": "errors",
    "PackageFile": "model",
    "PackageRef": "manage",
    "ParsedQuery": "search",
    "Ranker": "search",
    "PermissionCheck": "permissions",
    "PermissionDeniedError": "errors",
    "PermissionRequest": "permissions",
    "Policy": "policy",
    "PolicyError": "errors",
    "Redact": "hooks",
    "Registry": "registry",
    "Rewrite": "hooks",
    "Risk": "model",
    "RootSpec": "discover",
    "RunRequest": "sandbox",
    "RunResult": "sandbox",
    "Sandbox": "sandbox",
    "SandboxError": "errors",
    "SearchDoc": "search",
    "SearchIndex": "search",
    "SearchResult": "session",
    "ServerManifest": "model",
    "ServerSpec": "model",
    "Session": "session",
    "Severity": "model",
    "SignatureCheckFactory": "loader",
    "SignatureWritten": "manage",
    "Snapshot": "snapshot",
    "SnapshotDiff": "snapshot",
    "SnapshotStore": "snapshot",
    "Source": "model",
    "StateError": "errors",
    "Status": "model",
    "TokenCounter": "tokens",
    "TokenReport": "tokens",
    "ToolDef": "catalog",
    "ToolDirError": "errors",
    "Toolbox": "toolbox",
    "ToolRecord": "model",
    "Trust": "model",
    "UpstreamCaller": "registry",
    "UpstreamRef": "model",
    "Verdict": "manage",
    "WatchProblem": "watch",
    "WatchStatus": "watch",
    "Watcher": "watch",
    "approve": "manage",
    "explain": "manage",
    "gc_paused": "_internal.gcpause",
    "load": "loader",
    "load_policy": "policy",
    "ManagedOverride": "policy",
    "locate": "manage",
    "lock": "manage",
    "make_config": "loader",
    "open": "toolbox",
    "remember_load": "loader",
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
