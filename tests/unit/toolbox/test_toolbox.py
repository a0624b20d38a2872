"""tooldir.open(), the front door (issue 25 item 1): the CLI's defaults, one policy that every
consumer follows, sessions over the same registry, and a close() that leaves nothing running."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import require_sandbox
from toolkit import make_tool

import tooldir
from tooldir._cli import main
from tooldir.errors import ConfigError, StateDirError
from tooldir.model import Status

TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}


def _user_policy(text: str) -> Path:
    folder = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.toml"
    path.write_text(text)
    return path


def _quote(*, input: dict[str, Any], context: dict[str, Any]) -> Any:
    return {"quote": input["text"]}


QUOTE = tooldir.Builtin("stock_quote", TEXT_SCHEMA, _quote, "Get the latest stock price quote for a ticker symbol.")


@pytest.fixture
def strict_user(tmp_path: Path) -> Path:
    """The user's policy file says ``preset = "strict"`` (project tools need a pin or a signature);
    the project tool is only approved, which strict does not accept."""
    _user_policy('preset = "strict"\n')
    project = tmp_path / "project"
    make_tool(project / ".tooldir" / "tools", "approved_only")
    tooldir.approve(tooldir.make_config(project=str(project), policy=tooldir.Policy()), "approved_only", digest=None)
    return project


def test_open_refuses_an_approved_only_project_tool_under_the_users_strict_preset_exactly_as_tooldir_run(
    strict_user: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "approved_only", "--input", '{"text": "hi"}', "--json", "--project", str(strict_user)]) == 3
    cli = json.loads(capsys.readouterr().out)
    with tooldir.open(project=strict_user) as toolbox:
        assert toolbox.policy.sources.project.require == ("signature", "pin")
        assert toolbox.snapshot.records("approved_only")[0].status is Status.PENDING
        direct = toolbox.call("approved_only", {"text": "hi"})
        in_session = toolbox.session().call("approved_only", {"text": "hi"})
    assert cli["error"]["code"] == "not-active"
    assert direct.error is not None and direct.error.code == cli["error"]["code"]
    assert in_session.error is not None and not in_session.ok


def test_open_without_a_policy_file_uses_the_built_in_defaults_and_the_default_state_folder(tmp_path: Path) -> None:
    with tooldir.open(project=None) as toolbox:
        assert toolbox.policy == tooldir.Policy()
        assert toolbox.config.state_dir == Path(os.environ["XDG_STATE_HOME"]) / "tooldir"
        assert toolbox.registry.policy is toolbox.policy


def test_open_reads_a_named_policy_file_like_the_cli_option(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text('preset = "strict"\n')
    with tooldir.open(project=None, policy=path) as toolbox:
        assert toolbox.policy.sources.project.require == ("signature", "pin")
        assert toolbox.config.policy_file == str(path)


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_open_refuses_a_relative_state_folder_before_reading_anything(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the project a relative folder would land in
    _user_policy("not toml [")  # never read: the state folder is checked first
    if how == "environment":
        monkeypatch.setenv("TOOLDIR_STATE_DIR", "state")
    with pytest.raises(StateDirError, match="relative path"):
        tooldir.open(project=tmp_path, state_dir="state" if how == "argument" else None)
    assert not (tmp_path / "state").exists()


def test_open_names_a_project_that_is_not_a_directory_and_a_policy_of_the_wrong_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        tooldir.open(project=tmp_path / "missing")
    with pytest.raises(TypeError, match="expected a policy file path or a Policy, not int"):
        tooldir.open(project=None, policy=3)  # type: ignore[arg-type]


def test_a_builtin_given_to_open_reserves_its_name_and_runs_through_the_registry(tmp_path: Path) -> None:
    project = tmp_path / "project"
    make_tool(project / ".tooldir" / "tools", "stock_quote")
    with tooldir.open(project=project, policy=tooldir.Policy(), state_dir=tmp_path / "state", builtins=[QUOTE]) as box:
        taken = [d.code for d in box.snapshot.diagnostics if d.tool == "stock_quote"]
        result = box.call("stock_quote", {"text": "ACME"})
    assert "reserved-name" in taken
    assert (result.ok, result.content) == (True, {"quote": "ACME"})


def test_a_bad_builtin_is_refused_before_the_roots_are_loaded(tmp_path: Path) -> None:
    bad = tooldir.Builtin("stock_quote", {"type": "array"}, _quote, "Get a quote.")
    with pytest.raises(ValueError, match="stock_quote"):
        tooldir.open(project=None, state_dir=tmp_path / "state", builtins=[bad])


def test_a_pre_hook_given_to_open_can_deny_a_call(tmp_path: Path) -> None:
    def deny_all(*, call: tooldir.HookCall, input: Any) -> tooldir.Deny:
        return tooldir.Deny("not today")

    hook = tooldir.Hook("no-quotes", "pre", "stock_*", deny_all)
    with tooldir.open(project=None, state_dir=tmp_path / "state", builtins=[QUOTE], hooks=[hook]) as toolbox:
        result = toolbox.call("stock_quote", {"text": "ACME"})
    assert result.error is not None and result.error.code == "hook-denied"


def test_a_session_refuses_a_deferred_tool_whose_schema_it_has_not_seen_until_tool_search_loads_it(
    tmp_path: Path,
) -> None:
    _user_policy('[defer]\nmode = "on"\nrules = ["Defer(*)"]\n')
    with tooldir.open(project=None, state_dir=tmp_path / "state", builtins=[QUOTE]) as toolbox:
        session = toolbox.session()
        assert "stock_quote" not in [d.name for d in session.working_set()]
        refused = session.call("stock_quote", {"text": "ACME"})
        found = session.tool_search(tool_names=["stock_quote"])
        ran = session.call("stock_quote", {"text": "ACME"})
        direct = toolbox.call("stock_quote", {"text": "ACME"})  # no session: no deferral gate
    assert refused.error is not None and refused.error.code == "session:unloaded"
    assert [m.name for m in found.matches] == ["stock_quote"]
    assert ran.ok and direct.ok


def test_with_watch_the_snapshot_follows_a_change_and_close_leaves_no_thread_running(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    user = tmp_path / "user"
    user.mkdir()
    toolbox = tooldir.open(project=None, user_dirs=[user], state_dir=tmp_path / "state", watch=True)
    with toolbox:
        assert toolbox.snapshot.by_name.get("word_tool") is None
        make_tool(user, "word_tool")
        toolbox.store.wait_for(lambda s: "word_tool" in s.by_name, timeout=30)
        assert "word_tool" in toolbox.snapshot.by_name
        toolbox.session()
    leftover = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert leftover == []
    with pytest.raises(RuntimeError, match="closed"):
        toolbox.session()


def test_with_watch_a_reloaded_policy_file_reaches_the_registry_and_every_open_session(tmp_path: Path) -> None:
    policy_file = _user_policy("")
    user = tmp_path / "user"
    make_tool(user, "word_tool")
    with tooldir.open(
        project=None, user_dirs=[user], state_dir=tmp_path / "state", watch=True, builtins=[QUOTE]
    ) as box:
        session = box.session()
        assert "stock_quote" in [d.name for d in session.working_set()]
        assert box.call("stock_quote", {"text": "ACME"}).ok
        policy_file.write_text('[reserved]\nnames = ["word_tool"]\n[permissions]\ndeny = ["stock_quote"]\n')
        # the watcher passes the policy on before it publishes the snapshot the policy changed
        box.store.wait_for(lambda s: "word_tool" not in s.by_name, timeout=30)
        direct = box.call("stock_quote", {"text": "ACME"})
        in_session = session.call("stock_quote", {"text": "ACME"})
        offered = [d.name for d in session.working_set()]
        assert box.policy.permissions.deny == ("stock_quote",)
        assert box.registry.policy is box.policy
    assert direct.error is not None and direct.error.code == "permission-denied"
    assert not in_session.ok
    assert "stock_quote" not in offered  # the session follows the reloaded policy too


def test_close_ends_the_spare_sandboxes_the_registry_made_for_directory_tools(tmp_path: Path) -> None:
    require_sandbox()
    user = tmp_path / "user"
    make_tool(user, "echo_text")
    before = set(threading.enumerate())
    with tooldir.open(project=None, user_dirs=[user], state_dir=tmp_path / "state") as toolbox:
        results = [toolbox.call("echo_text", {"text": "hi"}) for _ in range(3)]  # spares from the second run on
        during = {t.name for t in set(threading.enumerate()) - before if t.is_alive()}
    assert [r.content for r in results] == [{"text": "hi"}] * 3
    assert "tooldir-spare-sandbox" in during
    assert [t.name for t in set(threading.enumerate()) - before if t.is_alive()] == []


def test_a_call_after_close_still_runs_and_is_audited(tmp_path: Path) -> None:
    state = tmp_path / "state"
    toolbox = tooldir.open(project=None, state_dir=state, builtins=[QUOTE])
    toolbox.close()
    toolbox.close()  # idempotent
    result = toolbox.call("stock_quote", {"text": "ACME"})
    assert result.ok and result.audit_id is not None
    lines = (state / "audit.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["tool"] == "stock_quote"
