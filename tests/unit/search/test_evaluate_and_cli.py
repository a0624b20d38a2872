"""Retrieval metrics, eval input errors, and the search / catalog / eval commands."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from toolkit import make_tool, project_tools

from tooldir._cli import main
from tooldir.deferred.ensemble import ensemble_status
from tooldir.deferred.evaluate import (
    EvalDataError,
    LabelledQuery,
    evaluate,
    evaluate_files,
    read_queries,
    read_tools,
    score_rankings,
    split_of,
)
from tooldir.deferred.search import doc_from_schema
from tooldir.deferred.semantic import SEMANTIC_ENV, semantic_status

TOOLS = [
    {
        "name": "weather_lookup",
        "description": "Current weather forecast for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "stock_quote",
        "description": "Latest stock price for a ticker.",
        "input_schema": {"type": "object", "properties": {"ticker": {"type": "string"}}},
    },
    {
        "name": "send_email",
        "description": "Send an email message.",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
    },
]
QUERIES = [
    {"query": "what is the weather in Oslo", "relevant": ["weather_lookup"]},
    {"query": "email my broker the ACME stock price", "relevant": ["stock_quote", "send_email"]},
]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_metrics_match_hand_computed_values() -> None:
    queries = [LabelledQuery("q1", ("a",)), LabelledQuery("q2", ("b", "c"))]
    rankings = [["x", "a"], ["b", "y", "z", "w", "v", "c"]]
    m = score_rankings(queries, rankings)
    assert m["recall@1"] == round((0 + 0.5) / 2, 4)
    assert m["recall@5"] == round((1 + 0.5) / 2, 4)
    assert m["recall@10"] == 1.0
    assert m["complete-recall@5"] == 0.5 and m["complete-recall@10"] == 1.0
    assert m["MRR@10"] == round((0.5 + 1.0) / 2, 4)
    ndcg_q1 = (1 / math.log2(3)) / 1.0
    ndcg_q2 = (1 + 1 / math.log2(7)) / (1 + 1 / math.log2(3))
    assert m["nDCG@10"] == round((ndcg_q1 + ndcg_q2) / 2, 4)


@pytest.mark.both_rankers
def test_eval_reports_both_rankers_over_the_same_files(tmp_path: Path) -> None:
    report = evaluate_files(_write(tmp_path / "t.jsonl", TOOLS), _write(tmp_path / "q.jsonl", QUERIES))
    assert report.n == 2 and report.tools == 3
    assert set(report.metrics) == set(report.baseline)
    assert report.metrics["recall@1"] >= 0.5  # the weather query is unambiguous


@pytest.mark.parametrize(
    ("tools", "queries", "message"),
    [
        ("{not json\n", None, "t.jsonl:1: not valid JSON"),
        (json.dumps({"description": "x"}) + "\n", None, "'name' must be a non-empty string"),
        (json.dumps(TOOLS[0]) + "\n" + json.dumps(TOOLS[0]) + "\n", None, "t.jsonl:2: duplicate tool name"),
        (None, json.dumps({"query": "x", "relevant": ["nope"]}) + "\n", "not in the tools file"),
        (None, json.dumps({"query": "x", "relevant": []}) + "\n", "non-empty list"),
        ("", None, "no tools"),
    ],
    ids=["bad-json", "no-name", "duplicate", "unknown-relevant", "empty-relevant", "empty-file"],
)
def test_malformed_eval_files_give_a_located_error(
    tmp_path: Path, tools: str | None, queries: str | None, message: str
) -> None:
    t = tmp_path / "t.jsonl"
    q = tmp_path / "q.jsonl"
    t.write_text(tools if tools is not None else "".join(json.dumps(r) + "\n" for r in TOOLS))
    q.write_text(queries if queries is not None else "".join(json.dumps(r) + "\n" for r in QUERIES))
    with pytest.raises(EvalDataError) as info:
        read_queries(q, {d.name for d in read_tools(t)})
    assert message in info.value.diagnostics()


@pytest.mark.both_rankers
def test_eval_command_prints_one_json_object_and_exits_2_on_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t, q = _write(tmp_path / "t.jsonl", TOOLS), _write(tmp_path / "q.jsonl", QUERIES)
    assert main(["eval", "--tools", str(t), "--queries", str(q), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"n", "tools", "ranker", "metrics", "baseline", "rankers", "splits"} <= set(data)
    assert data["n"] == 2 and "recall@5" in data["metrics"] and "nDCG@10" in data["baseline"]
    assert main(["eval", "--tools", str(tmp_path / "missing.jsonl"), "--queries", str(q), "--json"]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and "Traceback" not in err


@pytest.mark.both_rankers
def test_search_command_json_has_matches_missing_and_unavailable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user"
    make_tool(user, "weather_lookup", description="Current weather forecast for a city.")
    make_tool(user, "stock_quote", description="Latest stock price for a ticker.")
    project = tmp_path / "proj"
    make_tool(project_tools(project), "weather_radar", description="Weather radar images (project tool).")
    args = ["--user-dir", str(user), "--project", str(project), "--state-dir", str(tmp_path / "s"), "--json"]
    assert main(["search", "weather forecast", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"matches", "missing", "unavailable"}
    assert [m["name"] for m in data["matches"]] == ["weather_lookup"]
    match = data["matches"][0]
    assert set(match) == {"name", "score", "source", "load_state", "schema"}
    assert match["source"] == "user" and match["schema"]["input_schema"]["type"] == "object"
    assert data["unavailable"] == []  # a keyword search never matches a pending tool's text (trust:listing)
    assert main(["search", "select:weather_radar", *args]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [u["name"] for u in data["unavailable"]] == ["weather_radar"]  # asked for by its exact name
    assert "not-approved" in data["unavailable"][0]["reason"]
    assert main(["search", "select:stock_quote,nope", *args]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in data["matches"]] == ["stock_quote"] and data["missing"] == ["nope"]
    assert main(["search", "zebra", *args]) == 1
    assert json.loads(capsys.readouterr().out)["missing"] == ["zebra"]
    assert main(["search", "x", "--top-k", "0", *args]) == 2


def test_catalog_command_reports_directory_tokens_and_first_turn_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user"
    for i in range(3):
        make_tool(user, f"tool_{i}", description=f"Tool number {i}. " + "It does many detailed things. " * 10)
    policy = tmp_path / "policy.toml"
    policy.write_text('[defer]\nmode = "on"\nrules = ["Defer(*)", "NoDefer(tool_0)"]\n')
    args = ["--user-dir", str(user), "--project", str(tmp_path), "--policy", str(policy), "--json"]
    assert main(["catalog", *args, "--format", "mcp"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in data["directory"]] == ["tool_1", "tool_2"]
    assert data["working_set"] == ["tool_0", "tool_search", "defer_execute_tool"]
    assert [t["name"] for t in data["tools"]] == data["working_set"] and "inputSchema" in data["tools"][0]
    tokens = data["tokens"]
    assert tokens["saving"] == tokens["full_load"] - tokens["first_turn"] - tokens["loaded_increment"]
    assert isinstance(tokens["exact"], bool) and tokens["method"]
    assert main(["catalog", *args[:-1]]) == 0
    assert "first turn" in capsys.readouterr().out


def test_eval_json_names_the_ranker_that_ran_and_scores_every_ranker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    t, q = _write(tmp_path / "t.jsonl", TOOLS), _write(tmp_path / "q.jsonl", QUERIES)
    monkeypatch.setenv(SEMANTIC_ENV, "off")
    assert main(["eval", "--tools", str(t), "--queries", str(q), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranker"] == "bm25f" and set(data["rankers"]) == {"bm25f", "plain_bm25"}
    assert data["metrics"] == data["rankers"]["bm25f"] and data["baseline"] == data["rankers"]["plain_bm25"]
    assert SEMANTIC_ENV in data["semantic"]  # why the semantic ranker did not run
    monkeypatch.delenv(SEMANTIC_ENV)
    usable, _ = semantic_status()
    if not usable and not os.environ.get("TOOLDIR_REQUIRE_SEMANTIC"):
        return  # without the extra the default run is the one above
    assert main(["eval", "--tools", str(t), "--queries", str(q), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    plus = ensemble_status(load=False)[0]  # [semantic-plus]: the ensemble is the best installed
    best = "ensemble" if plus else "hybrid"
    assert data["ranker"] == best
    assert set(data["rankers"]) == {"hybrid", "bm25f", "plain_bm25", "embedding"} | ({"ensemble"} if plus else set())
    assert data["metrics"] == data["rankers"][best] and "semantic" not in data
    for metrics in data["rankers"].values():
        assert set(metrics) == set(data["baseline"])


def test_eval_takes_the_active_ranker_by_name_and_still_scores_every_one_available(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooldir._cli.search import EVAL_RANKERS
    from tooldir.deferred.evaluate import RANKERS

    assert EVAL_RANKERS == RANKERS == ("bm25f", "hybrid", "ensemble")
    t, q = _write(tmp_path / "t.jsonl", TOOLS), _write(tmp_path / "q.jsonl", QUERIES)
    monkeypatch.delenv(SEMANTIC_ENV, raising=False)
    usable, why = semantic_status()
    assert main(["eval", "--tools", str(t), "--queries", str(q), "--ranker", "bm25f", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranker"] == "bm25f" and data["metrics"] == data["rankers"]["bm25f"]
    if not usable:
        assert not os.environ.get("TOOLDIR_REQUIRE_SEMANTIC"), why
        assert main(["eval", "--tools", str(t), "--queries", str(q), "--ranker", "hybrid", "--json"]) == 2
        assert "hybrid ranker cannot run" in capsys.readouterr().err
        return
    plus = {"ensemble"} if ensemble_status(load=False)[0] else set()
    assert set(data["rankers"]) == {"hybrid", "bm25f", "plain_bm25", "embedding"} | plus  # every one available
    monkeypatch.setenv(SEMANTIC_ENV, "off")  # an explicit --ranker hybrid is what was asked for
    assert main(["eval", "--tools", str(t), "--queries", str(q), "--ranker", "hybrid", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranker"] == "hybrid" and data["metrics"] == data["rankers"]["hybrid"]
    if not plus:
        assert not os.environ.get("TOOLDIR_REQUIRE_SEMANTIC"), "[semantic-plus] is required in CI"
        assert main(["eval", "--tools", str(t), "--queries", str(q), "--ranker", "ensemble", "--json"]) == 2
        assert "ensemble ranker cannot run" in capsys.readouterr().err
        return
    assert main(["eval", "--tools", str(t), "--queries", str(q), "--ranker", "ensemble", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranker"] == "ensemble" and data["metrics"] == data["rankers"]["ensemble"]
    assert {"hybrid", "embedding"} <= set(data["rankers"])


def test_eval_reports_train_and_test_splits_from_the_split_field_or_a_hash_of_the_id() -> None:
    assert split_of(LabelledQuery("q", ("a",), "x", "dev")) == "train"
    assert split_of(LabelledQuery("q", ("a",), "x", "test_in_domain")) == "test"
    unlabelled = [split_of(LabelledQuery("q", ("a",), f"id-{i}")) for i in range(200)]
    assert 60 < unlabelled.count("train") < 140  # about half, and fixed by the id
    assert unlabelled == [split_of(LabelledQuery("other", ("b",), f"id-{i}")) for i in range(200)]
    docs = [doc_from_schema(t["name"], t["description"], t["input_schema"]) for t in TOOLS]
    queries = [LabelledQuery(QUERIES[0]["query"], ("weather_lookup",), "a", "dev")]
    queries.append(LabelledQuery(QUERIES[1]["query"], ("stock_quote", "send_email"), "b", "test"))
    report = evaluate(docs, queries, ranker=None)
    assert report.splits["train"]["n"] == 1 and report.splits["test"]["n"] == 1
    assert set(report.splits["train"]["rankers"]) == {"bm25f", "plain_bm25"}


@pytest.mark.both_rankers
def test_eval_calls_progress_up_to_the_total_and_prints_none_when_stderr_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [doc_from_schema(t["name"], t["description"], t["input_schema"]) for t in TOOLS]
    queries = [LabelledQuery(f"weather {i}", ("weather_lookup",)) for i in range(120)]
    seen: list[tuple[int, int]] = []
    evaluate(docs, queries, ranker=None, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (240, 240) and all(total == 240 for _, total in seen) and len(seen) > 2
    t, q = _write(tmp_path / "t.jsonl", TOOLS), _write(tmp_path / "q.jsonl", QUERIES)
    assert main(["eval", "--tools", str(t), "--queries", str(q)]) == 0
    assert capsys.readouterr().err == ""
