"""tooldir: load LLM agent tools from directories on disk, safely.

Public surface only; everything not in ``__all__`` is private.
"""

# First, before anything else is imported: ``python -m tooldir`` takes the project off sys.path.
from . import _safepath  # noqa: F401  # isort: split
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
from .hooks import Deny, HookCall, Redact, Rewrite
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
from .permissions import PermissionCheck, PermissionRequest
from .policy import Policy, load_policy
from .registry import CallError, CallGate, CallResult, Registry, UpstreamCaller
from .sandbox import RunRequest, RunResult, Sandbox
from .search import Bm25fParams, Hit, LexicalScores, ParsedQuery, Ranker, SearchDoc, SearchIndex
from .session import IndexFollower, SearchResult, Session
from .snapshot import Snapshot, SnapshotDiff, SnapshotStore
from .state import Approval
from .tokens import TokenCounter, TokenReport
from .watch import Observer, Watcher, WatchProblem, WatchStatus

__all__ = [
    "Approval",
    "AuditEvent",
    "AuditSink",
    "Bm25fParams",
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
    "HookCall",
    "IndexFollower",
    "LexicalScores",
    "LoadConfig",
    "Loader",
    "LockWritten",
    "Manifest",
    "Match",
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
    "remember_load",
    "review",
    "revoke",
    "sign",
]
