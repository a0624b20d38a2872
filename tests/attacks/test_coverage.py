"""The threat list and the drills match both ways, and the vendored list is the shared one."""

from __future__ import annotations

import re
from pathlib import Path

from tooldir.drill import load_scenarios

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "tooldir" / "_data" / "scenarios"

_ROW = re.compile(r"^\|\s*([a-z]+:[a-z][a-z-]*)\s*\|", re.M)


def threat_ids(text: str) -> set[str]:
    return set(_ROW.findall(text))


# Threat ids whose drill lands with the issue that fixes them, keyed by that open issue. Exactly these
# may lack a drill; once an id has its drill it must leave this table (the test below fails until it
# does), and the table empties as the issues close.
PENDING: dict[int, frozenset[str]] = {}


def test_every_threat_has_a_drill_except_exactly_the_pending_ones_and_every_drill_names_a_listed_threat() -> None:
    listed = threat_ids((REPO / "tooldir" / "_data" / "THREATS.md").read_text(encoding="utf-8"))
    drilled = {s.threat for s in load_scenarios(SCENARIOS)}
    pending = set().union(*PENDING.values())
    assert len(listed) >= 40
    assert sorted(pending - listed) == [], "pending ids that are not listed threats"
    assert sorted(pending & drilled) == [], "these have a drill now: take them out of PENDING"
    assert sorted(listed - drilled - pending) == [], "threats without a drill"
    assert sorted(drilled - listed) == [], "drills naming a threat that is not listed"


def test_vendored_threat_list_equals_the_shared_one_when_it_exists() -> None:
    shared = REPO.parent / "shared" / "THREATS.md"
    vendored = (REPO / "tooldir" / "_data" / "THREATS.md").read_bytes()
    if shared.exists():  # the shared copy only exists in the team's workspace, not in a fresh clone
        assert vendored == shared.read_bytes(), "docs/THREATS.md differs from ../shared/THREATS.md: copy it over"
    assert threat_ids(vendored.decode("utf-8"))


def test_threat_id_parser_reads_table_rows_only() -> None:
    text = "| id | attack |\n|---|---|\n| fs:symlink | x |\n| trust:bad-signature | y |\nnot | a:row |\n"
    assert threat_ids(text) == {"fs:symlink", "trust:bad-signature"}


def test_scenario_folders_are_named_after_their_drill_id() -> None:
    for s in load_scenarios(SCENARIOS):
        expected = s.threat.replace(":", "-") + (f"--{s.variant}" if s.variant else "")
        assert s.name == expected, f"{s.folder} holds drill {s.drill_id}"
