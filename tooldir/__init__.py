"""tooldir: load LLM agent tools from directories on disk, safely.

Public surface only; everything not in ``__all__`` is private.
"""

# First, before anything else is imported: ``python -m tooldir`` takes the project off sys.path.
from . import _safepath  # noqa: F401  # isort: split
from .catalog import ToolDef
from .errors import (
    ConfigError,
    ExecutionError,
    PermissionDeniedError,
    PolicyError,
    SandboxError,
    StateError,
    ToolDirError,
)
from .hooks import Deny, HookCall, Redact, Rewrite
from .loader import LoadConfig, Loader, load, make_config, remember_load
from .model import BuiltinSpec, Diagnostic, Grant, Manifest, Risk, Severity, Source, Status, ToolRecord, Trust
from .permissions import PermissionCheck, PermissionRequest
from .policy import Policy, load_policy
from .registry import CallError, CallGate, CallResult, Registry
from .search import SearchIndex
from .session import IndexFollower, SearchResult, Session
from .snapshot import Snapshot, SnapshotDiff, SnapshotStore
from .tokens import TokenCounter, TokenReport
from .watch import Watcher, WatchProblem

__all__ = [
    "BuiltinSpec",
    "CallError",
    "CallGate",
    "CallResult",
    "ConfigError",
    "Deny",
    "Diagnostic",
    "ExecutionError",
    "Grant",
    "HookCall",
    "IndexFollower",
    "LoadConfig",
    "Loader",
    "Manifest",
    "PermissionCheck",
    "PermissionDeniedError",
    "PermissionRequest",
    "Policy",
    "PolicyError",
    "Redact",
    "Registry",
    "Rewrite",
    "Risk",
    "SandboxError",
    "SearchIndex",
    "SearchResult",
    "Session",
    "Severity",
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
    "WatchProblem",
    "Watcher",
    "load",
    "load_policy",
    "make_config",
    "remember_load",
]
