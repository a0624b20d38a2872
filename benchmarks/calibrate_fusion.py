"""Choose the hybrid ranker's constants on TRAINING splits only, and write what it chose with its data.

One command: ``python3 benchmarks/calibrate_fusion.py`` (``--json`` prints the report; ``--write``
also writes it to ``benchmarks/calibrate_fusion.json``, which ``tooldir/deferred/semantic.py``'s constants
must match: tests/unit/search/test_semantic.py checks it).

Calibration sets (the only labelled data this project has; ToolLens and MetaTool, named by issue
26, are not reachable offline and no package ships them): Seal-Tools' ``dev`` split and the
training half of BFCL (a query is in training when the first byte of SHA-256 of its ``id`` is
even: :func:`tooldir.deferred.evaluate.split_of`). Test splits are never read here; the README reports
them. Because these two sets are also the regression check, the grid is kept to the region an
outside calibration found on other data (issue 26: alpha .2-.5, pool 20 or 50, the two BM25F
field weightings); this script only chooses inside it.

Objective: the mean over the sets of ``(nDCG@10 + recall@5) / 2`` (not a maximin); ties go to the
larger alpha (more BM25F), then the smaller pool. The miss threshold is the 99th percentile of
the best cosine that word salads (three random whole-word tokens of the model's vocabulary)
reach with any tool of either catalog, rounded up to 0.05; the report also gives how many of the
training queries' gold tools that no query term matches fall below it (what the threshold costs)
and checks that random letter strings never pass the known-word gate. Cheap on purpose (the
machine is shared): each catalog is embedded once, BM25F scores are computed once per query and
weighting, and the grid has few points.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import string
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from tooldir.deferred.evaluate import read_queries, read_tools, score_rankings, split_of
from tooldir.deferred.search import Bm25fParams, SearchIndex, lexical_scores, parse_query
from tooldir.deferred.semantic import DIM, FULL_WEIGHT, MIN_PART_WORDS, HybridRanker, load_embedder

EVAL = next(
    (p / "shared" / "eval" for p in Path(__file__).resolve().parents if (p / "shared" / "eval").is_dir()),
    Path(__file__).resolve().parents[2] / "shared" / "eval",
)  # beside the checkout (or a worktree folder's parent)
OUT = Path(__file__).resolve().with_suffix(".json")
SETS = ("sealtools", "bfcl")
ALPHAS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
POOLS = (20, 50)
SHAPES = (("whole", False, False), ("parts", True, False), ("parts+cover", True, True))
WEIGHTINGS: dict[str, dict[str, dict[str, float]]] = {
    "landed": {
        "weights": {"name": 3.0, "description": 1.0, "keywords": 1.5, "param_names": 1.0, "param_descriptions": 0.4},
        "b": {"name": 0.3, "description": 0.75, "keywords": 0.5, "param_names": 0.5, "param_descriptions": 0.75},
    },
    "issue26": {
        "weights": {"name": 2.0, "description": 1.0, "keywords": 1.5, "param_names": 1.5, "param_descriptions": 0.8},
        "b": {"name": 0.3, "description": 0.5, "keywords": 0.5, "param_names": 0.5, "param_descriptions": 0.75},
    },
}


def params_of(weighting: str) -> Bm25fParams:
    w = WEIGHTINGS[weighting]
    return Bm25fParams(weights=MappingProxyType(dict(w["weights"])), b=MappingProxyType(dict(w["b"])))


def salad(rng: random.Random, vocabulary: list[str], n: int) -> list[str]:
    return [" ".join(rng.choice(vocabulary) for _ in range(3)) for _ in range(n)]


def nonsense(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 9))) for _ in range(3)]
        out.append(" ".join(words))
    return out


def objective(m: dict[str, float]) -> float:
    return (m["nDCG@10"] + m["recall@5"]) / 2


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def choose(grid: dict[str, dict[str, dict[str, float]]], threshold: float) -> dict[str, Any]:
    """The configuration with the best mean objective. A BM25F weighting is eligible only if
    BM25F alone does not lose with it (BM25F alone is what every host without the extra, or
    with ``TOOLDIR_SEMANTIC=off``, gets): its mean objective is at least the landed one's."""
    mean = {k: sum(objective(grid[s][k]) for s in SETS) / len(SETS) for k in grid[SETS[0]]}
    eligible = {w for w in WEIGHTINGS if mean[f"{w}/bm25f"] >= mean["landed/bm25f"]}
    keys = [k for k in grid[SETS[0]] if not k.endswith("/bm25f") and k.split("/")[0] in eligible]

    def rank_key(k: str) -> tuple[float, float, float]:
        _, _, pool, alpha = k.split("/")
        return (round(mean[k], 4), float(alpha), -float(pool))

    best = max(keys, key=rank_key)
    weighting, shape, pool, alpha = best.split("/")
    return {
        "chosen": {
            "bm25f_weighting": weighting,
            "bm25f": WEIGHTINGS[weighting],
            "shape": shape,
            "pool": int(pool),
            "alpha": float(alpha),
            "min_cosine": threshold,
        },
        "chosen_mean_objective": round(mean[best], 4),
        "bm25f_mean_objective": {w: round(mean[f"{w}/bm25f"], 4) for w in WEIGHTINGS},
        "eligible_weightings": sorted(eligible),
        "mean_objective": {k: round(v, 4) for k, v in mean.items()},
    }


def calibrate() -> dict[str, Any]:
    embedder = load_embedder()
    vocabulary = sorted(w for w in embedder._whole if w.isalpha() and w.islower() and len(w) >= 4)
    rng = random.Random(15)
    salads = salad(rng, vocabulary, 500)
    gated = [embedder.knows_any(text) for text in nonsense(rng, 300)]
    grid: dict[str, dict[str, dict[str, float]]] = {}
    data: dict[str, Any] = {}
    salad_best: list[float] = []
    gold_unmatched: list[float] = []
    loaded = {}
    for name in SETS:  # first the miss threshold: the catalogs' vectors, the salads' best cosines
        tools, qfile = EVAL / name / "tools.jsonl", EVAL / name / "queries.jsonl"
        docs = read_tools(tools)
        queries = [q for q in read_queries(qfile, {d.name for d in docs}) if split_of(q) == "train"]
        data[name] = {
            "tools": len(docs),
            "train_queries": len(queries),
            "multi_tool_queries": sum(len(q.relevant) > 1 for q in queries),
            "files": {p.name: digest(p) for p in (tools, qfile)},
        }
        parsed = [parse_query(q.query) for q in queries]
        first = HybridRanker(embedder).follow(SearchIndex.build(docs))
        pos = first.catalog().position
        for q, p in zip(queries, parsed, strict=True):
            lx = lexical_scores(first._index, p) if first._index is not None else None
            found = set(lx.names_of(lx.candidates()[0].tolist())) if lx is not None else set()
            cos = first.cosines(q.query)
            gold_unmatched.extend(float(cos[pos[r]]) for r in q.relevant if r not in found)
        salad_best.extend(float(np.max(first.cosines(text))) for text in salads)
        loaded[name] = (docs, queries, parsed, first)
    p99 = float(np.percentile(salad_best, 99))
    threshold = math.ceil(p99 * 20) / 20
    lost = sum(c < threshold for c in gold_unmatched) / max(len(gold_unmatched), 1)
    for name in SETS:
        docs, queries, parsed, first = loaded[name]
        table: dict[str, dict[str, float]] = {}
        for weighting in WEIGHTINGS:
            base = SearchIndex.build(docs, params=params_of(weighting))
            lexical = [lexical_scores(base, p) for p in parsed]
            m = score_rankings(queries, [[h.name for h in lx.top(10)] for lx in lexical])
            table[f"{weighting}/bm25f"] = {"nDCG@10": m["nDCG@10"], "recall@5": m["recall@5"]}
            ranker = HybridRanker(embedder, min_cosine=threshold, _cache=first._cache).follow(base)
            for shape, parts, cover in SHAPES:
                for pool in POOLS:
                    for alpha in ALPHAS:
                        tuned = ranker.tuned(alpha=alpha, pool=pool, parts=parts, cover=cover)
                        ranked = [
                            [h.name for h in tuned.rank(p, lx, 10)] for p, lx in zip(parsed, lexical, strict=True)
                        ]
                        m = score_rankings(queries, ranked)
                        table[f"{weighting}/{shape}/{pool}/{alpha}"] = {
                            "nDCG@10": m["nDCG@10"],
                            "recall@5": m["recall@5"],
                        }
        grid[name] = table
    chosen = choose(grid, threshold)
    return {
        "what": "benchmarks/calibrate_fusion.py: the hybrid ranker's constants, chosen on training splits only",
        "objective": "mean over the sets of (nDCG@10 + recall@5) / 2",
        "data": data,
        "model": {"dim": DIM, "vector": "one vector of the whole tool text (tooldir.deferred.semantic.tool_text)"},
        "fixed": {"full_weight": FULL_WEIGHT, "min_part_words": MIN_PART_WORDS},
        **chosen,
        "salad_best_cosine_p99": round(p99, 4),
        "salad_best_cosine_max": round(max(salad_best), 4),
        "letter_strings_passing_the_known_word_gate": round(sum(gated) / len(gated), 4),
        "gold_without_lexical_match": len(gold_unmatched),
        "share_of_those_below_threshold": round(lost, 4),
        "grid": grid,
    }


# ------------------------------------------------------------------------------------------------
# The [semantic-plus] ensemble (tooldir.deferred.ensemble): its alpha and miss threshold, on the
# same training splits, the same objective; written to calibrate_fusion_ensemble.json. Each model
# embeds each catalog once: the vectors go to a vector cache (TOOLDIR_CALIBRATE_STATE, default
# /tmp/tooldir-calibrate-state), so a second run embeds only the queries.

ENSEMBLE_OUT = OUT.with_name("calibrate_fusion_ensemble.json")
ENSEMBLE_ALPHAS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7)


def calibrate_ensemble() -> dict[str, Any]:
    import os

    from tooldir.deferred import ensemble
    from tooldir.deferred.ensemble import POOL, EnsembleRanker, load_ensemble
    from tooldir.deferred.vectorcache import VectorCache

    ensemble.QUERY_MEMO = 1 << 20  # every training query is embedded once, not once per alpha

    models = load_ensemble()
    wordllama = load_embedder()
    vocabulary = sorted(w for w in wordllama._whole if w.isalpha() and w.islower() and len(w) >= 4)
    rng = random.Random(15)
    salads = salad(rng, vocabulary, 300)
    cache = VectorCache(Path(os.environ.get("TOOLDIR_CALIBRATE_STATE", "/tmp/tooldir-calibrate-state")))
    data: dict[str, Any] = {}
    salad_best: list[float] = []
    loaded = {}
    salad_rows = [_unit_rows(m.embed(salads)) for m in models]
    for name in SETS:
        tools, qfile = EVAL / name / "tools.jsonl", EVAL / name / "queries.jsonl"
        docs = read_tools(tools)
        queries = [q for q in read_queries(qfile, {d.name for d in docs}) if split_of(q) == "train"]
        data[name] = {
            "tools": len(docs),
            "train_queries": len(queries),
            "files": {p.name: digest(p) for p in (tools, qfile)},
        }
        index = SearchIndex.build(docs, ranker=EnsembleRanker(models, background=False, cache=cache))
        ranker = index.ranker
        assert isinstance(ranker, EnsembleRanker)
        cat = ranker.catalog()
        mean = np.mean([m @ s.T for m, s in zip(cat.matrices, salad_rows, strict=True)], axis=0)  # (tools, salads)
        salad_best.extend(mean.max(axis=0).tolist())
        parsed = [parse_query(q.query) for q in queries]
        loaded[name] = (queries, parsed, index, ranker)
    p99 = float(np.percentile(salad_best, 99))
    threshold = math.ceil(p99 * 20) / 20
    grid: dict[str, dict[str, dict[str, float]]] = {}
    for name in SETS:
        queries, parsed, index, ranker = loaded[name]
        lexical = [lexical_scores(index, p) for p in parsed]
        table: dict[str, dict[str, float]] = {}
        m = score_rankings(queries, [[h.name for h in lx.top(10)] for lx in lexical])
        table["bm25f"] = {"nDCG@10": m["nDCG@10"], "recall@5": m["recall@5"]}
        for alpha in ENSEMBLE_ALPHAS:
            tuned = ranker.tuned(alpha=alpha, min_cosine=threshold)
            ranked = [[h.name for h in tuned.rank(p, lx, 10)] for p, lx in zip(parsed, lexical, strict=True)]
            m = score_rankings(queries, ranked)
            table[f"ensemble/{POOL}/{alpha}"] = {"nDCG@10": m["nDCG@10"], "recall@5": m["recall@5"]}
        grid[name] = table
    mean_obj = {k: sum(objective(grid[s][k]) for s in SETS) / len(SETS) for k in grid[SETS[0]]}
    best = max((k for k in mean_obj if k != "bm25f"), key=lambda k: (round(mean_obj[k], 4), float(k.split("/")[2])))
    return {
        "what": "benchmarks/calibrate_fusion.py --ensemble: the ensemble ranker's constants, training splits only",
        "objective": "mean over the sets of (nDCG@10 + recall@5) / 2",
        "models": [{"name": m.name, "dim": m.dim} for m in models],
        "data": data,
        "chosen": {"alpha": float(best.split("/")[2]), "pool": POOL, "min_cosine": threshold},
        "chosen_mean_objective": round(mean_obj[best], 4),
        "mean_objective": {k: round(v, 4) for k, v in mean_obj.items()},
        "salad_best_mean_cosine_p99": round(p99, 4),
        "salad_best_mean_cosine_max": round(max(salad_best), 4),
        "grid": grid,
    }


def _unit_rows(rows: Any) -> Any:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--write", action="store_true", help=f"write the report to {OUT.name}")
    parser.add_argument(
        "--choose-only", action="store_true", help=f"choose again from the grid in {OUT.name} (no search)"
    )
    parser.add_argument(
        "--ensemble", action="store_true", help=f"calibrate the [semantic-plus] ensemble ({ENSEMBLE_OUT.name})"
    )
    args = parser.parse_args()
    if args.ensemble:
        report = calibrate_ensemble()
        if args.write:
            ENSEMBLE_OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        if args.json:
            print(json.dumps(report, indent=2))
            return
        for k, v in report["mean_objective"].items():
            cells = " ".join(
                f"{s} {report['grid'][s][k]['nDCG@10']:.4f}/{report['grid'][s][k]['recall@5']:.4f}" for s in SETS
            )
            print(f"{k:>22s} {cells}  mean {v:.4f}")
        print(f"chosen: {report['chosen']} (mean objective {report['chosen_mean_objective']})")
        return
    if args.choose_only:
        report = json.loads(OUT.read_text(encoding="utf-8"))
        report.update(choose(report["grid"], report["chosen"]["min_cosine"]))
    else:
        report = calibrate()
    if args.write:
        OUT.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=2))
        return
    grid = report["grid"]
    print(f"{'config':>32s} " + " ".join(f"{s + ' nDCG@10':>18s} {s + ' R@5':>14s}" for s in SETS) + "  mean")
    for k in grid[SETS[0]]:
        cells = " ".join(f"{grid[s][k]['nDCG@10']:18.4f} {grid[s][k]['recall@5']:14.4f}" for s in SETS)
        print(f"{k:>32s} {cells}  {report['mean_objective'][k]:.4f}")
    c = report["chosen"]
    print(
        f"chosen: BM25F weighting {c['bm25f_weighting']}, {c['shape']}, pool {c['pool']}, alpha {c['alpha']} "
        f"(mean objective {report['chosen_mean_objective']}); min_cosine {c['min_cosine']}"
    )
    print(
        f"random letter strings past the known-word gate: {report['letter_strings_passing_the_known_word_gate']:.1%}; "
        f"word salads' best cosine p99 {report['salad_best_cosine_p99']:.3f}, max {report['salad_best_cosine_max']:.3f}; "
        f"{report['share_of_those_below_threshold']:.1%} of {report['gold_without_lexical_match']} gold tools "
        "without a lexical match fall below the threshold"
    )


if __name__ == "__main__":
    main()
