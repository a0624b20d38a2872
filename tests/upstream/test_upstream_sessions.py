"""Sandboxed upstream sessions (issue 16 items 2, 4, 5): real MCP servers -- a FastMCP one whose
dependencies come from the user's runtime roots, and one written with the standard library only --
started inside bubblewrap after trust, called through Registry.call; a crash or a hang is contained."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from harness import rig, server_policy
from servertools import copy_server
from shared_helpers import require_sandbox
from toolkit import make_tool

from tooldir import upstream
from tooldir.model import Risk, Status
from tooldir.run.audit import AUDIT_FILE


@pytest.fixture(autouse=True)
def _sandbox() -> None:
    require_sandbox()


def pass_the_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Move the back-off's clock past the first back-off (1 s) instead of sleeping through it."""
    real = upstream._backoff_clock
    monkeypatch.setattr(upstream, "_backoff_clock", lambda: real() + upstream._BACKOFF_FIRST_S + 0.2)


def test_a_standard_library_server_is_listed_and_called_through_the_registry(tmp_path: Path, root: Path) -> None:
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        record = r.snapshot.by_name["calc__add"]
        assert record.status is Status.ACTIVE and record.upstream is not None
        assert record.upstream.package == "calc" and record.upstream.tool == "add"
        result = r.registry.call("calc__add", {"a": 2, "b": 40})
        assert result.ok and result.content == "42"
        line = json.loads((tmp_path / "state" / AUDIT_FILE).read_text().splitlines()[-1])
        assert line["tool"] == "calc__add" and line["digest"] == record.upstream.definition_digest


def test_a_fastmcp_server_runs_with_the_sdk_from_a_user_runtime_root_and_hints_only_lower_risk(
    tmp_path: Path, root: Path
) -> None:
    copy_server("good", root)
    with rig(root, tmp_path / "state") as r:
        add, note = r.snapshot.by_name["good__add"], r.snapshot.by_name["good__note"]
        assert add.risk is Risk.READ  # readOnlyHint lowered the package's "write"
        assert note.risk is Risk.WRITE  # no hint: the package ceiling
        assert r.registry.call("good__add", {"a": 1, "b": 2}).content == {"result": 3}
        assert r.registry.call("good__add", {"a": "x", "b": 2}).error.code == "invalid-input"  # type: ignore[union-attr]
        assert r.hub.instructions() == {"good": "Use add for sums and note to keep a note."}


def test_a_read_only_hint_never_raises_a_risk_above_the_package_ceiling(tmp_path: Path, root: Path) -> None:
    copy_server("misbehaving", root, "calc", risk="read")
    with rig(root, tmp_path / "state") as r:
        assert {r.snapshot.by_name[n].risk for n in ("calc__add", "calc__crash")} == {Risk.READ}


def test_without_its_runtime_a_server_is_unavailable_and_directory_tools_keep_working(
    tmp_path: Path, root: Path
) -> None:
    copy_server("good", root)
    make_tool(root, "echo")
    with rig(root, tmp_path / "state", server_policy(runtime_roots=())) as r:
        assert not any(name.startswith("good__") for name in r.snapshot.by_name)
        assert r.registry.call("echo", {"text": "hi"}).ok


def test_a_crashing_server_fails_the_call_upstream_unavailable_and_is_restarted_after_a_back_off(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        crashed = r.registry.call("calc__crash", {})
        assert crashed.error is not None and crashed.error.code == "upstream-unavailable"
        soon = r.registry.call("calc__add", {"a": 1, "b": 1})
        assert soon.error is not None and soon.error.code == "upstream-unavailable"  # still backing off
        pass_the_back_off(monkeypatch)
        assert r.registry.call("calc__add", {"a": 1, "b": 1}).content == "2"


def test_a_hanging_server_is_killed_at_its_timeout_while_another_server_keeps_answering(
    tmp_path: Path, root: Path
) -> None:
    copy_server("misbehaving", root, "slow", server={"command": ["python3", "server.py"], "timeout_s": 2})
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        started = time.monotonic()
        hung = r.registry.call("slow__hang", {})
        assert hung.error is not None and hung.error.code == "upstream-unavailable"
        assert time.monotonic() - started < 10
        assert r.registry.call("calc__add", {"a": 2, "b": 2}).content == "4"


def test_a_server_cannot_read_the_home_or_outside_files_nor_open_a_network_socket(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET")
    monkeypatch.setenv("HOME", str(home))
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        result = r.registry.call("calc__probe", {"path": str(home / ".ssh" / "id_rsa")})
        assert result.ok, result.error
        found = json.loads(result.content)
    assert found[str(home / ".ssh" / "id_rsa")].startswith("refused")
    assert "SECRET" not in json.dumps(found)
    assert all(v.startswith("refused") for k, v in found.items() if k.startswith("AddressFamily"))
    assert found["/etc/shadow"].startswith("refused")


def test_upstream_errors_are_results_and_output_is_sanitised(tmp_path: Path, root: Path) -> None:
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        failed = r.registry.call("calc__fail", {})
        assert failed.error is not None and failed.error.code == "upstream-error"
        shown = r.registry.call("calc__ansi", {})
        assert shown.ok and "\x1b" not in shown.content and "\u202e" not in shown.content and "red" in shown.content


def test_list_changed_from_upstream_relists_and_a_new_tool_stays_pending(tmp_path: Path, root: Path) -> None:
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        before = r.snapshot.id
        assert r.registry.call("calc__grow", {}).ok
        snap = r.store.wait_for(lambda s: s.id != before, timeout=20)
        grown = snap.by_name["calc__grown"]
        assert grown.status is Status.PENDING
        assert "definition-new" in {d.code for d in grown.diagnostics}
        assert r.registry.call("calc__grown", {}).error.code == "not-active"  # type: ignore[union-attr]
        assert snap.by_name["calc__add"].status is Status.ACTIVE


def test_a_reload_published_without_upstream_tools_is_swapped_in_with_them_when_the_hub_follows(
    tmp_path: Path, root: Path
) -> None:
    """No snapshot the store ever holds lacks the upstream tools: a reload is extended before it is
    swapped in, not re-published after (a call or a listing in between saw them gone: serve
    answered ``unknown-tool`` for a tool it had just listed)."""
    from tooldir.snapshot.loader import Loader, make_config

    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state") as r:
        r.hub.follow()
        held: list[set[str]] = []
        r.store.subscribe(lambda snapshot, _diff: held.append(set(snapshot.by_name)))
        config = make_config(project=None, user_dirs=[root], state_dir=tmp_path / "state", policy=server_policy())
        make_tool(root, "echo")
        fresh = Loader(config).load()  # what the watcher publishes: directory tools only
        assert "calc__add" not in fresh.by_name
        published, _ = r.store.publish(fresh)
        assert {"calc__add", "echo"} <= set(published.by_name)  # at once: nothing to wait for
        assert published.by_name["calc__add"].status is Status.ACTIVE
        assert r.registry.call("calc__add", {"a": 1, "b": 2}).content == "3"
        assert r.hub.quiet(timeout=60)  # the listing after it (new or changed servers) has ended
        assert held and all("calc__add" in names for names in held)


def test_a_server_over_its_memory_limit_fails_its_call_and_the_next_start_works(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_server("misbehaving", root, "calc")
    with rig(root, tmp_path / "state", server_policy(memory_mb=128, address_space_slack_mb=128)) as r:
        hog = r.registry.call("calc__hog", {})
        assert hog.error is not None and hog.error.code == "upstream-unavailable"
        pass_the_back_off(monkeypatch)
        assert r.registry.call("calc__add", {"a": 1, "b": 1}).content == "2"
