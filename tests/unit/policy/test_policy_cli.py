"""`tooldir policy show|check`, `policy-weakened` in scan, and the end-to-end effect of a partial
policy on `scan` and `run` (issue 11, items 1 and 4)."""

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

CANARY_SCRIPT = """\
import pathlib, sys
pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else {canary!r}).write_text("ran")
print('{{"ok": true, "content": "ran"}}')
"""


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main([*args, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    project = tmp_path / "project"
    tools = project_tools(project)
    canary = tmp_path / "canary"
    make_tool(tools, "evil_exec", risk="exec", script=CANARY_SCRIPT.format(canary=str(canary)))
    make_tool(tools, "evil_external", risk="external-read", script=CANARY_SCRIPT.format(canary=str(canary)))
    user = tmp_path / "user"
    user.mkdir()
    return {"project": project, "user": user, "state": tmp_path / "state", "canary": canary, "tmp": tmp_path}


def opts(setup: dict[str, Path], policy: Path) -> list[str]:
    return [
        "--project",
        str(setup["project"]),
        "--user-dir",
        str(setup["user"]),
        "--state-dir",
        str(setup["state"]),
        "--policy",
        str(policy),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "[sources.project]\nmay_shadow = false\n",
        '[sources.project]\nmax_risk = "external-read"\n',
        "[sources.project]\n",
    ],
    ids=["may-shadow-only", "max-risk-only", "empty-table"],
)
def test_a_partial_policy_leaves_unapproved_project_tools_unable_to_run(
    capsys: pytest.CaptureFixture[str], setup: dict[str, Path], text: str
) -> None:
    policy = setup["tmp"] / "policy.toml"
    policy.write_text(text)
    code, doc = run_json(capsys, "scan", *opts(setup, policy))
    assert code == 0
    tools = {t["name"]: t for t in doc["tools"]}
    assert tools["evil_exec"]["status"] == "rejected"  # exec stays above the project ceiling
    assert tools["evil_external"]["status"] in ("pending", "rejected")
    assert all(t["trust"] != "none-required" for t in tools.values())
    codes = {(d["code"], d["tool"]) for d in doc["diagnostics"]}
    assert ("risk-not-allowed", "evil_exec") in codes
    code, result = run_json(capsys, "run", "evil_exec", "--input", '{"text": "x"}', *opts(setup, policy))
    assert code == 3 and result["ok"] is False
    assert not setup["canary"].exists()


def test_the_max_risk_only_policy_keeps_the_external_tool_pending_as_not_approved(
    capsys: pytest.CaptureFixture[str], setup: dict[str, Path]
) -> None:
    policy = setup["tmp"] / "policy.toml"
    policy.write_text('[sources.project]\nmax_risk = "external-read"\n')
    _, doc = run_json(capsys, "scan", *opts(setup, policy))
    tools = {t["name"]: t for t in doc["tools"]}
    assert (tools["evil_external"]["status"], tools["evil_external"]["trust"]) == ("pending", "unverified")
    assert ("not-approved", "evil_external") in {(d["code"], d["tool"]) for d in doc["diagnostics"]}


def test_scan_reports_each_weakened_key_as_a_policy_weakened_warning(
    capsys: pytest.CaptureFixture[str], setup: dict[str, Path]
) -> None:
    policy = setup["tmp"] / "policy.toml"
    policy.write_text(
        '[sources.project]\nrequire = []\nmax_risk = "exec"\n[sandbox]\nunsafe_allow_unsandboxed = true\n'
    )
    _, doc = run_json(capsys, "scan", *opts(setup, policy))
    weak = [d for d in doc["diagnostics"] if d["code"] == "policy-weakened"]
    assert {(d["severity"], d["pointer"], d["path"]) for d in weak} == {
        ("warning", "/sources/project/require", str(policy)),
        ("warning", "/sources/project/max_risk", str(policy)),
        ("warning", "/sandbox/unsafe_allow_unsandboxed", str(policy)),
    }
    assert all(d["pointer"][1:].replace("/", ".") in d["message"] for d in weak)


def test_a_default_policy_reports_no_weakening(capsys: pytest.CaptureFixture[str], setup: dict[str, Path]) -> None:
    policy = setup["tmp"] / "policy.toml"
    policy.write_text("")
    _, doc = run_json(capsys, "scan", *opts(setup, policy))
    assert not [d for d in doc["diagnostics"] if d["code"] == "policy-weakened"]


def test_risk_not_allowed_names_the_policy_key_and_the_value_to_set(
    capsys: pytest.CaptureFixture[str], setup: dict[str, Path]
) -> None:
    policy = setup["tmp"] / "policy.toml"
    policy.write_text("")
    _, doc = run_json(capsys, "scan", *opts(setup, policy))
    refusal = next(d for d in doc["diagnostics"] if d["code"] == "risk-not-allowed" and d["tool"] == "evil_external")
    assert 'sources.project.max_risk = "external-read"' in refusal["message"]


def test_raising_the_project_ceiling_as_the_refusal_says_makes_the_readme_example_approvable(
    capsys: pytest.CaptureFixture[str], setup: dict[str, Path]
) -> None:
    policy = setup["tmp"] / "policy.toml"
    policy.write_text('[sources.project]\nmax_risk = "external-read"\n')
    _, doc = run_json(capsys, "scan", *opts(setup, policy))
    tools = {t["name"]: t for t in doc["tools"]}
    assert tools["evil_external"]["status"] == "pending"  # needs only the approval now
    assert main(["allow", "evil_external", "--yes", *opts(setup, policy)]) == 0
    capsys.readouterr()
    _, doc = run_json(capsys, "scan", *opts(setup, policy))
    assert {t["name"]: t["status"] for t in doc["tools"]}["evil_external"] == "active"


# -- tooldir policy show / check --------------------------------------------------------------------


def test_policy_show_json_gives_every_value_with_its_origin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('preset = "strict"\n\n[sources.project]\nmax_risk = "write"\n')
    code, doc = run_json(capsys, "policy", "show", "--policy", str(policy))
    assert code == 0
    assert (doc["file"], doc["preset"]) == (str(policy), "strict")
    assert doc["policy"]["sources"]["project"] == {
        "require": ["signature", "pin"],
        "max_risk": "write",
        "may_shadow": False,
    }
    assert doc["origins"]["sources.project.max_risk"] == f"{policy}:4"
    assert doc["origins"]["sources.project.require"] == "preset:strict"
    assert doc["origins"]["limits.max_json_depth"] == "default"
    assert doc["weakened"] == []


def test_policy_show_without_a_file_is_all_defaults(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty"))
    code, doc = run_json(capsys, "policy", "show")
    assert code == 0 and doc["file"] is None
    assert set(doc["origins"].values()) == {"default"}


def test_policy_check_accepts_a_valid_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[sandbox]\nnetwork = true\n")
    code, doc = run_json(capsys, "policy", "check", str(policy))
    assert code == 0 and doc["ok"] is True
    assert [w["key"] for w in doc["weakened"]] == ["sandbox.network"]
    assert main(["policy", "check", str(policy)]) == 0


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("[sources.project]\nmay_shadow = 1.5\n", "sources.project.may_shadow", 2),
        ("[sandbox]\nnetwork = true\nwifi = true\n", "sandbox.wifi", 3),
        ("[sandbox\n", None, 1),
    ],
    ids=["bad-value", "unknown-key", "bad-toml"],
)
def test_policy_check_refuses_a_bad_file_with_exit_2_and_where(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, key: str | None, line: int
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(text)
    code, doc = run_json(capsys, "policy", "check", str(policy))
    assert code == 2 and doc["ok"] is False
    assert (doc["error"]["key"], doc["error"]["line"], doc["error"]["path"]) == (key, line, str(policy))
    assert main(["policy", "check", str(policy)]) == 2
    err = capsys.readouterr().err
    assert f"{policy}:{line}" in err and "Traceback" not in err


def test_policy_check_of_a_missing_or_binary_file_is_exit_2_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe\x00")
    for target in ("missing.toml", "binary.toml", "."):
        proc = subprocess.run(
            [sys.executable, "-m", "tooldir", "policy", "check", target],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
            check=False,
        )
        assert proc.returncode == 2, target
        assert "Traceback" not in proc.stderr and "invalid policy" in proc.stderr
