"""The drill runner's audit-tampering steps: tamper-line and truncate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tooldir.drill import ScenarioError, Step
from tooldir.drill.execute import apply_step
from tooldir.drill.plant import make_arena

LOG = "home/.local/state/tooldir/audit.jsonl"


@pytest.mark.parametrize("how", ["whitespace", "reorder", "escape", "duplicate-key"])
def test_tamper_line_changes_the_bytes_of_exactly_one_line_but_not_what_python_parses(tmp_path: Path, how: str) -> None:
    arena = make_arena(tmp_path, str(tmp_path / "scenario.toml"))
    log = arena.state / "audit.jsonl"
    rows = [{"seq": n, "tool": f"tool{n}", "decision": "deny"} for n in (1, 2, 3)]
    log.write_bytes(b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in rows))
    before = log.read_bytes().splitlines()
    step = Step(do="tamper-line", how=how, path=LOG, line=2)
    apply_step(step, arena, (), "after_calls[0]", None)
    after = log.read_bytes().splitlines()
    assert [a == b for a, b in zip(before, after, strict=True)] == [True, False, True]
    assert json.loads(after[1]) == rows[1]


def test_truncate_removes_the_given_line_and_every_line_after_it(tmp_path: Path) -> None:
    arena = make_arena(tmp_path, str(tmp_path / "scenario.toml"))
    log = arena.state / "audit.jsonl"
    log.write_bytes(b"1\n2\n3\n4\n")
    apply_step(Step(do="truncate", path=LOG, line=3), arena, (), "s", None)
    assert log.read_bytes() == b"1\n2\n"
    with pytest.raises(ScenarioError, match="no line 9"):
        apply_step(Step(do="truncate", path=LOG, line=9), arena, (), "s", None)


def test_a_tamper_line_step_without_how_is_a_clear_error_naming_the_key(tmp_path: Path) -> None:
    from tooldir.drill import load_scenario

    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "scenario.toml").write_text(
        'threat = "audit:tamper"\ntitle = "t"\nplants = "p"\nexpected = "e"\n\n'
        '[control]\nuser = ["good_user_tool"]\n\n'
        f'[[after_calls]]\ndo = "tamper-line"\npath = "{LOG}"\nline = 1\n'
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(folder)
    assert info.value.message.startswith("after_calls.0")
