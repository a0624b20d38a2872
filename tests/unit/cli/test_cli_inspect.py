"""The scan/list/show contract (DESIGN §3, §8): JSON shapes, exit codes, bad input without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool, project_tools

from tooldir._cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "fixtures" / "example"

TOOL_KEYS = ["name", "source", "path", "status", "trust", "digest", "risk", "deferred", "network"]
DIAG_KEYS = ["severity", "code", "tool", "source", "path", "pointer", "message"]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main([*args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    user = tmp_path / "user"
    make_tool(user, "user_tool")
    make_tool(user, "shared_tool")
    project = tmp_path / "project"
    tools = project_tools(project)
    make_tool(tools, "shared_tool")
    make_tool(tools, "broken_tool", raw_manifest=b'{"name": "x", "name": "y"}')
    return {"user": str(user), "project": str(project), "state": str(tmp_path / "state")}


def common(dirs: dict[str, str]) -> list[str]:
    return ["--project", dirs["project"], "--user-dir", dirs["user"], "--state-dir", dirs["state"]]


def test_scan_json_has_exactly_the_contract_shape(capsys: pytest.CaptureFixture[str], dirs: dict[str, str]) -> None:
    code, doc = run_json(capsys, "scan", *common(dirs))
    assert code == 0
    assert list(doc) == ["snapshot", "tools", "diagnostics"]
    assert list(doc["snapshot"]) == ["id", "generation"]
    assert doc["snapshot"]["generation"] == 1 and doc["snapshot"]["id"].startswith("snap-")
    assert doc["tools"] and all(list(t) == TOOL_KEYS for t in doc["tools"])
    assert doc["diagnostics"] and all(list(d) == DIAG_KEYS for d in doc["diagnostics"])
    by = {(t["name"], t["source"]): t for t in doc["tools"]}
    assert by[("user_tool", "user")]["status"] == "active"
    assert by[("user_tool", "user")]["trust"] == "none-required"
    assert by[("user_tool", "user")]["digest"].startswith("sha256:")
    assert by[("user_tool", "user")]["risk"] == "read"
    assert isinstance(by[("user_tool", "user")]["deferred"], bool)
    assert by[("shared_tool", "user")]["status"] == "shadowed"
    assert by[("shared_tool", "project")]["status"] == "pending"
    assert by[("broken_tool", "project")]["status"] == "rejected"
    assert by[("broken_tool", "project")]["digest"] is not None
    dup = [d for d in doc["diagnostics"] if d["code"] == "duplicate-key"]
    assert dup == [
        {
            "severity": "error",
            "code": "duplicate-key",
            "tool": "broken_tool",
            "source": "project",
            "path": str(Path(dirs["project"]) / ".tooldir" / "tools" / "broken_tool" / "schema.json"),
            "pointer": None,
            "message": dup[0]["message"],
        }
    ]


def test_scan_json_is_identical_across_runs(capsys: pytest.CaptureFixture[str], dirs: dict[str, str]) -> None:
    assert run_json(capsys, "scan", *common(dirs)) == run_json(capsys, "scan", *common(dirs))


def test_scan_strict_exits_1_when_an_error_was_found(capsys: pytest.CaptureFixture[str], dirs: dict[str, str]) -> None:
    assert main(["scan", "--strict", *common(dirs)]) == 1
    capsys.readouterr()


def test_scan_strict_exits_0_when_only_warnings_were_found(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "ok_tool", description="Echo\u200b text.")
    code = main(["scan", "--strict", "--project", str(tmp_path), "--user-dir", str(user), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [d["severity"] for d in doc["diagnostics"]] == ["warning"]


def test_the_bundled_example_scans_with_every_status(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, doc = run_json(
        capsys,
        "scan",
        "--project",
        str(EXAMPLE / "project"),
        "--user-dir",
        str(EXAMPLE / "user"),
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert code == 0
    assert {t["status"] for t in doc["tools"]} >= {"active", "pending", "shadowed", "rejected"}


def test_list_json_shows_only_the_tools_that_would_be_offered(
    capsys: pytest.CaptureFixture[str], dirs: dict[str, str]
) -> None:
    code, doc = run_json(capsys, "list", *common(dirs))
    assert code == 0
    assert list(doc) == ["snapshot", "tools"]
    assert sorted((t["name"], t["status"]) for t in doc["tools"]) == [
        ("shared_tool", "pending"),
        ("user_tool", "active"),
    ]
    code, everything = run_json(capsys, "list", "--all", *common(dirs))
    assert len(everything["tools"]) == 4


def test_show_json_gives_every_record_of_a_name_with_files_and_diagnostics(
    capsys: pytest.CaptureFixture[str], dirs: dict[str, str]
) -> None:
    code, doc = run_json(capsys, "show", "shared_tool", *common(dirs))
    assert code == 0
    records = doc["records"]
    assert [(r["source"], r["status"]) for r in records] == [("user", "shadowed"), ("project", "pending")]
    assert records[0]["shadowed_by"] == str(Path(dirs["project"]) / ".tooldir" / "tools" / "shared_tool")
    assert [f["path"] for f in records[0]["files"]] == ["run.py", "schema.json"]
    assert records[0]["manifest"]["name"] == "shared_tool"
    assert {d["code"] for d in records[1]["diagnostics"]} == {"not-approved", "shadowed"}


def test_show_of_an_unknown_name_exits_1_with_a_message(
    capsys: pytest.CaptureFixture[str], dirs: dict[str, str]
) -> None:
    assert main(["show", "no_such_tool", *common(dirs)]) == 1
    assert "no_such_tool" in capsys.readouterr().err


def test_human_output_renders_tables_without_failing(capsys: pytest.CaptureFixture[str], dirs: dict[str, str]) -> None:
    assert main(["scan", *common(dirs)]) == 0
    assert main(["list", "--all", *common(dirs)]) == 0
    assert main(["show", "shared_tool", *common(dirs)]) == 0
    out = capsys.readouterr().out
    assert "user_tool" in out and "duplicate-key" in out and "shadowed" in out


def test_terminal_output_neutralises_escape_sequences_from_tool_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    user = tmp_path / "user"
    make_tool(user, "esc_tool", description="Echo \x1b[2J\x1b]0;pwned\x07 text.")
    assert main(["show", "esc_tool", "--project", str(tmp_path), "--user-dir", str(user)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "U+001B" in out  # the suspicious-text warning names the hidden character


def test_a_missing_root_is_empty_not_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, doc = run_json(capsys, "scan", "--project", str(tmp_path), "--user-dir", str(tmp_path / "absent"))
    assert code == 0
    assert doc["tools"] == [] and doc["diagnostics"] == []


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ('[sources.project]\nmax_risk = "nuclear"\n', "sources.project.max_risk"),
        ("[nonsense]\nx = 1\n", "nonsense"),
        ("[limits]\nmax_root_entries = 0\n", "limits.max_root_entries"),
        ('[defer]\nrules = ["Sometimes(*)"]\n', "defer.rules"),
        ("not [toml", None),
    ],
    ids=["bad-enum", "unknown-table", "out-of-range", "bad-defer-rule", "not-toml"],
)
def test_a_bad_policy_exits_2_naming_the_file_and_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, key: str | None
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(content)
    assert main(["scan", "--policy", str(policy), "--project", str(tmp_path), "--user-dir", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err
    assert str(policy) in err.replace("\n", "")
    if key is not None:
        assert key in err


@pytest.mark.parametrize(
    "args",
    [
        ["scan", "--policy", "{tmp}/missing.toml"],
        ["scan", "--policy", "{tmp}"],
        ["scan", "--project", "{tmp}/no-such-project"],
        ["scan", "--state-dir", "{tmp}/file-not-dir"],
    ],
    ids=["missing-policy", "policy-is-a-folder", "missing-project", "state-dir-is-a-file"],
)
def test_configuration_errors_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dirs: dict[str, str], args: list[str]
) -> None:
    (tmp_path / "file-not-dir").write_text("x")
    argv = [a.format(tmp=tmp_path) for a in args]
    if "--user-dir" not in argv:
        argv += ["--user-dir", dirs["user"]]
    if "--project" not in argv:
        argv += ["--project", dirs["project"]]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip()


def _nasty_tree(root: Path) -> Path:
    """A tool root full of hostile entries."""
    user = root / "nasty"
    make_tool(user, "bin_manifest", raw_manifest=os.urandom(512))
    make_tool(user, "deep", raw_manifest=b"[" * 100_000)
    make_tool(user, "huge_int", raw_manifest=b'{"a": ' + b"9" * 10_000 + b"}")
    make_tool(user, "nul", raw_manifest=b'{"name": "nul\x00"}')
    make_tool(user, "not_object", raw_manifest=b'"just a string"')
    make_tool(user, "weird_types", raw_manifest=json.dumps({"name": 1, "execute": "x", "input_schema": []}).encode())
    (user / "fifo_entry").mkdir()
    os.mkfifo(user / "fifo_entry" / "schema.json")
    (user / "dangling").symlink_to(root / "nowhere")
    (user / "\udcff-bad-bytes").mkdir()
    return user


def test_no_bad_input_ever_produces_a_traceback(tmp_path: Path) -> None:
    user = _nasty_tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (
        ["scan", "--json", "--user-dir", str(user)],
        ["scan", "--strict", "--user-dir", str(user)],
        ["list", "--all", "--user-dir", str(user)],
        ["show", "deep", "--user-dir", str(user)],
    ):
        proc = subprocess.run(
            [sys.executable, "-c", "from tooldir._cli import run; run()", *args, "--project", str(tmp_path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 1), (args, proc.returncode, proc.stderr)
