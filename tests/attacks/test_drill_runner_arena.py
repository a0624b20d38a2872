"""drill:arena-escape: a downloaded scenario never acts outside its arena (issue 23, item 1).

Before the fix, a scenario could plant a symlink with any target and then write, remove (rmtree),
chmod, chown or copy through it, or run ``tooldir revoke/allow/lock/keygen`` with any ``--state-dir``
or path: the user's real files changed and the drill still passed. Each case below plants such an
attempt against a folder *outside* the arena (``victim``, a stand-in for the user's files) and
asserts that the drill is a scenario error naming the plant or step and the path, and that nothing
outside the arena changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tooldir._cli import command_line
from tooldir._data import SCENARIOS
from tooldir.drill import (
    DrillResult,
    Plant,
    Scenario,
    ScenarioError,
    Step,
    load_scenario,
    load_scenarios,
    run_drill,
    select,
)
from tooldir.drill.checks import check_beyond
from tooldir.drill.checks import tree_state as tree_state_of
from tooldir.drill.execute import apply_step
from tooldir.drill.plant import ArenaEscapeError, apply_plant, make_arena, make_beyond
from tooldir.state import Approval, load_approvals, save_approvals

HEADER = """
threat = "drill:arena-escape"
title = "t"
plants = "p"
expected = "e"

[control]
user = ["good_user_tool"]
project = ["good_project_tool"]
"""

ROOT = os.geteuid() == 0


def tree_state(top: Path) -> dict[str, str]:
    """(type and mode, owner, content or link text) of ``top`` and everything below it."""
    out: dict[str, str] = {}
    for path in [top, *sorted(top.rglob("*"))]:
        st = path.lstat()
        body = ""
        if stat.S_ISREG(st.st_mode):
            body = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            body = os.readlink(path)
        out[str(path.relative_to(top))] = f"{st.st_mode:o}:{st.st_uid}:{st.st_gid}:{body}"
    return out


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside every arena: a file, a folder with a file, a tool package."""
    top = tmp_path / "victim"
    (top / "sub").mkdir(parents=True)
    (top / "inside.txt").write_text("keep\n")
    (top / "sub" / "deep.txt").write_text("keep too\n")
    pkg = top / "pkg"
    pkg.mkdir()
    (pkg / "schema.json").write_text(
        '{"name": "real_tool", "description": "A tool of the user.", "input_schema": {"type": "object"},'
        ' "risk": "read", "execute": {"command": ["python3", "run.py"]}}'
    )
    (pkg / "run.py").write_text("print('hi')\n")
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return top


@pytest.fixture
def real_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's real state dir (the caller's XDG_STATE_HOME) holding one approval."""
    home = tmp_path / "realhome"
    state = home / ".local" / "state" / "tooldir"
    state.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    approval = Approval(
        path=str(tmp_path / "victim" / "pkg"),
        name="real_tool",
        digest="sha256:" + "1" * 64,
        time=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    save_approvals(state, {approval.path: approval})
    return state


def drill(tmp_path: Path, body: str, **values: Path) -> DrillResult:
    text = HEADER + textwrap.dedent(body)
    for key, value in values.items():
        text = text.replace("{" + key + "}", str(value))
    folder = tmp_path / "scenarios" / "drill-arena-escape"
    folder.mkdir(parents=True)
    (folder / "scenario.toml").write_text(text)
    return run_drill(load_scenario(folder), cli=command_line())


def refused(result: DrillResult, *texts: str) -> str:
    """The drill is a scenario error (never a pass) whose message holds ``texts``."""
    assert result.status == "failed", result.observed
    assert [c.name for c in result.checks] == ["runnable"], result.checks
    message = result.checks[0].message
    assert message.startswith("invalid scenario "), message
    for text in texts:
        assert text in message, message
    return message


LINK_OUT = """
[[plant]]
kind = "symlink"
path = "project/link"
target = "{victim}"
"""

THROUGH_A_LINK = {
    "write": '[[steps]]\ndo = "write"\npath = "project/link/inside.txt"\ntext = "pwned"\n',
    "write-new-folder": '[[steps]]\ndo = "write"\npath = "project/link/new/f.txt"\ntext = "pwned"\n',
    "remove-file": '[[steps]]\ndo = "remove"\npath = "project/link/inside.txt"\n',
    "remove-tree": '[[steps]]\ndo = "remove"\npath = "project/link/sub"\n',
    "mode-of-the-link": '[[plant]]\nkind = "mode"\npath = "project/link"\nmode = "0777"\n',
    "mode-through": '[[plant]]\nkind = "mode"\npath = "project/link/inside.txt"\nmode = "0666"\n',
    "copy-into": (
        '[[steps]]\ndo = "copy"\npath = "project/.tooldir/tools/good_project_tool/run.py"\nto = "project/link/x.py"\n'
    ),
    "copy-out-of": '[[steps]]\ndo = "copy"\npath = "project/link/inside.txt"\nto = "project/stolen.txt"\n',
    "plant-file": '[[plant]]\nkind = "file"\npath = "project/link/planted.txt"\ntext = "pwned"\n',
    "plant-fifo": '[[plant]]\nkind = "fifo"\npath = "project/link/fifo"\n',
    "plant-link": '[[plant]]\nkind = "symlink"\npath = "project/link/l"\ntarget = "x"\n',
    "replace": '[[steps]]\ndo = "replace"\npath = "project/link/inside.txt"\nold = "keep"\ntext = "pwned"\n',
    "truncate": '[[steps]]\ndo = "truncate"\npath = "project/link/inside.txt"\nline = 1\n',
    "policy-link": (
        '[[plant]]\nkind = "symlink"\npath = "home/.config/tooldir/policy.toml"\ntarget = "{victim}/inside.txt"\n'
        '[[steps]]\ndo = "policy"\ntext = "# pwned"\n'
    ),
    "state-dir-link": (
        '[[plant]]\nkind = "symlink"\npath = "home/.local/state/tooldir"\ntarget = "{victim}/sub"\n'
        '[[steps]]\ndo = "approve"\ntool = "project/.tooldir/tools/good_project_tool"\n'
    ),
}
OWN_LINK = {"policy-link", "state-dir-link"}  # cases that plant their own link out
if ROOT:
    THROUGH_A_LINK["owner-through"] = '[[plant]]\nkind = "owner"\npath = "project/link/inside.txt"\nuid = 4242\n'


@pytest.mark.parametrize("case", sorted(THROUGH_A_LINK))
def test_a_planted_link_out_of_the_arena_is_a_scenario_error_and_nothing_outside_changes(
    tmp_path: Path, victim: Path, case: str
) -> None:
    before = tree_state(victim)
    body = THROUGH_A_LINK[case] if case in OWN_LINK else LINK_OUT + THROUGH_A_LINK[case]
    result = drill(tmp_path, body, victim=victim)
    refused(result, "plant[", "leads out of the arena", str(victim))
    assert tree_state(victim) == before


def test_a_later_plant_that_turns_an_inside_link_outward_is_refused_at_that_plant(tmp_path: Path, victim: Path) -> None:
    # outside/l -> d/../x stays inside while outside/d is missing; once outside/d -> .. (the arena's
    # root), the '..' after it climbs out of the arena
    body = """
    [[plant]]
    kind = "symlink"
    path = "outside/l"
    target = "d/../x"
    [[plant]]
    kind = "symlink"
    path = "outside/d"
    target = ".."
    """
    message = refused(drill(tmp_path, body), "plant[1] (symlink)", "outside/l")
    assert "leads out of the arena" in message


def test_a_link_inside_the_arena_is_never_written_through(tmp_path: Path) -> None:
    body = """
    [[plant]]
    kind = "file"
    path = "outside/folder/inside.txt"
    text = "keep"
    [[plant]]
    kind = "symlink"
    path = "project/link"
    target = "{outside}/folder"
    [[steps]]
    do = "write"
    path = "project/link/inside.txt"
    text = "pwned"
    """
    refused(drill(tmp_path, body), "steps[0] (write)", "project/link/inside.txt", "project/link is a symlink")


def test_writing_to_a_planted_link_itself_is_refused_not_done_to_its_target(tmp_path: Path) -> None:
    body = """
    [[plant]]
    kind = "file"
    path = "outside/target.txt"
    text = "keep"
    [[plant]]
    kind = "symlink"
    path = "project/link"
    target = "{outside}/target.txt"
    [[steps]]
    do = "write"
    path = "project/link"
    text = "pwned"
    """
    refused(drill(tmp_path, body), "steps[0] (write): project/link: is a symlink; writing through a planted link")


# ---------------------------------------------------------------------------------------------
# The arena's own operations, on a link that leads out (made behind the plant checks' back)

OPERATIONS: dict[str, tuple[str, ...]] = {
    "write": ("write", "project/link/inside.txt"),
    "write-new": ("write", "project/link/new/f.txt"),
    "remove": ("remove", "project/link/inside.txt"),
    "remove-tree": ("remove", "project/link/sub"),
    "copy-into": ("copy", "project/a.txt", "project/link/b.txt"),
    "copy-out-of": ("copy", "project/link/inside.txt", "project/b.txt"),
    "replace": ("replace", "project/link/inside.txt"),
    "corrupt": ("corrupt", "project/link/inside.txt"),
    "delete-line": ("delete-line", "project/link/inside.txt"),
}


def _step(kind: str, path: str, to: str | None) -> Step:
    extra: dict[str, object] = {
        "write": {"text": "pwned"},
        "replace": {"old": "keep", "text": "pwned"},
        "corrupt": {"line": 1, "column": 1},
        "delete-line": {"line": 1},
    }.get(kind, {})  # type: ignore[assignment]
    return Step.model_validate({"do": kind, "path": path, "to": to, **extra})


@pytest.mark.parametrize("case", sorted(OPERATIONS))
def test_every_arena_operation_refuses_to_go_through_a_link_whatever_its_target(
    tmp_path: Path, victim: Path, case: str
) -> None:
    arena = make_arena(tmp_path / "arena", str(tmp_path / "s"))
    (arena.project / "a.txt").write_text("a\n")
    os.symlink(victim, arena.project / "link")
    before = tree_state(victim)
    kind, path, *to = OPERATIONS[case]
    with pytest.raises(ArenaEscapeError) as info:
        apply_step(_step(kind, path, to[0] if to else None), arena, (), "steps[3] (x)", None)
    assert info.value.message.startswith("steps[3] (x): project/link")
    assert "project/link is a symlink" in info.value.message
    assert tree_state(victim) == before
    assert not (arena.project / "b.txt").exists()


@pytest.mark.parametrize(
    "plant",
    [
        {"kind": "mode", "path": "project/link", "mode": "0777"},
        {"kind": "mode", "path": "project/link/inside.txt", "mode": "0777"},
        {"kind": "file", "path": "project/link/inside.txt", "text": "pwned"},
        {"kind": "big-file", "path": "project/link/inside.txt", "size": 10},
        {"kind": "many-entries", "path": "project/link/sub", "count": 3},
        {"kind": "hardlink", "path": "project/h", "target": "project/link/inside.txt"},
        *([{"kind": "owner", "path": "project/link/inside.txt", "uid": 4242}] if ROOT else []),
    ],
    ids=lambda p: f"{p['kind']}:{p['path']}",
)
def test_every_plant_refuses_to_go_through_a_link_whatever_its_target(
    tmp_path: Path, victim: Path, plant: dict[str, object]
) -> None:
    arena = make_arena(tmp_path / "arena", str(tmp_path / "s"))
    os.symlink(victim, arena.project / "link")
    before = tree_state(victim)
    with pytest.raises(ArenaEscapeError) as info:
        apply_plant(Plant.model_validate(plant), arena, "plant[1] (x)")
    assert info.value.message.startswith("plant[1] (x): project/")
    assert "project/link is a symlink" in info.value.message or "project/link: is a symlink" in info.value.message
    assert tree_state(victim) == before


def test_removing_a_folder_removes_the_links_inside_it_and_nothing_they_point_to(tmp_path: Path, victim: Path) -> None:
    arena = make_arena(tmp_path / "arena", str(tmp_path / "s"))
    (arena.project / "pkg").mkdir()
    os.symlink(victim, arena.project / "pkg" / "link")
    before = tree_state(victim)
    apply_step(Step(do="remove", path="project/pkg"), arena, (), "steps[0] (remove)", None)
    assert not os.path.lexists(arena.project / "pkg")
    assert tree_state(victim) == before


def test_an_owner_plant_on_a_link_changes_the_link_not_its_target(tmp_path: Path, victim: Path) -> None:
    if not ROOT:
        pytest.skip("chown to another uid needs root; tests/attacks/test_drills_unprivileged.py runs the drills")
    arena = make_arena(tmp_path / "arena", str(tmp_path / "s"))
    apply_plant(Plant(kind="file", path="outside/t", text="x"), arena, "plant[0] (file)")
    apply_plant(Plant(kind="symlink", path="project/link", target="{outside}/t"), arena, "plant[1] (symlink)")
    apply_plant(Plant(kind="owner", path="project/link", uid=4242), arena, "plant[2] (owner)")
    assert (arena.project / "link").lstat().st_uid == 4242
    assert (arena.outside / "t").stat().st_uid == 0


# ---------------------------------------------------------------------------------------------
# tooldir steps get no path or option that reaches outside the arena

CLI_CASES = {
    "revoke-state-dir": '["revoke", "real_tool", "--state-dir", "{state}"]',
    "revoke-state-dir-equals": '["revoke", "real_tool", "--state-dir={state}"]',
    "revoke-abbreviated": '["revoke", "real_tool", "--state", "{state}"]',
    "allow-state-dir": '["allow", "--yes", "{{project}}/.tooldir/tools/good_project_tool", "--state-dir", "{state}"]',
    "allow-outside-package": '["allow", "--yes", "{victim}/pkg"]',
    "revoke-outside-path": '["revoke", "{victim}/pkg"]',
    "revoke-relative-climb": '["revoke", "../../../victim/pkg"]',
    "lock-outside": '["lock", "{victim}/pkg"]',
    "keygen-outside": '["keygen", "{victim}/key"]',
    "sign-outside-key": '["sign", "{{project}}/.tooldir/tools/good_project_tool", "--key", "{victim}/inside.txt"]',
    "scan-policy": '["scan", "--policy", "{victim}/inside.txt"]',
    "scan-user-dir": '["scan", "--user-dir", "{victim}"]',
    "scan-project": '["scan", "--project", "{victim}"]',
    "policy-check": '["policy", "check", "{victim}/inside.txt"]',
    "eval-files": '["eval", "--tools", "{victim}/inside.txt", "--queries", "{victim}/inside.txt"]',
}


@pytest.mark.parametrize("kind", ["tooldir", "python-m-tooldir"])
@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_a_tooldir_step_naming_a_path_outside_the_arena_is_a_scenario_error_and_the_real_state_is_untouched(
    tmp_path: Path, victim: Path, real_state: Path, case: str, kind: str
) -> None:
    approvals = (real_state / "approvals.json").read_bytes()
    before = tree_state(victim)
    args = CLI_CASES[case].format(state=real_state, victim=victim)
    result = drill(tmp_path, f'[[steps]]\ndo = "{kind}"\nargs = {args}\n')
    refused(result, f"steps[0] ({kind})", "outside the arena")
    assert (real_state / "approvals.json").read_bytes() == approvals
    assert sorted(load_approvals(real_state)) == [str(victim / "pkg")]
    assert tree_state(victim) == before


def test_a_forged_scan_memo_cannot_be_written_into_a_state_dir_outside_the_arena(
    tmp_path: Path, real_state: Path
) -> None:
    before = tree_state(real_state)
    result = drill(
        tmp_path, f'[[steps]]\ndo = "forge-scanmemo"\nargs = ["scan", "--json", "--state-dir", "{real_state}"]\n'
    )
    refused(result, "steps[0] (forge-scanmemo)", "--state-dir", "outside the arena")
    assert tree_state(real_state) == before


def test_a_forged_approval_cannot_be_written_through_a_link(tmp_path: Path, victim: Path) -> None:
    before = tree_state(victim)
    body = """
    [[plant]]
    kind = "symlink"
    path = "project/forged"
    target = "{outside}"
    [[steps]]
    do = "forge-approval"
    tool = "project/.tooldir/tools/good_project_tool"
    into = "project/forged/state"
    """
    refused(drill(tmp_path, body), "steps[0] (forge-approval)", "project/forged is a symlink")
    assert tree_state(victim) == before


def test_a_tooldir_step_may_not_pass_an_option_the_runner_does_not_know(tmp_path: Path) -> None:
    result = drill(tmp_path, '[[steps]]\ndo = "python-m-tooldir"\nargs = ["serve", "--http", "127.0.0.1:0"]\n')
    refused(result, "steps[0] (python-m-tooldir)", "'tooldir serve' --http is not allowed in a drill step")


def test_a_tooldir_step_with_paths_inside_the_arena_still_runs(tmp_path: Path) -> None:
    body = """
    [[steps]]
    do = "tooldir"
    args = ["keygen", "{home}/k"]
    [[steps]]
    do = "tooldir"
    args = ["lock", "{user_root}/good_user_tool", "--version", "1"]
    [[steps]]
    do = "tooldir"
    args = ["sign", "{user_root}/good_user_tool", "--key", "{home}/k"]
    [[steps]]
    do = "tooldir"
    args = ["scan", "--json", "--state-dir", "{state}", "--user-dir", "{user_root}", "--project", "."]
    """
    result = drill(tmp_path, body)
    assert result.status == "passed", result.reason


def test_a_bad_scenario_step_error_is_still_an_ordinary_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# Drills about the runner itself: expect.refused, and the arena check


def bundled(variant: str) -> Scenario:
    [scenario] = select(load_scenarios(SCENARIOS), [f"drill:arena-escape/{variant}"])
    return scenario


def test_the_bundled_arena_escape_drills_pass_because_the_runner_refuses_them() -> None:
    scenarios = select(load_scenarios(SCENARIOS), ["drill:arena-escape"])
    assert len(scenarios) >= 10
    for scenario in scenarios:
        result = run_drill(scenario, cli=command_line())
        assert result.status == "passed", (scenario.drill_id, result.reason)
        checks = {c.name: c for c in result.checks}
        assert checks["outcome"].message.startswith("refused as expected: " + scenario.expect.refused.at)  # type: ignore[union-attr]
        assert checks["arena"].message.startswith("nothing outside the arena changed")


def test_without_the_confinement_the_link_out_drill_fails_naming_the_file_changed_outside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tooldir.drill import confine

    def write(self: confine.Confined, path: Path, data: bytes, where: str, **_: object) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)  # what the runner did before: follow every link
        path.write_bytes(data)

    monkeypatch.setattr(confine, "inside", lambda base, path: True)
    monkeypatch.setattr(confine.Confined, "write", write)
    result = run_drill(bundled("link-out"), cli=command_line())
    assert result.status == "failed"
    checks = {c.name: c for c in result.checks}
    assert checks["outcome"].message == (
        "expected the runner to refuse plant[0], but it carried out every plant and step"
    )
    assert checks["arena"].message == "files outside the arena changed: folder/inside.txt"


def test_without_the_argument_allowlist_the_state_dir_drill_fails_naming_the_real_approvals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tooldir.drill import execute

    monkeypatch.setattr(execute, "vet", lambda args, **_: None)
    result = run_drill(bundled("state-dir"), cli=command_line())
    assert result.status == "failed"
    arena = {c.name: c.message for c in result.checks}["arena"]
    assert arena.startswith("files outside the arena changed: ")
    assert "state/approvals.json" in arena


def _expecting(tmp_path: Path, body: str, refused: str) -> DrillResult:
    return drill(tmp_path, body + f"\n[expect]\nrefused = {refused}\n")


def test_a_drill_expecting_a_refusal_that_does_not_come_fails(tmp_path: Path) -> None:
    body = '[[steps]]\ndo = "write"\npath = "project/fine.txt"\ntext = "x"\n'
    result = _expecting(tmp_path, body, '{ at = "steps[0]" }')
    assert result.status == "failed"
    outcome = {c.name: c for c in result.checks}["outcome"]
    assert outcome.message == "expected the runner to refuse steps[0], but it carried out every plant and step"


def test_a_drill_refused_elsewhere_than_expected_or_for_another_reason_fails(tmp_path: Path) -> None:
    body = LINK_OUT + '[[steps]]\ndo = "write"\npath = "project/fine.txt"\ntext = "x"\n'
    elsewhere = _expecting(tmp_path / "a", body.replace("{victim}", "/"), '{ at = "steps[0]" }')
    assert {c.name: c for c in elsewhere.checks}["outcome"].message.startswith(
        "expected the runner to refuse steps[0], but it refused plant[0] (symlink): project/link"
    )
    reason = _expecting(
        tmp_path / "b", body.replace("{victim}", "/"), '{ at = "plant[0]", message_contains = ["is a symlink"] }'
    )
    assert {c.name: c for c in reason.checks}["outcome"].message.startswith("the refusal does not say 'is a symlink'")
    assert elsewhere.status == reason.status == "failed"


def test_an_ordinary_scenario_error_is_never_an_expected_refusal(tmp_path: Path) -> None:
    body = '[[steps]]\ndo = "remove"\npath = "project/nothing-here"\n'
    result = _expecting(tmp_path, body, '{ at = "steps[0]" }')
    refused(result, "steps[0] (remove): project/nothing-here: No such file")


@pytest.mark.parametrize(
    ("body", "refused_at", "message"),
    [
        ("", '{ at = "steps[0]" }', "expect.refused: steps[0] does not exist"),
        (
            '[[steps]]\ndo = "write"\npath = "project/x"\ntext = "x"\n[[calls]]\ntool = "good_user_tool"\n',
            '{ at = "steps[0]" }',
            "expect.refused: the drill stops at steps[0], so calls would never be checked",
        ),
        ('[[steps]]\ndo = "write"\npath = "project/x"\ntext = "x"\n', '{ at = "calls[0]" }', "expect.refused.at:"),
    ],
    ids=["no-such-step", "calls-after-a-refusal", "not-a-plant-or-step"],
)
def test_an_expected_refusal_must_name_a_plant_or_step_and_nothing_after_it(
    tmp_path: Path, body: str, refused_at: str, message: str
) -> None:
    folder = tmp_path / "drill-arena-escape"
    folder.mkdir()
    (folder / "scenario.toml").write_text(HEADER + body + f"\n[expect]\nrefused = {refused_at}\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert message in info.value.message


def test_the_arena_check_names_what_changed_outside_the_arena(tmp_path: Path) -> None:
    beyond = make_beyond(tmp_path / "beyond")
    before = tree_state_of(beyond)
    assert check_beyond(before, tree_state_of(beyond)).passed
    (beyond / "canary.txt").write_text("changed")
    check = check_beyond(before, tree_state_of(beyond))
    assert (check.name, check.passed, check.message) == (
        "arena",
        False,
        "files outside the arena changed: canary.txt",
    )


def test_leads_to_follows_links_as_the_kernel_does_and_takes_missing_components_as_written(tmp_path: Path) -> None:
    from tooldir.drill.confine import leads_to

    (tmp_path / "a" / "b").mkdir(parents=True)
    os.symlink("a/b", tmp_path / "deep")
    os.symlink(str(tmp_path), tmp_path / "a" / "root")
    os.symlink("loop", tmp_path / "loop")
    assert leads_to(tmp_path, "deep/..") == tmp_path / "a"  # '..' after a link climbs from its target
    assert leads_to(tmp_path, "a/root/../x") == tmp_path.parent / "x"
    assert leads_to(tmp_path, "missing/../y") == tmp_path / "y"
    assert leads_to(tmp_path / "a", "/etc/../z") == Path("/z")
    assert leads_to(tmp_path, "loop") is None


def test_a_scenario_folder_whose_files_are_a_fifo_or_a_link_out_is_an_error_not_a_hang_or_a_read(
    tmp_path: Path, victim: Path
) -> None:
    fifo = tmp_path / "fifo-scenario"
    fifo.mkdir()
    os.mkfifo(fifo / "scenario.toml")
    with pytest.raises(ScenarioError) as info:
        load_scenario(fifo)  # never blocks waiting for a writer
    assert "cannot read it" in info.value.message and "not a regular file" in info.value.message

    linked = tmp_path / "scenarios" / "drill-arena-escape"
    (linked / "tree" / "project").mkdir(parents=True)
    (linked / "tree" / "project" / "real.txt").write_text("x")
    os.symlink(victim / "inside.txt", linked / "tree" / "project" / "stolen.txt")
    (linked / "scenario.toml").write_text(HEADER)
    refused(run_drill(load_scenario(linked), cli=command_line()), "stolen.txt is not a regular file")
