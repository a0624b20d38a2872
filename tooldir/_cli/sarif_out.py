"""``scan --format sarif``: the I/O edge of :mod:`tooldir._cli.sarif` (where each diagnostic is, in
which file and on which line)."""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._internal import jsonlines, tomllines
from ..model import Diagnostic, Source
from ..policy import default_policy_path
from ..snapshot.loader import LoadConfig
from ..snapshot.store import Snapshot
from . import _version
from .sarif import Locate, sarif_log, user_bases

MANIFEST = "schema.json"
MAX_READ = 4 * 1024 * 1024  # a file larger than this gets no line (discovery refuses far smaller manifests)


def scan_sarif(snap: Snapshot, *, project: str, config: LoadConfig) -> dict[str, Any]:
    """``config``'s user roots, the folder of its policy file (the default one when it read none)
    and its state folder get ``uriBaseId``s of their own."""
    root = Path(project).resolve()
    user_roots = [spec.path for spec in config.roots if spec.source == Source.USER]
    config_dir = Path(config.policy_file).parent if config.policy_file else default_policy_path().parent
    bases = user_bases(user_roots, config_dir, config.state_dir)
    return sarif_log(snap.diagnostics, root=root, version=_version(), locate=_locator(snap.diagnostics), bases=bases)


def _locator(diagnostics: Iterable[Diagnostic]) -> Locate:
    """Where each of ``diagnostics`` is: every file is read once, for the pointers its diagnostics
    name and nothing else, and its text is dropped before the next file is read."""
    files: dict[str, str] = {}  # a diagnostic's path -> its file
    wanted: dict[str, list[str]] = {}
    for d in diagnostics:
        if not d.path:
            continue
        file = files.get(d.path) or files.setdefault(d.path, _file_of(d.path))
        if d.pointer is not None:
            wanted.setdefault(file, []).append(d.pointer)
    json_lines: dict[str, dict[str, int]] = {}
    toml_lines: dict[str, dict[tuple[str, ...], int]] = {}
    for file, pointers in wanted.items():
        if file.endswith(".json"):
            text = _text_of(file)
            json_lines[file] = {} if text is None else jsonlines.pointer_lines(text, pointers)
        elif file.endswith(".toml"):
            toml_lines[file] = _toml_lines(file)

    def locate(d: Diagnostic) -> tuple[str, int | None] | None:
        if not d.path:
            return None
        file = files.get(d.path) or _file_of(d.path)
        if d.pointer is None:
            return file, None
        if file.endswith(".json"):
            return file, json_lines.get(file, {}).get(d.pointer)
        if file.endswith(".toml"):
            keys = tuple(_unescape(t) for t in d.pointer.split("/")[1:])
            return file, tomllines.line_of(toml_lines.get(file, {}), keys)
        return file, None

    return locate


def _file_of(path_text: str) -> str:
    """The file a diagnostic's path names: a package's manifest, else the path itself."""
    path = Path(path_text)
    try:
        is_package = stat.S_ISDIR(path.lstat().st_mode) and (path / MANIFEST).is_file()
    except OSError:
        is_package = False
    return str(path / MANIFEST) if is_package else str(path)


def _text_of(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_READ:
            return None
        data = os.read(fd, MAX_READ + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _toml_lines(path: str) -> dict[tuple[str, ...], int]:
    text = _text_of(path)
    if text is None:
        return {}
    try:
        tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return {}
    return tomllines.key_lines(text)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")
