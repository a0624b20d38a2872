"""Issue 17 item 3: ``tooldir init NAME [--dir ROOT] [--lang python|node|sh]`` scaffolds a package
that loads with no diagnostic and runs through ``tooldir run`` (sandbox included) as written, from
a plain install; it never overwrites anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plaininstall import PlainInstall


def _scan(plain: PlainInstall, cwd: Path, *options: str) -> dict[str, object]:
    done = plain.run([plain.tooldir, "scan", "--json", *options], cwd)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize(("lang", "script"), [("python", "run.py"), ("node", "run.js"), ("sh", "run.sh")])
def test_an_initialised_package_loads_clean_and_runs_in_the_sandbox(
    plain: PlainInstall, elsewhere: Path, lang: str, script: str
) -> None:
    done = plain.run([plain.tooldir, "init", "hello_tool", "--dir", "tools", "--lang", lang], elsewhere)
    assert done.returncode == 0, done.stderr
    folder = elsewhere / "tools" / "hello_tool"
    assert sorted(p.name for p in folder.iterdir()) == sorted(["schema.json", script, "README.md"])
    options = ["--user-dir", "tools", "--state-dir", str(elsewhere / "state")]
    scanned = _scan(plain, elsewhere, *options)
    [tool] = scanned["tools"]  # type: ignore[misc]
    assert (tool["name"], tool["status"]) == ("hello_tool", "active")
    assert scanned["diagnostics"] == []
    ran = plain.run([plain.tooldir, "run", "hello_tool", "--input", '{"text": "hello"}', "--json", *options], elsewhere)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout)
    assert result["ok"] is True and result["error"] is None
    expected = "hello_tool got a request of" if lang == "sh" else "hello_tool got 5 characters: hello"
    assert str(result["content"]).startswith(expected)


def test_init_defaults_to_the_project_tool_root_where_the_package_runs_once_approved(
    plain: PlainInstall, elsewhere: Path
) -> None:
    done = plain.run([plain.tooldir, "init", "proj_tool"], elsewhere)
    assert done.returncode == 0, done.stderr
    assert (elsewhere / ".tooldir" / "tools" / "proj_tool" / "schema.json").is_file()
    state = ["--state-dir", str(elsewhere / "state")]
    [tool] = _scan(plain, elsewhere, *state)["tools"]  # type: ignore[misc]
    assert (tool["source"], tool["status"]) == ("project", "pending")
    allowed = plain.run([plain.tooldir, "allow", "proj_tool", "--yes", *state], elsewhere)
    assert allowed.returncode == 0, allowed.stderr
    ran = plain.run([plain.tooldir, "run", "proj_tool", "--input", '{"text": "hi"}', "--json", *state], elsewhere)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert json.loads(ran.stdout)["content"] == "proj_tool got 2 characters: hi"


def test_init_refuses_to_overwrite_an_existing_folder_and_changes_nothing(plain: PlainInstall, elsewhere: Path) -> None:
    first = plain.run([plain.tooldir, "init", "mine", "--dir", "tools"], elsewhere)
    assert first.returncode == 0, first.stderr
    readme = elsewhere / "tools" / "mine" / "README.md"
    readme.write_text("my own notes\n")
    again = plain.run([plain.tooldir, "init", "mine", "--dir", "tools", "--lang", "node"], elsewhere)
    assert again.returncode == 2
    assert again.stderr.startswith("tooldir init: ") and "already exists" in again.stderr
    assert readme.read_text() == "my own notes\n"
    assert not (elsewhere / "tools" / "mine" / "run.js").exists()
    (elsewhere / "tools" / "empty").mkdir()
    assert plain.run([plain.tooldir, "init", "empty", "--dir", "tools"], elsewhere).returncode == 2
    assert list((elsewhere / "tools" / "empty").iterdir()) == []


@pytest.mark.parametrize("name", ["bad name", "../escape", "a/b", ""])
def test_init_refuses_a_name_that_is_not_a_tool_name(plain: PlainInstall, elsewhere: Path, name: str) -> None:
    done = plain.run([plain.tooldir, "init", name, "--dir", "tools"], elsewhere)
    assert done.returncode == 2
    assert done.stderr.startswith("tooldir init: tool name")
    assert not (elsewhere / "tools").exists()
