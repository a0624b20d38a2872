"""Every stable code tooldir emits, in one place (DESIGN §3: add more as needed, never rename).

* :class:`DiagnosticCode` -- ``Diagnostic.code`` of a load (``scan``, ``show``, ``verify``);
* :class:`CallErrorCode` -- ``CallResult.error.code`` of a registry or session call (the MCP
  server's ``error[<code>]``);
* :class:`AuditCode` -- ``Problem.code`` of ``audit verify``;
* :class:`WatchCode` -- ``WatchProblem.code`` of the watcher.

Each is a :class:`enum.StrEnum`, so a member equals its string and is written as it
(``DiagnosticCode.SYMLINK == "symlink"``, ``json.dumps``, ``f"{code}"``). The fields that carry a
code are typed with these enums and every module emits members, so ``mypy --strict`` refuses a
code that is not listed here; a code read back from stored data is converted with the enum's
constructor where it is read. tests/unit/test_codes.py checks that DESIGN §3's codes are all here.
"""

from __future__ import annotations

import enum
from typing import NewType


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
    POLICY_MANAGED = "policy-managed"  # warning: a user value under the managed policy's floor was ignored
    STATE_UNWRITABLE = "state-unwritable"
    # MCP server packages (DESIGN §10)
    DEFINITION_CHANGED = "definition-changed"
    DEFINITION_NEW = "definition-new"
    INSTRUCTIONS_CHANGED = "instructions-changed"
    INDEX_IGNORED = "index-ignored"  # warning: a content index that could not be trusted was rebuilt
    UPSTREAM_OVER_LIMIT = "upstream-over-limit"
    UPSTREAM_UNAVAILABLE = "upstream-unavailable"  # warning: a server that could not be listed (down, hung)
    UPSTREAM_ERROR = "upstream-error"  # warning: a server that answered its listing with an error
    # tooldir adopt: findings in an MCP client's configuration (DESIGN §13)
    ADOPT_UNPINNED = "adopt-unpinned"
    ADOPT_SECRET = "adopt-secret"  # noqa: S105 - a code: a secret in plain text in a client's config
    ADOPT_RUNTIME = "adopt-runtime"
    ADOPT_NO_TLS = "adopt-no-tls"
    ADOPT_COLLISION = "adopt-collision"
    ADOPT_INVALID_ENTRY = "adopt-invalid-entry"
    # tooldir adopt (without --dry-run): an entry that was not adopted
    ADOPT_SKIPPED = "adopt-skipped"
    ADOPT_INSTALL_FAILED = "adopt-install-failed"
    ADOPT_OVER_LIMIT = "adopt-over-limit"
    ADOPT_CONFLICT = "adopt-conflict"


class CallErrorCode(enum.StrEnum):
    """``CallResult.error.code`` of :meth:`tooldir.run.registry.Registry.call` and of a session's calls."""

    UNKNOWN_TOOL = "unknown-tool"  # no tool of that name in the current snapshot
    NOT_ACTIVE = "not-active"  # the tool exists but is pending, shadowed or rejected (message says why)
    SESSION_REFUSED = "session-refused"  # the session gate refused (the gate may supply its own code instead)
    SESSION_UNLOADED = "session:unloaded"  # a deferred tool the session has not loaded (tool_search first)
    SESSION_STALE = "session:stale"  # its input schema or risk changed since the session loaded it
    SESSION_IMMEDIATE = "session:immediate"  # a guard or non-deferred tool asked for through defer_execute_tool
    # input is not a JSON object, too large, breaks the input schema, or its validation overran the
    # budget (``schema:redos``; nothing ran)
    INVALID_INPUT = "invalid-input"
    INVALID_SCHEMA = "invalid-schema"  # the tool's input_schema cannot be compiled (nothing ran)
    PERMISSION_DENIED = "permission-denied"  # a policy rule, the plan mode or the risk cap refused the tool
    HOOK_DENIED = "hook-denied"  # a pre hook refused the call
    HOOK_FAILED = "hook-failed"  # a hook raised, or returned something that is not a hook result
    # a secret the tool declares is not granted by the user's policy, not in the secrets file, or its
    # command failed (message: which, what to set)
    SECRET_UNAVAILABLE = "secret-unavailable"  # noqa: S105 - a code, not a secret
    SANDBOX_UNAVAILABLE = "sandbox-unavailable"  # no working sandbox and the policy does not allow unsandboxed runs
    SANDBOX_FAILED = "sandbox-failed"  # the sandbox could not start the run
    CHANGED_SINCE_VERIFICATION = "changed-since-verification"  # the package's bytes no longer match (nothing ran)
    TIMEOUT = "timeout"  # the tool ran past its wall-clock limit and was killed
    OUTPUT_TOO_LARGE = "output-too-large"  # the tool wrote more than the output cap and was killed
    TOOL_FAILED = "tool-failed"  # the tool exited non-zero or was killed by a signal
    TOOL_ERROR = "tool-error"  # the tool answered ``{"ok": false, ...}``
    HANDLER_FAILED = "handler-failed"  # a builtin handler raised
    INVALID_OUTPUT = "invalid-output"  # a builtin or a post hook produced content that is not plain JSON
    # room for the call's audit line could not be reserved (a full disk, a read-only or vanished state
    # dir, EIO): refused before the tool started
    AUDIT_UNAVAILABLE = "audit-unavailable"
    AUDIT_FAILED = "audit-failed"  # the audit line could not be written (the result is withheld)
    INTERNAL_ERROR = "internal-error"  # tooldir itself failed on this call (a bug; nothing more ran)
    UPSTREAM_ERROR = "upstream-error"  # an MCP server package's tool failed (DESIGN §10)
    UPSTREAM_UNAVAILABLE = "upstream-unavailable"  # its server is down, hung or cannot start
    UPSTREAM_OVER_LIMIT = "upstream-over-limit"  # its listing or a message is over a limit


#: A code a host's session gate (:class:`tooldir.run.registry.CallGate`) refused with that is not a
#: :class:`CallErrorCode`: passed on as it is (``CallError.code`` is one or the other).
GateCode = NewType("GateCode", str)


class AuditCode(enum.StrEnum):
    """``Problem.code`` of :func:`tooldir.run.audit.verify`."""

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
    """``WatchProblem.code`` of :class:`tooldir.snapshot.watch.Watcher`."""

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


#: One line per diagnostic code: what it means and what to do (SARIF rule help, ``scan --format sarif``).
DIAGNOSTIC_HELP: dict[DiagnosticCode, str] = {
    DiagnosticCode.SYMLINK: "A symbolic link in a tool root or package; tooldir never follows links. Replace it with the real file.",
    DiagnosticCode.NOT_REGULAR_FILE: "A FIFO, device or socket in a package; only regular files and folders are read. Remove it.",
    DiagnosticCode.HARDLINK: "A file with more than one hard link (it could change through another path). Copy it instead.",
    DiagnosticCode.TOO_LARGE: "A file over the size limit (policy [limits]); the package is not read. Shrink or remove the file.",
    DiagnosticCode.TOO_MANY_ENTRIES: "A root or package with more entries than the policy allows; nothing past the limit is read.",
    DiagnosticCode.UNSAFE_PERMISSIONS: "A file or folder owned by another user, or writable by group or others. chmod go-w it (or fix its owner).",
    DiagnosticCode.UNREADABLE: "A file or folder tooldir could not open or read; the package is not loaded.",
    DiagnosticCode.STRAY_FILE: "A file directly under a tool root (packages are folders); it is ignored.",
    DiagnosticCode.MISSING_MANIFEST: "A package folder without schema.json; it is not a tool.",
    DiagnosticCode.AMBIGUOUS_FILE_NAME: "Two file names in a package that are equal after Unicode NFC normalisation, or a control character in a name. Rename one.",
    DiagnosticCode.INVALID_ENCODING: "The manifest is not valid UTF-8 (or has a BOM, NUL or lone surrogates). Save it as plain UTF-8.",
    DiagnosticCode.INVALID_JSON: "The manifest is not valid JSON; the message gives the line and column.",
    DiagnosticCode.DUPLICATE_KEY: "A JSON object repeats a key (parsers disagree on which one wins). Keep one.",
    DiagnosticCode.NON_FINITE_NUMBER: "NaN, Infinity or a number that overflows; not portable JSON. Use a finite number.",
    DiagnosticCode.TOO_DEEP: "The manifest nests deeper than the limit. Flatten it.",
    DiagnosticCode.SCHEMA_INVALID: "The manifest does not match the published schema (tooldir/manifest.schema.json) at this pointer.",
    DiagnosticCode.INVALID_NAME: "The tool name is not 1-64 ASCII letters, digits, _ or -.",
    DiagnosticCode.NAME_MISMATCH: "The manifest's name differs from its folder's name. Make them equal.",
    DiagnosticCode.INVALID_INPUT_SCHEMA: "The input schema is not an object JSON Schema tooldir accepts (2020-12, local references only, linear-time patterns).",
    DiagnosticCode.UNSAFE_COMMAND: "The command leaves the package, uses a shell, variables, absolute paths or '..', or an interpreter the policy does not allow.",
    DiagnosticCode.SUSPICIOUS_TEXT: "Text the model sees holds invisible, bidi or tag characters or injection-like instructions. Review and remove them.",
    DiagnosticCode.CONTROL_CHARACTER: "A control character (e.g. an ANSI escape) in a manifest string. Remove it.",
    DiagnosticCode.COLLISION: "Two tools of one source have the same name; both are rejected. Rename one.",
    DiagnosticCode.SHADOWED: "A tool of a higher source has the same name and wins (builtin < user < project).",
    DiagnosticCode.RESERVED_NAME: "The name is a builtin tool's or a reserved one. Pick another name.",
    DiagnosticCode.CONFUSABLE_NAME: "The name looks like another tool's name (case, look-alike characters). Pick a distinct name.",
    DiagnosticCode.NOT_APPROVED: "A project tool without an approval, signature or pin; it never runs until trusted (tooldir allow NAME).",
    DiagnosticCode.CHANGED_SINCE_APPROVAL: "The package changed after it was approved; review the changed files (tooldir show NAME) and approve again.",
    DiagnosticCode.HASH_MISMATCH: "A file's sha256 differs from its tool.lock entry. The package changed after it was locked.",
    DiagnosticCode.UNLISTED_FILE: "A file in the package is not listed in its tool.lock. Re-lock and re-sign, or remove the file.",
    DiagnosticCode.MISSING_FILE: "A file listed in tool.lock is missing from the package.",
    DiagnosticCode.BAD_SIGNATURE: "The signature of tool.lock does not verify (another file, tool, key or SSH namespace).",
    DiagnosticCode.UNTRUSTED_KEY: "The lock is signed by a key your policy does not trust ([keys]).",
    DiagnosticCode.REVOKED_KEY: "The lock is signed by a key your policy revoked ([keys] revoked).",
    DiagnosticCode.INVALID_KEY: "A key or allowed_signers line in your policy cannot be used; the message names the file and line.",
    DiagnosticCode.INVALID_LOCK: "tool.lock is malformed (fields, versions, dates or hashes).",
    DiagnosticCode.ROLLBACK: "The signed version is older than one already verified for this signer and tool.",
    DiagnosticCode.EXPIRED: "The lock's expiry date has passed. Re-lock with a new --expires and re-sign.",
    DiagnosticCode.RISK_NOT_ALLOWED: "The declared risk is above the source's ceiling (sources.<source>.max_risk in your policy).",
    DiagnosticCode.POLICY_WEAKENED: "Your policy weakens a secure default; the message names the key.",
    DiagnosticCode.POLICY_MANAGED: "Your policy sets a key weaker than the machine's managed policy (/etc/tooldir/policy.toml); your value is ignored and the managed one is used. The message names both files and lines.",
    DiagnosticCode.STATE_UNWRITABLE: "Your state directory could not be written; approvals and rollback marks hold only in this process.",
    DiagnosticCode.DEFINITION_CHANGED: "An MCP server changed a tool definition since you pinned it; held back. Review with tooldir show, then tooldir allow the package.",
    DiagnosticCode.DEFINITION_NEW: "An MCP server offers a tool you have not pinned; held back until you tooldir allow the package.",
    DiagnosticCode.INDEX_IGNORED: "A content index in your state could not be trusted (corrupt, foreign, writable by others); it was ignored and rebuilt.",
    DiagnosticCode.INSTRUCTIONS_CHANGED: "An MCP server changed its instructions since you pinned them; they are not passed on until you tooldir allow the package.",
    DiagnosticCode.ADOPT_UNPINNED: "An MCP client starts a package fetched without an exact version (npx -y pkg, uvx pkg@latest, an image without a digest): every start may run other code. Pin an exact version.",
    DiagnosticCode.ADOPT_SECRET: "A secret in plain text in an MCP client's configuration (env, args, headers or a URL). Move it to secrets.toml (tooldir adopt does) and rotate it if the file was shared.",
    DiagnosticCode.ADOPT_RUNTIME: "An MCP client starts a command outside the runtimes your policy allows (exec.interpreters and their package launchers).",
    DiagnosticCode.ADOPT_NO_TLS: "An MCP client talks to a remote server over plain http://; use its https:// address.",
    DiagnosticCode.ADOPT_COLLISION: "An MCP server would be adopted under a package name you already have (or another server would). Rename one.",
    DiagnosticCode.ADOPT_INVALID_ENTRY: "An MCP server entry of a client's configuration is not a server tooldir can read (no command or url, wrong types).",
    DiagnosticCode.ADOPT_SKIPPED: "tooldir adopt left an entry as it is: a remote server, a container image, a command that is not a package launcher (npx, bunx, pnpx, uvx, pipx run, uv tool run), or a secret inside an argument. The message says which.",
    DiagnosticCode.ADOPT_INSTALL_FAILED: "tooldir adopt could not resolve or install the entry's package (registry unreachable, no such version, no wheel for the sandbox's python3); nothing was written for it.",
    DiagnosticCode.ADOPT_OVER_LIMIT: "The package tooldir adopt installed is over your limits.max_package_* or max_file_bytes; the message names the keys and values to set. Nothing was written.",
    DiagnosticCode.ADOPT_CONFLICT: "tooldir adopt would overwrite something of yours: a folder of that name it did not write, a secret of that name with another value, a grant it cannot add to your policy. Nothing was written for the entry.",
    DiagnosticCode.UPSTREAM_OVER_LIMIT: "An MCP server's listing, one of its messages or its instructions is over a limit tooldir sets; the message names the limit. Nothing over it is used.",
    DiagnosticCode.UPSTREAM_UNAVAILABLE: "An MCP server package could not be started or listed (it is down, hung or cannot start); the message gives its last lines of stderr and the likely cause. Its last listing, if any, is used.",
    DiagnosticCode.UPSTREAM_ERROR: "An MCP server package answered its tools/list with an error; the message gives it. Its last listing, if any, is used.",
}
