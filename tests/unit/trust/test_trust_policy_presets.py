from __future__ import annotations

from pathlib import Path

import pytest

from tooldir.model import Risk
from tooldir.policy import Policy, load_policy

PRESETS = Path(__file__).resolve().parents[3] / "tooldir" / "_data" / "policies"


def test_default_preset_is_exactly_the_built_in_default_policy() -> None:
    policy, source = load_policy(PRESETS / "default.toml")
    assert source == str(PRESETS / "default.toml")
    assert policy == Policy()


def test_default_preset_spells_out_every_policy_field() -> None:
    # "presets document them all": every knob of Policy appears in default.toml (optional knobs
    # without a default, like keys.allowed_signers, appear commented out)
    import re

    text = (PRESETS / "default.toml").read_text()
    for section, fields in Policy().model_dump().items():
        assert re.search(rf"^\[{section}(\.|\])", text, re.M), f"no [{section}] section"
        names = {k for v in fields.values() for k in v} if section == "sources" else set(fields)
        if section == "pins":
            names = set()
        for name in names:
            assert re.search(rf"^\s*#?\s*{name}\s*=", text, re.M), f"[{section}] does not document {name}"


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
