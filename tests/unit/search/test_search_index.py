"""The BM25F index: tokenization, ordering, exact pruned top-k, required terms, updates from diffs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import bm25f_reference as reference
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolkit import make_tool

from tooldir.deferred import search
from tooldir.deferred.search import (
    Bm25fParams,
    Hit,
    SearchDoc,
    SearchIndex,
    doc_from_schema,
    lexical_scores,
    parse_query,
    split_words,
    stem,
    tokenize,
    top_k,
)
from tooldir.policy import Policy
from tooldir.snapshot.loader import Loader, make_config
from tooldir.snapshot.store import SnapshotStore


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


def _agrees(hits: list[Hit], expected: list[tuple[str, float]]) -> bool:
    return [h.name for h in hits] == [n for n, _ in expected] and all(
        math.isclose(h.score, s, rel_tol=1e-9, abs_tol=1e-9) for h, (_, s) in zip(hits, expected, strict=True)
    )


def _docs(raw: list[tuple[list[str], list[str], list[str]]]) -> list[SearchDoc]:
    """Tools from word lists; every third one is a copy of the one before under another name, so
    that equal scores (ties broken by name) are common."""
    docs = []
    for i, (n, d, ps) in enumerate(raw):
        if i % 3 == 2:
            prev = docs[-1]
            docs.append(SearchDoc(f"t{i}_" + "_".join(n), prev.description, prev.keywords, prev.params))
        else:
            params = tuple((p, " ".join(d[:2])) for p in ps)
            docs.append(SearchDoc(f"t{i}_" + "_".join(n), " ".join(d), tuple(ps[:1]), params))
    return docs


@settings(max_examples=80, deadline=None)
@given(DOCS, st.lists(WORDS, min_size=1, max_size=8), st.integers(min_value=1, max_value=6))
def test_the_vectorised_top_k_equals_a_reference_bm25f_scorer(
    raw: list[tuple[list[str], list[str], list[str]]], q: list[str], k: int
) -> None:
    for sample_from in (search._SAMPLE_FROM, 1):  # the top-k of a large index starts from a sampled guess
        saved, search._SAMPLE_FROM = search._SAMPLE_FROM, sample_from
        try:
            _check_against_reference(raw, q, k)
        finally:
            search._SAMPLE_FROM = saved


def _check_against_reference(raw: list[tuple[list[str], list[str], list[str]]], q: list[str], k: int) -> None:
    docs = _docs(raw)
    index = SearchIndex.build(docs)
    query = " ".join(q)
    assert _agrees(index.search(query, top_k=k), reference.top(docs, query, k))
    even = {d.name for d in docs[::2]}  # a visibility filter, as sessions use one
    assert _agrees(
        index.search(query, top_k=k, allow=even.__contains__), reference.top(docs, query, k, even.__contains__)
    )
    required = f"+{q[0]} {query}"  # "+word": only tools containing it
    assert _agrees(index.search(required, top_k=k), reference.top(docs, required, k))
    picky = {d.name for d in docs[::7]}  # a filter that refuses most candidates
    assert _agrees(
        index.search(query, top_k=k, allow=picky.__contains__), reference.top(docs, query, k, picky.__contains__)
    )
    among = lexical_scores(index, query, among=sorted(even)).top(k)
    assert _agrees(among, reference.top(docs, query, k, even.__contains__))


@settings(max_examples=60, deadline=None)
@given(DOCS, st.data())
def test_an_incrementally_updated_index_scores_like_the_reference_on_its_current_tools(
    raw: list[tuple[list[str], list[str], list[str]]], data: st.DataObject
) -> None:
    docs = _docs(raw)
    index = SearchIndex.build(docs)
    current = {d.name: d for d in docs}
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):  # a few watcher publishes
        removed = data.draw(st.lists(st.sampled_from(sorted(current) or ["none"]), max_size=2))
        edited = [
            SearchDoc(name, " ".join(data.draw(st.lists(WORDS, max_size=6))))
            for name in data.draw(st.lists(st.sampled_from([*sorted(current), "new_a", "new_b"]), max_size=3))
        ]
        index = index.updated(edited, removed)
        for name in removed:
            current.pop(name, None)
        current.update({d.name: d for d in edited})
        assert len(index) == len(current) and index.names() == tuple(sorted(current))
    for query in ("alpha", "file user", "weather stock quote +city", "list read write send mail"):
        assert _agrees(index.search(query, top_k=5), reference.top(current.values(), query, 5))


def test_scores_before_top_k_are_aligned_arrays_of_every_candidate() -> None:
    docs = [SearchDoc("list_files", "List files in a folder."), SearchDoc("read_file", "Read one file.")]
    docs.append(SearchDoc("weather", "Current weather."))
    index = SearchIndex.build(docs)
    scored = lexical_scores(index, "read a file")
    slots, values = scored.candidates()
    got = dict(zip(scored.names_of(slots), values.tolist(), strict=True))
    expected = reference.scores(docs, "read a file")
    assert got.keys() == expected.keys() == {"list_files", "read_file"}
    assert all(math.isclose(got[n], expected[n], rel_tol=1e-12) for n in got)
    assert scored.parsed.terms == ("read", "file")
    assert not lexical_scores(index, "qwertyuiop") and lexical_scores(index, "qwertyuiop").top(5) == []
    assert lexical_scores(index, "+read file").candidates()[0].tolist() == [index_slot(index, "read_file")]


def index_slot(index: SearchIndex, name: str) -> int:
    scored = lexical_scores(index, name.replace("_", " "), among=[name])
    return int(scored.candidates()[0][0])


def test_an_edit_rewrites_only_the_postings_of_the_terms_whose_counts_changed() -> None:
    docs = [SearchDoc(f"tool_{i}", f"common words plus unique{i}") for i in range(50)]
    index = SearchIndex.build(docs)
    change = SearchDoc("tool_3", "common words and a novel term")
    edited = index.updated([change])
    # "plus" and "unique" left, "novel" and "term" came, "3" left the description (still in the name)
    assert set(edited._overlay) == {"plus", "uniqu", "3", "novel", "term"}
    assert edited._base is index._base  # the full columns are shared, not rebuilt
    current = [change if d.name == "tool_3" else d for d in docs]
    for query in ("common words", "novel unique3", "tool 3"):
        assert _agrees(edited.search(query, top_k=3), reference.top(current, query, 3))


def test_invalid_field_weights_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="weights"):
        Bm25fParams(weights={"name": 0.0})


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


@pytest.mark.parametrize("sample_from", [search._SAMPLE_FROM, 1])
def test_many_tools_tied_at_the_cut_are_ranked_by_name(monkeypatch: pytest.MonkeyPatch, sample_from: int) -> None:
    monkeypatch.setattr(search, "_SAMPLE_FROM", sample_from)
    names = [f"fx_{i:03d}" for i in range(200)]
    docs = [SearchDoc(n, "convert currency amounts") for n in reversed(names)]
    docs += [SearchDoc(f"other_{i}", "weather forecast") for i in range(100)]
    index = SearchIndex.build(docs)
    assert [h.name for h in index.search("currency", top_k=3)] == names[:3]
    odd = set(names[1::2])
    assert [h.name for h in index.search("currency", top_k=4, allow=odd.__contains__)] == sorted(odd)[:4]
    assert [h.name for h in index.updated([SearchDoc("fx_000", "weather")]).search("currency", top_k=2)] == names[1:3]


def test_importing_tooldir_and_building_no_index_keeps_numpy_off_the_load_path() -> None:
    code = "import sys, tooldir, tooldir.deferred.search, tooldir.deferred.session; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_another_ranker_can_rank_fused_candidate_scores_with_the_same_contract() -> None:
    docs = [SearchDoc(n, "convert currency amounts") for n in ("zeta_fx", "alpha_fx", "mid_fx")]
    index = SearchIndex.build(docs)
    slots, lexical = lexical_scores(index, "currency").candidates()
    boost = {"zeta_fx": 1.0, "alpha_fx": 0.0, "mid_fx": -10.0}  # e.g. a cosine term; mid_fx drops out
    fused = lexical + np.array([boost[n] for n in lexical_scores(index, "currency").names_of(slots)])
    assert [h.name for h in top_k(index, slots, fused, 5)] == ["zeta_fx", "alpha_fx"]
    assert [h.name for h in top_k(index, slots, fused, 5, allow=lambda n: n != "zeta_fx")] == ["alpha_fx"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["Get", "the", "userID", "+list", "files,", "+1234", "v2", "+the", "a+b", "é", "x"]), max_size=8
    )
)
def test_a_query_parses_to_the_same_terms_word_by_word_or_whole(words: list[str]) -> None:
    query = " ".join(words)
    terms: list[str] = []
    for raw in query.split():  # word by word, the way required terms are parsed
        required = len(raw) > 1 and raw[0] == "+" and raw[1].isalpha()
        toks = tokenize(raw[1:] if required else raw) or ([stem(w) for w in split_words(raw[1:])] if required else [])
        terms.extend(t for t in toks if t not in terms)
    assert parse_query(query).terms == tuple(terms)


def test_an_index_whose_slots_are_mostly_removed_tools_is_compacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "_COMPACT_AFTER", 4)
    docs = [SearchDoc(f"tool_{i}", f"words {i}") for i in range(4)]
    index = SearchIndex.build(docs)
    current = {d.name: d for d in docs}
    for i in range(12):  # renames: a new name, the old one removed
        new = SearchDoc(f"renamed_{i}", f"words renamed {i}")
        index = index.updated([new], [f"tool_{i}" if i < 4 else f"renamed_{i - 4}"])
        current.pop(f"tool_{i}" if i < 4 else f"renamed_{i - 4}")
        current[new.name] = new
        assert len(index._slot_names) <= 2 * 4 + 4 + 1
    assert index.names() == tuple(sorted(current))
    assert _agrees(index.search("words renamed 9", top_k=3), reference.top(current.values(), "words renamed 9", 3))


@pytest.mark.parametrize("sample_from", [search._SAMPLE_FROM, 1])
def test_the_best_candidates_as_arrays_are_the_top_hits_in_the_same_order_with_the_same_scores(
    monkeypatch: pytest.MonkeyPatch, sample_from: int
) -> None:
    monkeypatch.setattr(search, "_SAMPLE_FROM", sample_from)
    docs = [SearchDoc(f"fx_{i:03d}", "convert currency amounts" + " money" * (i % 5)) for i in range(300)]
    docs += [SearchDoc(f"w_{i}", "weather forecast money") for i in range(100)]
    index = SearchIndex.build(docs).updated([SearchDoc("fx_000", "weather")], ["fx_001"])  # slots != name order
    picky = {f"fx_{i:03d}" for i in range(0, 300, 7)}
    for query in ("currency money", "money", "+currency money", "qwertyuiop"):
        scored = lexical_scores(index, query)
        for k in (1, 5, 20, 500):
            for allow in (None, picky.__contains__):
                slots, scores = scored.best(k, allow=allow)
                hits = scored.top(k, allow=allow)
                assert scored.names_of(slots) == [h.name for h in hits]
                assert scores.tolist() == [h.score for h in hits]
                assert slots.dtype == np.int64 and scores.dtype == np.float64


def test_scores_equal_once_rounded_are_ordered_by_name_and_scores_apart_by_score() -> None:
    names = ["d_tool", "c_tool", "b_tool", "a_tool"]
    index = SearchIndex.build([SearchDoc(n, "convert currency") for n in names])
    slots = np.array([index_slot(index, n) for n in names], dtype=np.int64)
    # d and c differ by less than the rounding (1e-9): a tie, by name; b is 3e-9 below: after them
    scores = np.array([1.0 + 4e-10, 1.0, 1.0 - 3e-9, 0.5])
    assert [(h.name, h.score) for h in top_k(index, slots, scores, 4)] == [
        ("c_tool", 1.0),
        ("d_tool", 1.0),
        ("b_tool", round(1.0 - 3e-9, 9)),
        ("a_tool", 0.5),
    ]
    assert [h.name for h in top_k(index, slots, scores, 1)] == ["c_tool"]
    assert [h.name for h in top_k(index, slots, scores, 2, allow=lambda n: n != "c_tool")] == ["d_tool", "b_tool"]


def test_an_upstream_tool_is_indexed_with_its_title_and_its_server_packages_description(tmp_path: Path) -> None:
    from dataclasses import replace

    from tooldir.model import Status, Trust, UpstreamRef

    user = tmp_path / "user"
    make_tool(user, "gh__list_pulls", description="List pull requests.")
    loader = Loader(make_config(project=None, user_dirs=[user], policy=Policy(), state_dir=tmp_path / "s"))
    record = loader.load().by_name["gh__list_pulls"]
    ref = UpstreamRef(
        "gh", "/p", "sha256:" + "0" * 64, "list_pulls", "sha256:" + "1" * 64, "now",
        title="Pull request listing", server_description="GitHub repositories, issues and code review",
    )  # fmt: skip
    upstream = replace(record, status=Status.PENDING, grant=None, trust=Trust(False, "t"), upstream=ref)
    doc = search.doc_from_record(upstream)
    assert doc is not None and doc.description == "List pull requests."
    assert doc.keywords[-2:] == ("Pull request listing", "GitHub repositories, issues and code review")
    index = SearchIndex.build([doc, SearchDoc("other", "List files.")])
    assert [h.name for h in index.search("code review", top_k=3)] == ["gh__list_pulls"]
    plain = search.doc_from_record(replace(upstream, upstream=None))
    assert plain is not None and plain.keywords == doc.keywords[:-2]  # a directory tool: its own keywords only


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.0 + 1e-10, 2.0, 3.25]), min_size=1, max_size=200),
    k=st.integers(1, 60),
)
def test_the_vectorised_best_pool_equals_the_named_top_k(scores: list[float], k: int) -> None:
    docs = [SearchDoc(f"tool_{i:03d}", "alpha " * (1 + i % 4)) for i in range(len(scores))]
    index = SearchIndex.build(docs)
    dense = np.asarray(scores, dtype=np.float64)
    rank_of = np.asarray([sorted(index.names()).index(n) for n in index.slot_names()], dtype=np.int64)
    positive = np.flatnonzero(dense)
    for ids in (None, positive[::2]):  # all matches, or the candidates a required term leaves
        got = search.LexicalScores(index, parse_query("alpha"), dense, ids)
        slots, values = got.best_ordered(k, rank_of)
        want_slots, want_values = got.best(k)
        assert slots.tolist() == want_slots.tolist()
        assert values.tolist() == want_values.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), min_size=1, max_size=50))
def test_the_vectorised_rounding_of_scores_equals_pythons(values: list[float]) -> None:
    near_halves = [(round(v * 1e9) + 0.5) / 1e9 for v in values]  # the hard cases
    for batch in (values, near_halves):
        got = search._rounded(np.asarray(batch, dtype=np.float64)).tolist()
        assert got == [round(v, 9) for v in batch]
