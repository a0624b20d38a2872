"""Issue 28: the small frictions a newcomer hits, each tried from a plain install."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

from plaininstall import PlainInstall
from shared_helpers import require_sandbox

from tooldir._cli.common import UNWRAPPED_WIDTH, output_width


def test_keygen_on_a_fresh_account_creates_the_missing_private_folders_and_says_so(
    plain: PlainInstall, elsewhere: Path
) -> None:
    home = Path(plain.env["HOME"])
    config = home / f"cfg-{elsewhere.parent.name}"  # a folder no other test made
    key = config / "tooldir" / "team.key"
    done = plain.run([plain.tooldir, "keygen", str(key)], elsewhere)
    assert done.returncode == 0, done.stderr
    assert f"created the private folder {config} (mode 0700)" in done.stdout
    for folder in (config, config / "tooldir"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.with_name("team.key.pub").is_file()


def test_keygen_into_an_existing_folder_creates_no_folder_and_says_nothing_of_one(
    plain: PlainInstall, elsewhere: Path
) -> None:
    before = elsewhere.stat().st_mode
    done = plain.run([plain.tooldir, "keygen", str(elsewhere / "k.key")], elsewhere)
    assert done.returncode == 0, done.stderr
    assert "created the private folder" not in done.stdout
    assert elsewhere.stat().st_mode == before  # an existing folder's mode is the user's business


def test_lock_after_allow_warns_that_the_tool_is_pending_again_and_names_the_command(
    plain: PlainInstall, elsewhere: Path
) -> None:
    state = ["--state-dir", str(elsewhere / "state")]
    assert plain.run([plain.tooldir, "init", "locked_tool"], elsewhere).returncode == 0
    allowed = plain.run([plain.tooldir, "allow", "locked_tool", "--yes", *state], elsewhere)
    assert allowed.returncode == 0, allowed.stderr
    folder = ".tooldir/tools/locked_tool"
    locked = plain.run([plain.tooldir, "lock", folder, *state], elsewhere)
    assert locked.returncode == 0, locked.stderr
    assert "it is pending until you approve it again: tooldir allow " + folder in " ".join(locked.stdout.split())
    scanned = json.loads(plain.run([plain.tooldir, "scan", "--json", *state], elsewhere).stdout)
    assert [t["status"] for t in scanned["tools"]] == ["pending"]  # what the warning said
    again = plain.run([plain.tooldir, "lock", folder, "--json", *state], elsewhere)
    assert json.loads(again.stdout)["approval_outdated"] is False  # nothing approved was changed this time


def test_lock_of_a_package_never_approved_gives_no_approval_warning(plain: PlainInstall, elsewhere: Path) -> None:
    assert plain.run([plain.tooldir, "init", "fresh_tool", "--dir", "tools"], elsewhere).returncode == 0
    locked = plain.run([plain.tooldir, "lock", "tools/fresh_tool", "--json"], elsewhere)
    assert locked.returncode == 0, locked.stderr
    assert json.loads(locked.stdout)["approval_outdated"] is False


def test_piped_tables_keep_one_line_per_row_and_honour_columns(plain: PlainInstall, elsewhere: Path) -> None:
    deep = "/".join(["tools", *(f"a-rather-long-folder-name-{i}" for i in range(8))])  # rows of 300+ columns
    for i in range(3):
        done = plain.run([plain.tooldir, "init", f"tool_{i}_" + "x" * 50, "--dir", deep], elsewhere)
        assert done.returncode == 0, done.stderr
    argv = [plain.tooldir, "list", "--user-dir", deep, "--state-dir", str(elsewhere / "s")]
    listed = plain.run(argv, elsewhere)
    assert listed.returncode == 0, listed.stderr
    rows = [line for line in listed.stdout.splitlines() if "tool_" in line]
    assert len(rows) == 3, listed.stdout  # each row whole on its own line, its path included
    assert all(str(elsewhere / deep) in row and len(row) > 200 for row in rows)
    done = subprocess.run(
        argv, cwd=elsewhere, env=dict(plain.env, COLUMNS="60"), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 60


def test_output_width_is_columns_when_set_else_the_terminal_or_unwrapped() -> None:
    assert output_width(terminal=False, environ={"COLUMNS": "72"}) == 72
    assert output_width(terminal=True, environ={"COLUMNS": "72"}) == 72
    assert output_width(terminal=False, environ={}) == UNWRAPPED_WIDTH
    assert output_width(terminal=True, environ={}) is None
    for nonsense in ("0", "-5", "wide", "99999999"):
        assert output_width(terminal=False, environ={"COLUMNS": nonsense}) == UNWRAPPED_WIDTH


def test_an_mcp_server_package_that_cannot_start_names_its_stderr_and_the_missing_runtime_root(
    plain: PlainInstall, elsewhere: Path
) -> None:
    require_sandbox()
    package = elsewhere / "proj" / ".tooldir" / "tools" / "notes"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "fixtures" / "example" / "project" / ".tooldir" / "tools" / "notes",
        package,
    )
    common = ["--project", "proj", "--user-dir", "none", "--state-dir", str(elsewhere / "state")]
    (elsewhere / "none").mkdir()
    allowed = plain.run([plain.tooldir, "allow", "notes", "--yes", *common], elsewhere)
    assert allowed.returncode == 1
    for text in (allowed.stderr, plain.run([plain.tooldir, "show", "notes", *common], elsewhere).stdout):
        flat = " ".join(text.split())
        assert "ModuleNotFoundError: No module named 'mcp'" in flat, text
        assert (
            "likely cause: a module it imports is not in the sandbox" in flat
            and "sandbox.runtime_roots (now: none)" in flat
        )
    ran = plain.run([plain.tooldir, "run", "notes__add", "--input", '{"text": "x"}', *common], elsewhere)
    assert ran.returncode == 1 and "No module named 'mcp'" in ran.stderr and "sandbox.runtime_roots" in ran.stderr


def test_piped_headings_are_one_short_line_not_a_rule_of_the_unwrapped_width(
    plain: PlainInstall, elsewhere: Path
) -> None:
    done = plain.run([plain.tooldir, "init", "piped_tool"], elsewhere)
    assert done.returncode == 0, done.stderr
    common = ["--user-dir", str(elsewhere / "none"), "--state-dir", str(elsewhere / "s")]
    for argv in (["allow", "piped_tool", "--yes"], ["show", "piped_tool"], ["verify", ".tooldir/tools/piped_tool"]):
        shown = plain.run([plain.tooldir, *argv, *common], elsewhere)
        assert shown.returncode == 0, shown.stderr
        headings = [line for line in shown.stdout.splitlines() if line.startswith("──")]
        assert headings and all(line.endswith(" ──") and len(line) < 200 for line in headings), shown.stdout
    narrow = subprocess.run(
        [plain.tooldir, "show", "piped_tool", *common],
        cwd=elsewhere, env=dict(plain.env, COLUMNS="60"), capture_output=True, text=True, check=False,
    )  # fmt: skip
    [heading] = [line for line in narrow.stdout.splitlines() if line.startswith("──")]
    assert len(heading) == 60  # with COLUMNS, rich's rule across that width
