"""Trust is a type, not a flag: only the trust stage makes a record the registry will run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from regkit import FakeSandbox, MemoryAudit, registry_for
from toolkit import approve, make_tool, project_tools

from tooldir.model import Grant, Source, Status, ToolRecord, Trust, _issue_seal, is_runnable
from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.snapshot.store import SnapshotStore, build_snapshot
from tooldir.trust import assess as trust


def _loaded(tmp_path: Path, name: str = "echo") -> tuple[Registry, ToolRecord, FakeSandbox]:
    user = tmp_path / "user"
    make_tool(user, name)
    box = FakeSandbox()
    setup = registry_for(tmp_path, user_dir=user, sandbox=box, audit=MemoryAudit())
    record = setup.store.current.get(name)
    assert record is not None and record.status is Status.ACTIVE
    return setup.registry, record, box


def _registry_over(tmp_path: Path, *records: ToolRecord, box: FakeSandbox) -> Registry:
    store = SnapshotStore(build_snapshot(records, [], 1))
    return Registry(store, policy=Policy(), state_dir=tmp_path / "s2", sandbox=box, audit=MemoryAudit())


def test_a_record_the_trust_stage_activated_carries_its_grant_and_runs(tmp_path: Path) -> None:
    registry, record, box = _loaded(tmp_path)
    assert isinstance(record.grant, Grant) and is_runnable(record)
    assert (record.grant.name, record.grant.source, record.grant.digest) == ("echo", Source.USER, record.digest)
    assert record.grant.method == record.trust.method == "none-required"
    assert registry.call("echo", {"text": "hi"}).ok and len(box.requests) == 1


def test_making_a_grant_outside_the_trust_stage_raises(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        Grant("echo", Source.USER, "sha256:" + "0" * 64, "approved")
    with pytest.raises(TypeError):
        Grant("echo", Source.USER, "sha256:" + "0" * 64, "approved", seal=object())
    with pytest.raises(RuntimeError):
        _issue_seal()  # the seal was handed to tooldir.trust.assess once, for good
    _, record, _ = _loaded(tmp_path)
    assert record.grant is not None
    with pytest.raises(AttributeError):
        record.grant.digest = "sha256:" + "0" * 64  # type: ignore[misc]


def test_constructing_an_active_record_outside_the_trust_stage_raises(tmp_path: Path) -> None:
    _, record, _ = _loaded(tmp_path)
    with pytest.raises(ValueError, match="Grant"):
        ToolRecord(
            name="echo",
            source=Source.USER,
            path=record.path,
            status=Status.ACTIVE,
            trust=Trust(True, "approved"),
            digest=record.digest,
            risk=record.risk,
            defer_candidate=False,
            manifest=record.manifest,
        )
    # a real grant does not stretch to other content, another name or another source
    for changes in ({"digest": "sha256:" + "0" * 64}, {"name": "echo2"}, {"source": Source.PROJECT}):
        with pytest.raises(ValueError, match="Grant"):
            replace(record, **changes)  # type: ignore[arg-type]
    # a pending or rejected record carries no grant
    with pytest.raises(ValueError, match="Grant"):
        replace(record, status=Status.PENDING)


def test_the_registry_refuses_a_hand_made_active_record_and_runs_nothing(tmp_path: Path) -> None:
    _, record, _ = _loaded(tmp_path)
    pending = replace(record, status=Status.PENDING, grant=None, trust=Trust(False, "unverified"))
    forged = replace(pending)
    object.__setattr__(forged, "status", Status.ACTIVE)  # bypasses the constructor's check
    box = FakeSandbox()
    registry = _registry_over(tmp_path, forged, box=box)
    result = registry.call("echo", {"text": "hi"})
    assert result.error is not None and result.error.code == "not-active"
    assert box.requests == []


def test_the_registry_refuses_a_grant_moved_onto_another_tool(tmp_path: Path) -> None:
    _, good, _ = _loaded(tmp_path / "a", "echo")
    _, other, _ = _loaded(tmp_path / "b", "other")
    stolen = replace(other, status=Status.PENDING, grant=None)
    object.__setattr__(stolen, "status", Status.ACTIVE)
    object.__setattr__(stolen, "grant", good.grant)
    half_made = tuple.__new__(Grant, ("echo3", Source.USER, good.digest, "approved", object()))  # no seal
    blank = replace(good, name="echo3", status=Status.PENDING, grant=None)
    object.__setattr__(blank, "status", Status.ACTIVE)
    object.__setattr__(blank, "grant", half_made)
    box = FakeSandbox()
    registry = _registry_over(tmp_path, stolen, blank, box=box)
    for name in ("other", "echo3"):
        result = registry.call(name, {"text": "hi"})
        assert result.error is not None and result.error.code == "not-active"
    assert box.requests == []


def test_an_assessment_made_outside_the_trust_stage_cannot_make_an_active_record(tmp_path: Path) -> None:
    from tooldir.read.discover import RootSpec, open_root, scan_package
    from tooldir.read.validate import validate_package
    from tooldir.snapshot.resolve import Assessed, resolve

    user = tmp_path / "user"
    make_tool(user, "echo")
    root = RootSpec(Source.USER, str(user))
    fd, _ = open_root(root)
    assert fd is not None
    candidate = validate_package(scan_package(fd, root, "echo", Policy().limits), Policy())
    fake = trust.Assessment(Status.ACTIVE, Trust(True, "approved"), ())
    with pytest.raises(ValueError, match="Grant"):
        resolve([Assessed(candidate, fake)], (), Policy())


def test_a_project_tool_gets_its_grant_only_once_approved_and_it_names_that_method(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    folder = make_tool(project_tools(project), "approved_tool")
    setup = registry_for(tmp_path / "before", project=project, audit=MemoryAudit())
    pending = setup.store.current.get("approved_tool")
    assert pending is not None and pending.status is Status.PENDING and pending.grant is None
    approve(tmp_path / "after" / "state", folder)
    setup = registry_for(tmp_path / "after", project=project, audit=MemoryAudit())
    record = setup.store.current.get("approved_tool")
    assert record is not None and record.status is Status.ACTIVE
    assert record.grant is not None and record.grant.method == "approved" and record.grant.source is Source.PROJECT


def test_every_builtin_record_comes_from_the_one_builtin_factory(tmp_path: Path) -> None:
    registry, _, _ = _loaded(tmp_path)
    spec = registry.register("b_tool", {"type": "object"}, lambda *, input, context: 1, description="b")
    record = trust.builtin_record(spec, defer_candidate=False)
    assert record.grant is not None and record.grant.method == "builtin" and is_runnable(record)
    assert registry.call("b_tool", {}).ok
