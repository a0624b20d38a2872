"""A load builds manifest models without pydantic validation (``manifest_from_checked``): the
published schema, generated from the same models, already enforces every one of their constraints.

The proof, per constraint of Manifest, ExecuteSpec, ServerManifest and ServerSpec (found by walking
the models, custom validators included, so a new constraint without a case fails here): a document
violating it is refused by the model AND by the scan path, with the diagnostic code it always had;
and for random documents, whatever the scan path accepts it builds exactly as ``model_validate``
would (values, types, set fields), while whatever the model refuses the scan path refuses too.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, StringConstraints, ValidationError
from toolkit import make_tool, manifest

from tooldir._internal.strictjson import loads
from tooldir.model import (
    ExecuteSpec,
    Manifest,
    PackageFile,
    ServerManifest,
    ServerSpec,
    Source,
    manifest_from_checked,
    server_manifest_from_checked,
)
from tooldir.policy import Policy
from tooldir.read.discover import MANIFEST, SERVER_MANIFEST, PackageScan, package_digest
from tooldir.read.validate import validate_package

NAME = "echo_tool"
_POLICY = Policy()


def server_manifest(name: str = NAME, **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "description": "An MCP server.",
        "risk": "read",
        "keywords": ["mcp"],
        "server": {"command": ["python3", "run.py"], "timeout_s": 10, "network": False, "env": []},
    }
    data.update(overrides)
    return data


def package(raw: bytes, manifest_file: str = MANIFEST) -> PackageScan:
    """An in-memory scan of a package holding ``raw`` as its manifest and a run.py."""
    files = (PackageFile("run.py", "0" * 64, 1, False), PackageFile(manifest_file, "1" * 64, len(raw), False))
    return PackageScan(
        source=Source.USER,
        root="/r",
        name=NAME,
        path=f"/r/{NAME}",
        files=files,
        contents={manifest_file: raw},
        digest=package_digest(files),
        diagnostics=(),
    )


# -- every constraint of the models ------------------------------------------------------------


def _annotation_constraints(path: str, annotation: Any) -> set[str]:
    found: set[str] = set()
    if typing.get_origin(annotation) is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        for item in metadata:
            found |= _metadata_constraints(path, item)
        return found | _annotation_constraints(path, base)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is tuple:  # its items: a type of their own, and its constraints
        return {f"{path}[]:type"} | _annotation_constraints(f"{path}[]", args[0])
    for arg in args:  # X | None
        if arg is not type(None):
            found |= _annotation_constraints(path, arg)
    return found


def _metadata_constraints(path: str, item: Any) -> set[str]:
    if isinstance(item, annotated_types.MinLen):
        return {f"{path}:min_length"}
    if isinstance(item, annotated_types.MaxLen):
        return {f"{path}:max_length"}
    if isinstance(item, annotated_types.Gt):
        return {f"{path}:gt"}
    if isinstance(item, annotated_types.Le):
        return {f"{path}:le"}
    if isinstance(item, StringConstraints):
        return {f"{path}:{key}" for key in ("min_length", "max_length", "pattern") if getattr(item, key) is not None}
    if isinstance(item, AfterValidator):
        return {f"{path}:validator:{item.func.__name__}"}
    return set()  # strictness, JSON Schema overrides: the type cases below cover strictness


def constraints(model: type[BaseModel], prefix: str = "") -> set[str]:
    """``field:constraint`` of every constraint of ``model`` and its nested models."""
    found = {f"{prefix}:extra"}  # extra="forbid"
    for name, info in model.model_fields.items():
        path = f"{prefix}/{name}"
        found.add(f"{path}:type")
        if info.is_required():
            found.add(f"{path}:required")
        for item in info.metadata:
            found |= _metadata_constraints(path, item)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= constraints(annotation, path)
        else:
            found |= _annotation_constraints(path, annotation)
    for decorator in model.__pydantic_decorators__.field_validators.values():
        for field in decorator.info.fields:
            found.add(f"{prefix}/{field}:validator:{decorator.cls_var_name}")
    return found


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = data
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


# (id, the constraint it violates, mutation, the diagnostic code of the scan path). "SPEC" stands
# for execute (schema.json) or server (server.json): the same rules.
_CASES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("extra-key", ":extra", _set("handler", "x"), "schema-invalid"),
    ("name-missing", "/name:required", _drop("name"), "schema-invalid"),
    ("name-number", "/name:type", _set("name", 5), "schema-invalid"),
    ("name-empty", "/name:min_length", _set("name", ""), "invalid-name"),
    ("name-too-long", "/name:max_length", _set("name", "n" * 65), "invalid-name"),
    ("name-dot", "/name:validator:_name_chars_only", _set("name", "a.b"), "invalid-name"),
    ("name-newline", "/name:validator:_name_chars_only", _set("name", "echo_tool\n"), "invalid-name"),
    ("description-missing", "/description:required", _drop("description"), "schema-invalid"),
    ("description-number", "/description:type", _set("description", 7), "schema-invalid"),
    ("description-empty", "/description:min_length", _set("description", ""), "schema-invalid"),
    ("description-too-long", "/description:max_length", _set("description", "d" * 4097), "schema-invalid"),
    ("risk-missing", "/risk:required", _drop("risk"), "schema-invalid"),
    ("risk-number", "/risk:type", _set("risk", 1), "schema-invalid"),
    ("risk-unknown", "/risk:type", _set("risk", "admin"), "schema-invalid"),
    ("keywords-string", "/keywords:type", _set("keywords", "echo"), "schema-invalid"),
    ("keywords-too-many", "/keywords:max_length", _set("keywords", ["k"] * 33), "schema-invalid"),
    ("keyword-number", "/keywords[]:type", _set("keywords", [3]), "schema-invalid"),
    ("keyword-empty", "/keywords[]:min_length", _set("keywords", [""]), "schema-invalid"),
    ("keyword-too-long", "/keywords[]:max_length", _set("keywords", ["k" * 65]), "schema-invalid"),
    ("spec-missing", "/SPEC:required", _drop("SPEC"), "schema-invalid"),
    ("spec-array", "/SPEC:type", _set("SPEC", []), "schema-invalid"),
    ("spec-extra-key", "/SPEC:extra", _set("SPEC/shell", True), "schema-invalid"),
    ("command-missing", "/SPEC/command:required", _drop("SPEC/command"), "schema-invalid"),
    ("command-string", "/SPEC/command:type", _set("SPEC/command", "python3 run.py"), "schema-invalid"),
    ("command-empty", "/SPEC/command:min_length", _set("SPEC/command", []), "schema-invalid"),
    ("command-too-long", "/SPEC/command:max_length", _set("SPEC/command", ["run.py"] * 65), "schema-invalid"),
    ("command-item-number", "/SPEC/command[]:type", _set("SPEC/command", ["python3", 1]), "schema-invalid"),
    ("command-item-empty", "/SPEC/command[]:min_length", _set("SPEC/command", ["python3", ""]), "schema-invalid"),
    (
        "command-item-too-long",
        "/SPEC/command[]:max_length",
        _set("SPEC/command", ["python3", "a" * 1025]),
        "schema-invalid",
    ),
    ("timeout-string", "/SPEC/timeout_s:type", _set("SPEC/timeout_s", "3"), "schema-invalid"),
    ("timeout-bool", "/SPEC/timeout_s:type", _set("SPEC/timeout_s", True), "schema-invalid"),
    ("timeout-null", "/SPEC/timeout_s:validator:_no_null_timeout", _set("SPEC/timeout_s", None), "schema-invalid"),
    ("timeout-zero", "/SPEC/timeout_s:gt", _set("SPEC/timeout_s", 0), "schema-invalid"),
    ("timeout-negative", "/SPEC/timeout_s:gt", _set("SPEC/timeout_s", -1.5), "schema-invalid"),
    ("timeout-too-long", "/SPEC/timeout_s:le", _set("SPEC/timeout_s", 3600.5), "schema-invalid"),
    ("timeout-huge-int", "/SPEC/timeout_s:le", _set("SPEC/timeout_s", 10**30), "schema-invalid"),
    ("network-yes", "/SPEC/network:type", _set("SPEC/network", "yes"), "schema-invalid"),
    ("network-one", "/SPEC/network:type", _set("SPEC/network", 1), "schema-invalid"),
    ("network-null", "/SPEC/network:type", _set("SPEC/network", None), "schema-invalid"),
    ("env-string", "/SPEC/env:type", _set("SPEC/env", "PATH"), "schema-invalid"),
    ("env-too-many", "/SPEC/env:max_length", _set("SPEC/env", [f"V{i}" for i in range(65)]), "schema-invalid"),
    ("env-number", "/SPEC/env[]:type", _set("SPEC/env", [1]), "schema-invalid"),
    ("env-empty", "/SPEC/env[]:min_length", _set("SPEC/env", [""]), "schema-invalid"),
    ("env-too-long", "/SPEC/env[]:max_length", _set("SPEC/env", ["V" * 129]), "schema-invalid"),
    ("env-leading-digit", "/SPEC/env[]:pattern", _set("SPEC/env", ["1PATH"]), "schema-invalid"),
    ("env-dash", "/SPEC/env[]:validator:_env_chars_only", _set("SPEC/env", ["MY-VAR"]), "schema-invalid"),
    ("env-newline", "/SPEC/env[]:validator:_env_chars_only", _set("SPEC/env", ["PATH\n"]), "schema-invalid"),
    ("secrets-string", "/SPEC/secrets:type", _set("SPEC/secrets", "JIRA_TOKEN"), "schema-invalid"),
    (
        "secrets-too-many",
        "/SPEC/secrets:max_length",
        _set("SPEC/secrets", [f"S{i}" for i in range(17)]),
        "schema-invalid",
    ),
    ("secret-number", "/SPEC/secrets[]:type", _set("SPEC/secrets", [1]), "schema-invalid"),
    ("secret-empty", "/SPEC/secrets[]:min_length", _set("SPEC/secrets", [""]), "schema-invalid"),
    ("secret-too-long", "/SPEC/secrets[]:max_length", _set("SPEC/secrets", ["S" * 129]), "schema-invalid"),
    ("secret-lowercase-start", "/SPEC/secrets[]:pattern", _set("SPEC/secrets", ["jira_TOKEN"]), "schema-invalid"),
    ("secret-leading-digit", "/SPEC/secrets[]:pattern", _set("SPEC/secrets", ["1TOKEN"]), "schema-invalid"),
    (
        "secret-lowercase",
        "/SPEC/secrets[]:validator:_secret_chars_only",
        _set("SPEC/secrets", ["JIRA_token"]),
        "schema-invalid",
    ),
    (
        "secret-newline",
        "/SPEC/secrets[]:validator:_secret_chars_only",
        _set("SPEC/secrets", ["JIRA_TOKEN\n"]),
        "schema-invalid",
    ),
]
_TOOL_CASES: list[tuple[str, str, Callable[[dict[str, Any]], None], str]] = [
    ("input-schema-missing", "/input_schema:required", _drop("input_schema"), "schema-invalid"),
    ("input-schema-array", "/input_schema:type", _set("input_schema", []), "invalid-input-schema"),
    ("input-schema-string", "/input_schema:type", _set("input_schema", "object"), "invalid-input-schema"),
    (
        "input-schema-no-type",
        "/input_schema:validator:_object_schema",
        _set("input_schema", {"properties": {}}),
        "invalid-input-schema",
    ),
    (
        "input-schema-type-string",
        "/input_schema:validator:_object_schema",
        _set("input_schema", {"type": "string"}),
        "invalid-input-schema",
    ),
    (
        "input-schema-type-list",
        "/input_schema:validator:_object_schema",
        _set("input_schema", {"type": ["object"]}),
        "invalid-input-schema",
    ),
]


def _mutated(base: dict[str, Any], spec: str, mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """``base`` mutated, with "SPEC" in the mutation's path meaning ``spec``."""
    data = copy.deepcopy(base)
    data["SPEC"] = data.pop(spec)
    mutate(data)
    if "SPEC" in data:
        data[spec] = data.pop("SPEC")
    return {k: data[k] for k in sorted(data, key=lambda k: list(base).index(k) if k in base else 99)}


_KINDS = {
    "tool": (Manifest, "execute", MANIFEST, manifest(NAME), _CASES + _TOOL_CASES),
    "server": (ServerManifest, "server", SERVER_MANIFEST, server_manifest(), _CASES),
}


@pytest.mark.parametrize("kind", list(_KINDS))
def test_every_constraint_of_the_manifest_models_has_a_violation_case(kind: str) -> None:
    model, spec, _, _, cases = _KINDS[kind]
    covered = {constraint.replace("SPEC", spec) for _, constraint, _, _ in cases}
    assert constraints(model) - covered == set()
    assert covered - constraints(model) == set()  # no case names a constraint the model lacks


def test_the_constraint_walk_sees_nested_models_items_and_custom_validators() -> None:
    found = constraints(Manifest)
    assert {"/execute/env[]:validator:_env_chars_only", "/execute/timeout_s:validator:_no_null_timeout"} <= found
    assert {"/input_schema:validator:_object_schema", "/execute/command[]:max_length", "/execute:extra"} <= found
    assert constraints(ServerSpec) == {c.removeprefix("/execute") for c in constraints(ExecuteSpec)}


def _violations() -> list[Any]:
    params = []
    for kind, (*_, cases) in _KINDS.items():
        for case_id, _, mutate, code in cases:
            params.append(pytest.param(kind, mutate, code, id=f"{kind}-{case_id}"))
    return params


@pytest.mark.parametrize(("kind", "mutate", "code"), _violations())
def test_each_violation_is_refused_by_the_model_and_by_the_scan_path_with_its_code(
    kind: str, mutate: Callable[[dict[str, Any]], None], code: str
) -> None:
    model, spec, manifest_file, base, _ = _KINDS[kind]
    data = _mutated(base, spec, mutate)
    raw = json.dumps(data).encode()
    with pytest.raises(ValidationError):
        model.model_validate(loads(raw))
    candidate = validate_package(package(raw, manifest_file), _POLICY)
    assert candidate.declared is None
    assert code in {d.code for d in candidate.diagnostics if d.severity == "error"}


# -- random documents: the scan path agrees with model_validate ---------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5000) | st.floats(-10, 4000, allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
_GOOD_VALUES = {
    "name": st.just(NAME),
    "description": st.text(min_size=1, max_size=20).filter(lambda s: s.isprintable() and s.isascii()),
    "risk": st.sampled_from(["read", "write", "external-read", "external-write", "exec"]),
    "keywords": st.lists(st.text("abcxyz_", min_size=1, max_size=8), max_size=4),
    "timeout_s": st.integers(1, 3600) | st.floats(0.001, 3600, allow_nan=False),
    "network": st.booleans(),
    "env": st.lists(st.sampled_from(["PATH", "_X1", "LANG", "HOME"]), max_size=3),
    "secrets": st.lists(st.sampled_from(["JIRA_TOKEN", "A", "X_1"]), max_size=3),
}


@st.composite
def documents(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    """A valid manifest with random optional keys and values, then maybe one member replaced by
    any JSON value (wrong types, out of range, null, nested junk)."""
    _, spec, _, base, _ = _KINDS[kind]
    data = copy.deepcopy(base)
    for key in ("description", "risk"):
        data[key] = draw(_GOOD_VALUES[key])
    if draw(st.booleans()):
        data["keywords"] = draw(_GOOD_VALUES["keywords"])
    else:
        data.pop("keywords")
    block: dict[str, Any] = {"command": ["python3", "run.py"]}
    for key in ("timeout_s", "network", "env", "secrets"):
        if draw(st.booleans()):
            block[key] = draw(_GOOD_VALUES[key])
    data[spec] = block
    if draw(st.booleans()):
        paths = [*[k for k in data if k != "name"], *[f"{spec}/{k}" for k in ("command", *block)]]
        path = draw(st.sampled_from(paths))
        _set(path, draw(_JSON))(data)
    return data


def _same_model(built: BaseModel, expected: BaseModel) -> None:
    assert built == expected
    assert built.model_fields_set == expected.model_fields_set
    for name in type(expected).model_fields:
        ours, theirs = getattr(built, name), getattr(expected, name)
        assert type(ours) is type(theirs), name
        if isinstance(theirs, BaseModel):
            _same_model(ours, theirs)
        elif isinstance(theirs, tuple):
            assert [type(v) for v in ours] == [type(v) for v in theirs], name


@pytest.mark.parametrize("kind", list(_KINDS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_scan_path_accepts_only_what_the_model_accepts_and_builds_the_same_model(kind: str, data: Any) -> None:
    model, _, manifest_file, _, _ = _KINDS[kind]
    doc = data.draw(documents(kind))
    raw = json.dumps(doc).encode()
    try:
        expected: BaseModel | None = model.model_validate(loads(raw))
    except ValidationError:
        expected = None
    candidate = validate_package(package(raw, manifest_file), _POLICY)
    built = candidate.declared
    if expected is None:
        assert built is None
        assert any(d.severity == "error" for d in candidate.diagnostics)
    elif built is not None:  # the scan path may refuse more (commands, input schemas), never less
        _same_model(built, expected)


@pytest.mark.parametrize("model", [Manifest, ExecuteSpec, ServerManifest, ServerSpec])
def test_the_models_built_directly_have_no_extra_private_or_post_init_state_to_set(model: type[BaseModel]) -> None:
    # what tooldir.model._built relies on to equal model_construct
    assert model.model_config.get("extra") == "forbid"
    assert model.__private_attributes__ == {}
    assert model.__pydantic_post_init__ is None
    assert not model.__pydantic_root_model__


def test_a_directly_built_model_is_what_model_construct_and_model_validate_make() -> None:
    for kind, build in (("tool", manifest_from_checked), ("server", server_manifest_from_checked)):
        model, spec, _, base, _ = _KINDS[kind]
        for data in (base, {k: v for k, v in base.items() if k != "keywords"}, {**base, spec: {"command": ["a"]}}):
            checked = loads(json.dumps(data).encode())
            built = build(checked)
            _same_model(built, model.model_validate(checked))
            assert list(built.__dict__) == list(model.model_fields)
            assert built.__pydantic_extra__ is None and built.__pydantic_private__ is None
            assert built.model_dump() == model.model_validate(checked).model_dump()
            assert repr(built) == repr(model.model_validate(checked))
    one, two = (manifest_from_checked(loads(json.dumps(manifest(NAME)).encode())) for _ in range(2))
    assert one.model_fields_set is two.model_fields_set  # shared: equal given keys, one set
    assert one.execute.model_fields_set is two.execute.model_fields_set


def test_the_input_schema_a_load_keeps_is_the_parsed_frozen_object_itself() -> None:
    raw = json.dumps(manifest(NAME)).encode()
    checked = loads(raw)
    assert manifest_from_checked(checked).input_schema is checked["input_schema"]
    assert manifest_from_checked(checked) == Manifest.model_validate(checked)
    server = loads(json.dumps(server_manifest()).encode())
    assert server_manifest_from_checked(server) == ServerManifest.model_validate(server)


def test_a_load_builds_no_pydantic_validator_of_the_manifest_models(tmp_path: Path, root: Path) -> None:
    make_tool(root, NAME)
    code = (
        "import tooldir; from tooldir.model import Manifest, ExecuteSpec, ServerManifest, ServerSpec;"
        f"snap = tooldir.load(project=None, user_dirs=[{str(root)!r}], state_dir={str(tmp_path / 's')!r});"
        "assert [t.manifest is not None for t in snap.tools] == [True], snap.diagnostics;"
        "print([m.__pydantic_complete__ for m in (Manifest, ExecuteSpec, ServerManifest, ServerSpec)])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.strip() == "[False, False, False, False]", done.stderr
