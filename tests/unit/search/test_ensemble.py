"""The ``[semantic-plus]`` ensemble ranker (tooldir.deferred.ensemble, issue 26 items 2 and 5):
its fusion, its background embedding behind the fallback ranker, its persistent vector cache, and
that no dependency writes under HOME.

Tests that need the extra's models skip only when they are not installed AND
``TOOLDIR_REQUIRE_SEMANTIC`` is unset; ``scripts/test`` sets it, so there they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from tooldir.deferred import ensemble
from tooldir.deferred.ensemble import EnsembleRanker, load_ensemble
from tooldir.deferred.search import Hit, SearchDoc, SearchIndex, doc_from_schema, parse_query
from tooldir.deferred.semantic import SemanticUnavailable, tool_text
from tooldir.deferred.vectorcache import VectorCache

REQUIRE = "TOOLDIR_REQUIRE_SEMANTIC"

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
    doc_from_schema("rent_car", "Rent a car for a trip.", {"type": "object", "properties": {}}),
    doc_from_schema(
        "create_calendar_event",
        "Create a meeting or appointment in the user's calendar.",
        {"type": "object", "properties": {"title": {"type": "string"}, "start": {"type": "string"}}},
    ),
]
NONSENSE = ["qwxzt vrrkp", "zzkjq plmvb xqw", "jjjjj kkkkk"]


def _models_or_skip() -> list[ensemble.Embedder]:
    try:
        return load_ensemble()
    except SemanticUnavailable as exc:
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but the ensemble is unavailable: {exc}")
        pytest.skip(f"the [semantic-plus] extra is not installed ({exc}); set {REQUIRE}=1 to require it")


@pytest.fixture(scope="module")
def models() -> list[ensemble.Embedder]:
    return _models_or_skip()


class Fake:
    """A deterministic embedder: a text's row is the sum of fixed vectors of its known words."""

    def __init__(self, name: str, table: dict[str, list[float]], gate: threading.Event | None = None) -> None:
        self.name = name
        self.dim = len(next(iter(table.values())))
        self.table = table
        self.gate = gate
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.gate is not None:
            assert self.gate.wait(60)
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace(":", " ").replace(",", " ").split():
                if w in self.table:
                    out[i] += np.asarray(self.table[w], dtype=np.float32)
        return out


DOCS = [SearchDoc("alpha_tool", "apples"), SearchDoc("beta_tool", "bananas"), SearchDoc("gamma_tool", "cherries")]
# model one: "fruit" is nearest apples; model two: nearest bananas
ONE = {"apples": [1, 0, 0], "bananas": [0, 1, 0], "cherries": [0, 0, 1], "fruit": [1, 0.5, 0]}
TWO = {"apples": [1, 0, 0], "bananas": [0, 1, 0], "cherries": [0, 0, 1], "fruit": [0.2, 1, 0]}


def _fused(min_cosine: float = 0.1, **kw: object) -> SearchIndex:
    r = EnsembleRanker([Fake("one", ONE), Fake("two", TWO)], background=False, min_cosine=min_cosine, **kw)  # type: ignore[arg-type]
    return SearchIndex.build(DOCS, ranker=r)


# ------------------------------------------------------------------------------------------------
# Fusion (fake models: the formula itself)


def test_each_models_cosines_are_min_max_normalised_then_averaged() -> None:
    hits = _fused(min_cosine=-1.0).search("fruit", top_k=3)
    # no term matches: lexical part 0; per model, min-max over the candidates (every tool here)
    c1 = np.array([1, 0.5, 0]) / np.linalg.norm([1, 0.5, 0])
    c2 = np.array([0.2, 1, 0]) / np.linalg.norm([0.2, 1, 0])
    mm = lambda v: (v - v.min()) / (v.max() - v.min())  # noqa: E731
    expect = (1 - ensemble.ALPHA) * (mm(c1) + mm(c2)) / 2  # (.6, .75, 0): neither model alone says beta
    assert [h.name for h in hits] == ["beta_tool", "alpha_tool", "gamma_tool"]
    assert [h.score for h in hits] == [round(float(expect[i]), 6) for i in (1, 0, 2)]


def test_the_lexical_part_is_fused_at_alpha() -> None:
    hits = _fused(alpha=1.0).search("cherries fruit", top_k=1)
    assert hits == [Hit("gamma_tool", 1.0)]


def test_required_terms_still_filter_with_the_ensemble() -> None:
    assert [h.name for h in _fused().search("fruit +cherries", top_k=3)] == ["gamma_tool"]


def test_a_query_no_model_knows_misses() -> None:
    assert _fused().search("zzzz", top_k=3) == []


# ------------------------------------------------------------------------------------------------
# Background embedding: the fallback answers, nothing waits


def test_a_search_answers_with_the_fallback_while_the_catalog_is_embedded_in_the_background() -> None:
    gate = threading.Event()
    slow = Fake("slow", ONE, gate)
    ranker = EnsembleRanker([slow], min_cosine=0.1)  # type: ignore[list-item]
    index = SearchIndex.build(DOCS, ranker=ranker)
    live = index.ranker
    assert isinstance(live, EnsembleRanker)
    # the model is blocked: the search returns at once, with BM25F (no fallback ranker given)
    assert index.search("fruit", top_k=3) == []  # BM25F knows no "fruit"
    assert [h.name for h in index.search("apples", top_k=3)] == ["alpha_tool"]
    assert not live.ready()
    gate.set()
    assert live.wait(60)
    assert [h.name for h in index.search("fruit", top_k=1)] == ["alpha_tool"]  # now by meaning


def test_a_model_that_fails_while_embedding_leaves_the_fallback_answering() -> None:
    class Broken(Fake):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            raise RuntimeError("boom")

    ranker = EnsembleRanker([Broken("broken", ONE)])  # type: ignore[list-item]
    index = SearchIndex.build(DOCS, ranker=ranker)
    live = index.ranker
    assert isinstance(live, EnsembleRanker)
    assert [h.name for h in index.search("apples", top_k=3)] == ["alpha_tool"]
    assert not live.wait(60)
    assert live.failure == "RuntimeError: boom"
    assert [h.name for h in index.search("apples", top_k=3)] == ["alpha_tool"]


# ------------------------------------------------------------------------------------------------
# The vector cache


def test_vectors_are_cached_in_the_state_dir_0600_and_reused_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Fake("one", ONE)
    r1 = EnsembleRanker([first], background=False, cache=VectorCache(state))  # type: ignore[list-item]
    i1 = SearchIndex.build(DOCS, ranker=r1)
    i1.search("apples", top_k=1)
    files = list((state / "vectors").iterdir())
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "vectors").stat().st_mode) == 0o700
    again = Fake("one", ONE)
    r2 = EnsembleRanker([again], background=False, cache=VectorCache(state))  # type: ignore[list-item]
    i2 = SearchIndex.build(DOCS, ranker=r2)
    assert i2.search("apples", top_k=3) == i1.search("apples", top_k=3)
    assert again.calls == [1]  # only the query was embedded: the catalog came from the cache
    assert isinstance(i2.ranker, EnsembleRanker) and i2.ranker.embedded == 0


def test_the_cache_is_keyed_by_model_and_text_digest(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    cache.store("m1", 3, {b"k" * 32: np.array([1, 0, 0], dtype=np.float32)})
    assert list(cache.load("m1", 3)) == [b"k" * 32]
    assert cache.load("m2", 3) == {}
    assert cache.load("m1", 4) == {}  # another width is another cache


def test_the_cache_keeps_the_newest_vectors_within_its_bound(tmp_path: Path) -> None:
    record = 32 + 4 * 3
    cache = VectorCache(tmp_path, max_bytes=2 * record)
    for i in range(3):
        cache.store("m", 3, {bytes([i]) * 32: np.array([1, i, 0], dtype=np.float32)})
    assert sorted(cache.load("m", 3)) == [b"\x01" * 32, b"\x02" * 32]
    assert cache.path("m").stat().st_size <= 2 * record + 64


@pytest.mark.parametrize("damage", ["truncated", "nan", "other_header"])
def test_a_damaged_cache_file_counts_as_empty(tmp_path: Path, damage: str) -> None:
    cache = VectorCache(tmp_path)
    cache.store("m", 3, {b"k" * 32: np.array([1, 0, 0], dtype=np.float32)})
    path = cache.path("m")
    data = path.read_bytes()
    if damage == "truncated":
        data = data[:-1]
    elif damage == "nan":
        data = data[:-4] + np.array([np.nan], dtype="<f4").tobytes()
    else:
        data = data.replace(b" 3 m", b" 3 x")
    path.write_bytes(data)
    assert cache.load("m", 3) == {}


def test_a_cache_file_another_user_owns_is_ignored_and_left_alone(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    cache = VectorCache(tmp_path)
    cache.store("m", 3, {b"k" * 32: np.array([1, 0, 0], dtype=np.float32)})
    path = cache.path("m")
    before = path.read_bytes()
    os.chown(path, 12345, 12345)
    assert cache.load("m", 3) == {}
    assert cache.problem is not None and str(path) in cache.problem
    cache.store("m", 3, {b"j" * 32: np.array([0, 1, 0], dtype=np.float32)})
    assert path.read_bytes() == before and path.stat().st_uid == 12345


def test_a_cache_vector_is_only_a_vector_renormalised_on_read(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    cache.store("m", 3, {b"k" * 32: np.array([3, 4, 0], dtype=np.float32)})
    (vec,) = cache.load("m", 3).values()
    assert np.allclose(vec, [0.6, 0.8, 0])


# ------------------------------------------------------------------------------------------------
# The real models


def test_the_three_models_load_from_their_wheels(models: list[ensemble.Embedder]) -> None:
    assert [(m.name, m.dim) for m in models] == [
        ("wordllama-l2_supercat-256[:256]", 256),
        ("all-MiniLM-L6-v2-onnx-int8", 384),
        ("use-multilingual-v3-numpy", 512),
    ]
    for m in models:
        rows = m.embed(["send an email", ""])
        assert rows.shape == (2, m.dim) and np.isfinite(rows).all()


def _real(models: list[ensemble.Embedder], docs: list[SearchDoc] = HONEST) -> SearchIndex:
    return SearchIndex.build(docs, ranker=EnsembleRanker(models, background=False))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("weather forecast for Oslo tomorrow", "weather_forecast"),
        ("send an email to my boss", "send_email"),
        ("hire a vehicle for my holiday", "rent_car"),
        ("latest share price of ACME", "stock_quote"),
    ],
)
def test_the_ensemble_puts_the_right_tool_first(models: list[ensemble.Embedder], query: str, expected: str) -> None:
    assert _real(models).search(query, top_k=3)[0].name == expected


@pytest.mark.parametrize("query", NONSENSE)
def test_a_nonsense_query_still_misses_with_the_ensemble(models: list[ensemble.Embedder], query: str) -> None:
    assert _real(models).search(query, top_k=5) == []


def test_the_minilm_model_file_is_checked_against_its_pinned_digest(
    models: list[ensemble.Embedder], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ensemble, "MINILM_SHA256", "0" * 64)
    with pytest.raises(SemanticUnavailable, match="SHA-256 differs"):
        ensemble.MiniLMEmbedder.load()


CHILD = """
import json, os, sys
from tooldir.deferred.ensemble import EnsembleRanker, load_ensemble
from tooldir.deferred.search import SearchDoc, SearchIndex
from tooldir.deferred.vectorcache import VectorCache
docs = [SearchDoc(d['name'], d['description']) for d in json.loads(sys.argv[1])]
r = EnsembleRanker(load_ensemble(), background=False, cache=VectorCache(os.environ['TOOLDIR_STATE_DIR']))
i = SearchIndex.build(docs, ranker=r)
print(json.dumps([h.name for h in i.search('hire a vehicle', top_k=1)]))
"""


def _run_in(home: Path, code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"HOME": str(home), "PATH": os.environ.get("PATH", "")}
    # offline: in a network namespace of its own when this runs as root with unshare(1)
    offline = ["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else []
    return subprocess.run(
        [*offline, sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=300,
    )


def test_loading_and_searching_writes_nothing_under_an_empty_read_only_home(
    tmp_path: Path, models: list[ensemble.Embedder]
) -> None:
    # the control: onnxruntime imported as a host would, without tooldir, writes under HOME
    control = tmp_path / "control"
    control.mkdir()
    out = _run_in(control, "import onnxruntime")
    assert out.returncode == 0, out.stderr
    assert any(p.is_file() for p in control.rglob("*")), "onnxruntime no longer writes under HOME on import"
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)  # read-only (root ignores the bits: the listing below is the proof)
    state = tmp_path / "state"
    docs = json.dumps([{"name": d.name, "description": d.description} for d in HONEST])
    out = _run_in(home, CHILD, docs, env={"TOOLDIR_STATE_DIR": str(state)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["rent_car"]
    assert list(home.rglob("*")) == []
    assert len(list((state / "vectors").iterdir())) == 3  # the vectors went to the state dir instead


def test_the_tool_text_embedded_is_the_hybrids() -> None:
    fake = Fake("one", ONE)
    r = EnsembleRanker([fake], background=False)  # type: ignore[list-item]
    index = SearchIndex.build(DOCS, ranker=r)
    assert isinstance(index.ranker, EnsembleRanker)
    cat = index.ranker.catalog()
    assert cat.keys == tuple(ensemble._key(tool_text(d)) for d in sorted(DOCS, key=lambda d: d.name))
    assert parse_query("fruit").terms


# ------------------------------------------------------------------------------------------------
# TOOLDIR_SEMANTIC chooses; unset is the best installed


@pytest.mark.parametrize(
    ("value", "kind"),
    [("", "EnsembleRanker"), ("ensemble", "EnsembleRanker"), ("hybrid", "HybridRanker"), ("off", "NoneType")],
)
def test_tooldir_semantic_chooses_the_ranker_and_unset_is_the_ensemble_when_installed(
    models: list[ensemble.Embedder], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, kind: str
) -> None:
    from tooldir.deferred.ensemble import default_ranker
    from tooldir.deferred.semantic import SEMANTIC_ENV

    monkeypatch.setenv("TOOLDIR_STATE_DIR", str(tmp_path / "state"))
    ranker = default_ranker({SEMANTIC_ENV: value} if value else {})
    assert type(ranker).__name__ == kind
    if isinstance(ranker, EnsembleRanker):
        assert type(ranker.fallback).__name__ == "HybridRanker"  # what answers until the catalog is embedded
        assert ranker.cache is not None and ranker.cache.state_dir == tmp_path / "state"


def test_without_the_extra_the_ensemble_choice_is_the_hybrid(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ensemble.importlib.util.find_spec
    monkeypatch.setattr(
        ensemble.importlib.util, "find_spec", lambda name: None if name == ensemble.USE_PACKAGE else real(name)
    )
    from tooldir.deferred.ensemble import default_ranker
    from tooldir.deferred.semantic import SEMANTIC_ENV

    usable, why = ensemble.ensemble_status(load=False)
    assert not usable and "tooldir[semantic-plus]" in why
    assert type(default_ranker({SEMANTIC_ENV: "ensemble"})).__name__ in {"HybridRanker", "NoneType"}


def test_the_ensembles_constants_are_the_ones_the_calibration_chose_and_wrote_down() -> None:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "calibrate_fusion_ensemble.json"
    report = json.loads(path.read_text())
    chosen = report["chosen"]
    assert (chosen["alpha"], chosen["pool"], chosen["min_cosine"]) == (
        ensemble.ALPHA,
        ensemble.POOL,
        ensemble.MIN_COSINE,
    )
    assert [m["name"] for m in report["models"]] == [
        "wordllama-l2_supercat-256[:256]",
        ensemble.MiniLMEmbedder.name,
        ensemble.UseEmbedder.name,
    ]
    assert set(report["data"]) == {"sealtools", "bfcl"}
    assert all(d["train_queries"] > 0 for d in report["data"].values())  # training splits only, by name
