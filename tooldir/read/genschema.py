"""Write the published manifest schema from the pydantic model (its one source of truth).

``python -m tooldir.read.genschema`` rewrites ``tooldir/manifest.schema.json``;
``--check`` exits 1 when the committed file differs from what the model generates (a test runs
the same comparison). The schema is the model's ``model_json_schema()`` made self-contained and
plain: references inlined, generated titles dropped, an optional field is "may be left out"
(never JSON ``null``), an enum lists its values only, keys in a fixed order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .._internal.inputschema import DRAFT_2020_12

SCHEMA_ID = "https://tooldir.invalid/schema/manifest-v1.json"
SCHEMA_FILE = Path(__file__).resolve().parent.parent / "manifest.schema.json"
SERVER_SCHEMA_ID = "https://tooldir.invalid/schema/server-v1.json"
#: The published schema of server.json (MCP server packages, DESIGN §10), from ``ServerManifest``.
SERVER_SCHEMA_FILE = Path(__file__).resolve().parent.parent / "server.schema.json"

_KEY_ORDER = (
    "$schema",
    "$id",
    "title",
    "description",
    "$comment",
    "type",
    "additionalProperties",
    "required",
    "minLength",
    "maxLength",
    "pattern",
    "not",
    "minItems",
    "maxItems",
    "items",
    "exclusiveMinimum",
    "maximum",
    "enum",
    "const",
    "properties",
    "default",
)


def generate() -> dict[str, Any]:
    """The published manifest schema, from :class:`tooldir.model.Manifest`."""
    from ..model import Manifest

    raw = Manifest.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    body = _plain(raw, defs, top=True)
    return _ordered({"$schema": DRAFT_2020_12, "$id": SCHEMA_ID, **body})


def generate_server() -> dict[str, Any]:
    """The published server.json schema, from :class:`tooldir.model.ServerManifest`."""
    from ..model import ServerManifest

    raw = ServerManifest.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    body = _plain(raw, defs, top=True)
    return _ordered({"$schema": DRAFT_2020_12, "$id": SERVER_SCHEMA_ID, **body})


def render() -> str:
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def render_server() -> str:
    return json.dumps(generate_server(), indent=2, ensure_ascii=False) + "\n"


def _plain(node: Any, defs: dict[str, Any], *, top: bool = False) -> Any:
    if isinstance(node, list):
        return [_plain(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:  # inline "#/$defs/X"; the field's own keywords (its description) win
        node = {**defs[ref.rsplit("/", 1)[-1]], **node}
    branches = node.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        # an optional field: leaving it out is how a manifest says "none"; null is not accepted
        rest = [b for b in branches if b != {"type": "null"}]
        if len(rest) == 1:
            del node["anyOf"]
            node = {**rest[0], **node}
            if node.get("default", 0) is None:
                del node["default"]
    branches = node.get("anyOf")
    if isinstance(branches, list):
        branches = [_inlined(b, defs) for b in branches]
    if isinstance(branches, list) and _mergeable(branches):
        # one value of several JSON types (network: false | {"allow": [...]}): each type's keywords
        # apply to that type alone, so one schema with a list of types says the same, plainly
        del node["anyOf"]
        merged: dict[str, Any] = {"type": [b["type"] for b in branches]}
        for branch in branches:
            merged.update({k: v for k, v in _plain(branch, defs).items() if k not in ("type", "title", "description")})
        node = {**merged, **node}
    if not top:
        node.pop("title", None)
    if "enum" in node:
        node.pop("type", None)  # the values say it; a second keyword would double every report
    out = {key: _plain(value, defs) if key != "properties" else _properties(value, defs) for key, value in node.items()}
    return _ordered(out)


def _inlined(branch: Any, defs: dict[str, Any]) -> Any:
    if isinstance(branch, dict) and "$ref" in branch:
        return {**defs[branch["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in branch.items() if k != "$ref"}}
    return branch


def _mergeable(branches: list[Any]) -> bool:
    """Branches of distinct JSON types whose keywords (beyond ``type``) apply to one type each."""
    inlined = [b for b in branches if isinstance(b, dict) and isinstance(b.get("type"), str)]
    if len(inlined) != len(branches) or len({b["type"] for b in inlined}) != len(inlined):
        return False
    object_only = {"additionalProperties", "required", "properties", "type", "title", "description"}
    return all(b["type"] != "object" or set(b) <= object_only for b in inlined) and all(
        set(b) <= {"type", "title", "description"} for b in inlined if b["type"] != "object"
    )


def _properties(props: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    return {name: _plain(schema, defs) for name, schema in props.items()}


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {key: i for i, key in enumerate(_KEY_ORDER)}
    return dict(sorted(node.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    outputs = ((SCHEMA_FILE, render()), (SERVER_SCHEMA_FILE, render_server()))
    if args == ["--check"]:
        stale = 0
        for file, text in outputs:
            current = file.read_text("utf-8") if file.exists() else ""
            if current != text:
                print(f"{file} differs from the model; run python -m tooldir.read.genschema", file=sys.stderr)
                stale = 1
        return stale
    if args:
        print("usage: python -m tooldir.read.genschema [--check]", file=sys.stderr)
        return 2
    for file, text in outputs:
        file.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
