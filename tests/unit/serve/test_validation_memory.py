"""serve:starve, validation memory: the input-validation worker is bounded in memory, not only in
time. A small input against a recursive ``anyOf`` makes the validator collect error messages at
about a gigabyte per second; the worker's bound ends it with MemoryBoundError, the next check
gets a fresh worker, a valid 1 MiB input still fits, and no more than MAX_BUSY workers validate
at once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tooldir._internal import schema_worker
from tooldir._internal.schema_worker import MAX_BUSY, MemoryBoundError, work_bytes

#: Generous: the memory bound must end the validation, never the time budget.
LONG_BUDGET_S = 120.0

HOG_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "$defs": {
            "n": {
                "anyOf": [
                    {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 2},
                    {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 2},
                    {"type": "array", "items": {"$ref": "#/$defs/n"}},
                ]
            }
        },
    }
)
#: 8 nested arrays around a 100 kB string: every error message of the anyOf branches quotes it.
HOG_INPUT = json.dumps({"a": json.loads("[" * 8 + json.dumps("x" * 100_000) + "]" * 8)}, separators=(",", ":"))
PLAIN_SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}})


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[schema_worker._Pool, dict[str, int]]]:
    """A fresh pool whose workers are counted: started, alive now, most alive at once."""
    fresh = schema_worker._Pool()
    counts = {"started": 0, "alive": 0, "most": 0}
    lock = threading.Lock()
    real = schema_worker._Worker

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self._gone = False
            with lock:
                counts["started"] += 1
                counts["alive"] += 1
                counts["most"] = max(counts["most"], counts["alive"])

        def _end(self) -> None:
            with lock:
                if not self._gone:
                    self._gone = True
                    counts["alive"] -= 1

        def kill(self) -> None:
            super().kill()
            self._end()

        def close(self) -> None:
            super().close()
            self._end()

    monkeypatch.setattr(schema_worker, "_Worker", Counted)
    yield fresh, counts
    fresh.close()


def test_a_recursive_any_of_is_stopped_by_the_memory_bound_and_the_next_check_gets_a_fresh_worker(
    pool: tuple[schema_worker._Pool, dict[str, int]],
) -> None:
    fresh, counts = pool
    assert fresh.check("plain", PLAIN_SCHEMA, '{"n":1}', 3, LONG_BUDGET_S) == []
    with pytest.raises(MemoryBoundError) as caught:
        fresh.check("hog", HOG_SCHEMA, HOG_INPUT, 3, LONG_BUDGET_S)
    request_bytes = len(HOG_SCHEMA) + len(HOG_INPUT)
    assert work_bytes(request_bytes) <= caught.value.limit <= work_bytes(request_bytes + 256)
    assert f"memory bound of {caught.value.limit >> 20} MiB" in str(caught.value)
    assert counts["alive"] == 0  # the worker that hit the bound is gone
    assert fresh.check("plain", PLAIN_SCHEMA, '{"n":"x"}', 3, LONG_BUDGET_S) != []
    assert counts["started"] == 2


def test_a_valid_one_mib_input_still_fits_the_bound(pool: tuple[schema_worker._Pool, dict[str, int]]) -> None:
    fresh, _ = pool
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "array"}}}})
    many_lists = json.dumps({"a": [[] for _ in range((1 << 20) // 3)]}, separators=(",", ":"))  # ~25 B per byte parsed
    assert len(many_lists) >= 1 << 20
    assert fresh.check("lists", schema, many_lists, 3, LONG_BUDGET_S) == []


def test_no_more_than_max_busy_workers_validate_at_once(pool: tuple[schema_worker._Pool, dict[str, int]]) -> None:
    fresh, counts = pool
    outcomes: list[Any] = []

    def hog() -> None:
        try:
            fresh.check("hog", HOG_SCHEMA, HOG_INPUT, 3, LONG_BUDGET_S)
            outcomes.append("answered")
        except MemoryBoundError as exc:
            outcomes.append(type(exc))

    threads = [threading.Thread(target=hog) for _ in range(MAX_BUSY + 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LONG_BUDGET_S * 4)
    assert not any(t.is_alive() for t in threads), "a check never ended"
    assert outcomes == [MemoryBoundError] * (MAX_BUSY + 2)
    assert counts["most"] <= MAX_BUSY
