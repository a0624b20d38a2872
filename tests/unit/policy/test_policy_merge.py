"""Policy files merge per key over the defaults (DESIGN §9): what a file leaves out stays secure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tooldir.errors import PolicyError
from tooldir.model import Risk
from tooldir.policy import (
    NEUTRAL_KEYS,
    WEAKENING_RULES,
    Policy,
    effective_policy,
    load_policy,
    parse_policy,
    read_policy,
    weakenings,
)

MINISIGN = "RWQdaZcrjL8T2sjQbKvxwkpASoH4auuWOHIe4jAztlSoLHM+zxIaWWto"
#: A valid value different from the default, for every key of the policy.
OTHER: dict[str, Any] = {
    "sources.project.require": ["approval"],
    "sources.project.max_risk": "read",
    "sources.project.may_shadow": False,
    "sources.user.require": ["approval", "pin"],
    "sources.user.max_risk": "write",
    "sources.user.may_shadow": False,
    "keys.minisign": [MINISIGN],
    "keys.allowed_signers": "~/.config/tooldir/allowed_signers",
    "keys.revoked": [MINISIGN],
    "pins": {"jira_get_issue": "sha256:" + "a" * 64},
    "reserved.names": ["shell", "read_file", "write_file", "exec"],
    "defer.mode": "off",
    "defer.rules": ["NoDefer(read_file)", "Defer(*)"],
    "defer.max_searches_per_turn": 4,
    "defer.max_working_set": 16,
    "defer.max_schema_tokens_per_turn": 1000,
    "defer.redefer": False,
    "defer.discount": 0.5,
    "defer.prior_strength": 1.0,
    "defer.default_prior": 0.1,
    "defer.min_idle_turns": 5,
    "defer.search_cost_tokens": 40,
    "defer.usage_ewma": 0.5,
    "permissions.mode": "plan",
    "permissions.allow": ["json_*"],
    "permissions.deny": ["shell_*"],
    "permissions.max_risk": "write",
    "sandbox.network": True,
    "sandbox.network_allow": ["api.example.com:443"],
    "sandbox.network_unrestricted": True,
    "sandbox.timeout_s": 10.0,
    "sandbox.memory_mb": 256,
    "sandbox.max_processes": 8,
    "sandbox.max_output_bytes": 4096,
    "sandbox.scratch_mb": 8,
    "sandbox.env_allow": ["LANG"],
    "sandbox.unsafe_allow_unsandboxed": True,
    "sandbox.cpu_s": 5,
    "sandbox.max_file_mb": 8,
    "sandbox.run_as_uid": 64000,
    "sandbox.max_input_bytes": 2048,
    "sandbox.memory_bound": "cgroup",
    "sandbox.cgroup_parent": "/sys/fs/cgroup/tooldir",
    "sandbox.address_space_slack_mb": 256,
    "sandbox.unsafe_allow_no_seccomp": True,
    "sandbox.runtime_roots": ["/opt/venv/lib"],
    "exec.interpreters": ["python3"],
    "audit.durability": "buffered",
    "audit.sync_interval_ms": 50,
    "secrets.grants": {"jira_get_issue": ["JIRA_TOKEN"]},
    "secrets.project_tools": True,
    "limits.max_manifest_bytes": 4096,
    "limits.max_file_bytes": 4096,
    "limits.max_package_bytes": 8192,
    "limits.max_package_files": 16,
    "limits.max_package_depth": 4,
    "limits.max_root_entries": 100,
    "limits.max_json_depth": 16,
}

#: Keys whose value is a table of names (a file sets one entry each, under its own key).
_TABLES = frozenset({"pins", "secrets.grants"})


def leaf_defaults() -> dict[str, Any]:
    return {key: value for key, value, _ in effective_policy("").values()}


def toml_text(values: dict[str, Any], empty_tables: tuple[str, ...] = ()) -> tuple[str, dict[str, int]]:
    """A policy file setting ``values`` (dotted keys), one table per prefix; returns (text, key -> line)."""
    tables: dict[str, list[tuple[str, Any]]] = {table: [] for table in empty_tables}
    for key, value in values.items():
        table, _, name = key.rpartition(".")
        if isinstance(value, dict):  # pins: a table of its own
            tables.setdefault(key, []).extend(value.items())
        else:
            tables.setdefault(table, []).append((name, value))
    lines: list[str] = ["# generated"]
    where: dict[str, int] = {}
    for table, entries in tables.items():
        lines.append(f"[{table}]")
        for name, value in entries:
            lines.append(f"{name} = {json.dumps(value)}")
            where[f"{table}.{name}"] = len(lines)
    return "\n".join(lines) + "\n", where


def test_every_key_of_the_policy_has_an_alternative_value_here() -> None:
    assert set(leaf_defaults()) == set(OTHER)


# -- the three fail-open policies of the issue ----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "[sources.project]\nmay_shadow = false\n",
        '[sources.project]\nmax_risk = "external-read"\n',
        "[sources.project]\n",
        "[sources]\nproject = {}\n",
        "[sources.user]\nmay_shadow = false\n",
    ],
    ids=["may-shadow-only", "max-risk-only", "empty-table", "empty-inline-table", "other-source-only"],
)
def test_a_partial_sources_table_keeps_the_project_trust_requirement(text: str) -> None:
    project = effective_policy(text).policy.sources.project
    assert project.require == ("approval", "signature", "pin")
    assert project.max_risk.rank <= Risk.EXTERNAL_READ.rank


def test_a_project_table_with_only_may_shadow_keeps_the_write_ceiling() -> None:
    project = effective_policy("[sources.project]\nmay_shadow = false\n").policy.sources.project
    assert (project.require, project.max_risk, project.may_shadow) == (
        ("approval", "signature", "pin"),
        Risk.WRITE,
        False,
    )


@pytest.mark.parametrize("key", sorted(OTHER))
def test_a_file_setting_one_key_leaves_every_other_key_at_its_default(key: str) -> None:
    text, _ = toml_text({key: OTHER[key]})
    values = {k: v for k, v, _ in effective_policy(text).values()}
    defaults = leaf_defaults()
    for other, default in defaults.items():
        if other != key and not other.startswith(key + "."):
            assert values[other] == default, other
    if key in _TABLES:  # a table of names: each entry is a key of its own
        assert values[f"{key}.jira_get_issue"] == OTHER[key]["jira_get_issue"]
    else:
        assert values[key] == OTHER[key]


def _models(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel], Any]]:
    out = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.append((prefix + name, annotation, info))
            out.extend(_models(annotation, prefix + name + "."))
    return out


def test_every_table_default_is_its_own_models_field_defaults() -> None:
    # one place per default: no parent-level factory may carry values a partial table would lose
    for where, model, info in _models(Policy):
        assert info.default_factory is model, where
        model()  # every key of every table has a default on its own model


@settings(max_examples=60, deadline=None)
@given(
    chosen=st.sets(st.sampled_from(sorted(OTHER))),
    empty=st.sets(st.sampled_from(["sources.project", "sources.user", "sandbox", "limits", "keys", "defer"])),
)
def test_every_key_a_file_leaves_out_equals_its_default(
    chosen: set[str], empty: set[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    written = {key: OTHER[key] for key in sorted(chosen)}
    text, lines = toml_text(written, tuple(t for t in sorted(empty) if not any(k.startswith(t + ".") for k in written)))
    path = tmp_path_factory.mktemp("p") / "policy.toml"
    path.write_text(text)
    effective = read_policy(path)
    values = {key: (value, origin) for key, value, origin in effective.values()}
    for key, default in leaf_defaults().items():
        if key in _TABLES and key in written:
            assert values[f"{key}.jira_get_issue"] == (
                OTHER[key]["jira_get_issue"],
                f"{path}:{lines[f'{key}.jira_get_issue']}",
            )
        elif key in written:
            assert values[key] == (written[key], f"{path}:{lines[key]}"), key
        else:
            assert values[key][0] == default, key
            assert values[key][1] == "default" or key in _TABLES, key


# -- origins and presets --------------------------------------------------------------------------


def test_origins_name_the_file_and_line_of_every_value_it_sets(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("# mine\n\n[sources.project]\nmay_shadow = false\n\n[sandbox]\ntimeout_s = 5\n")
    effective = read_policy(path)
    assert effective.origin("sources.project.may_shadow") == f"{path}:4"
    assert effective.origin("sandbox.timeout_s") == f"{path}:7"
    assert effective.origin("sources.project.require") == "default"


def test_a_file_can_start_from_a_preset_and_override_single_keys(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('preset = "strict"\n[sources.project]\nmax_risk = "write"\n')
    effective = read_policy(path)
    project = effective.policy.sources.project
    assert project.require == ("signature", "pin")  # from the preset
    assert project.may_shadow is False
    assert project.max_risk is Risk.WRITE  # from the file
    assert effective.preset == "strict"
    assert effective.origin("sources.project.require") == "preset:strict"
    assert effective.origin("sources.project.max_risk") == f"{path}:3"
    assert effective.origin("sandbox.network") == "preset:strict"
    assert effective.origin("sandbox.cpu_s") == "default"


def test_a_preset_file_and_a_file_naming_the_preset_give_the_same_policy() -> None:
    from tooldir._data import PRESETS

    for preset in PRESETS.glob("*.toml"):
        assert effective_policy(f'preset = "{preset.stem}"\n').policy == load_policy(preset)[0], preset.stem


# -- bad files --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("[sources.project]\nmay_shadow = false\nbogus = 1\n", "sources.project.bogus", 3),
        ("[sources.builtin]\nrequire = []\n", "sources.builtin", 1),
        ('\n[sources.project]\nmax_risk = "everything"\n', "sources.project.max_risk", 3),
        ('[sources.project]\nrequire = ["approval", "vibes"]\n', "sources.project.require[1]", 2),
        ("[sandbox]\ntimeout_s = -1\n", "sandbox.timeout_s", 2),
        ('preset = "lax"\n', "preset", 1),
        ('[pins]\nx = "sha256:nothex"\n', "pins", 1),
    ],
)
def test_a_bad_policy_names_the_key_and_line(text: str, key: str, line: int) -> None:
    with pytest.raises(PolicyError) as caught:
        effective_policy(text, path="p.toml")
    assert (caught.value.key, caught.value.line, caught.value.path) == (key, line, "p.toml")


def test_invalid_toml_is_a_policy_error_with_its_line() -> None:
    with pytest.raises(PolicyError) as caught:
        effective_policy("[sandbox]\nnetwork = \n", path="p.toml")
    assert caught.value.line == 2


# -- weakening ----------------------------------------------------------------------------------------


def test_every_policy_key_is_either_a_protection_with_a_rule_or_declared_neutral() -> None:
    keys = set(leaf_defaults())
    assert not set(WEAKENING_RULES) & NEUTRAL_KEYS
    assert keys == set(WEAKENING_RULES) | NEUTRAL_KEYS


def weakened_keys(text: str) -> set[str]:
    return {w.key for w in effective_policy(text).weakenings()}


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[sources.project]\nrequire = []\n", "sources.project.require"),
        ('[sources.project]\nmax_risk = "exec"\n', "sources.project.max_risk"),
        ('[sources.user]\nmax_risk = "exec"\nrequire = []\n', None),
        ("[sandbox]\nunsafe_allow_unsandboxed = true\n", "sandbox.unsafe_allow_unsandboxed"),
        ("[sandbox]\nnetwork = true\n", "sandbox.network"),
        ('[sandbox]\nenv_allow = ["AWS_SECRET_ACCESS_KEY"]\n', "sandbox.env_allow"),
        ("[sandbox]\nmemory_mb = 4096\n", "sandbox.memory_mb"),
        ("[limits]\nmax_json_depth = 200\n", "limits.max_json_depth"),
        ('[exec]\ninterpreters = ["python3", "node", "bash", "sh", "env"]\n', "exec.interpreters"),
        ('[reserved]\nnames = ["read_file"]\n', "reserved.names"),
        ('[sandbox]\nmemory_bound = "rlimit+seccomp"\n', "sandbox.memory_bound"),
        ("[sandbox]\nunsafe_allow_no_seccomp = true\n", "sandbox.unsafe_allow_no_seccomp"),
        ("[sandbox]\naddress_space_slack_mb = 4096\n", "sandbox.address_space_slack_mb"),
        ('[audit]\ndurability = "buffered"\n', "audit.durability"),
        ('[audit]\ndurability = "interval"\n', "audit.durability"),
        ('[audit]\ndurability = "interval"\nsync_interval_ms = 200\n', "audit.durability"),
    ],
)
def test_a_value_looser_than_its_default_is_reported_as_weakening_that_key(text: str, key: str | None) -> None:
    assert weakened_keys(text) == ({key} if key else set())


@pytest.mark.parametrize(
    "text",
    [
        '[sources.project]\nrequire = ["approval"]\nmax_risk = "read"\nmay_shadow = false\n',
        '[sources.user]\nrequire = ["approval"]\nmax_risk = "write"\n',
        '[permissions]\nmode = "plan"\ndeny = ["x*"]\nmax_risk = "write"\n',
        "[sandbox]\ntimeout_s = 5\nmemory_mb = 64\nrun_as_uid = 64000\n",
        '[sandbox]\nmemory_bound = "cgroup"\ncgroup_parent = "/sys/fs/cgroup/tooldir"\n',
        '[keys]\nminisign = ["' + MINISIGN + '"]\n',
        '[defer]\nmode = "off"\nmax_working_set = 500\n',
        '[audit]\ndurability = "fsync"\n',
        "[audit]\nsync_interval_ms = 200\n",  # a partial [audit]: durability keeps "fsync"
        "",
    ],
)
def test_tightening_or_neutral_values_are_not_weakening(text: str) -> None:
    assert weakened_keys(text) == set()


def test_the_strict_preset_weakens_nothing_and_team_signed_names_its_higher_ceiling() -> None:
    assert weakened_keys('preset = "strict"\n') == set()
    weak = effective_policy('preset = "team-signed"\n').weakenings()
    assert [(w.key, w.origin) for w in weak] == [("sources.project.max_risk", "preset:team-signed")]


def test_weakenings_of_a_policy_built_in_python_need_no_file() -> None:
    from tooldir.policy import ProjectSourcePolicy, SourcesPolicy

    policy = Policy(sources=SourcesPolicy(project=ProjectSourcePolicy(require=())))
    assert [(w.key, w.value, w.default, w.pointer) for w in weakenings(policy)] == [
        ("sources.project.require", [], ["approval", "signature", "pin"], "/sources/project/require")
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [('[sources.project]\nrequire = "approval"\n', "an array"), ("[sources]\nproject = 3\n", "a table")],
)
def test_type_errors_speak_toml_not_python(text: str, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        effective_policy(text)
    assert words in caught.value.message and "tuple" not in caught.value.message
    assert "instance" not in caught.value.message


@pytest.mark.parametrize("written", ['"yes"', '"true"', "1", '"on"'])
@pytest.mark.parametrize("key", ["sandbox.network", "sandbox.unsafe_allow_unsandboxed", "sources.project.may_shadow"])
def test_a_policy_switch_written_as_anything_but_a_toml_boolean_is_refused_not_read_as_true(
    key: str, written: str
) -> None:
    table, _, leaf = key.rpartition(".")
    with pytest.raises(PolicyError, match=leaf):
        parse_policy(f"[{table}]\n{leaf} = {written}\n")
