"""Resolution (threats name:*): precedence, collisions, shadowing, reserved and confusable names;
and the snapshot it produces is immutable with a content-derived id."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError
from toolkit import make_tool, manifest, project_tools

import tooldir
from tooldir import Policy, Snapshot, Source, Status
from tooldir.model import BuiltinSpec
from tooldir.policy import ProjectSourcePolicy, SourcesPolicy

READ_FILE = BuiltinSpec("read_file", "Read a file.", {"type": "object"})


def load(
    tmp_path: Path,
    *,
    user: list[Path] | None = None,
    project: Path | None = None,
    policy: Policy | None = None,
    builtins: tuple[BuiltinSpec, ...] = (),
) -> Snapshot:
    return tooldir.load(
        project=project, user_dirs=user or [], policy=policy, state_dir=tmp_path / "state", builtins=builtins
    )


def statuses(snap: Snapshot, name: str) -> list[tuple[Source, Status]]:
    return [(t.source, t.status) for t in snap.records(name)]


def codes(snap: Snapshot, name: str) -> set[str]:
    return {d.code for d in snap.diagnostics if d.tool == name}


@pytest.fixture
def user(tmp_path: Path) -> Path:
    path = tmp_path / "user_tools"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    project_tools(path)
    return path


def approve_all(tmp_path: Path, project: Path) -> Policy:
    """A policy under which project tools need no trust, so status reflects resolution alone."""
    return Policy(sources=SourcesPolicy(project=ProjectSourcePolicy(require=())))


# -- name:reserved --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["read_file", "tool_search", "defer_execute_tool", "shell"])
def test_a_directory_tool_cannot_take_a_builtin_guard_or_reserved_name(tmp_path: Path, user: Path, name: str) -> None:
    make_tool(user, name)
    snap = load(tmp_path, user=[user], builtins=(READ_FILE,))
    assert (Source.USER, Status.REJECTED) in statuses(snap, name)
    assert codes(snap, name) == {"reserved-name"}
    if name == "read_file":
        assert snap.get("read_file") is not None and snap.get("read_file").source is Source.BUILTIN  # type: ignore[union-attr]


def test_a_registered_builtin_name_is_reserved_even_if_the_policy_does_not_list_it(tmp_path: Path, user: Path) -> None:
    make_tool(user, "send_mail")
    builtin = BuiltinSpec("send_mail", "Send mail.", {"type": "object"})
    snap = load(tmp_path, user=[user], builtins=(builtin,))
    assert statuses(snap, "send_mail") == [(Source.BUILTIN, Status.ACTIVE), (Source.USER, Status.REJECTED)]
    assert codes(snap, "send_mail") == {"reserved-name"}


@pytest.mark.parametrize("name", ["read_fiIe", "Read_File", "read-file", "reaD_fi1e", "tool_5earch"])
def test_a_name_that_looks_like_a_reserved_one_is_confusable(tmp_path: Path, user: Path, name: str) -> None:
    make_tool(user, name)
    snap = load(tmp_path, user=[user], builtins=(READ_FILE,))
    assert statuses(snap, name) == [(Source.USER, Status.REJECTED)]
    assert codes(snap, name) == {"confusable-name"}


@pytest.mark.parametrize(
    "name", ["rеad_file", "ｒｅａｄ_file", "read_ﬁle"], ids=["cyrillic-e", "full-width", "fi-ligature"]
)
def test_unicode_look_alikes_of_a_builtin_are_refused(tmp_path: Path, user: Path, name: str) -> None:
    make_tool(user, name)
    snap = load(tmp_path, user=[user], builtins=(READ_FILE,))
    assert [t.status for t in snap.tools if t.source is Source.USER] == [Status.REJECTED]
    assert {d.code for d in snap.diagnostics} & {"invalid-name", "confusable-name"}
    assert snap.get("read_file").source is Source.BUILTIN  # type: ignore[union-attr]


# -- name:collision -------------------------------------------------------------------------------


def test_the_same_name_twice_in_one_source_rejects_both(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_tool(first, "dup_tool")
    make_tool(second, "dup_tool")
    make_tool(second, "bystander")
    snap = load(tmp_path, user=[first, second])
    assert statuses(snap, "dup_tool") == [(Source.USER, Status.REJECTED), (Source.USER, Status.REJECTED)]
    diags = [d for d in snap.diagnostics if d.tool == "dup_tool"]
    assert {d.code for d in diags} == {"collision"}
    assert {d.path for d in diags} == {str(first / "dup_tool"), str(second / "dup_tool")}
    assert snap.get("dup_tool") is None
    assert snap.get("bystander") is not None


@pytest.mark.parametrize(
    ("names", "code"),
    [(("Fetch_Page", "fetch_page"), "collision"), (("get_log", "get_l0g"), "confusable-name")],
    ids=["equal-ignoring-case", "look-alike"],
)
def test_two_names_one_source_cannot_tell_apart_are_both_rejected(
    tmp_path: Path, user: Path, names: tuple[str, str], code: str
) -> None:
    for name in names:
        make_tool(user, name)
    snap = load(tmp_path, user=[user])
    assert {t.name: t.status for t in snap.tools} == dict.fromkeys(names, Status.REJECTED)
    assert {d.code for d in snap.diagnostics} == {code}


def test_distinct_names_do_not_interfere(tmp_path: Path, user: Path) -> None:
    names = ["get_log", "get_logs", "list_files", "list_file"]
    for name in names:
        make_tool(user, name)
    snap = load(tmp_path, user=[user])
    assert {t.name: t.status for t in snap.tools} == dict.fromkeys(names, Status.ACTIVE)
    assert snap.diagnostics == ()


# -- name:shadow ----------------------------------------------------------------------------------


def test_a_project_tool_shadows_a_user_tool_and_both_paths_are_reported(
    tmp_path: Path, user: Path, project: Path
) -> None:
    make_tool(user, "word_count")
    make_tool(project_tools(project), "word_count")
    snap = load(tmp_path, user=[user], project=project, policy=approve_all(tmp_path, project))
    assert statuses(snap, "word_count") == [(Source.USER, Status.SHADOWED), (Source.PROJECT, Status.ACTIVE)]
    user_path, project_path = str(user / "word_count"), str(project / ".tooldir" / "tools" / "word_count")
    shadowed = [d for d in snap.diagnostics if d.code == "shadowed"]
    assert len(shadowed) == 2
    assert all(user_path in d.message and project_path in d.message for d in shadowed)
    (loser,) = [t for t in snap.records("word_count") if t.status is Status.SHADOWED]
    assert loser.shadowed_by == project_path
    assert snap.get("word_count").source is Source.PROJECT  # type: ignore[union-attr]


def test_a_policy_that_forbids_project_shadowing_keeps_the_user_tool(tmp_path: Path, user: Path, project: Path) -> None:
    make_tool(user, "word_count")
    make_tool(project_tools(project), "word_count")
    policy = Policy(sources=SourcesPolicy(project=ProjectSourcePolicy(require=(), may_shadow=False)))
    snap = load(tmp_path, user=[user], project=project, policy=policy)
    assert statuses(snap, "word_count") == [(Source.USER, Status.ACTIVE), (Source.PROJECT, Status.SHADOWED)]
    assert snap.get("word_count").source is Source.USER  # type: ignore[union-attr]


def test_a_project_tool_looking_like_a_user_tool_is_rejected_as_confusable(
    tmp_path: Path, user: Path, project: Path
) -> None:
    make_tool(user, "get_log")
    make_tool(project_tools(project), "get_l0g")
    snap = load(tmp_path, user=[user], project=project, policy=approve_all(tmp_path, project))
    assert statuses(snap, "get_log") == [(Source.USER, Status.ACTIVE)]
    assert statuses(snap, "get_l0g") == [(Source.PROJECT, Status.REJECTED)]
    assert codes(snap, "get_l0g") == {"confusable-name"}


def test_a_rejected_project_tool_never_shadows_a_user_tool(tmp_path: Path, user: Path, project: Path) -> None:
    make_tool(user, "fmt_json")
    make_tool(project_tools(project), "fmt_json", raw_manifest=b"{broken")
    snap = load(tmp_path, user=[user], project=project, policy=approve_all(tmp_path, project))
    assert statuses(snap, "fmt_json") == [(Source.USER, Status.ACTIVE), (Source.PROJECT, Status.REJECTED)]


def test_removing_the_project_tool_brings_the_user_tool_back(tmp_path: Path, user: Path, project: Path) -> None:
    make_tool(user, "word_count")
    folder = make_tool(project_tools(project), "word_count")
    policy = approve_all(tmp_path, project)
    assert load(tmp_path, user=[user], project=project, policy=policy).get("word_count").source is Source.PROJECT  # type: ignore[union-attr]
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    snap = load(tmp_path, user=[user], project=project, policy=policy)
    assert statuses(snap, "word_count") == [(Source.USER, Status.ACTIVE)]


# -- snapshot immutability and identity -----------------------------------------------------------


def test_snapshot_records_and_manifests_cannot_be_mutated(tmp_path: Path, user: Path) -> None:
    make_tool(user, "frozen_tool")
    snap = load(tmp_path, user=[user])
    record = snap.get("frozen_tool")
    assert record is not None and record.manifest is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.status = Status.REJECTED  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.generation = 7  # type: ignore[misc]
    with pytest.raises(ValidationError):
        record.manifest.risk = "exec"  # type: ignore[assignment]
    with pytest.raises(TypeError):
        record.manifest.input_schema["properties"] = {}
    with pytest.raises(TypeError):
        record.manifest.input_schema["required"].append("x")
    with pytest.raises(TypeError):
        record.manifest.input_schema["properties"]["text"]["type"] = "number"
    with pytest.raises(TypeError):
        snap.by_name["other"] = record  # type: ignore[index]
    assert isinstance(snap.tools, tuple) and isinstance(snap.diagnostics, tuple)
    assert isinstance(record.files, tuple) and isinstance(record.manifest.keywords, tuple)
    assert record.manifest.input_schema["properties"]["text"]["type"] == "string"


def test_the_snapshot_id_is_stable_across_loads_and_changes_with_content(tmp_path: Path, user: Path) -> None:
    make_tool(user, "alpha")
    folder = make_tool(user, "beta")
    first, second = load(tmp_path, user=[user]), load(tmp_path, user=[user])
    assert first.id == second.id
    assert first.to_json() == second.to_json()
    (folder / "run.py").write_text("print('changed')\n")
    third = load(tmp_path, user=[user])
    assert third.id != first.id
    assert third.records("alpha")[0].digest == first.records("alpha")[0].digest


def test_the_snapshot_id_does_not_depend_on_creation_order(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    ids = []
    for order in (["a_tool", "b_tool", "c_tool"], ["c_tool", "a_tool", "b_tool"]):
        if root.exists():
            shutil.rmtree(root)
        for name in order:
            make_tool(root, name)
        ids.append(load(tmp_path, user=[root]).id)
    assert ids[0] == ids[1]


def test_every_tool_found_ends_in_exactly_one_status(tmp_path: Path, user: Path, project: Path) -> None:
    make_tool(user, "shared")
    make_tool(user, "plain")
    make_tool(project_tools(project), "shared")
    make_tool(project_tools(project), "pending_one")
    make_tool(project_tools(project), "broken", raw_manifest=b"[]")
    snap = load(tmp_path, user=[user], project=project)
    by_key = {(t.name, t.source): t.status for t in snap.tools}
    assert by_key == {
        ("broken", Source.PROJECT): Status.REJECTED,
        ("pending_one", Source.PROJECT): Status.PENDING,
        ("plain", Source.USER): Status.ACTIVE,
        ("shared", Source.USER): Status.SHADOWED,
        ("shared", Source.PROJECT): Status.PENDING,
    }
    assert {d.code for d in snap.diagnostics if d.tool == "pending_one"} == {"not-approved"}


def test_manifest_overrides_from_toolkit_round_trip(tmp_path: Path, user: Path) -> None:
    make_tool(user, "risky", risk="external-write", keywords=["net"])
    record = load(tmp_path, user=[user]).get("risky")
    assert record is not None and record.manifest is not None
    assert record.manifest.model_dump(mode="json")["input_schema"] == manifest("risky")["input_schema"]
    assert str(record.risk) == "external-write"
