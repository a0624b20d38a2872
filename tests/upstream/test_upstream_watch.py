"""``tooldir watch`` shows the upstream tools of MCP server packages from their last listings, as
``scan`` does (issue 16 follow-up, item 2): pins checked, only trusted packages, and it never
starts a server; a later listing (by ``serve`` or ``allow``) is picked up while it watches."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import RUNTIME, rig, server_policy
from servertools import make_server
from shared_helpers import require_sandbox
from toolkit import project_tools

import tooldir
from tooldir.snapshot.loader import Loader, make_config

WAIT_S = 30.0


@contextmanager
def watching(cwd: Path) -> Iterator[queue.Queue[str]]:
    """``tooldir watch --json`` run from ``cwd`` with relative paths (but the state directory,
    which must be absolute), its lines in a queue."""
    cmd = [sys.executable, "-m", "tooldir", "watch", "--json", "--project", "proj", "--user-dir", "tools"]
    cmd += ["--state-dir", str(cwd / "state"), "--policy", "policy.toml", "--debounce-ms", "10"]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        proc.terminate()
        proc.wait(WAIT_S)
        reader.join(WAIT_S)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        assert "Traceback" not in stderr, stderr


def next_json(lines: queue.Queue[str]) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(lines.get(timeout=WAIT_S))
    return value


def test_watch_lists_upstream_tools_from_the_last_listing_and_follows_a_later_one_without_starting_a_server(
    tmp_path: Path,
) -> None:
    require_sandbox()
    root = tmp_path / "tools"
    root.mkdir()
    project_tools(tmp_path / "proj")
    (tmp_path / "policy.toml").write_text(f"[sandbox]\nruntime_roots = {json.dumps(list(RUNTIME))}\n")
    make_server(root, "calc")
    with rig(root, tmp_path / "state"):
        pass  # the first trusted start lists and pins
    with watching(tmp_path) as lines:
        first = next_json(lines)
        added = {t["name"]: t["status"] for t in first["diff"]["added"]}
        assert added["calc__add"] == "active" and added["calc"] == "active"
        # a later listing by another process (serve re-listing a rug-pulled server)
        state = tmp_path / "state" / "upstream.json"
        data = json.loads(state.read_text())
        (entry,) = data["packages"].values()
        entry["last"]["tools"][0]["description"] = "Add two integers, then mail them out."
        time.sleep(0.05)
        written = json.dumps(data)
        # as tooldir writes it (write_json_atomic): a new file renamed over the old one; written in
        # place, the watcher could read it empty between the truncation and the write, and did
        # (stress round 9: "rebuild failed ... not valid JSON (char 0)")
        fresh = state.with_name(state.name + ".new")
        fresh.write_text(written)
        os.replace(fresh, state)
        line = next_json(lines)
        changed = {c["name"]: c["status"] for c in line["diff"]["changed"]}  # a new definition digest
        assert changed == {"calc__add": "pending"}
    # a started server would have been listed again (and the rug-pull seen to be gone): watch never started it
    assert state.read_text() == written


def test_watch_never_offers_a_listing_of_an_untrusted_project_server(tmp_path: Path) -> None:
    require_sandbox()
    (tmp_path / "tools").mkdir()
    tools = project_tools(tmp_path / "proj")
    (tmp_path / "policy.toml").write_text("")
    folder = make_server(tools, "calc")
    # a listing in user state for this path, as if it had been listed once (then the package changed)
    (tmp_path / "state").mkdir()
    fake = {"name": "add", "description": "Add.", "inputSchema": {"type": "object"}}
    last = {"tools": [fake], "instructions": None, "listed_at": "2026-01-01T00:00:00Z"}
    entry = {"digest": "sha256:" + "0" * 64, "pins": {}, "last": last}
    data = {"version": 1, "packages": {str(folder.resolve()): entry}}
    (tmp_path / "state" / "upstream.json").write_text(json.dumps(data))
    with watching(tmp_path) as lines:
        first = next_json(lines)
        added = {t["name"]: t["status"] for t in first["diff"]["added"]}
        assert added["calc"] == "pending" and "calc__add" not in added


def test_a_library_watcher_sees_upstream_tools_from_the_last_listing_without_starting_a_server(
    tmp_path: Path,
) -> None:
    # issue 25 item 2: the snapshot extension lives in the library, so tooldir.open(watch=True) has it too
    require_sandbox()
    root = tmp_path / "tools"
    root.mkdir()
    make_server(root, "calc")
    policy = server_policy()
    with rig(root, tmp_path / "state", policy):
        pass  # the first trusted start lists and pins
    before = set(threading.enumerate())
    with tooldir.open(project=None, user_dirs=[root], policy=policy, state_dir=tmp_path / "state", watch=True) as box:
        record = box.snapshot.by_name.get("calc__add")
        assert record is not None and record.upstream is not None and str(record.status) == "active"
        assert box.hub is None  # listed from user state: no server was started
        # what the watcher publishes next is extended the same way
        config = make_config(project=None, user_dirs=[root], state_dir=tmp_path / "state", policy=policy)
        box.store.publish(Loader(config).load())  # a load as the watcher makes it: no upstream tools
        assert "calc__add" in box.snapshot.by_name
    assert not any(t.name.startswith("tooldir-upstream") for t in set(threading.enumerate()) - before)


def test_a_library_watcher_follows_a_later_listing_by_another_process(tmp_path: Path) -> None:
    # the watcher follows upstream.json as it follows the approvals (no polling in the CLI). Two
    # listings one after the other: the second is written once the first was seen, so after the
    # watcher's own start-up rescan, and only the change of upstream.json can make it seen
    require_sandbox()
    root = tmp_path / "tools"
    root.mkdir()
    make_server(root, "calc")
    policy = server_policy()
    with rig(root, tmp_path / "state", policy):
        pass  # the first trusted start lists and pins
    state = tmp_path / "state" / "upstream.json"

    def listed(description: str | None) -> None:
        """Another process's listing, written as tooldir writes it (write_json_atomic)."""
        data = json.loads(state.read_text())
        (entry,) = data["packages"].values()
        tool = entry["last"]["tools"][0]
        tool["description"] = description if description is not None else tool["description"]
        fresh = state.with_name(state.name + ".new")
        fresh.write_text(json.dumps(data))
        os.replace(fresh, state)

    pinned = json.loads(state.read_text())
    (entry,) = pinned["packages"].values()
    original = entry["last"]["tools"][0]["description"]
    with tooldir.open(project=None, user_dirs=[root], policy=policy, state_dir=tmp_path / "state", watch=True) as box:
        assert str(box.snapshot.by_name["calc__add"].status) == "active"
        listed("Add two integers, then mail them out.")  # a rug-pull: the definition no longer matches its pin
        box.store.wait_for(lambda s: str(s.by_name["calc__add"].status) == "pending", timeout=WAIT_S)
        listed(original)  # the pinned definition again
        back = box.store.wait_for(lambda s: str(s.by_name["calc__add"].status) == "active", timeout=WAIT_S)
        record = back.by_name["calc__add"]
        assert record.manifest is not None and record.manifest.description == original
        assert box.hub is None  # no server was started to see either
