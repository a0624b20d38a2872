"""First-turn tokens with deferred loading vs sending every schema: the 117 GitHub MCP server tools.

The tools are registered as builtins (their real names, descriptions and input schemas) in a
Registry; a Session with the default policy (``[defer] mode = "auto"``, ``Defer(*)``) decides
what goes in the first request. Risk is derived from the name (get/list/search/read -> external-read,
anything else -> external-write) because the snapshot files carry no risk. Counts are o200k when
``bpe-openai`` is installed and the estimate otherwise (the report says which); both are printed.
Run: ``python3 benchmarks/bench_tokens.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tooldir.deferred.session import Session
from tooldir.deferred.tokens import TokenCounter
from tooldir.mcp.early import INSTRUCTIONS
from tooldir.policy import Policy
from tooldir.run.registry import Registry
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore

TOOLS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "github_mcp_server" / "tools.jsonl"
READ_PREFIXES = ("get_", "list_", "search_", "read_")


def _noop(*, input: dict[str, Any], context: dict[str, Any]) -> Any:
    return None


def measure(counter: TokenCounter, rows: list[dict[str, Any]], state: Path) -> dict[str, Any]:
    policy = Policy()
    store = SnapshotStore(Loader(make_config(project=None, user_dirs=[], policy=policy, state_dir=state)).load())
    registry = Registry(store, policy=policy, state_dir=state)
    for r in rows:
        name = r["name"]
        read = name.startswith(READ_PREFIXES) or name.endswith(("_get", "_list", "_read"))
        registry.register(
            name,
            r["input_schema"],
            _noop,
            description=r["description"],
            risk="external-read" if read else "external-write",
        )
    session = Session(store, policy=policy, registry=registry, counter=counter)
    first = session.token_report()
    directory = counter.count(session.directory_text())  # the compact directory, inside first_turn
    instructions = counter.count(INSTRUCTIONS)  # what tooldir serve's initialize sends instead
    session.tool_search(queries=["create pull request"], top_k=3)
    after = session.token_report()
    session.close()
    return {
        "method": first.method,
        "exact": first.exact,
        "tools": first.tools,
        "deferred": first.deferred,
        "all_schemas": first.full_load,
        "first_turn": first.first_turn,
        "first_turn_share": round(first.first_turn_share, 4),
        "saving_first_turn": first.saving,
        # issue 25 item 4: tooldir serve sends tools/list (eager + guard tools) and its instructions,
        # not the directory: what its first turn costs, both ways
        "directory": directory,
        "serve_instructions": instructions,
        "serve_first_turn_without_directory": first.first_turn - directory + instructions,
        "serve_first_turn_with_directory": first.first_turn + instructions,
        "after_loading_3": {"loaded_increment": after.loaded_increment, "loaded": session.loaded()},
        "defer_decision": session.defer_decision,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [json.loads(line) for line in TOOLS.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        exact = measure(TokenCounter(), rows, Path(tmp) / "a")
        estimate = measure(TokenCounter(prefer_exact=False), rows, Path(tmp) / "b")
    report = {"exact": exact, "estimate": estimate, "target_share": 0.08}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for label, r in (("counted", exact), ("estimated", estimate)):
        print(
            f"{label:9s} ({r['method']}): {r['tools']} tools, all schemas {r['all_schemas']} tokens, "
            f"first turn {r['first_turn']} ({r['first_turn_share']:.2%}; target <= 8%), "
            f"+{r['after_loading_3']['loaded_increment']} after loading {r['after_loading_3']['loaded']}"
        )
        print(
            f"{'':9s} of which the compact directory {r['directory']}; tooldir serve's first turn "
            f"{r['serve_first_turn_without_directory']} without it, {r['serve_first_turn_with_directory']} with it "
            f"(instructions {r['serve_instructions']})"
        )


if __name__ == "__main__":
    main()
