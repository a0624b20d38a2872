"""A load's diagnostics as SARIF 2.1.0 (``tooldir scan --format sarif``), for GitHub code scanning
and other CI security dashboards. Pure: the caller says where each diagnostic is (:data:`Locate`).

* one rule per diagnostic code of :class:`tooldir.codes.DiagnosticCode` (all of them, in that
  order, so a ``ruleIndex`` never changes between runs), with the help text of
  :data:`tooldir.codes.DIAGNOSTIC_HELP`;
* one result per diagnostic: ``level`` (error / warning / note), the message (characters that
  could hide or rewrite text shown as ``<U+XXXX>``; link and placeholder syntax escaped, see
  :func:`message_text`), and, when it has a file, a location: inside
  the repository root a URI relative to it under ``uriBaseId`` :data:`ROOT_ID`, elsewhere (a user
  tool root, the policy file) an absolute ``file:`` URI; a ``region``: the pointer's line, or line 1
  for a whole file or package; the tool as a logical location; a stable ``partialFingerprints`` entry.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from .codes import DIAGNOSTIC_HELP, DiagnosticCode
from .model import Diagnostic, Severity
from .text import ALL_KINDS, character_class

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
ROOT_ID = "PROJECTROOT"
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
                "properties": {"tags": ["security", "tooldir"]},
            }
        )
    return out


def artifact_location(path: str, root: Path) -> dict[str, Any]:
    """``path`` (absolute) relative to ``root`` under :data:`ROOT_ID`, else an absolute file URI."""
    absolute = Path(path)
    try:
        relative = absolute.relative_to(root)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(PurePosixPath(relative).as_posix(), safe="/", errors="surrogateescape"), "uriBaseId": ROOT_ID}


def result(diagnostic: Diagnostic, *, index: int, root: Path, locate: Locate) -> dict[str, Any]:
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


def sarif_log(diagnostics: Iterable[Diagnostic], *, root: str | Path, version: str, locate: Locate) -> dict[str, Any]:
    """The SARIF log of one load; ``root`` is the repository root (absolute) relative URIs start from."""
    base = Path(root)
    index = {str(code): i for i, code in enumerate(DiagnosticCode)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": {"name": "tooldir", "version": version, "rules": rules()}},
                "originalUriBaseIds": {ROOT_ID: {"uri": base.as_uri().rstrip("/") + "/"}},
                "results": [result(d, index=index.get(d.code, -1), root=base, locate=locate) for d in diagnostics],
                "columnKind": "unicodeCodePoints",
            }
        ],
    }
