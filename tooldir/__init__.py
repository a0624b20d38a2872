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
    from ._internal.gcpause import (
        gc_paused as gc_paused,
    )
    from .codes import (
        CallErrorCode as CallErrorCode,
    )
    from .codes import (
        DiagnosticCode as DiagnosticCode,
    )
    from .codes import (
        WatchCode as WatchCode,
    )
    from .deferred.catalog import (
        DirectoryEntry as DirectoryEntry,
    )
    from .deferred.catalog import (
        Match as Match,
    )
    from .deferred.catalog import (
        ToolDef as ToolDef,
    )
    from .deferred.session import (
        SearchResult as SearchResult,
    )
    from .deferred.session import (
        Session as Session,
    )
    from .deferred.tokens import (
        TokenReport as TokenReport,
    )
    from .errors import (
        ConfigError as ConfigError,
    )
    from .errors import (
        DiscoveryError as DiscoveryError,
    )
    from .errors import (
        ExecutionError as ExecutionError,
    )
    from .errors import (
        PackageError as PackageError,
    )
    from .errors import (
        PermissionDeniedError as PermissionDeniedError,
    )
    from .errors import (
        PolicyError as PolicyError,
    )
    from .errors import (
        SandboxError as SandboxError,
    )
    from .errors import (
        StateError as StateError,
    )
    from .errors import (
        ToolDirError as ToolDirError,
    )
    from .manage import (
        LockWritten as LockWritten,
    )
    from .manage import (
        PackageRef as PackageRef,
    )
    from .manage import (
        SignatureWritten as SignatureWritten,
    )
    from .manage import (
        Verdict as Verdict,
    )
    from .manage import (
        approve as approve,
    )
    from .manage import (
        explain as explain,
    )
    from .manage import (
        locate as locate,
    )
    from .manage import (
        lock as lock,
    )
    from .manage import (
        review as review,
    )
    from .manage import (
        revoke as revoke,
    )
    from .manage import (
        sign as sign,
    )
    from .model import (
        BuiltinSpec as BuiltinSpec,
    )
    from .model import (
        Diagnostic as Diagnostic,
    )
    from .model import (
        Grant as Grant,
    )
    from .model import (
        Manifest as Manifest,
    )
    from .model import (
        Risk as Risk,
    )
    from .model import (
        ServerManifest as ServerManifest,
    )
    from .model import (
        Severity as Severity,
    )
    from .model import (
        Source as Source,
    )
    from .model import (
        Status as Status,
    )
    from .model import (
        ToolRecord as ToolRecord,
    )
    from .model import (
        Trust as Trust,
    )
    from .policy import (
        ManagedOverride as ManagedOverride,
    )
    from .policy import (
        Policy as Policy,
    )
    from .policy import (
        load_policy as load_policy,
    )
    from .run.hooks import (
        Deny as Deny,
    )
    from .run.hooks import (
        Hook as Hook,
    )
    from .run.hooks import (
        HookCall as HookCall,
    )
    from .run.hooks import (
        Redact as Redact,
    )
    from .run.hooks import (
        Rewrite as Rewrite,
    )
    from .run.permissions import (
        PermissionCheck as PermissionCheck,
    )
    from .run.permissions import (
        PermissionRequest as PermissionRequest,
    )
    from .run.registry import (
        CallError as CallError,
    )
    from .run.registry import (
        CallResult as CallResult,
    )
    from .snapshot.loader import (
        LoadConfig as LoadConfig,
    )
    from .snapshot.loader import (
        load as load,
    )
    from .snapshot.loader import (
        make_config as make_config,
    )
    from .snapshot.store import (
        Snapshot as Snapshot,
    )
    from .snapshot.store import (
        SnapshotDiff as SnapshotDiff,
    )
    from .snapshot.watch import (
        Watcher as Watcher,
    )
    from .snapshot.watch import (
        WatchProblem as WatchProblem,
    )
    from .snapshot.watch import (
        WatchStatus as WatchStatus,
    )
    from .state import (
        Approval as Approval,
    )
    from .toolbox import (
        Builtin as Builtin,
    )
    from .toolbox import (
        Toolbox as Toolbox,
    )
    from .toolbox import (
        open as open,
    )

#: Every public name and the submodule (relative to this package) that defines it.
_LAZY: dict[str, str] = {
    "Approval": "state",
    "Builtin": "toolbox",
    "BuiltinSpec": "model",
    "CallError": "run.registry",
    "CallErrorCode": "codes",
    "CallResult": "run.registry",
    "ConfigError": "errors",
    "Deny": "run.hooks",
    "Diagnostic": "model",
    "DiagnosticCode": "codes",
    "DirectoryEntry": "deferred.catalog",
    "DiscoveryError": "errors",
    "ExecutionError": "errors",
    "Grant": "model",
    "Hook": "run.hooks",
    "HookCall": "run.hooks",
    "LoadConfig": "snapshot.loader",
    "ManagedOverride": "policy",
    "LockWritten": "manage",
    "Manifest": "model",
    "Match": "deferred.catalog",
    "PackageError": "errors",
    "PackageRef": "manage",
    "PermissionCheck": "run.permissions",
    "PermissionDeniedError": "errors",
    "PermissionRequest": "run.permissions",
    "Policy": "policy",
    "PolicyError": "errors",
    "Redact": "run.hooks",
    "Rewrite": "run.hooks",
    "Risk": "model",
    "SandboxError": "errors",
    "SearchResult": "deferred.session",
    "ServerManifest": "model",
    "Session": "deferred.session",
    "Severity": "model",
    "SignatureWritten": "manage",
    "Snapshot": "snapshot.store",
    "SnapshotDiff": "snapshot.store",
    "Source": "model",
    "StateError": "errors",
    "Status": "model",
    "TokenReport": "deferred.tokens",
    "ToolDef": "deferred.catalog",
    "ToolDirError": "errors",
    "Toolbox": "toolbox",
    "ToolRecord": "model",
    "Trust": "model",
    "Verdict": "manage",
    "WatchCode": "codes",
    "WatchProblem": "snapshot.watch",
    "WatchStatus": "snapshot.watch",
    "Watcher": "snapshot.watch",
    "approve": "manage",
    "explain": "manage",
    "gc_paused": "_internal.gcpause",
    "load": "snapshot.loader",
    "load_policy": "policy",
    "locate": "manage",
    "lock": "manage",
    "make_config": "snapshot.loader",
    "open": "toolbox",
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


#: What a host names (tests/test_public_api.py): the keys of _LAZY, capitalised names first. Type
#: checkers read the explicit re-exports (``X as X``) above instead of this computed list.
__all__ = sorted(_LAZY, key=lambda n: (n[0].islower(), n))  # noqa: PLE0605
