from __future__ import annotations

from pathlib import Path

import pytest

from tooldir.model import Risk
from tooldir.policy import Policy, load_policy

PRESETS = Path(__file__).resolve().parents[3] / "policies"


def test_default_preset_is_exactly_the_built_in_default_policy() -> None:
    policy, source = load_policy(PRESETS / "default.toml")
    assert source == str(PRESETS / "default.toml")
    assert policy == Policy()


@pytest.mark.parametrize("preset", sorted(p.name for p in PRESETS.glob("*.toml")))
def test_every_preset_parses_and_is_commented(preset: str) -> None:
    text = (PRESETS / preset).read_text()
    load_policy(PRESETS / preset)
    assert sum(line.lstrip().startswith("#") for line in text.splitlines()) >= 5


def test_presets_exist_and_tighten_project_trust() -> None:
    strict, _ = load_policy(PRESETS / "strict.toml")
    team, _ = load_policy(PRESETS / "team-signed.toml")
    assert "approval" not in strict.sources.project.require and strict.sources.project.max_risk is Risk.READ
    assert team.sources.project.require == ("signature", "approval")
    assert team.keys.allowed_signers == "~/.config/tooldir/allowed_signers"
