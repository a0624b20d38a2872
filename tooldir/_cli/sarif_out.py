"""``scan --format sarif``: the I/O edge of :mod:`tooldir.sarif` (where each diagnostic is, in
which file and on which line)."""

from __future__ import annotations

import os
import stat
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from .._internal import jsonlines, tomllines
from ..model import Diagnostic
from ..sarif import sarif_log
from ..snapshot import Snapshot
from . import _version

MANIFEST = "schema.json"
MAX_READ = 4 * 1024 * 1024  # a file larger than this gets no line (discovery refuses far smaller manifests)


def scan_sarif(snap: Snapshot, *, project: str) -> dict[str, Any]:
    root = Path(project).resolve()
    return sarif_log(snap.diagnostics, root=root, version=_version(), locate=_locator())


def _locator() -> Any:
    @cache
    def text_of(path: str) -> str | None:
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

    @cache
    def json_lines(path: str) -> dict[str, int]:
        text = text_of(path)
        return {} if text is None else jsonlines.pointer_lines(text)

    @cache
    def toml_lines(path: str) -> dict[tuple[str, ...], int]:
        text = text_of(path)
        if text is None:
            return {}
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return {}
        return tomllines.key_lines(text)

    def locate(d: Diagnostic) -> tuple[str, int | None] | None:
        if not d.path:
            return None
        path = Path(d.path)
        try:
            is_package = stat.S_ISDIR(path.lstat().st_mode) and (path / MANIFEST).is_file()
        except OSError:
            is_package = False
        file = str(path / MANIFEST) if is_package else str(path)
        if d.pointer is None:
            return file, None
        if file.endswith(".json"):
            return file, jsonlines.line_of(json_lines(file), d.pointer)
        if file.endswith(".toml"):
            keys = tuple(_unescape(t) for t in d.pointer.split("/")[1:])
            return file, tomllines.line_of(toml_lines(file), keys)
        return file, None

    return locate


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")
