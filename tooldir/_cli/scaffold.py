"""``tooldir init NAME``: a new tool package that loads clean and runs as written.

:func:`package_files` is pure (the files of a package, by language); :func:`create_package` is
the I/O edge: it creates ``ROOT/NAME`` (never overwriting anything: the folder must not exist)
with modes discovery accepts whatever the umask: never group- or world-writable (folders at most
0755, files at most 0644; a stricter umask is kept).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from ..names import explain_invalid, is_valid_name

LANGS = ("python", "node", "sh")

_INTERPRETER = {"python": ("python3", "run.py"), "node": ("node", "run.js"), "sh": ("sh", "run.sh")}

_PYTHON = '''\
"""{name}: reads the request envelope on stdin and answers with one JSON object on stdout."""

import json
import sys

request = json.load(sys.stdin)  # {{"version": 1, "input": {{...}}, "context": {{...}}}}
text = request["input"]["text"]
print(json.dumps({{"ok": True, "content": f"{name} got {{len(text)}} characters: {{text}}"}}))
'''

_NODE = """\
// {name}: reads the request envelope on stdin and answers with one JSON object on stdout.
"use strict";
const fs = require("fs");

const request = JSON.parse(fs.readFileSync(0, "utf8")); // {{"version": 1, "input": {{...}}, "context": {{...}}}}
const text = request.input.text;
process.stdout.write(JSON.stringify({{ ok: true, content: `{name} got ${{text.length}} characters: ${{text}}` }}) + "\\n");
"""

_SH = """\
# {name}: reads the request envelope on stdin and answers in plain text on stdout.
# POSIX sh has no JSON parser: use python3 or node (tooldir init --lang) to read the input's fields.
request=$(cat)
printf '%s got a request of %s bytes\\n' '{name}' "${{#request}}"
"""

_SCRIPTS = {"python": _PYTHON, "node": _NODE, "sh": _SH}


def manifest(name: str, lang: str) -> dict[str, object]:
    interpreter, script = _INTERPRETER[lang]
    return {
        "name": name,
        "description": f"Describe what {name} does, for the model and for whoever reviews it.",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Some text for the tool."}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "risk": "read",
        "keywords": [],
        "execute": {"command": [interpreter, script], "timeout_s": 10, "network": False, "env": []},
    }


def package_files(name: str, lang: str) -> dict[str, str]:
    """file name -> text of a new package ``name`` in ``lang`` (ValueError on a bad name or language)."""
    if not is_valid_name(name):
        raise ValueError(f"tool name {name!r}: {explain_invalid(name)}")
    if lang not in _SCRIPTS:
        raise ValueError(f"--lang {lang!r}: one of {', '.join(LANGS)}")
    _, script = _INTERPRETER[lang]
    readme = (
        f"# {name}\n\nA tooldir tool: `schema.json` is its manifest, `{script}` reads the request on stdin and "
        f'answers on stdout. Try it: `tooldir run {name} --input \'{{"text": "hello"}}\'`.\n'
    )
    return {
        "schema.json": json.dumps(manifest(name, lang), indent=2) + "\n",
        script: _SCRIPTS[lang].format(name=name),
        "README.md": readme,
    }


def _refuse_links(root: Path) -> None:
    """Every existing component of ``root`` as given is a real folder, not a symlink."""
    walked = Path(root.anchor)
    for part in root.parts[len(root.parts[:1]) if root.anchor else 0 :]:
        walked = walked / part
        try:
            info = os.lstat(walked)
        except FileNotFoundError:
            return  # the rest is created by mkdir, which makes no links
        if stat.S_ISLNK(info.st_mode):
            raise ValueError(
                f"{walked} is a symlink: a tool root reached through a link is refused (as discovery refuses it); "
                "pass the real folder"
            )


def create_package(root: str | os.PathLike[str], name: str, lang: str) -> tuple[Path, list[str]]:
    """Write package ``name`` under ``root`` (created if missing); returns (folder, file names).

    Raises:
        ValueError: a bad name or language, or ``root`` is reached through a symlink (any
            existing component of the path as given: a project-planted ``.tooldir`` link into
            your own tool root would make the new package run there without approval).
        FileExistsError: ``root/name`` already exists (nothing is written).
        OSError: the folder or a file could not be created.
    """
    files = package_files(name, lang)
    base = Path(root)
    _refuse_links(base)
    missing = [p for p in (base, *base.parents) if not p.exists()]
    base.mkdir(parents=True, exist_ok=True)
    for made in missing:  # discovery refuses group/world-writable folders; a stricter umask stays
        os.chmod(made, stat.S_IMODE(os.stat(made).st_mode) & ~0o022)
    folder = base / name
    os.mkdir(folder, 0o755)  # FileExistsError if anything is there: never overwrite; at most rwxr-xr-x
    for file_name, text in files.items():
        fd = os.open(folder / file_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # at most rw-r--r--, whatever the umask
            out.write(text)
    return folder, list(files)
