"""Builders for tool trees in tmp_path, shared by every test package.

``make_tool(root, name)`` writes a valid package (schema.json + run.py) and returns its folder;
keyword arguments override manifest fields, ``script`` replaces run.py, ``extra_files`` adds files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tooldir.model import Source
from tooldir.policy import Limits
from tooldir.read.discover import PackageScan, RootSpec, scan_one
from tooldir.state import Approval, save_approvals

ECHO_SCRIPT = """\
import json
import sys

request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": request["input"]}))
"""


def manifest(name: str, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "description": f"Echo the input back ({name}).",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "any text"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "risk": "read",
        "keywords": ["echo"],
        "execute": {"command": ["python3", "run.py"], "timeout_s": 10, "network": False, "env": []},
    }
    data.update(overrides)
    return data


def make_tool(
    root: Path,
    name: str,
    *,
    script: str = ECHO_SCRIPT,
    raw_manifest: bytes | None = None,
    extra_files: dict[str, bytes | str] | None = None,
    **overrides: Any,
) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    data = raw_manifest if raw_manifest is not None else json.dumps(manifest(name, **overrides), indent=2).encode()
    (folder / "schema.json").write_bytes(data)
    (folder / "run.py").write_text(script)
    for rel, content in (extra_files or {}).items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
    return folder


def project_tools(project: Path) -> Path:
    """The project tool root of ``project`` (created)."""
    root = project / ".tooldir" / "tools"
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(project / ".tooldir", 0o755)  # noqa: S103 - a normal, non-writable-by-others folder
    return root


def scan(folder: Path) -> PackageScan:
    """Read one tool folder through discovery, as a load would (its parent is the root)."""
    return scan_one(RootSpec(Source.PROJECT, str(folder.parent)), folder.name, Limits())


def approve(state: Path, folder: Path, name: str | None = None) -> None:
    """Record the user's approval of ``folder`` as it is now (the only approval in ``state``)."""
    digest = scan(folder).digest
    assert digest is not None
    save_approvals(state, {str(folder): Approval(str(folder), name or folder.name, digest, "2026-01-01T00:00:00Z")})
