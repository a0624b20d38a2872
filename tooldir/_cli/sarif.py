"""A load's diagnostics as SARIF 2.1.0 (``tooldir scan --format sarif``), for GitHub code scanning
and other CI security dashboards. Pure: the caller says where each diagnostic is (:data:`Locate`).

* one rule per diagnostic code of :class:`tooldir.codes.DiagnosticCode` (all of them, in that
  order, so a ``ruleIndex`` never changes between runs), with the help text of
  :data:`tooldir.codes.DIAGNOSTIC_HELP`;
* one result per diagnostic: ``level`` (error / warning / note), the message (characters that
  could hide or rewrite text shown as ``<U+XXXX>``; link and placeholder syntax escaped, see
  :func:`message_text`), and, when it has a file, a location: a URI relative to the most specific
  base folder that holds it, under that base's ``uriBaseId`` (:data:`ROOT_ID` the repository,
  :data:`USER_ROOT_ID` a user tool root, :data:`USER_CONFIG_ID` the folder of the user's policy file,
  :data:`USER_STATE_ID` the user's state folder),
  each base named in the run's ``originalUriBaseIds``; a file under none of them keeps an absolute
  ``file:`` URI; a ``region``: the pointer's line, or line 1 for a whole file or package; the tool as
  a logical location; a stable ``partialFingerprints`` entry;
* every rule carries ``properties.security-severity`` (:data:`SECURITY_SEVERITY`, GitHub code
  scanning's 0.0-10.0 scale). No ``informationUri``: the project publishes no documentation URL
  (``pyproject.toml`` names none), and a made-up one would mislead.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from ..codes import DIAGNOSTIC_HELP, DiagnosticCode
from ..model import Diagnostic, Severity
from ..text import ALL_KINDS, character_class

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
ROOT_ID = "PROJECTROOT"
USER_ROOT_ID = "USERROOT"  # the first user tool root; the next ones USERROOT2, USERROOT3, ...
USER_CONFIG_ID = "USERCONFIG"  # the folder of the user's policy file (keys, allowed_signers beside it)
USER_STATE_ID = "USERSTATE"  # the user's state folder (approvals, the content index)
FINGERPRINT = "tooldirDiagnostic/v1"

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_DEFAULT_WARNING = frozenset(
    {
        DiagnosticCode.SUSPICIOUS_TEXT,
        DiagnosticCode.NOT_APPROVED,
        DiagnosticCode.SHADOWED,
        DiagnosticCode.POLICY_WEAKENED,
        DiagnosticCode.STATE_UNWRITABLE,
        DiagnosticCode.CHANGED_SINCE_APPROVAL,
    }
)
_DEFAULT_NOTE = frozenset({DiagnosticCode.STRAY_FILE, DiagnosticCode.MISSING_MANIFEST})
#: GitHub code scanning's ``security-severity`` (critical > 9.0, high 7.0-8.9, medium 4.0-6.9, low
#: 0.1-3.9) per diagnostic code: what the finding lets hostile content do if it is ignored. Codes not
#: named here get the severity of their default level (:data:`_LEVEL_SEVERITY`).
SECURITY_SEVERITY: dict[DiagnosticCode, str] = {
    # content changed after it was reviewed or signed, or signed by someone not to be trusted
    DiagnosticCode.HASH_MISMATCH: "9.1",
    DiagnosticCode.BAD_SIGNATURE: "9.1",
    DiagnosticCode.REVOKED_KEY: "9.1",
    DiagnosticCode.ROLLBACK: "9.1",
    DiagnosticCode.CHANGED_SINCE_APPROVAL: "7.5",
    DiagnosticCode.DEFINITION_CHANGED: "7.5",
    DiagnosticCode.INSTRUCTIONS_CHANGED: "7.5",
    DiagnosticCode.UNLISTED_FILE: "8.1",
    # files that could be swapped or run outside the package
    DiagnosticCode.SYMLINK: "8.1",
    DiagnosticCode.HARDLINK: "8.1",
    DiagnosticCode.UNSAFE_PERMISSIONS: "8.1",
    DiagnosticCode.UNSAFE_COMMAND: "8.8",
    # text aimed at the model or the reader
    DiagnosticCode.SUSPICIOUS_TEXT: "6.5",
    DiagnosticCode.CONTROL_CHARACTER: "6.5",
    DiagnosticCode.AMBIGUOUS_FILE_NAME: "6.5",
    DiagnosticCode.CONFUSABLE_NAME: "7.3",
    DiagnosticCode.RESERVED_NAME: "7.3",
    DiagnosticCode.POLICY_WEAKENED: "5.0",
    DiagnosticCode.RISK_NOT_ALLOWED: "5.0",
    DiagnosticCode.UNTRUSTED_KEY: "5.0",
    DiagnosticCode.EXPIRED: "5.0",
    DiagnosticCode.NOT_APPROVED: "3.0",
    DiagnosticCode.DEFINITION_NEW: "3.0",
    DiagnosticCode.SHADOWED: "3.0",
}
_LEVEL_SEVERITY = {"error": "4.0", "warning": "2.0", "note": "0.1"}
_HIDDEN = re.compile(character_class(ALL_KINDS, extra="\r"))

#: ``locate(diagnostic) -> (absolute file path, line or None)``, or None when it has no file.
Locate = Callable[[Diagnostic], tuple[str, int | None] | None]


def _shown(text: str) -> str:
    return _HIDDEN.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


_MESSAGE_SYNTAX = re.compile(r"\\(?=[\[\]])|[\[\]{}]")
_MESSAGE_ESCAPE = {"\\": "\\\\", "[": "\\[", "]": "\\]", "{": "{{", "}": "}}"}


def message_text(text: str) -> str:
    """``text`` as a SARIF plain-text message that reads as itself: literal braces doubled
    (SARIF 2.1.0 §3.11.5: ``{0}`` is a placeholder) and literal square brackets backslash-escaped,
    with a backslash before one doubled (§3.11.6: ``[text](url)`` is an embedded link), after
    hidden characters are shown as ``<U+XXXX>``. A manifest's name or text quoted in a message
    never becomes a link or a placeholder in a code-scanning dashboard."""
    return _MESSAGE_SYNTAX.sub(lambda m: _MESSAGE_ESCAPE[m.group()], _shown(text))


def rules() -> list[dict[str, Any]]:
    out = []
    for code in DiagnosticCode:
        help_text = DIAGNOSTIC_HELP[code]
        level = "warning" if code in _DEFAULT_WARNING else "note" if code in _DEFAULT_NOTE else "error"
        out.append(
            {
                "id": str(code),
                "name": "".join(part.capitalize() for part in str(code).split("-")),
                "shortDescription": {"text": help_text.split(". ")[0].rstrip(".") + "."},
                "fullDescription": {"text": help_text},
                "help": {"text": help_text},
                "defaultConfiguration": {"level": level},
                "properties": {
                    "tags": ["security", "tooldir"],
                    "security-severity": SECURITY_SEVERITY.get(code, _LEVEL_SEVERITY[level]),
                },
            }
        )
    return out


Bases = Mapping[str, Path]
"""``uriBaseId -> absolute folder``: where relative URIs start from (:data:`ROOT_ID` first)."""


def _uri(path: Path) -> str:
    return quote(PurePosixPath(path).as_posix(), safe="/", errors="surrogateescape")


def artifact_location(path: str, root: Path | Bases) -> dict[str, Any]:
    """``path`` (absolute) relative to the repository (:data:`ROOT_ID`, a bare ``root``) when it is
    inside it, so code scanning can place it; else relative to the deepest other base folder that
    holds it, under that base's id; else an absolute file URI."""
    bases: Bases = {ROOT_ID: root} if isinstance(root, Path) else root
    absolute = Path(path)
    best: tuple[int, str, Path] | None = None
    for base_id, base in bases.items():
        try:
            relative = absolute.relative_to(base)
        except ValueError:
            continue
        depth = len(base.parts) if base_id != ROOT_ID else 1 << 30  # the repository always wins
        if best is None or depth > best[0]:
            best = (depth, base_id, relative)
    if best is None:
        return {"uri": absolute.as_uri()}
    return {"uri": _uri(best[2]), "uriBaseId": best[1]}


def user_bases(
    user_roots: Sequence[str | Path], config_dir: str | Path | None, state_dir: str | Path | None = None
) -> dict[str, Path]:
    """The base ids of the user's side: :data:`USER_ROOT_ID` for the first user root (``USERROOT2``,
    ... for the next ones), :data:`USER_CONFIG_ID` for ``config_dir``, :data:`USER_STATE_ID` for
    ``state_dir``; all made absolute."""
    out: dict[str, Path] = {}
    for i, user_root in enumerate(user_roots):
        out[USER_ROOT_ID if i == 0 else f"{USER_ROOT_ID}{i + 1}"] = Path(user_root).resolve()
    if config_dir is not None:
        out[USER_CONFIG_ID] = Path(config_dir).resolve()
    if state_dir is not None:
        out[USER_STATE_ID] = Path(state_dir).resolve()
    return out


_BASE_TEXT = {
    ROOT_ID: "the repository (the scanned project)",
    USER_ROOT_ID: "the user's tool root, outside the repository",
    USER_CONFIG_ID: "the folder of the user's tooldir policy, outside the repository",
    USER_STATE_ID: "the user's tooldir state folder, outside the repository",
}


def _original_base(base_id: str, folder: Path) -> dict[str, Any]:
    text = _BASE_TEXT.get(base_id.rstrip("0123456789"), "")
    out: dict[str, Any] = {"uri": folder.as_uri().rstrip("/") + "/"}
    if text:
        out["description"] = {"text": text}
    return out


def result(diagnostic: Diagnostic, *, index: int, root: Path | Bases, locate: Locate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ruleId": diagnostic.code,
        "level": _LEVEL[diagnostic.severity],
        "message": {"text": message_text(diagnostic.message)},
    }
    if index >= 0:
        out["ruleIndex"] = index
    location: dict[str, Any] = {}
    where = locate(diagnostic)
    if where is not None:
        file, line = where
        # GitHub code scanning places an alert only with a region: the file's first line when the
        # diagnostic is about the whole file or package
        region = {"startLine": 1 if line is None else line}
        location["physicalLocation"] = {"artifactLocation": artifact_location(file, root), "region": region}
    if diagnostic.tool:
        location["logicalLocations"] = [{"name": _shown(diagnostic.tool), "kind": "module"}]
    if location:
        out["locations"] = [location]
    key = "\0".join([diagnostic.code, diagnostic.tool or "", diagnostic.path or "", diagnostic.pointer or ""])
    out["partialFingerprints"] = {FINGERPRINT: hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()}
    properties = {
        "source": None if diagnostic.source is None else str(diagnostic.source),
        "pointer": diagnostic.pointer,
    }
    out["properties"] = {k: v for k, v in properties.items() if v is not None}
    return out


def sarif_log(
    diagnostics: Iterable[Diagnostic],
    *,
    root: str | Path,
    version: str,
    locate: Locate,
    bases: Bases | None = None,
) -> dict[str, Any]:
    """The SARIF log of one load; ``root`` is the repository root (absolute) relative URIs start
    from, ``bases`` the other folders with an id of their own (:func:`user_bases`)."""
    all_bases: dict[str, Path] = {ROOT_ID: Path(root), **(bases or {})}
    index = {str(code): i for i, code in enumerate(DiagnosticCode)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": {"name": "tooldir", "version": version, "rules": rules()}},
                "originalUriBaseIds": {k: _original_base(k, v) for k, v in all_bases.items()},
                "results": [result(d, index=index.get(d.code, -1), root=all_bases, locate=locate) for d in diagnostics],
                "columnKind": "unicodeCodePoints",
            }
        ],
    }
