"""Secrets reach only their tool (issue 24 items 4 and 5), through the real sandbox: a granted tool
gets the value as its environment variable; nothing else does; what leaves the sandbox is
redacted; the audit log, state and ``show`` never hold it; secrets resolve after validation,
permission and hooks (a refused call never runs a secret's command); the CLI and a host calling
the library get the same."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from toolkit import make_tool, project_tools

import tooldir
import tooldir.run.registry
import tooldir.snapshot.store
from tooldir._cli import main
from tooldir.policy import Policy, parse_policy
from tooldir.run.hooks import Deny
from tooldir.run.registry import Registry
from tooldir.run.secrets import default_secrets_path
from tooldir.sandbox import BubblewrapSandbox
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

pytestmark = pytest.mark.usefixtures("sandbox_ready")

VALUE = "tok-3xAmple/s3cr3t+value=="

#: Reports what it can see of every variable it was asked about, and echoes the value as asked.
PROBE = """\
import base64, json, os, sys, urllib.parse
request = json.load(sys.stdin)
value = os.environ.get("JIRA_TOKEN")
mode = request["input"]["text"]
if mode == "stdout":
    print(json.dumps({"ok": True, "content": {"seen": value, "b64": base64.b64encode((value or "").encode()).decode(),
                                              "url": urllib.parse.quote(value or "", safe="")}}))
elif mode == "plain":
    print(f"token is {value}")
elif mode == "stderr":
    sys.stderr.write(f"auth failed with {value}\\n")
    sys.exit(3)
elif mode == "tool-error":
    print(json.dumps({"ok": False, "content": f"rejected {value}"}))
else:
    print(json.dumps({"ok": True, "content": {"has": "JIRA_TOKEN" in os.environ,
                                              "env": sorted(os.environ)}}))
"""


def policy_text(grants: dict[str, list[str]]) -> str:
    lines = ["[secrets.grants]"] + [f"{tool} = {json.dumps(names)}" for tool, names in grants.items()]
    return "\n".join(lines) + "\n"


def write_secrets(text: str, mode: int = 0o600) -> Path:
    path = default_secrets_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def tools(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    make_tool(user, "jira_get_issue", script=PROBE, execute=_execute(["JIRA_TOKEN"]))
    make_tool(user, "other_tool", script=PROBE, execute=_execute([]))
    make_tool(user, "greedy_tool", script=PROBE, execute=_execute(["JIRA_TOKEN"]))
    return user


def _execute(secrets: list[str]) -> dict[str, Any]:
    return {"command": ["python3", "run.py"], "timeout_s": 20, "network": False, "env": [], "secrets": secrets}


def registry(tmp_path: Path, policy: Policy) -> Registry:
    state = tmp_path / "state"
    config = make_config(project=None, user_dirs=[tools(tmp_path)], policy=policy, state_dir=state)
    return Registry(SnapshotStore(Loader(config).load()), policy=policy, state_dir=state)


def host_registry(project: Path, user: Path, state: Path) -> Registry:
    """What a host embedding the library builds with the defaults (the user's policy file and secrets file)."""
    snapshot = tooldir.load(project=str(project), user_dirs=[str(user)], state_dir=str(state))
    return tooldir.run.registry.Registry(tooldir.snapshot.store.SnapshotStore(snapshot), state_dir=state)


def everything_written(tmp_path: Path) -> bytes:
    """Every byte tooldir wrote under the test's folders (state, audit log, index, memo, copies)."""
    out = b""
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out += path.read_bytes()
    return out


GRANTED = policy_text({"jira_get_issue": ["JIRA_TOKEN"]})


@pytest.fixture
def granted(tmp_path: Path) -> Registry:
    write_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n')
    return registry(tmp_path, parse_policy(GRANTED))


def test_a_granted_tool_gets_its_secret_as_an_environment_variable_and_its_echo_is_redacted(
    granted: Registry, tmp_path: Path
) -> None:
    result = granted.call("jira_get_issue", {"text": "stdout"})
    assert result.ok, result.error
    assert result.content == {"seen": "[secret:JIRA_TOKEN]", "b64": "[secret:JIRA_TOKEN]", "url": "[secret:JIRA_TOKEN]"}
    plain = granted.call("jira_get_issue", {"text": "plain"})
    assert plain.content == "token is [secret:JIRA_TOKEN]\n" or plain.content.strip() == "token is [secret:JIRA_TOKEN]"
    assert VALUE.encode() not in everything_written(tmp_path)


@pytest.mark.parametrize("mode", ["stderr", "tool-error"])
def test_a_secret_in_error_text_is_redacted_from_the_result_and_the_audit_line(
    granted: Registry, tmp_path: Path, mode: str
) -> None:
    result = granted.call("jira_get_issue", {"text": mode})
    assert not result.ok and result.error is not None
    assert "[secret:JIRA_TOKEN]" in result.error.message and VALUE not in result.error.message
    assert VALUE not in json.dumps(result.to_json())
    written = everything_written(tmp_path)
    for form in (VALUE, base64.b64encode(VALUE.encode()).decode(), quote(VALUE, safe="")):
        assert form.encode() not in written
    assert b"[secret:JIRA_TOKEN]" in (tmp_path / "state" / "audit.jsonl").read_bytes()


def test_no_other_tool_sees_the_secret_and_an_ungranted_declaration_is_refused_naming_the_grant(
    granted: Registry,
) -> None:
    other = granted.call("other_tool", {"text": "env"})
    assert other.ok and other.content["has"] is False
    greedy = granted.call("greedy_tool", {"text": "env"})
    assert greedy.error is not None and greedy.error.code == "secret-unavailable"
    assert "JIRA_TOKEN" in greedy.error.message and "[secrets.grants] greedy_tool" in greedy.error.message


def test_the_audit_line_names_the_secrets_given_never_their_values(granted: Registry, tmp_path: Path) -> None:
    granted.call("jira_get_issue", {"text": "env"})
    granted.call("other_tool", {"text": "env"})
    lines = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert lines[0]["secrets"] == "JIRA_TOKEN" and lines[0]["status"] == "ok"
    assert "secrets" not in lines[1]
    assert main(["audit", "verify", "--json", "--state-dir", str(tmp_path / "state")]) == 0


def test_a_granted_secret_missing_from_the_file_is_refused_with_the_key_to_set(tmp_path: Path) -> None:
    write_secrets('[secrets]\nOTHER = "x"\n')
    result = registry(tmp_path, parse_policy(GRANTED)).call("jira_get_issue", {"text": "env"})
    assert result.error is not None and result.error.code == "secret-unavailable"
    assert f'add JIRA_TOKEN = "..." under [secrets] in {default_secrets_path()}' in result.error.message


def test_a_secrets_file_readable_by_others_refuses_the_call_with_the_reason(tmp_path: Path) -> None:
    write_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n', 0o644)
    result = registry(tmp_path, parse_policy(GRANTED)).call("jira_get_issue", {"text": "env"})
    assert result.error is not None and result.error.code == "secret-unavailable"
    assert "chmod 600" in result.error.message and VALUE not in result.error.message


def test_a_command_secret_runs_at_call_time_and_its_value_reaches_the_tool(tmp_path: Path) -> None:
    canary = tmp_path / "command-ran"
    write_secrets(f'[secrets]\nJIRA_TOKEN = {{command = ["sh", "-c", "touch {canary}; echo {VALUE}"]}}\n')
    reg = registry(tmp_path, parse_policy(GRANTED))
    assert not canary.exists()  # loading and building the registry runs nothing
    result = reg.call("jira_get_issue", {"text": "stdout"})
    assert result.ok and result.content["seen"] == "[secret:JIRA_TOKEN]"
    assert canary.exists()


@pytest.mark.parametrize("refusal", ["invalid-input", "permission-denied", "hook-denied"])
def test_a_refused_call_never_runs_a_secrets_command(tmp_path: Path, refusal: str) -> None:
    canary = tmp_path / "command-ran"
    write_secrets(f'[secrets]\nJIRA_TOKEN = {{command = ["sh", "-c", "touch {canary}; echo v"]}}\n')
    text = GRANTED + ('[permissions]\ndeny = ["jira_*"]\n' if refusal == "permission-denied" else "")
    reg = registry(tmp_path, parse_policy(text))
    if refusal == "hook-denied":
        reg.add_pre_hook(lambda *, call, input: Deny("no"), name="deny-all")
    result = reg.call("jira_get_issue", {"text": 5} if refusal == "invalid-input" else {"text": "env"})
    assert result.error is not None and result.error.code == refusal
    assert not canary.exists()


def test_a_tool_with_secrets_is_never_set_up_ahead_or_kept_as_a_spare(granted: Registry) -> None:
    assert granted.prepare_sandboxes(["jira_get_issue"]) == 0
    for _ in range(2):
        assert granted.call("jira_get_issue", {"text": "env"}).ok
    box = granted.sandbox()
    assert isinstance(box, BubblewrapSandbox)
    assert box._spares.held() == []  # no held sandbox keeps a value waiting


def test_a_secret_from_the_callers_environment_never_reaches_a_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIRA_TOKEN", VALUE)  # exported in the user's shell: not a grant
    result = registry(tmp_path, Policy()).call("other_tool", {"text": "env"})
    assert result.ok and result.content["has"] is False


def test_a_project_file_can_never_grant_a_secret(tmp_path: Path) -> None:
    write_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n')
    project = tmp_path / "project"
    (project / ".tooldir").mkdir(parents=True)
    (project / ".tooldir" / "policy.toml").write_text(GRANTED)  # planted: never read as policy
    (project / ".tooldir" / "secrets.toml").write_text(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n')
    result = host_registry(project, tools(tmp_path), tmp_path / "state").call("jira_get_issue", {"text": "env"})
    assert result.error is not None and result.error.code == "secret-unavailable"


def test_the_cli_and_a_host_get_the_same_grants_from_the_users_policy_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n')
    policy_file = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    policy_file.write_text(GRANTED)
    user = tools(tmp_path)
    common = ["--json", "--user-dir", str(user), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s")]
    assert main(["run", "jira_get_issue", "--input", '{"text": "stdout"}', *common]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["content"]["seen"] == "[secret:JIRA_TOKEN]"
    assert main(["run", "greedy_tool", "--input", '{"text": "env"}', *common]) == 3
    printed = json.loads(capsys.readouterr().out)
    assert printed["error"]["code"] == "secret-unavailable"
    host = host_registry(tmp_path, user, tmp_path / "h")  # the README's host recipe: no policy, no secrets file
    assert host.call("jira_get_issue", {"text": "stdout"}).content["seen"] == "[secret:JIRA_TOKEN]"
    refused = host.call("greedy_tool", {"text": "env"})
    assert refused.error is not None and refused.error.code == "secret-unavailable"
    assert VALUE.encode() not in everything_written(tmp_path)


def test_show_says_which_secrets_are_granted_and_set_never_their_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n')
    policy_file = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    policy_file.write_text(GRANTED)
    user = tools(tmp_path)
    common = ["--user-dir", str(user), "--project", str(tmp_path), "--state-dir", str(tmp_path / "s")]
    assert main(["show", "jira_get_issue", "--json", *common]) == 0
    (record,) = json.loads(capsys.readouterr().out)["records"]
    assert record["secrets"] == [{"name": "JIRA_TOKEN", "granted": True, "value": "set"}]
    assert main(["show", "greedy_tool", "--json", *common]) == 0
    (record,) = json.loads(capsys.readouterr().out)["records"]
    assert record["secrets"] == [{"name": "JIRA_TOKEN", "granted": False, "value": "set"}]
    assert main(["show", "jira_get_issue", *common]) == 0
    text = " ".join(capsys.readouterr().out.split())  # as read, whatever the console's width wrapped
    assert "JIRA_TOKEN: granted; set in secrets.toml" in text and VALUE not in text
    assert main(["show", "greedy_tool", *common]) == 0
    assert "NOT granted (add it to [secrets.grants] greedy_tool" in " ".join(capsys.readouterr().out.split())
    default_secrets_path().chmod(0o644)
    assert main(["show", "jira_get_issue", "--json", *common]) == 0
    (record,) = json.loads(capsys.readouterr().out)["records"]
    assert record["secrets"][0]["value"].startswith("unusable: secrets file") and VALUE not in json.dumps(record)
    assert VALUE.encode() not in everything_written(tmp_path)


def test_a_project_tool_that_takes_a_granted_name_gets_no_secret_unless_the_policy_opts_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canary = tmp_path / "secret-command-ran"
    write_secrets(f'[secrets]\nJIRA_TOKEN = {{command = ["touch", "{canary}"]}}\n')
    policy_file = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    policy_file.write_text(GRANTED)  # the user granted JIRA_TOKEN to *their* jira_get_issue
    project = tmp_path / "repo"
    package = make_tool(project_tools(project), "jira_get_issue", script=PROBE, execute=_execute(["JIRA_TOKEN"]))
    user, state = tmp_path / "user", tmp_path / "state"
    user.mkdir()
    roots = ["--user-dir", str(user), "--project", str(project), "--state-dir", str(state)]
    assert main(["allow", str(package), "--yes", *roots]) == 0  # its code approved: not a grant of secrets
    capsys.readouterr()
    assert main(["run", "jira_get_issue", "--input", '{"text": "env"}', "--json", *roots]) == 3
    printed = json.loads(capsys.readouterr().out)
    assert printed["error"]["code"] == "secret-unavailable"
    assert "comes from the project" in printed["error"]["message"]
    assert "secrets.project_tools = true" in printed["error"]["message"]
    host = host_registry(project, user, state).call("jira_get_issue", {"text": "env"})  # a host, by default
    assert host.error is not None and host.error.code == "secret-unavailable"
    assert not canary.exists()  # refused before the secret's command could run
    write_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n')
    policy_file.write_text("[secrets]\nproject_tools = true\n" + GRANTED)  # opted in, by name
    assert main(["run", "jira_get_issue", "--input", '{"text": "stdout"}', "--json", *roots]) == 0
    assert json.loads(capsys.readouterr().out)["content"]["seen"] == "[secret:JIRA_TOKEN]"
    assert main(["policy", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "secrets.project_tools" in json.dumps(shown["weakened"])
