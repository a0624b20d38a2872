"""Every stable code tooldir emits, in one place (DESIGN §3: add more as needed, never rename).

* :class:`DiagnosticCode` -- ``Diagnostic.code`` of a load (``scan``, ``show``, ``verify``);
* :class:`CallErrorCode` -- ``CallResult.error.code`` of a registry or session call (the MCP
  server's ``error[<code>]``);
* :class:`AuditCode` -- ``Problem.code`` of ``audit verify``;
* :class:`WatchCode` -- ``WatchProblem.code`` of the watcher.

Each is a :class:`enum.StrEnum`, so a member equals its string (``DiagnosticCode.SYMLINK ==
"symlink"``). tests/unit/test_codes.py scans the source of tooldir/ and fails when a module
emits a code that is missing here, when a code here is emitted nowhere, or when a code of DESIGN
§3 is missing.
"""

from __future__ import annotations

import enum


class DiagnosticCode(enum.StrEnum):
    # files (discover)
    SYMLINK = "symlink"
    NOT_REGULAR_FILE = "not-regular-file"
    HARDLINK = "hardlink"
    TOO_LARGE = "too-large"
    TOO_MANY_ENTRIES = "too-many-entries"
    UNSAFE_PERMISSIONS = "unsafe-permissions"
    UNREADABLE = "unreadable"
    STRAY_FILE = "stray-file"  # info: a file directly under a root
    MISSING_MANIFEST = "missing-manifest"
    AMBIGUOUS_FILE_NAME = "ambiguous-file-name"
    # parsing (strict JSON)
    INVALID_ENCODING = "invalid-encoding"
    INVALID_JSON = "invalid-json"
    DUPLICATE_KEY = "duplicate-key"
    NON_FINITE_NUMBER = "non-finite-number"
    TOO_DEEP = "too-deep"
    # manifest (validate)
    SCHEMA_INVALID = "schema-invalid"
    INVALID_NAME = "invalid-name"
    NAME_MISMATCH = "name-mismatch"
    INVALID_INPUT_SCHEMA = "invalid-input-schema"
    UNSAFE_COMMAND = "unsafe-command"
    SUSPICIOUS_TEXT = "suspicious-text"  # warning
    CONTROL_CHARACTER = "control-character"
    # resolution
    COLLISION = "collision"
    SHADOWED = "shadowed"
    RESERVED_NAME = "reserved-name"
    CONFUSABLE_NAME = "confusable-name"
    # trust
    NOT_APPROVED = "not-approved"
    CHANGED_SINCE_APPROVAL = "changed-since-approval"
    HASH_MISMATCH = "hash-mismatch"
    UNLISTED_FILE = "unlisted-file"
    MISSING_FILE = "missing-file"
    BAD_SIGNATURE = "bad-signature"
    UNTRUSTED_KEY = "untrusted-key"
    REVOKED_KEY = "revoked-key"
    INVALID_KEY = "invalid-key"
    INVALID_LOCK = "invalid-lock"
    ROLLBACK = "rollback"
    EXPIRED = "expired"
    RISK_NOT_ALLOWED = "risk-not-allowed"
    # policy and state
    POLICY_WEAKENED = "policy-weakened"
    STATE_UNWRITABLE = "state-unwritable"
    INDEX_IGNORED = "index-ignored"  # warning: a content index that could not be trusted was rebuilt


class CallErrorCode(enum.StrEnum):
    """``CallResult.error.code`` (the table in :mod:`tooldir.registry`, and the session's)."""

    UNKNOWN_TOOL = "unknown-tool"
    NOT_ACTIVE = "not-active"
    SESSION_REFUSED = "session-refused"
    SESSION_UNLOADED = "session:unloaded"
    SESSION_STALE = "session:stale"
    SESSION_IMMEDIATE = "session:immediate"
    INVALID_INPUT = "invalid-input"
    INVALID_SCHEMA = "invalid-schema"
    PERMISSION_DENIED = "permission-denied"
    HOOK_DENIED = "hook-denied"
    HOOK_FAILED = "hook-failed"
    SANDBOX_UNAVAILABLE = "sandbox-unavailable"
    SANDBOX_FAILED = "sandbox-failed"
    CHANGED_SINCE_VERIFICATION = "changed-since-verification"
    TIMEOUT = "timeout"
    OUTPUT_TOO_LARGE = "output-too-large"
    TOOL_FAILED = "tool-failed"
    TOOL_ERROR = "tool-error"
    HANDLER_FAILED = "handler-failed"
    INVALID_OUTPUT = "invalid-output"
    AUDIT_FAILED = "audit-failed"
    INTERNAL_ERROR = "internal-error"


class AuditCode(enum.StrEnum):
    """``Problem.code`` of :func:`tooldir.audit.verify`."""

    NOT_TERMINATED = "not-terminated"
    INVALID_JSON = "invalid-json"
    DUPLICATE_KEY = "duplicate-key"
    NOT_A_RECORD = "not-a-record"
    UNKNOWN_VERSION = "unknown-version"
    HASH_MISMATCH = "hash-mismatch"
    NOT_CANONICAL = "not-canonical"
    SEQ_MISMATCH = "seq-mismatch"
    PREV_MISMATCH = "prev-mismatch"
    TOO_LONG = "too-long"
    MISSING_LINES = "missing-lines"
    LOG_MISSING = "log-missing"
    HEAD_MISMATCH = "head-mismatch"
    HEAD_MISSING = "head-missing"
    HEAD_INVALID = "head-invalid"
    HEAD_BEHIND = "head-behind"
    EXPECTED_HEAD_NOT_FOUND = "expected-head-not-found"


class WatchCode(enum.StrEnum):
    """``WatchProblem.code`` of :class:`tooldir.watch.Watcher`."""

    BUILD_FAILED = "build-failed"
    POLICY_INVALID = "policy-invalid"
    POLICY_REMOVED = "policy-removed"
    INOTIFY_OVERFLOW = "inotify-overflow"
    INOTIFY_LIMIT = "inotify-limit"
    WATCH_FAILED = "watch-failed"
    WATCH_BUDGET = "watch-budget"


#: The stable codes DESIGN §3 lists (a vendored copy, for when the contract is not beside the tree).
DESIGN_CODES = frozenset(
    {
        "symlink",
        "not-regular-file",
        "hardlink",
        "too-large",
        "too-many-entries",
        "unsafe-permissions",
        "invalid-encoding",
        "invalid-json",
        "duplicate-key",
        "non-finite-number",
        "too-deep",
        "schema-invalid",
        "invalid-name",
        "name-mismatch",
        "invalid-input-schema",
        "unsafe-command",
        "suspicious-text",
        "collision",
        "shadowed",
        "reserved-name",
        "confusable-name",
        "not-approved",
        "changed-since-approval",
        "hash-mismatch",
        "unlisted-file",
        "missing-file",
        "bad-signature",
        "untrusted-key",
        "revoked-key",
        "rollback",
        "expired",
        "risk-not-allowed",
    }
)
