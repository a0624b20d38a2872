"""Issue 17 item 1: ``tooldir scan --format sarif|json|table`` from a plain install; the SARIF is
valid against the official SARIF 2.1.0 JSON Schema (tests/fit/data, provenance in its README)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from plaininstall import PlainInstall
from toolkit import make_tool, project_tools

from tooldir.codes import DIAGNOSTIC_HELP, DiagnosticCode

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"

BAD_COMMAND = """{
  "name": "bad_command",
  "description": "Runs something outside its package.",
  "input_schema": {"type": "object"},
  "risk": "read",
  "execute": {
    "command": [
      "../../outside.sh"
    ]
  }
}
"""


@pytest.fixture
def repo(elsewhere: Path) -> Path:
    """A repository with a pending tool, a rejected one (a pointer into its manifest), broken JSON,
    and a user root outside the repository."""
    repo = elsewhere / "repo"
    tools = project_tools(repo)
    make_tool(tools, "fine_tool")
    (tools / "bad_command").mkdir()
    (tools / "bad_command" / "schema.json").write_text(BAD_COMMAND)
    (tools / "broken json").mkdir()
    (tools / "broken json" / "schema.json").write_text('{"name": ')
    make_tool(elsewhere / "user", "fine_tool")  # shadowed by the project's
    return repo


def _scan(plain: PlainInstall, cwd: Path, *extra: str) -> Any:
    argv = [plain.tooldir, "scan", "--project", "repo", "--user-dir", "user", "--state-dir", str(cwd / "state")]
    return plain.run([*argv, *extra], cwd)


def test_the_shipped_schema_is_the_official_one() -> None:
    data = SCHEMA.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256
    assert json.loads(data)["id"].startswith("https://docs.oasis-open.org/sarif/sarif/v2.1.0/")


def test_scan_sarif_validates_against_the_sarif_2_1_0_schema(plain: PlainInstall, elsewhere: Path, repo: Path) -> None:
    done = _scan(plain, elsewhere, "--format", "sarif")
    assert done.returncode == 0, done.stderr
    log = json.loads(done.stdout)
    schema = json.loads(SCHEMA.read_text("utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft4Validator(schema).iter_errors(log), key=lambda e: list(e.absolute_path))
    assert [f"{list(e.absolute_path)}: {e.message}" for e in errors] == []
    assert log["version"] == "2.1.0"


def test_sarif_has_one_rule_per_code_and_one_result_per_diagnostic(
    plain: PlainInstall, elsewhere: Path, repo: Path
) -> None:
    [run] = json.loads(_scan(plain, elsewhere, "--format", "sarif").stdout)["runs"]
    diagnostics = json.loads(_scan(plain, elsewhere, "--format", "json").stdout)["diagnostics"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [str(c) for c in DiagnosticCode]
    assert all(r["help"]["text"] == DIAGNOSTIC_HELP[DiagnosticCode(r["id"])] for r in rules)
    results = run["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        (d["code"], {"error": "error", "warning": "warning", "info": "note"}[d["severity"]]) for d in diagnostics
    ]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    assert {"unsafe-command", "invalid-json", "not-approved", "shadowed"} <= {r["ruleId"] for r in results}


def test_sarif_locations_are_relative_to_the_repository_root_with_the_pointer_line(
    plain: PlainInstall, elsewhere: Path, repo: Path
) -> None:
    [run] = json.loads(_scan(plain, elsewhere, "--format", "sarif").stdout)["runs"]
    base = run["originalUriBaseIds"]["PROJECTROOT"]["uri"]
    assert base == repo.resolve().as_uri() + "/"
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for r in run["results"]:
        by_rule.setdefault(r["ruleId"], []).append(r["locations"][0]["physicalLocation"])
    [command] = by_rule["unsafe-command"]
    assert command["artifactLocation"] == {"uri": ".tooldir/tools/bad_command/schema.json", "uriBaseId": "PROJECTROOT"}
    assert command["region"] == {"startLine": 8}  # the line of "../../outside.sh" (/execute/command/0)
    [pending] = by_rule["not-approved"]
    assert pending == {
        "artifactLocation": {"uri": ".tooldir/tools/fine_tool/schema.json", "uriBaseId": "PROJECTROOT"},
        "region": {"startLine": 1},  # the whole package: its manifest's first line
    }
    broken = by_rule["invalid-json"][0]["artifactLocation"]
    assert broken == {"uri": ".tooldir/tools/broken%20json/schema.json", "uriBaseId": "PROJECTROOT"}
    outside = [
        loc["artifactLocation"] for loc in by_rule["shadowed"] if loc["artifactLocation"]["uriBaseId"] != "PROJECTROOT"
    ]
    assert outside == [{"uri": "fine_tool/schema.json", "uriBaseId": "USERROOT"}]


def test_sarif_gives_user_root_and_user_policy_findings_their_own_uri_base_ids(
    plain: PlainInstall, elsewhere: Path, repo: Path
) -> None:
    config = elsewhere / "home" / ".config" / "tooldir"
    config.mkdir(parents=True)
    (config / "policy.toml").write_text('[sources.project]\nmax_risk = "external-read"\n')
    plain.env["XDG_CONFIG_HOME"] = str(elsewhere / "home" / ".config")
    try:
        done = _scan(plain, elsewhere, "--format", "sarif")
    finally:
        del plain.env["XDG_CONFIG_HOME"]
    assert done.returncode == 0, done.stderr
    [run] = json.loads(done.stdout)["runs"]
    bases = run["originalUriBaseIds"]
    assert {k: v["uri"] for k, v in bases.items()} == {
        "PROJECTROOT": repo.resolve().as_uri() + "/",
        "USERROOT": (elsewhere / "user").resolve().as_uri() + "/",
        "USERCONFIG": config.resolve().as_uri() + "/",
        "USERSTATE": (elsewhere / "state").resolve().as_uri() + "/",
    }
    assert all(v["description"]["text"] for v in bases.values())
    located = {
        (r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"]): r["locations"][0][
            "physicalLocation"
        ]
        for r in run["results"]
        if "physicalLocation" in r["locations"][0]
    }
    weakened = located[("policy-weakened", "USERCONFIG")]
    assert weakened["artifactLocation"]["uri"] == "policy.toml"
    assert weakened["region"] == {"startLine": 2}  # the line of max_risk
    assert located[("shadowed", "USERROOT")]["artifactLocation"]["uri"] == "fine_tool/schema.json"
    every_uri = [
        loc["physicalLocation"]["artifactLocation"]
        for r in run["results"]
        for loc in r["locations"]
        if "physicalLocation" in loc
    ]
    assert all("uriBaseId" in a and not a["uri"].startswith("file:") for a in every_uri)


def test_a_user_root_inside_the_repository_stays_relative_to_the_repository(
    plain: PlainInstall, elsewhere: Path, repo: Path
) -> None:
    make_tool(repo / "my-tools", "fine_tool")
    done = plain.run(
        [
            plain.tooldir,
            "scan",
            "--format",
            "sarif",
            "--project",
            "repo",
            "--user-dir",
            "repo/my-tools",
            "--state-dir",
            str(elsewhere / "state"),
        ],
        elsewhere,
    )
    [run] = json.loads(done.stdout)["runs"]
    places = [
        r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"] if r["ruleId"] == "shadowed"
    ]
    assert {"uri": "my-tools/fine_tool/schema.json", "uriBaseId": "PROJECTROOT"} in places
    assert all(place["uriBaseId"] == "PROJECTROOT" for place in places)


def test_every_sarif_rule_has_a_security_severity_on_code_scannings_scale(
    plain: PlainInstall, elsewhere: Path, repo: Path
) -> None:
    [run] = json.loads(_scan(plain, elsewhere, "--format", "sarif").stdout)["runs"]
    severity = {r["id"]: r["properties"]["security-severity"] for r in run["tool"]["driver"]["rules"]}
    assert set(severity) == {str(c) for c in DiagnosticCode}
    assert all(isinstance(v, str) and 0.0 <= float(v) <= 10.0 for v in severity.values())
    # what lets changed or unreviewed content through ranks above what only needs a review
    assert float(severity["hash-mismatch"]) >= 9.0 and float(severity["bad-signature"]) >= 9.0
    assert float(severity["unsafe-command"]) > float(severity["suspicious-text"]) > float(severity["not-approved"])
    assert float(severity["stray-file"]) < 1.0
    assert "informationUri" not in run["tool"]["driver"]  # the project publishes no documentation URL


def test_json_is_an_alias_of_format_json_and_table_is_the_default(
    plain: PlainInstall, elsewhere: Path, repo: Path
) -> None:
    as_alias = json.loads(_scan(plain, elsewhere, "--json").stdout)
    as_format = json.loads(_scan(plain, elsewhere, "--format", "json").stdout)
    assert as_alias["diagnostics"] == as_format["diagnostics"] and as_alias["tools"] == as_format["tools"]
    table = _scan(plain, elsewhere, "--format", "table")
    assert table.stdout == _scan(plain, elsewhere).stdout.replace(
        _snapshot_id(_scan(plain, elsewhere).stdout), _snapshot_id(table.stdout)
    )
    assert "diagnostics" in table.stdout
    both = _scan(plain, elsewhere, "--json", "--format", "sarif")
    assert both.returncode == 2 and both.stderr.startswith("tooldir scan: --json is --format json")


def _snapshot_id(text: str) -> str:
    return text.split("snapshot ", 1)[1].split(" ", 1)[0]


def test_scan_strict_with_sarif_still_exits_1_on_errors(plain: PlainInstall, elsewhere: Path, repo: Path) -> None:
    done = _scan(plain, elsewhere, "--format", "sarif", "--strict")
    assert done.returncode == 1
    assert json.loads(done.stdout)["version"] == "2.1.0"


def test_every_diagnostic_code_has_a_one_line_help_text() -> None:
    assert set(DIAGNOSTIC_HELP) == set(DiagnosticCode)
    assert all(text and "\n" not in text and text.endswith(".") for text in DIAGNOSTIC_HELP.values())
