"""A policy file deleted while `watch`/`serve` runs: the defaults apply, as on a cold start (issue 11)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from toolkit import make_tool, project_tools
from watchkit import WAIT_S, config_for, watching

import tooldir.policy as policy_module
from tooldir.model import Status
from tooldir.policy import Policy, load_policy
from tooldir.snapshot.loader import Loader


def test_deleting_the_policy_file_during_a_watch_brings_back_the_strict_defaults(tmp_path: Path) -> None:
    project = tmp_path / "project"
    make_tool(project_tools(project), "loose", risk="write")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text("[sources.project]\nrequire = []\n")  # project tools need no trust
    loose, _ = load_policy(policy_file)
    config = config_for(tmp_path, project=project, policy=loose)
    received: list[Policy] = []
    got = threading.Event()

    def on_policy(p: Policy) -> None:
        received.append(p)
        got.set()

    with watching(config, policy_file=policy_file, on_policy=on_policy) as (watcher, problems):
        assert watcher.store.current.by_name["loose"].status is Status.ACTIVE
        policy_file.unlink()
        snap = watcher.wait_for(lambda s: s.by_name["loose"].status is Status.PENDING, WAIT_S)
        assert got.wait(WAIT_S)
        cold = Loader(config_for(tmp_path, project=project)).load()
        assert snap.id == cold.id  # exactly what a cold start without the file loads
    assert any(d.code == "not-approved" and d.tool == "loose" for d in snap.diagnostics)
    assert not any(d.code == "policy-weakened" for d in snap.diagnostics)
    assert received[-1] == Policy()  # enforcement (Registry.update_policy in serve) follows too
    assert [p.code for p in problems] == ["policy-removed"]


def test_a_policy_file_recreated_after_deletion_applies_again(tmp_path: Path) -> None:
    project = tmp_path / "project"
    make_tool(project_tools(project), "loose", risk="write")
    policy_file = tmp_path / "policy.toml"
    text = "[sources.project]\nrequire = []\n"
    policy_file.write_text(text)
    config = config_for(tmp_path, project=project, policy=load_policy(policy_file)[0])
    with watching(config, policy_file=policy_file) as (watcher, _):
        policy_file.unlink()
        watcher.wait_for(lambda s: s.by_name["loose"].status is Status.PENDING, WAIT_S)
        policy_file.write_text(text)
        snap = watcher.wait_for(lambda s: s.by_name["loose"].status is Status.ACTIVE, WAIT_S)
    weakened = [d for d in snap.diagnostics if d.code == "policy-weakened"]
    assert [(d.pointer, d.path) for d in weakened] == [("/sources/project/require", str(policy_file))]


@pytest.mark.skipif(os.geteuid() != 0, reason="a managed policy is root's file: needs root to plant one")
def test_deleting_the_users_policy_during_a_watch_keeps_the_managed_floor(tmp_path: Path) -> None:
    managed = Path(policy_module.MANAGED_POLICY_PATH)  # the conftest's stand-in for /etc/tooldir/policy.toml
    managed.parent.mkdir(parents=True)
    managed.write_text('[sources.project]\nmax_risk = "read"\n')
    project = tmp_path / "project"
    make_tool(project_tools(project), "loose", risk="write")
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text('[sources.project]\nrequire = []\nmax_risk = "exec"\n')
    loose, _ = load_policy(policy_file)
    assert loose.sources.project.max_risk == "read"  # the managed floor, already at start
    config = config_for(tmp_path, project=project, policy=loose)
    received: list[Policy] = []
    got = threading.Event()

    def on_policy(p: Policy) -> None:
        received.append(p)
        got.set()

    with watching(config, policy_file=policy_file, on_policy=on_policy) as (watcher, problems):
        assert watcher.store.current.records("loose")[0].status is Status.REJECTED  # write is above "read"
        policy_file.unlink()
        assert got.wait(WAIT_S)
    assert received[-1].sources.project.max_risk == "read"  # not the plain defaults' "write"
    assert received[-1].sources.project.require == ("approval", "signature", "pin")
    assert [p.code for p in problems] == ["policy-removed"]
