"""The drill runner itself: failures are detected, bad scenarios are clear errors, the CLI contract."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tooldir._cli import main
from tooldir._drill_checks import check_canary, check_state
from tooldir._drill_plant import fingerprint, make_arena
from tooldir._drill_storm import whole
from tooldir.drill import ScenarioError, load_scenario, run_drill

HOSTILE = {
    "name": "evil_new",
    "description": "Format a short text.",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "risk": "read",
    "execute": {"command": ["python3", "run.py"]},
}


def write_scenario(folder: Path, toml: str, tools: dict[str, dict[str, object]] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "scenario.toml").write_text(textwrap.dedent(toml))
    for name, manifest in (tools or {}).items():
        pkg = folder / "tree" / "project" / ".tooldir" / "tools" / name
        pkg.mkdir(parents=True)
        (pkg / "schema.json").write_text(json.dumps(manifest))
        (pkg / "run.py").write_text('open("{canary}", "w")\n')
    return folder


HEADER = """
threat = "trust:unapproved"
title = "t"
plants = "p"
expected = "e"

[control]
user = ["good_user_tool"]
project = ["good_project_tool"]
"""


def test_a_drill_whose_expected_code_does_not_occur_fails_the_outcome_check(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER
        + '[expect]\ndiagnostics = [{ code = "symlink", tool = "evil_new" }]\nstatus = { evil_new = "active" }\n',
        {"evil_new": HOSTILE},
    )
    result = run_drill(load_scenario(folder))
    checks = {c.name: c for c in result.checks}
    assert not result.passed
    assert not checks["outcome"].passed
    assert "missing diagnostic symlink(evil_new)" in checks["outcome"].message
    assert "evil_new should be active but is pending" in checks["outcome"].message
    assert checks["canary"].passed and checks["control"].passed and checks["state"].passed


def test_a_drill_whose_hostile_plant_breaks_a_control_tool_fails_the_control_check(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER
        + '[[steps]]\ndo = "plant"\nplant = { kind = "mode", path = "project/.tooldir/tools/good_project_tool", mode = "0777" }\n',
    )
    result = run_drill(load_scenario(folder))
    control = next(c for c in result.checks if c.name == "control")
    assert not control.passed
    assert "good_project_tool is rejected" in control.message


def test_canary_check_fails_when_hostile_code_wrote_its_marker(tmp_path: Path) -> None:
    arena = make_arena(tmp_path, "s")
    assert check_canary(arena).passed
    arena.canary.write_text("ran")
    check = check_canary(arena)
    assert not check.passed
    assert "ran" in check.message


def test_state_check_names_a_user_file_changed_during_the_load(tmp_path: Path) -> None:
    arena = make_arena(tmp_path, "s")
    before = fingerprint(arena)
    (arena.state / "approvals.json").write_text("{}")
    check = check_state(before, fingerprint(arena))
    assert not check.passed
    assert "home/.local/state/tooldir/approvals.json" in check.message


def test_state_check_ignores_the_audit_log_that_tooldir_itself_appends_to(tmp_path: Path) -> None:
    arena = make_arena(tmp_path, "s")
    before = fingerprint(arena)
    (arena.state / "audit.jsonl").write_text("{}\n")
    assert check_state(before, fingerprint(arena)).passed


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        (HEADER + '[[plant]]\nkind = "symlink"\npath = "project/x"\n', "plant.0"),
        ("surprise = 1\n" + HEADER, "surprise"),
        ('threat = "trust:unapproved"\ntitle = "t"\nplants = "p"\nexpected = "e"\n', "(top)"),
        (HEADER.replace('"trust:unapproved"', '"Not An Id"'), "threat"),
        (HEADER + '[[steps]]\ndo = "write"\npath = "project/x"\n', "steps.0"),
    ],
    ids=["symlink-without-target", "unknown-key", "no-control-tool", "bad-threat-id", "write-without-content"],
)
def test_an_invalid_scenario_is_a_clear_error_naming_the_key(tmp_path: Path, toml: str, key: str) -> None:
    folder = write_scenario(tmp_path / "bad", toml)
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert info.value.path == str(folder / "scenario.toml")
    assert info.value.message.startswith(key)


def test_a_plant_path_leaving_the_arena_fails_the_drill_without_writing_anything(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER + '[[plant]]\nkind = "file"\npath = "project/../../escaped"\ntext = "x"\n',
    )
    result = run_drill(load_scenario(folder))
    assert not result.passed
    assert [c.name for c in result.checks] == ["runnable"]
    assert "must be relative, without '..'" in result.checks[0].message
    assert not (tmp_path / "escaped").exists()


def test_a_drill_restores_the_environment_umask_and_working_directory(tmp_path: Path) -> None:
    folder = write_scenario(tmp_path / "trust-unapproved", HEADER)
    env_before = dict(os.environ)
    cwd_before = os.getcwd()
    old = os.umask(0o027)
    try:
        run_drill(load_scenario(folder))
        assert os.umask(0o027) == 0o027
    finally:
        os.umask(old)
    assert dict(os.environ) == env_before
    assert os.getcwd() == cwd_before


def test_cli_drill_json_reports_each_drill_and_exits_1_when_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_scenario(
        tmp_path / "trust-unapproved", HEADER + '[expect]\nstatus = { evil_new = "pending" }\n', {"evil_new": HOSTILE}
    )
    write_scenario(
        tmp_path / "trust-unapproved--wrong",
        HEADER.replace('"trust:unapproved"', '"trust:unapproved"\nvariant = "wrong"')
        + '[expect]\nstatus = { evil_new = "active" }\n',
        {"evil_new": HOSTILE},
    )
    assert main(["drill", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    assert [(d["id"], d["scenario"], d["passed"]) for d in report["drills"]] == [
        ("trust:unapproved", "trust-unapproved", True),
        ("trust:unapproved/wrong", "trust-unapproved--wrong", False),
    ]
    first = report["drills"][0]
    assert set(first) == {"id", "scenario", "expected", "observed", "passed", "details"}
    assert {d["check"] for d in first["details"]} == {"outcome", "canary", "control", "state"}
    assert "project:evil_new=pending" in first["observed"]


def test_cli_drill_only_selects_by_threat_id_and_exits_0_when_all_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_scenario(
        tmp_path / "trust-unapproved", HEADER + '[expect]\nstatus = { evil_new = "pending" }\n', {"evil_new": HOSTILE}
    )
    write_scenario(tmp_path / "other", HEADER.replace('"trust:unapproved"', '"fs:symlink"'), {"evil_new": HOSTILE})
    assert main(["drill", str(tmp_path), "--only", "trust:*"]) == 0
    out = capsys.readouterr().out
    assert "trust:unapproved" in out and "fs:symlink" not in out
    assert "1 drills, all passed" in out


def test_cli_drill_usage_errors_exit_2_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_scenario(tmp_path / "trust-unapproved", HEADER)
    assert main(["drill", str(tmp_path), "--only", "nope:*"]) == 2
    assert "no scenario matches 'nope:*'" in capsys.readouterr().err
    assert main(["drill", str(tmp_path / "missing")]) == 2
    assert "not a directory" in " ".join(capsys.readouterr().err.split())  # rich wraps stderr
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "scenario.toml").write_text("threat = [")
    assert main(["drill", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "invalid scenario" in err and "Traceback" not in err


def test_cli_drill_prints_hostile_names_with_invisible_characters_made_visible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "evil\u202ename"
    write_scenario(
        tmp_path / "trust-unapproved", HEADER + f'[expect]\nstatus = {{ "{name}" = "rejected" }}\n', {name: HOSTILE}
    )
    assert main(["drill", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out
    assert "<U+202E>" in out


def test_a_drill_needing_machinery_this_build_lacks_fails_as_not_runnable_yet(tmp_path: Path) -> None:
    folder = write_scenario(tmp_path / "trust-unapproved", 'needs = ["teleport.Beam"]\n' + HEADER)
    result = run_drill(load_scenario(folder))
    assert not result.passed
    assert result.unavailable is None  # a tooldir gap, never a skip
    assert result.checks[0].name == "runnable"
    assert result.checks[0].message.startswith("not runnable yet: tooldir.teleport does not exist")


def test_a_tooldir_step_naming_a_missing_command_fails_as_not_runnable_yet(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved", HEADER + '[[steps]]\ndo = "tooldir"\nargs = ["teleport", "--now"]\n'
    )
    result = run_drill(load_scenario(folder))
    assert not result.passed
    assert result.checks[0].message == "not runnable yet: 'tooldir teleport' does not exist in this build"


def test_a_failing_tooldir_step_is_a_clear_scenario_error_with_its_exit_code(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER + '[[steps]]\ndo = "tooldir"\nargs = ["sign", "{project}/nowhere", "--key", "{home}/k"]\n',
    )
    result = run_drill(load_scenario(folder))
    assert not result.passed
    message = result.checks[0].message
    assert "steps[0] (tooldir): 'tooldir sign' exited 2, expected 0" in message


def test_whole_rejects_a_snapshot_whose_owner_index_disagrees_with_its_tools(tmp_path: Path) -> None:
    import dataclasses
    from types import MappingProxyType

    from tooldir import load

    project = tmp_path / "p"
    root = project / ".tooldir" / "tools"
    root.mkdir(parents=True)
    (root / "evil_new").mkdir()
    (root / "evil_new" / "schema.json").write_text(json.dumps(HOSTILE))
    (root / "evil_new" / "run.py").write_text("")
    snapshot = load(project=project, user_dirs=[], state_dir=tmp_path / "state")
    assert whole(snapshot) is None
    torn = dataclasses.replace(snapshot, by_name=MappingProxyType({}))
    assert "by_name disagrees" in (whole(torn) or "")


SANDBOX = os.environ.get("TOOLDIR_REQUIRE_SANDBOX") == "1"


def test_a_call_whose_output_leaks_the_secret_fails_the_outcome_check(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "sandbox-secrets",
        HEADER.replace('"trust:unapproved"', '"sandbox:secrets"').replace(
            'expected = "e"', 'expected = "e"\nrequires = ["sandbox"]'
        )
        + '[[calls]]\ntool = "good_user_tool"\ninput = { text = "{secret}" }\ncontent_excludes = ["{secret}"]\n',
    )
    result = run_drill(load_scenario(folder))
    if result.unavailable is not None and not SANDBOX:
        pytest.skip(f"no working sandbox on this machine: {result.unavailable}")
    checks = {c.name: c for c in result.checks}
    assert not checks["outcome"].passed
    assert "call good_user_tool: output leaks '{secret}'" in checks["outcome"].message
    assert checks["audit"].passed  # the (successful) call was recorded


def test_a_call_refused_with_another_code_than_expected_fails_and_names_both(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER + '[[calls]]\ntool = "evil_new"\ninput = { text = "x" }\nerror = "timeout"\n',
        {"evil_new": HOSTILE},
    )
    result = run_drill(load_scenario(folder))
    checks = {c.name: c for c in result.checks}
    assert "call evil_new should fail with timeout but got not-active" in checks["outcome"].message
    assert checks["audit"].passed
