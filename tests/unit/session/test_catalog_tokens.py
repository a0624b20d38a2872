"""Tool formats, the compact directory and token accounting."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from sesskit import TEXT_SCHEMA, defer_policy, setup

from tooldir.deferred.catalog import GUARD_DEFS, ToolDef, directory_text, summary, tool_reference_blocks
from tooldir.deferred.tokens import CHARS_PER_TOKEN, TokenCounter, compact_json
from tooldir.model import Risk

TOOL = ToolDef("weather_lookup", "Look up the weather.", TEXT_SCHEMA, Risk.READ)
# the shared evaluation data lies beside the checkout (as in CI); a bare clone has none
GITHUB = Path(__file__).resolve().parents[4] / "shared" / "eval" / "github_mcp_server" / "tools.jsonl"


def test_one_definition_renders_in_anthropic_openai_and_mcp_shapes() -> None:
    assert TOOL.anthropic() == {
        "name": "weather_lookup",
        "description": "Look up the weather.",
        "input_schema": TEXT_SCHEMA,
    }
    assert TOOL.anthropic(defer_loading=True)["defer_loading"] is True
    assert TOOL.openai() == {
        "type": "function",
        "function": {"name": "weather_lookup", "description": "Look up the weather.", "parameters": TEXT_SCHEMA},
    }
    assert TOOL.mcp() == {"name": "weather_lookup", "description": "Look up the weather.", "inputSchema": TEXT_SCHEMA}
    with pytest.raises(ValueError, match="unknown tool format"):
        TOOL.render("gemini")  # type: ignore[arg-type]


def test_schema_digest_changes_with_any_model_facing_field() -> None:
    other = ToolDef("weather_lookup", "Look up the weather!", TEXT_SCHEMA, Risk.READ)
    riskier = ToolDef("weather_lookup", "Look up the weather.", TEXT_SCHEMA, Risk.EXEC)
    assert len({TOOL.digest, other.digest, riskier.digest}) == 3
    assert TOOL.digest == ToolDef("weather_lookup", "Look up the weather.", dict(TEXT_SCHEMA), Risk.READ).digest


def test_summary_is_one_clean_line_of_the_first_sentence() -> None:
    assert summary("Read a file.  Then do more things.") == "Read a file."
    assert summary("Line one\nstill one\u200b sentence") == "Line one still one sentence"
    long = summary("word " * 60)
    assert len(long) <= 100 and long.endswith("…")


@pytest.mark.both_rankers
def test_directory_lists_name_risk_and_summary_and_is_empty_without_deferred_tools(tmp_path: Path) -> None:
    s = setup(tmp_path)
    text = s.session.directory_text()
    lines = text.splitlines()
    assert lines[1] == "[read]"
    assert "stock_quote: Get the latest stock price quote for a ticker symbol." in lines
    assert directory_text([]) == ""
    s.session.tool_search(tool_names=["stock_quote"])
    assert "stock_quote" not in s.session.directory_text()  # loaded tools leave the directory


def test_anthropic_native_deferral_marks_deferred_tools_and_references_them_by_name(tmp_path: Path) -> None:
    s = setup(tmp_path, policy=defer_policy(rules=("Defer(*)", "NoDefer(translate_text)")))
    tools = {t["name"]: t for t in s.session.anthropic_deferred_tools()}
    assert "defer_loading" not in tools["tool_search"] and "defer_loading" not in tools["translate_text"]
    assert tools["stock_quote"]["defer_loading"] is True
    assert tool_reference_blocks(["stock_quote"]) == [{"type": "tool_reference", "tool_name": "stock_quote"}]
    rendered = s.session.tools("openai")
    assert [t["function"]["name"] for t in rendered] == ["translate_text", "tool_search", "defer_execute_tool"]


def test_estimated_counts_are_labelled_as_estimates() -> None:
    counter = TokenCounter(prefer_exact=False)
    assert not counter.exact and counter.method.startswith("estimate")
    text = compact_json(TOOL.anthropic())
    assert counter.count(text) == round(len(text) / CHARS_PER_TOKEN)
    assert counter.count("") == 0


@pytest.mark.skipif(importlib.util.find_spec("bpe_openai") is None, reason="optional extra tooldir[tokens]")
def test_exact_counts_use_o200k_when_the_tokenizer_is_installed() -> None:
    counter = TokenCounter()
    text = compact_json(TOOL.anthropic())
    assert counter.exact and counter.method == "o200k_base"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # bpe-openai's own vocabulary loading
        import bpe_openai

        reference = len(bpe_openai.get_encoding("o200k_base").encode_ordinary(text))
    assert counter.count(text) == reference
    counter._encoder = None  # white-box: a second count of the same text must come from the cache, not re-encode
    assert counter.count(text) == reference


def test_loading_the_package_and_scanning_never_imports_the_tokenizer() -> None:
    code = "import sys, tooldir, tooldir.deferred.session, tooldir.deferred.catalog, tooldir.deferred.tokens; print('bpe_openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.both_rankers
def test_token_report_accounts_first_turn_increment_and_saving(tmp_path: Path) -> None:
    s = setup(tmp_path)
    before = s.session.token_report()
    assert before.loaded_increment == 0 and before.deferred == 5 and before.tools == 5
    guards = sum(TokenCounter(prefer_exact=False).count_json(g.anthropic()) for g in GUARD_DEFS)
    assert before.first_turn >= guards
    # the compact directory is a named part of first_turn (tooldir serve does not send it)
    directory = TokenCounter(prefer_exact=False).count(s.session.directory_text())
    assert before.directory == directory > 0 and before.first_turn >= guards + directory
    assert before.to_json()["directory"] == directory
    s.session.tool_search(tool_names=["stock_quote"])
    after = s.session.token_report()
    assert after.loaded_increment > 0
    assert after.saving == after.full_load - after.first_turn - after.loaded_increment
    assert json.loads(json.dumps(after.to_json()))["exact"] is False


@pytest.mark.skipif(not GITHUB.exists(), reason="shared eval data not present")
def test_first_turn_of_the_github_mcp_server_tools_is_under_eight_percent_of_all_schemas(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in GITHUB.read_text().splitlines() if line.strip()]
    builtins = {r["name"]: (r["description"], r["input_schema"]) for r in rows}
    s = setup(tmp_path, builtins=builtins, policy=defer_policy(mode="auto"))
    report = s.session.token_report()
    assert report.tools == 117 and report.deferred == 117
    assert report.first_turn / report.full_load <= 0.08
    assert report.saving > 0
