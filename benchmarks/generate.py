"""Generate N realistic tool packages for benchmarks (deterministic for a given seed).

Each package is ``<root>/<name>/schema.json`` (a valid 1-4 KB manifest with a varied description,
keywords and 1-8 parameters of assorted types) plus a small working ``run.py``. Names are unique,
valid and never confusable with each other, so a load of the generated root has no diagnostics.

Library use (other benchmarks)::

    from benchmarks.generate import generate      # or: sys.path.insert(0, "benchmarks"); import generate
    paths = generate(tmp_root, 10_000, seed=0)     # -> sorted list of package folders

Command line::

    python3 benchmarks/generate.py ROOT N [--seed S]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

VERBS = (
    "get", "list", "create", "update", "delete", "search", "fetch", "convert", "format", "parse",
    "summarize", "translate", "validate", "compare", "export", "import", "resize", "count", "merge",
    "render", "schedule", "archive", "tag", "sync", "check", "lookup", "compute", "extract", "preview",
)  # fmt: skip
NOUNS = (
    "issue", "ticket", "page", "calendar_event", "invoice", "customer", "order", "image", "document",
    "spreadsheet", "email", "message", "channel", "repository", "branch", "commit", "build", "deployment",
    "metric", "dashboard", "alert", "contact", "note", "task", "playlist", "recipe", "weather_report",
    "flight", "hotel", "booking", "package", "dependency", "container", "cluster", "table", "query",
    "report", "translation", "address", "timezone", "currency", "unit", "font", "color_palette",
)  # fmt: skip
SYSTEMS = (
    "Jira", "GitHub", "GitLab", "Confluence", "Slack", "Google Calendar", "Stripe", "Notion", "Linear",
    "Trello", "Zendesk", "Salesforce", "PagerDuty", "Grafana", "Kubernetes", "Postgres", "S3", "Figma",
    "the local filesystem", "the project workspace", "an internal HTTP service", "the issue tracker",
)  # fmt: skip
RISKS = ("read", "read", "read", "write", "external-read", "external-read", "external-write", "exec")
SENTENCES = (
    "Results are returned as JSON with stable field names so they can be compared between calls.",
    "Pagination is handled internally; at most {limit} items are returned per call.",
    "Dates are ISO 8601 strings in UTC unless a time zone is given explicitly.",
    "The call is idempotent: repeating it with the same input gives the same result.",
    "Use this when the user asks about a specific {noun} by its identifier or title.",
    "Do not use this for bulk operations; prefer the dedicated export tool for more than {limit} items.",
    "Errors from {system} are reported with their original code and a short explanation.",
    "Fields that {system} does not return are omitted rather than set to null.",
    "The response includes a link to the {noun} in {system} when one exists.",
    "Text fields are trimmed and normalised to NFC before they are sent.",
    "Large values are truncated to {limit} characters and marked as truncated in the output.",
    "Identifiers are case-sensitive and must match exactly what {system} shows.",
    "When several matches exist, they are ordered by relevance and then by last modification time.",
    "Only fields listed in the input schema are accepted; unknown fields are rejected.",
    "This tool never changes anything unless its risk level says it writes.",
    "Rate limits of {system} apply; the tool waits and retries at most twice.",
    "Numbers are returned as decimals with the precision {system} stores.",
    "The output is deterministic for the same input and the same remote state.",
)  # fmt: skip
PARAM_WORDS = (
    "id", "key", "title", "query", "limit", "offset", "since", "until", "status", "owner", "label",
    "project", "format", "language", "width", "height", "amount", "currency", "path", "branch", "sort",
    "order", "include_archived", "dry_run", "timezone", "fields", "comment", "priority", "assignee",
)  # fmt: skip
WORDS = (
    "the", "a", "value", "used", "to", "filter", "results", "by", "optional", "when", "given", "only",
    "matching", "items", "are", "returned", "default", "is", "empty", "which", "means", "all", "of",
    "them", "must", "be", "one", "allowed", "values", "in", "lower", "case", "and", "no", "spaces",
)  # fmt: skip

SCRIPT = '''\
"""{title}"""
import json
import sys

request = json.load(sys.stdin)
args = request.get("input", {{}})
result = {{"tool": "{name}", "received": sorted(args), "count": {seed}}}
{extra}print(json.dumps({{"ok": True, "content": result}}))
'''

_SCRIPT_EXTRAS = (
    "",
    "if args.get('dry_run'):\n    result['dry_run'] = True\n",
    "result['summary'] = ', '.join(f'{k}={v!r}' for k, v in sorted(args.items()))[:200]\n",
    "for key, value in list(args.items()):\n    if isinstance(value, str):\n        result[key + '_len'] = len(value)\n",
)


def _phrase(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def _param(rng: random.Random, word: str) -> dict[str, Any]:
    kind = rng.choice(("string", "string", "integer", "number", "boolean", "enum", "array", "object"))
    desc = _phrase(rng, 5, 18)
    if kind == "string":
        spec: dict[str, Any] = {"type": "string", "description": desc, "maxLength": rng.choice((64, 256, 4096))}
        if rng.random() < 0.3:
            spec["pattern"] = "^[A-Za-z0-9_.-]+$"
    elif kind == "integer":
        spec = {"type": "integer", "description": desc, "minimum": 0, "maximum": rng.choice((100, 1000, 65535))}
    elif kind == "number":
        spec = {"type": "number", "description": desc, "exclusiveMinimum": 0}
    elif kind == "boolean":
        spec = {"type": "boolean", "description": desc, "default": False}
    elif kind == "enum":
        spec = {"type": "string", "description": desc, "enum": rng.sample(WORDS, rng.randint(2, 6))}
    elif kind == "array":
        spec = {"type": "array", "description": desc, "items": {"type": "string"}, "maxItems": 50}
    else:
        spec = {
            "type": "object",
            "description": desc,
            "properties": {
                "name": {"type": "string"},
                "value": {"type": ["string", "number", "null"]},
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    return {word: spec}


def _manifest(rng: random.Random, name: str, verb: str, noun: str, target: int) -> dict[str, Any]:
    system = rng.choice(SYSTEMS)
    limit = rng.choice((10, 50, 100, 500))
    thing = noun.replace("_", " ")
    params: dict[str, Any] = {}
    for word in rng.sample(PARAM_WORDS, rng.randint(1, 8)):
        params.update(_param(rng, word))
    required = sorted(rng.sample(sorted(params), rng.randint(0, min(2, len(params)))))
    data: dict[str, Any] = {
        "name": name,
        "description": f"{verb.capitalize()} a {thing} in {system}.",
        "input_schema": {
            "type": "object",
            "properties": params,
            "required": required,
            "additionalProperties": False,
        },
        "risk": rng.choice(RISKS),
        "keywords": sorted({verb, *noun.split("_"), system.split()[-1].lower(), *rng.sample(WORDS, 2)}),
        "execute": {
            "command": ["python3", "run.py"],
            "timeout_s": rng.choice((5, 10, 30)),
            "network": False,
            "env": [],
        },
    }
    sentences = list(SENTENCES)
    rng.shuffle(sentences)
    parts = [data["description"]]
    # Grow the description until the whole manifest reaches its target size (1-4 KB).
    while len(json.dumps(data, indent=2)) < target and sentences:
        parts.append(sentences.pop().format(limit=limit, noun=thing, system=system))
        data["description"] = " ".join(parts)
    while len(json.dumps(data, indent=2)) < target:
        parts.append(_phrase(rng, 8, 20))
        data["description"] = " ".join(parts)
    return data


def generate(root: Path, n: int, *, seed: int = 0) -> list[Path]:
    """Write ``n`` tool packages under ``root`` (created; mode 0755) and return their folders, sorted.

    Same ``(n, seed)`` gives byte-identical packages. Existing folders of the same name are overwritten.
    """
    rng = random.Random(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # noqa: S103 -- not group/world-writable: what discovery requires
    folders: list[Path] = []
    width = max(5, len(str(n)))
    for i in range(n):
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        # Unique digit suffix: names never collide and are never confusable with one another.
        name = f"{verb}_{noun}_{i:0{width}d}"
        manifest = _manifest(rng, name, verb, noun, rng.randint(1100, 3900))
        folder = root / name
        folder.mkdir(exist_ok=True)
        os.chmod(folder, 0o755)  # noqa: S103 -- owner-writable only
        schema = folder / "schema.json"
        schema.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        script = folder / "run.py"
        script.write_text(
            SCRIPT.format(
                title=manifest["description"].split(".")[0],
                name=name,
                seed=rng.randint(0, 1_000_000),
                extra=rng.choice(_SCRIPT_EXTRAS),
            ),
            encoding="utf-8",
        )
        os.chmod(schema, 0o644)
        os.chmod(script, 0o644)
        folders.append(folder)
    return sorted(folders)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate N realistic tool packages for benchmarks.")
    parser.add_argument("root", type=Path)
    parser.add_argument("n", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.n < 0:
        parser.error("N must be >= 0")
    folders = generate(args.root, args.n, seed=args.seed)
    print(f"generated {len(folders)} packages in {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
