"""Issue 17 item 2: the repository offers a pre-commit hook ``tooldir-scan`` that runs
``tooldir scan --strict`` on the repository it is installed in."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml
from plaininstall import REPO, PlainInstall

from tooldir._cli import build_parser


def _hook() -> dict[str, object]:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text("utf-8"))
    [hook] = [h for h in hooks if h["id"] == "tooldir-scan"]
    return dict(hook)


def test_the_pre_commit_hook_file_offers_tooldir_scan_strict_as_a_python_hook() -> None:
    hook = _hook()
    assert hook["language"] == "python"  # pre-commit installs this repository, which provides the script
    assert hook["pass_filenames"] is False  # the scan reads the whole tree, not the staged files
    argv = shlex.split(str(hook["entry"]))
    assert argv[0] == "tooldir"
    args = build_parser(argv[1:]).parse_args(argv[1:])
    assert (args.command, args.strict) == ("scan", True)


def test_the_hook_entry_passes_on_a_clean_repository_and_fails_on_a_broken_tool(
    plain: PlainInstall, elsewhere: Path
) -> None:
    argv = [str(plain.bin / a) if i == 0 else a for i, a in enumerate(shlex.split(str(_hook()["entry"])))]
    tools = elsewhere / ".tooldir" / "tools"
    tools.mkdir(parents=True)
    assert plain.run(argv, elsewhere).returncode == 0
    (tools / "broken").mkdir()
    (tools / "broken" / "schema.json").write_text(json.dumps({"name": "broken"}))
    done = plain.run(argv, elsewhere)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "schema-invalid" in done.stdout
