"""The drill runner itself: failures are detected, bad scenarios are clear errors, the CLI contract."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tooldir._cli import command_line, main
from tooldir._data import SCENARIOS
from tooldir.drill import (
    DrillResult,
    Plant,
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenarios,
    plant,
    run_drill,
    select,
)
from tooldir.drill import execute as ex
from tooldir.drill.checks import check_canary, check_planted, check_state
from tooldir.drill.plant import apply_plant, fingerprint, make_arena, record
from tooldir.drill.storm import whole
from tooldir.policy import parse_policy

REPO = Path(__file__).resolve().parents[2]

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
    result = run_drill(load_scenario(folder), cli=command_line())
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
    result = run_drill(load_scenario(folder), cli=command_line())
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
        (HEADER + '[[calls]]\ntool = "good_project_tool"\ncancelled = 3\n', "calls.0"),
        (HEADER + '[expect]\ndiagnostics = [{ code = "not-aproved" }]\n', "expect.diagnostics.0.code"),
        (HEADER + '[[calls]]\ntool = "good_project_tool"\nerror = "tool-faild"\n', "calls.0.error"),
    ],
    ids=[
        "symlink-without-target",
        "unknown-key",
        "no-control-tool",
        "bad-threat-id",
        "write-without-content",
        "cancelled-without-mcp",
        "unknown-diagnostic-code",
        "unknown-error-code",
    ],
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
    result = run_drill(load_scenario(folder), cli=command_line())
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
        run_drill(load_scenario(folder), cli=command_line())
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
    assert set(first) == {"id", "scenario", "expected", "observed", "status", "reason", "passed", "details"}
    assert [(d["status"], d["reason"] is None) for d in report["drills"]] == [("passed", True), ("failed", False)]
    assert report["drills"][1]["reason"].startswith("outcome: ")
    assert {d["check"] for d in first["details"]} == {"planted", "outcome", "canary", "control", "state", "arena"}
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
    result = run_drill(load_scenario(folder), cli=command_line())
    assert not result.passed
    assert result.unavailable is None  # a tooldir gap, never a skip
    assert result.checks[0].name == "runnable"
    assert result.checks[0].message.startswith("not runnable yet: tooldir.teleport does not exist")


def test_a_tooldir_step_naming_a_missing_command_fails_as_not_runnable_yet(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved", HEADER + '[[steps]]\ndo = "tooldir"\nargs = ["teleport", "--now"]\n'
    )
    result = run_drill(load_scenario(folder), cli=command_line())
    assert not result.passed
    assert result.checks[0].message == "not runnable yet: 'tooldir teleport' does not exist in this build"


def test_a_failing_tooldir_step_is_a_clear_scenario_error_with_its_exit_code(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER + '[[steps]]\ndo = "tooldir"\nargs = ["sign", "{project}/nowhere", "--key", "{home}/k"]\n',
    )
    result = run_drill(load_scenario(folder), cli=command_line())
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
    result = run_drill(load_scenario(folder), cli=command_line())
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
    result = run_drill(load_scenario(folder), cli=command_line())
    checks = {c.name: c for c in result.checks}
    assert "call evil_new should fail with timeout but got not-active" in checks["outcome"].message
    assert checks["audit"].passed


# ---------------------------------------------------------------------------------------------
# Issue 12, item 8: relative scenario folders, missing content, the planted check


def drill_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["drill", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("where", ["repo-root", "other-cwd"])
def test_a_relative_scenario_folder_plants_the_hostile_tree_and_passes_for_real(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cwd = REPO if where == "repo-root" else tmp_path
    monkeypatch.chdir(cwd)
    relative = os.path.relpath(REPO / "fixtures" / "poisoned", cwd)
    assert not Path(relative).is_absolute()
    code, report = drill_json(capsys, relative, "--only", "fs:prefix")
    assert code == 0
    [drill] = report["drills"]  # type: ignore[misc]
    assert drill["status"] == "passed"
    planted = next(d for d in drill["details"] if d["check"] == "planted")
    assert planted["passed"] is True
    tree_files = [p for p in (SCENARIOS / "fs-prefix" / "tree").rglob("*") if p.is_file()]
    assert len(tree_files) == 4
    assert int(planted["message"].split()[0]) >= len(tree_files)


def test_a_scenario_loaded_by_a_relative_path_records_its_absolute_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    scenario = load_scenario("fixtures/poisoned/fs-prefix")
    assert Path(scenario.folder).is_absolute()
    assert Path(scenario.folder) == (SCENARIOS / "fs-prefix").resolve()


def copy_without_tree(name: str, dest: Path) -> Path:
    folder = dest / name
    folder.mkdir(parents=True)
    (folder / "scenario.toml").write_bytes((SCENARIOS / name / "scenario.toml").read_bytes())
    return folder


def test_a_scenario_whose_tree_is_missing_is_a_scenario_error_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = copy_without_tree("fs-prefix", tmp_path)
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert info.value.message.startswith("expect.status.evil_sibling: names the tool 'evil_sibling'")
    assert main(["drill", str(tmp_path), "--only", "fs:prefix"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "invalid scenario" in err and "Traceback" not in err


def test_no_bundled_scenario_passes_once_its_tree_is_missing(tmp_path: Path) -> None:
    with_tree = [s.name for s in load_scenarios(SCENARIOS) if (Path(s.folder) / "tree").is_dir()]
    assert len(with_tree) > 40
    outcomes: dict[str, str] = {}
    for name in with_tree:
        try:
            scenario = load_scenario(copy_without_tree(name, tmp_path))
        except ScenarioError:
            outcomes[name] = "invalid scenario"
            continue
        result = run_drill(scenario, cli=command_line())
        outcomes[name] = result.status if result.status != "failed" else result.checks[0].name
    assert {name: how for name, how in outcomes.items() if how == "passed"} == {}
    assert sum(how == "invalid scenario" for how in outcomes.values()) > len(with_tree) // 2


def test_an_empty_tree_folder_is_a_scenario_error(tmp_path: Path) -> None:
    folder = write_scenario(tmp_path / "trust-unapproved", HEADER)
    (folder / "tree" / "project" / ".tooldir").mkdir(parents=True)
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert info.value.message.startswith("tree/ holds no files")


def test_a_call_naming_a_tool_nothing_plants_is_a_scenario_error(tmp_path: Path) -> None:
    folder = write_scenario(tmp_path / "trust-unapproved", HEADER + '[[calls]]\ntool = "ghost_tool"\n')
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert info.value.message.startswith("calls.0.tool: names the tool 'ghost_tool'")


def test_a_tool_written_by_a_step_counts_as_provided(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER
        + '[[steps]]\ndo = "write"\npath = "project/.tooldir/tools/made_by_step/schema.json"\ntext = "{}"\n'
        + '[expect]\nstatus = { made_by_step = "rejected" }\n',
    )
    assert load_scenario(folder).expect.status == {"made_by_step": "rejected"}


def test_a_step_on_a_path_that_was_never_planted_is_a_scenario_error_naming_the_step(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER + '[[steps]]\ndo = "delete-line"\npath = "project/.tooldir/tools/nothing/run.py"\nline = 1\n',
    )
    result = run_drill(load_scenario(folder), cli=command_line())
    assert result.status == "failed"
    assert [c.name for c in result.checks] == ["runnable"]
    assert "steps[0] (delete-line): project/.tooldir/tools/nothing/run.py: No such file" in result.checks[0].message


def test_the_planted_check_fails_when_a_plant_is_not_in_the_arena_as_planted(tmp_path: Path) -> None:
    arena = make_arena(tmp_path, "s")
    planted: dict[Path, object] = {}
    for kind, path in [("fifo", "project/a"), ("file", "project/b"), ("symlink", "project/c")]:
        plant = Plant(
            kind=kind, path=path, text="x" if kind == "file" else None, target="t" if kind == "symlink" else None
        )  # type: ignore[arg-type]
        record(planted, apply_plant(plant, arena))  # type: ignore[arg-type]
    assert check_planted(arena, planted).passed  # type: ignore[arg-type]
    (arena.project / "a").unlink()
    (arena.project / "a").write_text("")
    (arena.project / "b").write_text("changed")
    (arena.project / "c").unlink()
    check = check_planted(arena, planted)  # type: ignore[arg-type]
    assert not check.passed
    assert "project/a should be a fifo but is a file" in check.message
    assert "project/b does not hold the planted content" in check.message
    assert "project/c is missing" in check.message


def test_a_later_plant_replaces_the_expectation_of_what_it_replaced(tmp_path: Path) -> None:
    arena = make_arena(tmp_path, "s")
    planted: dict[Path, object] = {}
    record(planted, apply_plant(Plant(kind="file", path="project/x/f", text="a"), arena))  # type: ignore[arg-type]
    record(planted, apply_plant(Plant(kind="symlink", path="project/x", target="{outside}"), arena))  # type: ignore[arg-type]
    record(planted, apply_plant(Plant(kind="mode", path="project", mode="0777"), arena))  # type: ignore[arg-type]
    assert sorted(str(p.relative_to(tmp_path)) for p in planted) == ["project", "project/x"]
    assert check_planted(arena, planted).passed  # type: ignore[arg-type]
    arena.project.chmod(0o755)
    check = check_planted(arena, planted)  # type: ignore[arg-type]
    assert not check.passed
    assert "project has mode 0755, planted 0777" in check.message


# ---------------------------------------------------------------------------------------------
# Issue 12, item 10: drills this machine cannot run are not failures


ROOT_ONLY = HEADER.replace('"trust:unapproved"', '"fs:perms"\nvariant = "owner"').replace(
    'expected = "e"', 'expected = "e"\nrequires = ["root"]'
)


def two_drills(tmp_path: Path) -> Path:
    write_scenario(
        tmp_path / "trust-unapproved", HEADER + '[expect]\nstatus = { evil_new = "pending" }\n', {"evil_new": HOSTILE}
    )
    write_scenario(tmp_path / "fs-perms--owner", ROOT_ONLY)
    return tmp_path


@pytest.fixture
def not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.mark.usefixtures("not_root")
def test_a_drill_needing_root_is_not_runnable_here_and_the_run_still_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = drill_json(capsys, str(two_drills(tmp_path)))
    assert code == 0
    by_id = {d["id"]: d for d in report["drills"]}  # type: ignore[attr-defined]
    assert by_id["trust:unapproved"]["status"] == "passed"
    owner = by_id["fs:perms/owner"]
    assert (owner["status"], owner["passed"]) == ("not-runnable", False)
    assert owner["reason"].startswith("not runnable here (needs root")
    assert report["counts"] == {"passed": 1, "failed": 0, "not-runnable": 1}
    assert report["passed"] is True and report["require_all"] is False


@pytest.mark.usefixtures("not_root")
def test_require_all_fails_the_run_when_a_drill_could_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = drill_json(capsys, str(two_drills(tmp_path)), "--require-all")
    assert code == 1
    assert report["passed"] is False and report["counts"]["failed"] == 0  # type: ignore[index]


@pytest.mark.usefixtures("not_root")
def test_a_run_in_which_no_drill_could_run_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two_drills(tmp_path)
    code, report = drill_json(capsys, str(tmp_path), "--only", "fs:perms")
    assert code == 1
    assert report["counts"] == {"passed": 0, "failed": 0, "not-runnable": 1}


@pytest.mark.usefixtures("not_root")
def test_the_table_shows_not_runnable_drills_apart_from_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["drill", str(two_drills(tmp_path))]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "fs:perms/owner" in line)
    assert "not run" in row and "FAIL" not in row
    assert "not runnable here (needs root" in out
    assert "2 drills: 1 passed, 0 failed, 1 not runnable here (needs root" in " ".join(out.split())


def test_a_call_drill_needing_a_sandbox_this_machine_lacks_is_not_runnable_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ex, "sandbox_problem", lambda policy: "bwrap: not found")
    folder = write_scenario(
        tmp_path / "sandbox-secrets",
        HEADER.replace('"trust:unapproved"', '"sandbox:secrets"').replace(
            'expected = "e"', 'expected = "e"\nrequires = ["sandbox"]'
        )
        + '[[calls]]\ntool = "good_user_tool"\ninput = { text = "x" }\n',
    )
    result = run_drill(load_scenario(folder), cli=command_line())
    assert result.status == "not-runnable"
    assert result.reason == "not runnable here (needs a working sandbox: bwrap: not found)"


def test_a_drill_whose_tooldir_machinery_is_missing_counts_as_failed_not_as_not_runnable(tmp_path: Path) -> None:
    folder = write_scenario(tmp_path / "trust-unapproved", 'needs = ["teleport.Beam"]\n' + HEADER)
    result = run_drill(load_scenario(folder), cli=command_line())
    assert result.status == "failed"
    assert result.to_json()["status"] == "failed"


# ---------------------------------------------------------------------------------------------
# Issue 12, item 9: --list


def test_drill_list_json_names_every_bundled_drill_with_its_threat_title_and_requirements(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["drill", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["drills"]
    bundled = load_scenarios(SCENARIOS)
    assert [r["id"] for r in rows] == [s.drill_id for s in bundled]
    assert set(rows[0]) == {"id", "threat", "title", "requires", "scenario"}
    owner = next(r for r in rows if r["id"] == "fs:perms/owner")
    assert (owner["threat"], owner["requires"]) == ("fs:perms", ["root"])


def test_drill_list_runs_nothing_and_honours_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved", HEADER + '[expect]\nstatus = { evil_new = "active" }\n', {"evil_new": HOSTILE}
    )
    write_scenario(tmp_path / "other", HEADER.replace('"trust:unapproved"', '"fs:symlink"'), {"evil_new": HOSTILE})
    assert main(["drill", str(tmp_path), "--list", "--only", "trust:*"]) == 0  # the drill would fail if run
    out = capsys.readouterr().out
    assert "trust:unapproved" in out and "fs:symlink" not in out and "1 drills" in out
    assert folder.is_dir()


# ---------------------------------------------------------------------------------------------
# Issue 12, item 11: a scenario cannot reach the caller's secrets or the network

FAKE_KEY = "FAKE-aws-secret-" + "5f0c1e2d3b4a69788796a5b4c3d2e1f0"


def isolation_drill() -> Scenario:
    [scenario] = select(load_scenarios(SCENARIOS), ["drill:isolation"])
    return scenario


def run_capturing_calls(monkeypatch: pytest.MonkeyPatch) -> tuple[DrillResult, list[ex.CallOutcome]]:
    seen: list[ex.CallOutcome] = []
    real = ex.call

    def call(*args: Any) -> ex.CallOutcome:
        outcome = real(*args)
        seen.append(outcome)
        return outcome

    monkeypatch.setattr(ex, "call", call)
    result = run_drill(isolation_drill(), cli=command_line())
    if result.unavailable is not None and not SANDBOX:
        pytest.skip(f"no working sandbox on this machine: {result.unavailable}")
    return result, seen


def test_the_isolation_drill_keeps_the_callers_aws_key_out_of_the_tool_and_off_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_KEY)
    result, seen = run_capturing_calls(monkeypatch)
    assert result.status == "passed", result.reason
    [outcome] = seen
    assert outcome.ok and "aws=<unset>" in outcome.shown() and "net=blocked" in outcome.shown()
    assert FAKE_KEY not in outcome.shown()
    assert outcome.connections == 0
    isolation = next(c for c in result.checks if c.name == "isolation")
    assert "(AWS_SECRET_ACCESS_KEY)" in isolation.message
    assert "sandbox.network" in isolation.message and "sandbox.env_allow AWS_SECRET_ACCESS_KEY" in isolation.message
    assert FAKE_KEY not in json.dumps(result.to_json())
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == FAKE_KEY  # the caller's environment is back


def test_without_the_scrubbed_environment_and_the_ceiling_the_isolation_drill_fails_naming_the_leak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_KEY)
    real_env = plant.drill_environment
    monkeypatch.setattr(plant, "drill_environment", lambda arena, caller: {**caller, **real_env(arena, caller)})
    monkeypatch.setattr(ex, "ceiling", lambda policy: policy)
    result, seen = run_capturing_calls(monkeypatch)
    assert result.status == "failed"
    assert FAKE_KEY in seen[0].shown() and seen[0].connections == 1  # what the drill exists to prevent
    checks = {c.name: c for c in result.checks}
    assert checks["isolation"].message.startswith("the caller's AWS_SECRET_ACCESS_KEY reached a tool's output")
    assert "the host loopback listener accepted 1 connection(s)" in checks["outcome"].message


def test_without_the_ceiling_the_scenarios_network_grant_reaches_the_host_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ex, "ceiling", lambda policy: policy)
    result, _ = run_capturing_calls(monkeypatch)
    assert result.status == "failed"
    assert "listener accepted 1 connection(s)" in next(c for c in result.checks if c.name == "outcome").message


def test_a_drill_runs_with_only_its_own_environment_and_restores_the_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_KEY)
    monkeypatch.setenv("TOOLDIR_STATE_DIR", str(tmp_path / "elsewhere"))
    before = dict(os.environ)
    arena = make_arena(tmp_path / "arena", "s")
    with plant.isolated(arena) as caller:
        inside = dict(os.environ)
    assert caller == before
    assert dict(os.environ) == before
    assert sorted(inside) == sorted(
        [
            "PATH",
            "LANG",
            "HOME",
            "XDG_CONFIG_HOME",
            "XDG_STATE_HOME",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
            plant.SECRET_ENV,
        ]
    )
    assert inside["HOME"] == str(arena.home) and inside[plant.SECRET_ENV] == arena.secret


def test_the_drill_ceiling_takes_back_network_unsandboxed_runs_and_foreign_variables() -> None:
    granted = parse_policy(
        "[sandbox]\nnetwork = true\nunsafe_allow_unsandboxed = true\ntimeout_s = 5\n"
        'env_allow = ["AWS_SECRET_ACCESS_KEY", "TOOLDIR_DRILL_SECRET_TOKEN"]\n'
    )
    clamped = ex.ceiling(granted)
    assert clamped.sandbox.network is False
    assert clamped.sandbox.unsafe_allow_unsandboxed is False
    assert clamped.sandbox.env_allow == ("TOOLDIR_DRILL_SECRET_TOKEN",)
    assert clamped.sandbox.timeout_s == 5  # what the ceiling does not cover stays the scenario's
    assert ex.clamped(granted) == [
        "sandbox.network",
        "sandbox.unsafe_allow_unsandboxed",
        "sandbox.env_allow AWS_SECRET_ACCESS_KEY",
    ]


def test_the_drill_ceiling_keeps_only_proxied_loopback_destinations_of_a_scenarios_network_allow() -> None:
    granted = parse_policy(
        "[sandbox]\nnetwork = true\nnetwork_unrestricted = true\n"
        'network_allow = ["127.0.0.1:8080", "[::1]:8080", "localhost:8080", "api.example.com:443", "10.0.0.1:80"]\n'
    )
    clamped = ex.ceiling(granted)
    assert clamped.sandbox.network is True and clamped.sandbox.network_unrestricted is False
    assert clamped.sandbox.network_allow == ("127.0.0.1:8080", "[::1]:8080", "localhost:8080")
    assert ex.clamped(granted) == [
        "sandbox.network_unrestricted",
        "sandbox.network_allow api.example.com:443",
        "sandbox.network_allow 10.0.0.1:80",
    ]
    # a tool declaring network: true gets nothing under it, and without a ceiling list no network at all
    assert clamped.sandbox.network_grant(True).kind == "none"
    assert ex.ceiling(parse_policy("[sandbox]\nnetwork = true\n")).sandbox.network is False


@pytest.mark.parametrize("command", ["serve", "watch", "drill"])
def test_a_tooldir_step_that_could_run_a_tool_is_a_scenario_error(tmp_path: Path, command: str) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved", HEADER + f'[[steps]]\ndo = "tooldir"\nargs = ["{command}"]\n'
    )
    result = run_drill(load_scenario(folder), cli=command_line())
    assert result.status == "failed"
    assert f"steps[0] (tooldir): 'tooldir {command}' may not run as a step" in result.checks[0].message


@pytest.mark.parametrize(
    ("policy", "args", "refusal"),
    [
        ('policy = """\n[sandbox]\nnetwork = true\n"""\n', '["run", "good_user_tool"]', "grants sandbox.network"),
        ("", '["run", "good_user_tool", "--policy", "{project}/loose.toml"]', "may not pass --policy"),
        (
            'policy = """\n[secrets.grants]\ngood_user_tool = ["X_TOKEN"]\n"""\n',
            '["run", "good_user_tool"]',
            "may not be used with [secrets.grants]",
        ),
    ],
    ids=["network", "policy-option", "secret-grants"],
)
def test_a_run_step_that_could_loosen_the_drill_ceiling_is_a_scenario_error(
    tmp_path: Path, policy: str, args: str, refusal: str
) -> None:
    header = HEADER.replace("[control]", policy + "[control]", 1) if policy else HEADER
    folder = write_scenario(tmp_path / "trust-unapproved", header + f'[[steps]]\ndo = "tooldir"\nargs = {args}\n')
    result = run_drill(load_scenario(folder), cli=command_line())
    assert result.status == "failed"
    assert "steps[0] (tooldir): a 'tooldir run' step" in result.checks[0].message
    assert refusal in result.checks[0].message


def test_a_scenario_listener_gets_a_port_for_the_tree_and_any_connection_fails_the_outcome(tmp_path: Path) -> None:
    import dataclasses

    from tooldir import load
    from tooldir.drill.checks import LoadTime, check_outcome

    folder = write_scenario(tmp_path / "trust-unapproved", "listen = true\n" + HEADER, {"evil_new": HOSTILE})
    scenario = load_scenario(folder)
    assert scenario.listen
    arena = dataclasses.replace(make_arena(tmp_path / "arena", str(folder)), port="4242")
    assert arena.substitute("http://127.0.0.1:{port}/x") == "http://127.0.0.1:4242/x"
    snapshot = load(project=None, user_dirs=[], state_dir=tmp_path / "state")
    quick = LoadTime(cpu=0.1, wall=0.1)
    assert check_outcome(scenario, arena, snapshot, quick, [], connections=0).passed
    failed = check_outcome(scenario, arena, snapshot, quick, [], connections=1)
    assert not failed.passed and "listener accepted 1 connection" in failed.message


def test_the_load_bound_is_cpu_time_so_a_starved_load_passes_until_the_wall_clock_backstop(tmp_path: Path) -> None:
    from tooldir import load
    from tooldir.drill.checks import LOAD_WALL_BACKSTOP, LoadTime, check_outcome

    folder = write_scenario(tmp_path / "trust-unapproved", HEADER, {"evil_new": HOSTILE})
    scenario = load_scenario(folder)
    bound = scenario.expect.max_seconds
    arena = make_arena(tmp_path / "arena", str(folder))
    snapshot = load(project=None, user_dirs=[], state_dir=tmp_path / "state")

    def outcome(cpu: float, wall: float) -> tuple[bool, str]:
        check = check_outcome(scenario, arena, snapshot, LoadTime(cpu=cpu, wall=wall), [], connections=0)
        return check.passed, check.message

    assert outcome(bound / 10, bound * 3)[0]  # off the CPU most of the time: not the load's fault
    over_cpu = outcome(bound + 0.5, bound + 0.5)
    assert not over_cpu[0] and f"of CPU time; the bound is {bound} s" in over_cpu[1]
    stuck = outcome(0.0, LOAD_WALL_BACKSTOP * bound + 1)
    assert not stuck[0] and "(wall clock)" in stuck[1]


# --------------------------------------------------------------------------- expect.load_error, host


def test_a_drill_expecting_a_refused_load_fails_when_the_load_succeeds(tmp_path: Path) -> None:
    folder = write_scenario(
        tmp_path / "trust-unapproved",
        HEADER + '[expect]\nload_error = { error = "StateError", message_contains = ["writable by others"] }\n',
        {"evil_new": HOSTILE},
    )
    result = run_drill(load_scenario(folder), cli=command_line())
    checks = {c.name: c for c in result.checks}
    assert not result.passed
    assert checks["outcome"].message == "expected the load to be refused with StateError, but it loaded"
    assert checks["canary"].passed and checks["state"].passed


@pytest.mark.parametrize(
    ("want", "says", "message"),
    [
        ("PolicyError", "writable by others (mode 777)", "expected PolicyError, but the load raised StateError"),
        ("StateError", "owned by uid 4242", "the error does not say 'owned by uid 4242'"),
        ("StateError", "{state}, on the way to the state file,", "load refused as expected"),
    ],
)
def test_a_refused_load_passes_only_with_the_named_error_saying_what_it_must(
    tmp_path: Path, want: str, says: str, message: str
) -> None:
    toml = HEADER + textwrap.dedent(
        f"""
        [[steps]]
        do = "plant"
        plant = {{ kind = "mode", path = "home/.local/state/tooldir", mode = "0777" }}

        [expect]
        load_error = {{ error = "{want}", message_contains = ["{says}"] }}
        """
    )
    result = run_drill(
        load_scenario(write_scenario(tmp_path / "trust-unapproved", toml, {"evil_new": HOSTILE})), cli=command_line()
    )
    checks = {c.name: c for c in result.checks}
    assert checks["outcome"].message.startswith(message), checks["outcome"].message
    assert result.passed is (message == "load refused as expected")
    assert sorted(checks) == ["arena", "canary", "outcome", "planted", "state"]


def test_a_refused_load_without_expect_load_error_is_a_scenario_error(tmp_path: Path) -> None:
    toml = (
        HEADER
        + '[[steps]]\ndo = "plant"\nplant = { kind = "mode", path = "home/.local/state/tooldir", mode = "0777" }\n'
    )
    result = run_drill(
        load_scenario(write_scenario(tmp_path / "trust-unapproved", toml, {"evil_new": HOSTILE})), cli=command_line()
    )
    assert [c.name for c in result.checks] == ["runnable"]
    assert "writable by others (mode 777)" in result.checks[0].message


def test_expect_load_error_with_calls_or_statuses_is_refused_at_load(tmp_path: Path) -> None:
    toml = HEADER + textwrap.dedent(
        """
        [[calls]]
        tool = "evil_new"
        input = { text = "x" }

        [expect]
        status = { evil_new = "pending" }
        load_error = { error = "StateError" }
        """
    )
    with pytest.raises(ScenarioError, match=r"the load is refused, so calls, expect\.status would never be checked"):
        load_scenario(write_scenario(tmp_path / "trust-unapproved", toml, {"evil_new": HOSTILE}))


def test_a_host_drill_loads_with_the_librarys_defaults_and_so_the_users_policy_file(tmp_path: Path) -> None:
    toml = HEADER.replace(
        "[control]", 'host = true\npolicy = """\n[sources.project]\nrequire = []\n"""\n\n[control]', 1
    )
    toml += '\n[expect]\nstatus = { evil_new = "active" }\n'  # the user's policy: project tools need no trust
    scenario = load_scenario(write_scenario(tmp_path / "trust-unapproved", toml, {"evil_new": HOSTILE}))
    assert scenario.host
    result = run_drill(scenario, cli=command_line())
    assert result.passed, [c.message for c in result.checks if not c.passed]
