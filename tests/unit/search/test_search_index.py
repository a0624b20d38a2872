"""The BM25F index: tokenization, ordering, exact pruned top-k, required terms, updates from diffs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolkit import make_tool

from tooldir.loader import Loader, make_config
from tooldir.policy import Policy
from tooldir.search import SearchDoc, SearchIndex, doc_from_schema, parse_query, split_words, stem, tokenize
from tooldir.snapshot import SnapshotStore


def test_identifiers_split_on_camel_case_snake_case_dots_and_digits() -> None:
    assert split_words("getUserID_v2") == ["get", "user", "id", "v", "2"]
    assert split_words("HTTPServer.start") == ["http", "server", "start"]
    assert split_words("math.factorial") == ["math", "factorial"]


def test_light_stemming_joins_inflections_and_leaves_short_words() -> None:
    assert {stem(w) for w in ("analyze", "analyzes", "analyzing", "analyzed")} == {"analyz"}
    assert stem("files") == stem("file") and stem("queries") == stem("query")
    assert stem("id") == "id" and stem("bus") == "bus" and stem("class") == "class"
    assert tokenize("Get the weather for a city") == ["get", "weather", "city"]


def test_required_terms_come_from_plus_words_but_not_from_plus_numbers() -> None:
    parsed = parse_query("send +email to +1234567890")
    assert parsed.required == ("email",)
    assert "1234567890" in parsed.terms


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate tool name 'a'"):
        SearchIndex.build([SearchDoc("a", "one"), SearchDoc("a", "two")])


def test_equal_scores_are_ordered_by_name() -> None:
    docs = [SearchDoc(n, "convert currency amounts") for n in ("zeta_fx", "alpha_fx", "mid_fx")]
    hits = SearchIndex.build(docs).search("currency", top_k=3)
    assert [h.name for h in hits] == ["alpha_fx", "mid_fx", "zeta_fx"]
    assert len({h.score for h in hits}) == 1


def test_a_name_match_outranks_the_same_word_in_a_parameter_description() -> None:
    docs = [
        SearchDoc("invoice_create", "Create a billing document."),
        SearchDoc("mailer", "Send mail.", params=(("body", "text, for example an invoice"),)),
    ]
    assert [h.name for h in SearchIndex.build(docs).search("invoice", top_k=2)] == ["invoice_create", "mailer"]


def test_required_terms_filter_and_unmatched_tools_never_appear() -> None:
    docs = [SearchDoc("list_files", "List files in a folder."), SearchDoc("read_file", "Read one file.")]
    index = SearchIndex.build(docs)
    assert [h.name for h in index.search("file +list", top_k=5)] == ["list_files"]
    assert index.search("+nothing file", top_k=5) == []
    assert index.search("the of and", top_k=5) == []
    assert [h.name for h in index.search("file", top_k=5, allow=lambda n: n != "list_files")] == ["read_file"]


def test_parameter_names_and_descriptions_are_indexed_from_the_input_schema() -> None:
    doc = doc_from_schema(
        "geo",
        "Resolve a place.",
        {"type": "object", "properties": {"zipCode": {"type": "string", "description": "postal code"}}},
    )
    assert doc.params == (("zipCode", "postal code"),)
    assert [h.name for h in SearchIndex.build([doc]).search("zip", top_k=1)] == ["geo"]


WORDS = st.sampled_from(
    [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "file",
        "user",
        "list",
        "read",
        "write",
        "send",
        "mail",
        "weather",
        "stock",
        "quote",
        "city",
    ]
)
DOCS = st.lists(
    st.tuples(st.lists(WORDS, min_size=1, max_size=3), st.lists(WORDS, max_size=12), st.lists(WORDS, max_size=4)),
    min_size=1,
    max_size=40,
)


def _exhaustive(index: SearchIndex, query: str, k: int) -> list[str]:
    """The oracle: add every posting of every query term, no pruning, then sort."""
    scores: dict[str, float] = {}
    postings = index._postings  # white-box on purpose: the impacts are what the pruning skips over
    for term in parse_query(query).terms:
        for doc_id, impact in postings.get(term, ()):
            name = index.names()[doc_id]
            scores[name] = scores.get(name, 0.0) + impact
    return [n for n, _ in sorted(scores.items(), key=lambda e: (-e[1], e[0]))[:k]]


@settings(max_examples=60, deadline=None)
@given(DOCS, st.lists(WORDS, min_size=1, max_size=8), st.integers(min_value=1, max_value=6))
def test_pruned_top_k_equals_the_exhaustive_ranking(
    raw: list[tuple[list[str], list[str], list[str]]], q: list[str], k: int
) -> None:
    docs = [
        SearchDoc(f"t{i}_" + "_".join(n), " ".join(d), params=tuple((p, "") for p in ps))
        for i, (n, d, ps) in enumerate(raw)
    ]
    index = SearchIndex.build(docs)
    query = " ".join(q)
    assert [h.name for h in index.search(query, top_k=k)] == _exhaustive(index, query, k)
    even = {d.name for d in docs[::2]}  # a visibility filter, as sessions use one
    filtered = [n for n in _exhaustive(index, query, len(docs)) if n in even][:k]
    assert [h.name for h in index.search(query, top_k=k, allow=even.__contains__)] == filtered
    must = parse_query(q[0]).terms[0]  # "+word": only tools containing it
    having = {index.names()[d] for d, _ in index._postings.get(must, ())}
    required = [n for n in _exhaustive(index, query, len(docs)) if n in having][:k]
    assert [h.name for h in index.search(f"+{q[0]} {query}", top_k=k)] == required


@settings(max_examples=40, deadline=None)
@given(DOCS, st.data())
def test_an_updated_index_ranks_like_one_built_from_scratch(
    raw: list[tuple[list[str], list[str], list[str]]], data: st.DataObject
) -> None:
    docs = [SearchDoc(f"t{i}", " ".join(n + d)) for i, (n, d, _) in enumerate(raw)]
    cut = data.draw(st.integers(min_value=0, max_value=len(docs)))
    removed = data.draw(st.lists(st.sampled_from([d.name for d in docs]), max_size=3))
    incremental = SearchIndex.build(docs[:cut]).updated(docs[cut:], removed)
    kept = [d for d in docs if d.name not in set(removed) or docs.index(d) >= cut]
    scratch = SearchIndex.build(kept)
    for word in ("alpha", "file user", "weather stock quote"):
        assert incremental.search(word, top_k=5) == scratch.search(word, top_k=5)


def test_index_follows_snapshot_diffs_from_the_store(tmp_path: Path) -> None:
    user = tmp_path / "user"
    make_tool(user, "weather_now", description="Current weather for a city.")
    loader = Loader(make_config(project=None, user_dirs=[user], policy=Policy(), state_dir=tmp_path / "s"))
    store = SnapshotStore(loader.load())
    index = SearchIndex.from_snapshot(store.current)
    make_tool(user, "stock_price", description="Stock price for a ticker.")
    snapshot, change = store.publish(loader.load())
    updated = index.apply_diff(snapshot, change)
    assert [h.name for h in updated.search("stock ticker", top_k=3)] == ["stock_price"]
    assert index.search("stock ticker", top_k=3) == []  # the old index is untouched
    assert updated.search("weather", top_k=3) == SearchIndex.from_snapshot(snapshot).search("weather", top_k=3)
    assert updated.apply_diff(*store.publish(loader.load())) is updated  # nothing changed: same index


def test_enum_values_of_parameters_are_indexed_with_the_parameter_descriptions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "array", "items": {"type": "string", "enum": ["monday"]}},
        },
    }
    doc = doc_from_schema("get_temperature", "Current temperature.", schema)
    assert doc.enums == ("celsius", "fahrenheit", "monday")
    index = SearchIndex.build([doc, SearchDoc("other", "Something else entirely.")])
    assert [h.name for h in index.search("fahrenheit", top_k=5)] == ["get_temperature"]
    assert [h.name for h in index.search("monday", top_k=5)] == ["get_temperature"]
