"""The token bounds of tooldir.deferred.tokenbounds hold for the o200k tokenizer and for the
estimate, on any text, so a deferral plan decided by them is the plan the exact counts give."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolkit import make_tool

from tooldir.deferred.catalog import ToolDef
from tooldir.deferred.defer import plan_deferral
from tooldir.deferred.tokenbounds import token_lower_bound, token_upper_bound
from tooldir.deferred.tokens import TokenCounter
from tooldir.model import Risk
from tooldir.policy import DeferPolicy

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import bpe_openai

_O200K = bpe_openai.get_encoding("o200k_base")
_ESTIMATE = TokenCounter(prefer_exact=False)
_EXACT = TokenCounter()

# Characters where the pre-tokenizer's rules meet: ASCII letters, digits, apostrophes, contraction
# letters, punctuation, whitespace, non-ASCII letters, marks, digits, punctuation, spaces, emoji.
_ALPHABET = st.sampled_from(
    [
        *"aZs'tdlmrev09 _-.,:;\"/\\{}[]\n\r\t<>|!?",
        "é",
        "e\u0301",
        "\u00a0",
        "\u2014",
        "\u0663",
        "字",
        "\U0001f600",
        "ß",
        "Ⅻ",
        "\u200b",
        "’",
        "<|endoftext|>",
    ]
)
_TEXT = st.lists(_ALPHABET, max_size=80).map("".join)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
def test_the_bounds_enclose_the_o200k_count_and_the_estimate_of_any_text(text: str) -> None:
    exact = len(_O200K.encode_ordinary(text))
    estimate = _ESTIMATE.count(text)
    low, high = token_lower_bound(text), token_upper_bound(text)
    assert low <= exact <= high
    assert low <= estimate <= high


def test_the_bounds_enclose_the_count_of_real_tool_definitions() -> None:
    sample = {
        "name": "jira_get_issue",
        "description": "Read one Jira issue by key. Read-only: never creates or edits issues. It's fast; don't retry.",
        "input_schema": {"type": "object", "properties": {"key": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"}}},
    }
    for text in (json.dumps(sample), json.dumps(sample, separators=(",", ":")), json.dumps(sample, indent=2)):
        exact = len(_O200K.encode_ordinary(text))
        assert token_lower_bound(text) <= exact <= token_upper_bound(text)
        assert token_lower_bound(text) > exact / 3  # tight enough to decide a plan


def test_scan_json_decides_a_large_auto_plan_without_importing_the_tokenizer(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    # a short summary line in the directory, a long definition: deferring clearly pays
    long = "Query stock. " + "Query the inventory database for stock levels, reorder points and lead times. " * 6
    for i in range(30):
        make_tool(root, f"inventory_tool_{i}", description=long)
    code = (
        "import sys, json, io, contextlib\n"
        "from tooldir._cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    main(['scan', '--json', '--project', {str(tmp_path)!r}, '--user-dir', {str(root)!r},"
        f" '--state-dir', {str(tmp_path / 'state')!r}])\n"
        "tools = json.loads(out.getvalue())['tools']\n"
        "print(json.dumps([len(tools), all(t['deferred'] for t in tools), 'bpe_openai' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [30, True, False]


_WORDS = st.sampled_from(["stock", "levels", "it's", "Jira", "zoë", "字段", "v2", "—", "x-y", "(id)", "42"])
_DESCRIPTION = st.lists(_WORDS, min_size=1, max_size=120).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_DESCRIPTION, min_size=1, max_size=40))
def test_a_plan_decided_by_bounds_defers_exactly_what_the_exact_counts_defer(descriptions: list[str]) -> None:
    offered = {
        f"tool_{i}": ToolDef(f"tool_{i}", text, {"type": "object", "properties": {"q": {"type": "string"}}}, Risk.READ)
        for i, text in enumerate(descriptions)
    }
    policy = DeferPolicy(mode="auto")
    for counter in (_EXACT, _ESTIMATE):
        exact = plan_deferral(offered, policy, counter)
        bounded = plan_deferral(offered, policy, counter, by_bounds=True)
        assert (bounded.deferred, bounded.engaged) == (exact.deferred, exact.engaged)


def test_a_large_plan_is_decided_by_bounds_and_a_small_one_falls_back_to_the_counts() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    large = {f"tool_{i}": ToolDef(f"tool_{i}", "Find it. " + "Stock levels it's v2 " * 40, schema) for i in range(40)}
    small = {"tool_0": ToolDef("tool_0", "Find it.", schema)}
    policy = DeferPolicy(mode="auto")
    assert "directory_and_guard_tokens_at_most" in plan_deferral(large, policy, _EXACT, by_bounds=True).decision
    assert "directory_and_guard_tokens" in plan_deferral(small, policy, _EXACT, by_bounds=True).decision
