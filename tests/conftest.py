from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _isolated_user_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test ever reads or writes the real user's config or state."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.delenv("TOOLDIR_STATE_DIR", raising=False)
    # the semantic pass ranks with the [semantic] hybrid, deterministically: with [semantic-plus]
    # installed the default would be the ensemble, whose answers change once its background
    # embedding is done (tests/unit/search/test_ensemble.py tests it, and the default, by name)
    monkeypatch.setenv("TOOLDIR_SEMANTIC", os.environ.get("TOOLDIR_SEMANTIC") or "hybrid")
    # nor the machine's managed policy: a test that wants one writes it here (tests/unit/policy)
    monkeypatch.setattr("tooldir.policy.MANAGED_POLICY_PATH", home / "etc" / "tooldir" / "policy.toml")
    os.umask(0o022)
    yield


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty tool root (``<tmp>/tools``) for tests that plant packages in it."""
    path = tmp_path / "tools"
    path.mkdir()
    return path


# ------------------------------------------------------------------------------------------------
# Parallel runs (pytest-xdist, `scripts/test` passes `-n 2 --dist loadgroup`)

SERIAL_GROUP = "serial"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``serial`` (timing bounds, inotify limits, cgroups, memory) all go to one
    xdist group, so under ``--dist loadgroup`` they run one after another on a single worker and
    never beside each other; without xdist the marker changes nothing. It runs first: pytest-xdist
    reads the ``xdist_group`` markers in its own hook of this name (tests/test_serial_group.py)."""
    for item in items:
        if item.get_closest_marker("serial") is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
    items.sort(key=_slow_first)


#: Files whose tests take longest (measured with --durations: they mostly wait on subprocesses and
#: servers), in this order before every other file. pytest-xdist's loadgroup hands tests out in
#: collection order (after the largest group, `serial`), so a long test collected last is the tail
#: of the run with one worker busy; collected first, it overlaps the many short ones. A sort that
#: keeps each file's tests together and in their order: no test depends on it to pass.
SLOW_FIRST = (
    "tests/attacks/test_drills_unprivileged.py",
    "tests/unit/test_readme_examples.py",
    "tests/attacks/test_drill_wheel.py",
    "tests/mcp/test_mcp_early.py",
    "tests/mcp/test_mcp_http_starve.py",
    "tests/fit/",
    "tests/upstream/",
    "tests/attacks/",
    "tests/mcp/",
)


def _slow_first(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, prefix in enumerate(SLOW_FIRST) if path.startswith(prefix)), len(SLOW_FIRST))


# ------------------------------------------------------------------------------------------------
# Both rankers: tests that involve the search ranker run once with the semantic ranker (the
# [semantic] extra, required in CI) and once on plain BM25F (TOOLDIR_SEMANTIC=off, what a user
# without the extra gets), as two test ids: ``...[semantic]`` and ``...[bm25f]``.

RANKERS = ("semantic", "bm25f")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_rankers") is None:
        return
    if "ranker_pass" not in metafunc.fixturenames:
        metafunc.fixturenames.append("ranker_pass")
    metafunc.parametrize("ranker_pass", RANKERS, indirect=True)


@pytest.fixture
def ranker_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which ranker this run of a ``both_rankers`` test is for; ``bm25f`` turns the semantic
    ranker off for the test and every process it starts (as the old second pass of the suite
    did: TOOLDIR_SEMANTIC=off, TOOLDIR_REQUIRE_SEMANTIC unset)."""
    mode = str(request.param)
    request.node.user_properties.append(("ranker_pass", mode))  # for the summary: reports carry it
    if mode == "bm25f":
        monkeypatch.setenv("TOOLDIR_SEMANTIC", "off")
        monkeypatch.delenv("TOOLDIR_REQUIRE_SEMANTIC", raising=False)
    return mode


@pytest.fixture(autouse=True)
def _ranker_before_other_fixtures(request: pytest.FixtureRequest, _isolated_user_env: None) -> None:
    """Set the ranker up before the test's own fixtures, which may start servers that read it."""
    # the parametrisation is added at collection, after the test's fixture closure was computed:
    # so it is found in the call spec, not in request.fixturenames
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "ranker_pass" in callspec.params:
        request.getfixturevalue("ranker_pass")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Both rankers' results, side by side (what the two passes of the suite used to print)."""
    # the ranker of a report is the one its test's ranker_pass fixture recorded (not a word of the
    # test id: other parametrisations may use the same words)
    seen: dict[str, tuple[str, set[str]]] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            mode = dict(getattr(report, "user_properties", ())).get("ranker_pass")
            if mode in RANKERS:
                seen.setdefault(report.nodeid, (mode, set()))[1].add(outcome)
    counts: dict[str, dict[str, int]] = {mode: {} for mode in RANKERS}
    for mode, outcomes in seen.values():
        final = next(o for o in ("error", "failed", "skipped", "passed") if o in outcomes)
        counts[mode][final] = counts[mode].get(final, 0) + 1
    if any(counts.values()):
        terminalreporter.write_sep("-", "both rankers")
        for mode in RANKERS:
            shown = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts[mode].items())) or "none ran"
            terminalreporter.write_line(f"{mode}: {shown}")
