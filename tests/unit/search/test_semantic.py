"""The semantic ranker (issue 15): offline loading, the fusion's result contract, misses,
``+required``, stuffing, per-tool re-embedding, and BM25F when the extra is absent or disabled.

Tests that need the ``[semantic]`` extra skip only when it is not installed AND
``TOOLDIR_REQUIRE_SEMANTIC`` is unset; CI sets it, so there they fail instead of skipping.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tooldir.deferred import semantic
from tooldir.deferred.ensemble import default_ranker
from tooldir.deferred.evaluate import PlainBM25
from tooldir.deferred.search import SearchDoc, SearchIndex, doc_from_schema, lexical_scores, parse_query
from tooldir.deferred.semantic import (
    SEMANTIC_ENV,
    HybridRanker,
    SemanticUnavailable,
    load_embedder,
    semantic_status,
    tool_text,
)

REQUIRE = "TOOLDIR_REQUIRE_SEMANTIC"


def _model_or_skip() -> semantic.StaticEmbedder:
    try:
        return load_embedder()
    except SemanticUnavailable as exc:
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but the semantic ranker is unavailable: {exc}")
        pytest.skip(f"the [semantic] extra is not installed ({exc}); set {REQUIRE}=1 to require it")


@pytest.fixture
def embedder() -> semantic.StaticEmbedder:
    return _model_or_skip()


HONEST = [
    doc_from_schema(
        "weather_forecast",
        "Weather forecast for a city: temperature, rain and wind for the next days.",
        {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}},
    ),
    doc_from_schema(
        "send_email",
        "Send an email message to a recipient.",
        {"type": "object", "properties": {"to": {"type": "string"}, "subject": {"type": "string"}}},
    ),
    doc_from_schema(
        "stock_quote",
        "Latest stock price for a ticker symbol on an exchange.",
        {"type": "object", "properties": {"ticker": {"type": "string"}}},
    ),
    doc_from_schema(
        "translate_text",
        "Translate text from one language into another language.",
        {
            "type": "object",
            "properties": {"text": {"type": "string"}, "target": {"type": "string", "enum": ["french", "german"]}},
        },
    ),
    doc_from_schema("rent_car", "Rent a car for a trip.", {"type": "object", "properties": {}}),
    doc_from_schema(
        "create_calendar_event",
        "Create a meeting or appointment in the user's calendar.",
        {"type": "object", "properties": {"title": {"type": "string"}, "start": {"type": "string"}}},
    ),
]
QUERIES = {
    "weather forecast for Oslo tomorrow": "weather_forecast",
    "send an email to my boss": "send_email",
    "stock price of ACME": "stock_quote",
    "translate this text into German": "translate_text",
    "create a meeting in my calendar": "create_calendar_event",
}
POPULAR = "weather forecast email send stock price translate text language calendar meeting create city"
STUFFED = SearchDoc("everything_tool", "A helpful tool. " + " ".join([POPULAR] * 8))
NONSENSE = ["qwxzt vrrkp", "zzkjq plmvb xqw", "jjjjj kkkkk", "xkcdq wpfzv blorptk"]


# ------------------------------------------------------------------------------------------------
# Without the model


def test_without_the_extra_or_when_disabled_the_index_is_plain_bm25f() -> None:
    assert default_ranker({SEMANTIC_ENV: "off"}) is None
    usable, why = semantic_status({SEMANTIC_ENV: "off"})
    assert usable is False and SEMANTIC_ENV in why
    index = SearchIndex.build(HONEST, ranker=default_ranker({SEMANTIC_ENV: "off"}))
    assert index.ranker is None
    assert index.search("weather", top_k=3) == index.lexical(parse_query("weather"), top_k=3)


def test_a_missing_model_folder_is_a_clear_unavailable_error_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(SemanticUnavailable, match="cannot load the model"):
        load_embedder(tmp_path)


def test_a_corrupt_weights_file_is_a_clear_unavailable_error(tmp_path: Path, embedder: object) -> None:
    base = tmp_path / "model"
    (base / "weights").mkdir(parents=True)
    (base / "tokenizers").mkdir()
    real = semantic.model_dir()
    shutil.copy(real.joinpath(*semantic.TOKENIZER), base.joinpath(*semantic.TOKENIZER))
    base.joinpath(*semantic.WEIGHTS).write_bytes(b"\x00" * 64)
    with pytest.raises(SemanticUnavailable, match="cannot load the model"):
        load_embedder(base)


def test_a_ranker_whose_model_vanished_falls_back_to_the_bm25f_order() -> None:
    def gone() -> semantic.StaticEmbedder:
        raise SemanticUnavailable("model removed")

    index = SearchIndex.build(HONEST, ranker=HybridRanker(gone))
    lexical = index.lexical(parse_query("weather city"), top_k=3)
    assert index.search("weather city", top_k=3) == lexical
    assert isinstance(index.ranker, HybridRanker) and index.ranker.failure == "model removed"


def test_tool_text_holds_name_words_description_parameters_enums_and_keywords() -> None:
    doc = doc_from_schema(
        "getUserProfile",
        "Read a profile.",
        {"type": "object", "properties": {"fmt": {"type": "string", "description": "Output", "enum": ["yaml"]}}},
        ["account"],
    )
    text = tool_text(doc)
    for part in ("get user profile", "Read a profile.", "account", "fmt: Output", "yaml"):
        assert part in text


# ------------------------------------------------------------------------------------------------
# Offline


def test_loading_and_searching_needs_no_network_no_home_and_never_imports_wordllama(
    tmp_path: Path, embedder: object
) -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a network namespace")
    home = tmp_path / "emptyhome"
    home.mkdir()
    code = (
        "import json, sys\n"
        "from tooldir.deferred.search import SearchDoc, SearchIndex\n"
        "from tooldir.deferred.ensemble import default_ranker\n"
        "r = default_ranker()\n"
        "docs = [SearchDoc(d['name'], d['description']) for d in json.loads(sys.argv[1])]\n"
        "i = SearchIndex.build(docs, ranker=r)\n"
        "hits = [h.name for h in i.search('vehicle rental', top_k=2)]\n"
        "print(json.dumps({'ranker': type(r).__name__, 'hits': hits,"
        " 'imported': sorted(m for m in ('wordllama', 'requests', 'huggingface_hub') if m in sys.modules)}))\n"
    )
    docs = json.dumps([{"name": d.name, "description": d.description} for d in HONEST])
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", ""),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TOOLDIR_SEMANTIC": "hybrid",  # the ensemble's own proof: tests/unit/search/test_ensemble.py
    }
    out = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", code, docs],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data == {"ranker": "HybridRanker", "hits": ["rent_car"], "imported": []}
    assert list(home.iterdir()) == []  # nothing written to (or cached in) HOME


# ------------------------------------------------------------------------------------------------
# The result contract with the hybrid


def _hybrid(embedder: semantic.StaticEmbedder, docs: list[SearchDoc] = HONEST) -> SearchIndex:
    return SearchIndex.build(docs, ranker=HybridRanker(embedder))


@pytest.mark.parametrize("query", NONSENSE)
def test_a_nonsense_query_still_misses_with_the_hybrid(embedder: semantic.StaticEmbedder, query: str) -> None:
    assert _hybrid(embedder).search(query, top_k=5) == []


def test_stop_words_alone_miss_with_the_hybrid(embedder: semantic.StaticEmbedder) -> None:
    assert _hybrid(embedder).search("the of and", top_k=5) == []


@pytest.mark.parametrize(("query", "expected"), QUERIES.items())
def test_the_hybrid_puts_the_right_tool_first(embedder: semantic.StaticEmbedder, query: str, expected: str) -> None:
    hits = _hybrid(embedder).search(query, top_k=3)
    assert hits[0].name == expected


def test_a_tool_sharing_no_word_with_the_query_is_found_by_meaning(embedder: semantic.StaticEmbedder) -> None:
    index = _hybrid(embedder)
    query = "vehicle rental"
    assert index.lexical(parse_query(query), top_k=5) == []  # BM25F alone misses ("rental" is not "rent")
    assert [h.name for h in index.search(query, top_k=1)] == ["rent_car"]
    weak = "notify my colleague by mail"  # send_email's cosine is under the threshold: a miss, not a guess
    assert index.lexical(parse_query(weak), top_k=5) == [] and index.search(weak, top_k=5) == []


def test_required_terms_still_filter_with_the_hybrid(embedder: semantic.StaticEmbedder) -> None:
    index = _hybrid(embedder)
    hits = index.search("send a message +email", top_k=5)
    assert [h.name for h in hits] == ["send_email"]
    assert index.search("weather +zebra", top_k=5) == []


def test_equal_fused_scores_are_ordered_by_name(embedder: semantic.StaticEmbedder) -> None:
    # digits are not embedded: the three tools have the same vector and the same BM25F score
    docs = [SearchDoc(n, "convert currency amounts") for n in ("fx_3", "fx_1", "fx_2")]
    hits = _hybrid(embedder, docs).search("currency", top_k=3)
    assert [h.name for h in hits] == ["fx_1", "fx_2", "fx_3"]
    assert len({h.score for h in hits}) == 1


def test_the_allow_filter_holds_for_semantic_candidates_too(embedder: semantic.StaticEmbedder) -> None:
    assert _hybrid(embedder).search("vehicle rental", top_k=5, allow=lambda n: n != "rent_car") == []


def _fused_reference(
    index: SearchIndex, query: str, k: int, allow: Callable[[str], bool] | None = None
) -> list[tuple[str, float]]:
    """The fusion as the module documents it, written plainly over names and Python floats."""
    ranker = index.ranker
    assert isinstance(ranker, HybridRanker)
    parsed = parse_query(query)
    text = semantic.query_text(parsed)
    lexical = {h.name: h.score for h in index.lexical(parsed, top_k=max(k, ranker.pool), allow=allow)}
    cos = dict(zip(ranker.catalog().names, ranker.cosines(text).tolist(), strict=True))
    candidates = dict.fromkeys(lexical)
    if not parsed.required and ranker.embedder.knows_any(text):
        by_meaning = [n for n, c in cos.items() if c >= ranker.min_cosine and (allow is None or allow(n))]
        candidates.update(dict.fromkeys(sorted(by_meaning, key=lambda n: (-cos[n], n))[: ranker.pool]))
    if not candidates:
        return []
    hi, lo = max(cos[n] for n in candidates), min(cos[n] for n in candidates)
    best = max(lexical.values(), default=0.0)
    a = ranker.alpha
    fused = {
        n: a * (lexical.get(n, 0.0) / best if best > 0 else 0.0)
        + (1 - a) * ((cos[n] - lo) / (hi - lo) if hi - lo > 1e-9 else 1.0)
        for n in candidates
    }
    return [(n, round(v, 6)) for n, v in sorted(fused.items(), key=lambda e: (-e[1], e[0]))[:k]]


def _catalog(size: int) -> list[SearchDoc]:
    """HONEST and variants of it (names kept apart, descriptions mixed): many near neighbours."""
    docs = list(HONEST)
    for i in range(size - len(docs)):
        a, b = HONEST[i % len(HONEST)], HONEST[(i * 7 + 3) % len(HONEST)]
        words = b.description.split()
        docs.append(
            SearchDoc(f"{a.name}_v{i}", f"{a.description} {' '.join(words[: 1 + i % len(words)])}", (), a.params)
        )
    return docs


def test_the_vectorised_fusion_ranks_exactly_like_the_documented_formula(embedder: semantic.StaticEmbedder) -> None:
    docs = _catalog(300)
    built = _hybrid(embedder, docs)
    edited = [SearchDoc("aaa_new_rental", "Hire a vehicle at the airport."), SearchDoc(docs[7].name, "Send a letter.")]
    updated = built.updated(edited, [docs[9].name, docs[30].name])  # slots no longer in name order
    even = set(updated.names()[::2])
    queries = [*QUERIES, "vehicle rental", "hire a car", "send a message +email", "weather +zebra", *NONSENSE]
    for index in (built, updated):
        for query in queries:
            for k in (1, 3, 25):
                for allow in (None, even.__contains__):
                    got = [(h.name, h.score) for h in index.search(query, top_k=k, allow=allow)]
                    assert got == _fused_reference(index, query, k, allow), (query, k, allow)


def test_ranking_given_the_pool_as_hits_equals_ranking_given_the_lexical_scores(
    embedder: semantic.StaticEmbedder,
) -> None:
    index = _hybrid(embedder, _catalog(120))
    ranker = index.ranker
    assert isinstance(ranker, HybridRanker)
    for query in [*QUERIES, "vehicle rental", "send a message +email"]:
        parsed = parse_query(query)
        pool = index.lexical(parsed, top_k=ranker.pool)
        assert ranker.rank(parsed, pool, 5) == ranker.rank(parsed, lexical_scores(index, parsed), 5)


def test_the_cosines_of_a_few_rows_equal_the_catalogs_to_the_bit(embedder: semantic.StaticEmbedder) -> None:
    index = _hybrid(embedder, _catalog(300))
    ranker = index.ranker
    assert isinstance(ranker, HybridRanker)
    cat = ranker.catalog()
    vector, known = embedder.query("weather forecast for a city")
    assert known
    unit = vector / np.linalg.norm(vector)
    full = ranker.cosines("weather forecast for a city")
    for size in (1, 2, 3, 5, 17, 63, 64, 65, 130):  # BLAS rounds a product differently by row count
        rows = np.arange(0, 300, 300 // size)[:size]
        assert ranker._cosines_at(cat, rows, unit).tobytes() == full[rows].tobytes(), size


@pytest.mark.parametrize("min_cosine", [0.3, 0.5, 0.65])
def test_the_bounding_passes_keep_every_tool_whose_cosine_reaches_the_threshold(
    embedder: semantic.StaticEmbedder, min_cosine: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semantic, "PRUNE_FROM", 0)  # bound even this small catalog
    index = SearchIndex.build(_catalog(600), ranker=HybridRanker(embedder, min_cosine=min_cosine))
    ranker = index.ranker
    assert isinstance(ranker, HybridRanker)
    cat = ranker.catalog()
    queries = [*QUERIES, "vehicle rental", "hire a car", "money", "language", *NONSENSE]
    units = [vector / np.linalg.norm(vector) for vector in (embedder.query(q)[0] for q in queries)]
    fulls = [ranker.cosines(q) for q in queries]
    for at in range(len(queries)):  # one unit, and several at once (a query with parts)
        for group in ([at], [at, (at + 1) % len(queries), (at + 5) % len(queries)]):
            got = ranker._reachable_of(cat, [units[i] for i in group])
            for i, (rows, cos) in zip(group, got, strict=True):
                full = fulls[i]
                assert set(np.flatnonzero(full >= min_cosine).tolist()) <= set(rows.tolist()), queries[i]
                assert cos.tobytes() == full[rows].tobytes(), queries[i]


def test_a_picky_allow_filter_still_finds_the_allowed_tool_by_meaning_among_many_equal_ones(
    embedder: semantic.StaticEmbedder,
) -> None:
    # digits are not embedded: 200 tools with one vector; the one allowed sorts last by name
    docs = [SearchDoc(f"rent_car_{i:03d}", "Rent a car for a trip.") for i in range(200)]
    index = _hybrid(embedder, docs)
    assert [h.name for h in index.search("vehicle rental", top_k=3)] == ["rent_car_000", "rent_car_001", "rent_car_002"]
    last = index.search("vehicle rental", top_k=3, allow=lambda n: n == "rent_car_199")
    assert [h.name for h in last] == ["rent_car_199"]


# ------------------------------------------------------------------------------------------------
# Stuffing


def test_the_stuffed_tool_captures_a_query_under_plain_bm25_so_the_drill_below_is_a_real_attack() -> None:
    plain = PlainBM25([*HONEST, STUFFED])
    captured = [q for q, expected in QUERIES.items() if plain.search(q, 1) != [expected]]
    assert captured  # one bag of words with k1 saturation only: "stock price of ACME" goes to the stuffer


@pytest.mark.parametrize("mode", ["bm25f", "hybrid"])
def test_a_description_stuffed_with_popular_words_captures_no_query(mode: str) -> None:
    # BM25F saturates per field and normalises the description by its length; the hybrid also
    # caps the lexical part at the query's best match and adds the (generic) stuffer's cosine
    ranker = HybridRanker(_model_or_skip()) if mode == "hybrid" else None
    index = SearchIndex.build([*HONEST, STUFFED], ranker=ranker)
    for query, expected in QUERIES.items():
        hits = index.search(query, top_k=3)
        assert hits[0].name == expected, (query, hits)
        scores = {h.name: h.score for h in hits}
        assert scores.get(STUFFED.name, 0.0) < 0.9 * scores[expected], (query, hits)


# ------------------------------------------------------------------------------------------------
# The embedding cache follows the index


def test_an_edit_re_embeds_one_tool_and_a_removal_none(embedder: semantic.StaticEmbedder) -> None:
    index = _hybrid(embedder)
    first = index.ranker
    assert isinstance(first, HybridRanker)
    first.catalog()
    assert first.embedded == len(HONEST)
    edited = SearchDoc("stock_quote", "Latest stock price and volume for a ticker symbol.")
    after = index.updated([edited], removals=["send_email"])
    assert isinstance(after.ranker, HybridRanker) and after.ranker is not first
    after.ranker.catalog()
    assert after.ranker.embedded == 1
    assert "send_email" not in after.ranker.catalog().names
    assert [h.name for h in after.search("stock volume", top_k=1)] == ["stock_quote"]
    assert index.search("send an email", top_k=1)[0].name == "send_email"  # the old index is untouched


def test_updates_between_searches_re_embed_only_the_edited_tools_and_rank_like_a_fresh_build(
    embedder: semantic.StaticEmbedder,
) -> None:
    docs = _catalog(200)
    index = _hybrid(embedder, docs)
    assert isinstance(index.ranker, HybridRanker)
    index.ranker.catalog()
    one = index.updated([SearchDoc(docs[3].name, "Hire a vehicle at the airport.")])  # no search in between
    two = one.updated([SearchDoc(docs[40].name, "Book a table at a restaurant.")], [docs[5].name])
    assert isinstance(two.ranker, HybridRanker)
    two.ranker.catalog()
    assert two.ranker.embedded == 2
    assert two.ranker._previous is None  # the old catalog is not kept alive once this one is built
    fresh = _hybrid(embedder, [d for n in two.names() if (d := two.doc(n)) is not None])
    assert isinstance(fresh.ranker, HybridRanker)
    assert fresh.ranker.catalog().matrix.tobytes() == two.ranker.catalog().matrix.tobytes()
    for query in ("vehicle rental", "restaurant reservation", *QUERIES):
        assert two.search(query, top_k=5) == fresh.search(query, top_k=5)


def test_without_the_package_the_default_is_bm25f_and_the_reason_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(semantic.importlib.util, "find_spec", lambda name: None)
    assert default_ranker({}) is None
    usable, why = semantic_status({}, load=False)
    assert usable is False and "tooldir[semantic]" in why


def test_without_the_package_a_session_never_imports_the_semantic_module(tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'wordllama' else real(name, *a)\n"
        "from tooldir.snapshot.loader import Loader, make_config\n"
        "from tooldir.deferred.session import IndexFollower\n"
        "from tooldir.snapshot.store import SnapshotStore\n"
        f"config = make_config(project=None, user_dirs=[], state_dir={str(tmp_path / 'state')!r})\n"
        "follower = IndexFollower(SnapshotStore(Loader(config).load()))\n"
        "assert follower.current[1].ranker is None\n"
        "print(sorted(m for m in ('wordllama', 'tokenizers', 'safetensors', 'tooldir.deferred.semantic') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------------------
# Issue 26: the calibrated constants, query parts, part coverage, the ranker choice


def test_the_rankers_constants_are_the_ones_the_calibration_chose_and_wrote_down() -> None:
    report = json.loads((Path(__file__).resolve().parents[3] / "benchmarks" / "calibrate_fusion.json").read_text())
    chosen = report["chosen"]
    assert (
        chosen["alpha"],
        chosen["pool"],
        chosen["min_cosine"],
    ) == (semantic.ALPHA, semantic.POOL, semantic.MIN_COSINE)
    assert report["model"]["dim"] == semantic.DIM == 256
    assert chosen["shape"] == "parts+cover"  # what HybridRanker() does by default
    ranker = HybridRanker(load_embedder)
    assert ranker.parts and ranker.cover
    from tooldir.deferred.search import Bm25fParams

    assert dict(Bm25fParams().weights) == chosen["bm25f"]["weights"]
    assert dict(Bm25fParams().b) == chosen["bm25f"]["b"]


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        ("weather forecast for Oslo tomorrow", []),
        (
            "Get the weather in Oslo, and then send an email to my boss.",
            ["Get the weather in Oslo", "send an email to my boss."],
        ),
        (
            "Find the stock price of ACME. Translate the report into German!",
            ["Find the stock price of ACME.", "Translate the report into German!"],
        ),
        ("Rent a car, then book a hotel room", ["Rent a car", "book a hotel room"]),
        ("Rent a car, and go", []),  # a part of fewer than three words is no part
        ("Book me a car, but also a very cheap one", ["Book me a car", "also a very cheap one"]),
    ],
)
def test_a_query_is_cut_into_parts_at_sentence_ends_and_joining_commas(query: str, parts: list[str]) -> None:
    assert semantic.query_parts(query) == parts


def test_with_several_parts_each_parts_best_tool_comes_before_any_other(embedder: semantic.StaticEmbedder) -> None:
    docs = _catalog(120)
    index = _hybrid(embedder, docs)
    query = "Check the weather forecast for Oslo tomorrow, and then send an email to my boss about it."
    hits = index.search(query, top_k=5)
    assert {h.name for h in hits[:2]} == {"weather_forecast", "send_email"}, hits
    assert all(h.score > 1 for h in hits[:2]) and all(h.score <= 1 for h in hits[2:])
    whole = SearchIndex.build(docs, ranker=HybridRanker(embedder, cover=False))
    assert [h.name for h in whole.search(query, top_k=5)] != [h.name for h in hits]  # the coverage did something
    assert [(h.name, h.score) for h in hits] == sorted(((h.name, h.score) for h in hits), key=lambda e: (-e[1], e[0]))


def test_a_part_with_no_evidence_promotes_no_tool(embedder: semantic.StaticEmbedder) -> None:
    index = _hybrid(embedder)
    hits = index.search("Translate this text into German, and then qwxzt vrrkp blorptk", top_k=5)
    assert hits[0].name == "translate_text"
    assert [h.name for h in hits if h.score > 1] == ["translate_text"]


def test_a_query_with_a_required_term_is_not_cut_into_parts(embedder: semantic.StaticEmbedder) -> None:
    index = _hybrid(embedder)
    hits = index.search("Check the weather in Oslo, and then send a message +email", top_k=5)
    assert [h.name for h in hits] == ["send_email"] and hits[0].score <= 1


@pytest.mark.parametrize(
    ("value", "usable"),
    [
        ("", True),
        ("hybrid", True),
        ("HYBRID", True),
        ("off", False),
        ("bm25f", False),
        ("ensemble", True),  # the ensemble, or the hybrid when [semantic-plus] is not there
        ("hybird", False),
    ],
)
def test_tooldir_semantic_chooses_the_ranker_and_an_unknown_value_is_bm25f_with_the_reason(
    embedder: semantic.StaticEmbedder, value: str, usable: bool
) -> None:
    got, why = semantic_status({SEMANTIC_ENV: value}, load=False)
    assert got is usable
    assert (default_ranker({SEMANTIC_ENV: value}) is not None) is usable
    if value == "hybird":
        assert value in why and "off, hybrid, ensemble" in why


# ------------------------------------------------------------------------------------------------
# The bounded passes (issue 26's query cost) rank exactly like the full product


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(1, 400),
    min_cosine=st.sampled_from([0.3, 0.5, 0.65, 0.8]),
)
def test_the_bounded_passes_rank_random_catalogs_exactly_like_the_full_product(
    embedder: semantic.StaticEmbedder, monkeypatch: pytest.MonkeyPatch, seed: int, size: int, min_cosine: float
) -> None:
    monkeypatch.setattr(semantic, "PRUNE_FROM", 0)
    rng = random.Random(seed)
    vocabulary = sorted(w for w in embedder._whole if w.isalpha() and len(w) > 3)
    topics = [rng.sample(vocabulary, 12) for _ in range(max(1, size // 20))]  # near neighbours share words

    def text(topic: list[str], lo: int, hi: int) -> str:
        return " ".join(rng.choice(topic if rng.random() < 0.7 else vocabulary) for _ in range(rng.randint(lo, hi)))

    docs = [SearchDoc(f"t{i:03d}_{rng.choice(vocabulary)}", text(rng.choice(topics), 2, 30)) for i in range(size)]
    fast = SearchIndex.build(docs, ranker=HybridRanker(embedder, min_cosine=min_cosine))
    plain = SearchIndex.build(docs, ranker=HybridRanker(embedder, min_cosine=min_cosine))
    assert isinstance(plain.ranker, HybridRanker)
    plain.ranker.prune = False
    queries = [text(rng.choice(topics), 1, 6) for _ in range(8)]
    queries += [". ".join(text(rng.choice(topics), 3, 5) for _ in range(3)) + ", and then ask" for _ in range(4)]
    queries += [f"+{docs[0].description.split()[0]} {text(rng.choice(topics), 1, 3)}", NONSENSE[0]]
    for query in queries:
        for k in (1, 20):
            assert fast.search(query, top_k=k) == plain.search(query, top_k=k), (query, k)
    ranker = fast.ranker
    assert isinstance(ranker, HybridRanker)
    cat = ranker.catalog()
    units = [u for u in (semantic._unit(embedder.query(q)[0]) for q in queries) if u is not None]
    for at in range(0, len(units), 3):  # the tools by meaning alone, for one unit and several at once
        group = units[at : at + 3]
        for (rows, cos), u in zip(ranker._reachable_of(cat, group), group, strict=True):
            want_rows, want_cos = ranker._plain_reach(cat, u)
            ok = cos >= min_cosine
            assert rows[ok].tolist() == want_rows[want_cos >= min_cosine].tolist()
            assert cos[ok].tobytes() == want_cos[want_cos >= min_cosine].tobytes()
