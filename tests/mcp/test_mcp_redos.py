"""schema:redos through ``tooldir serve``: while one call's input takes its whole validation
budget (``BUDGET_S``), the server keeps answering other requests, and afterwards it still works."""

from __future__ import annotations

import random
import time
from pathlib import Path

import anyio
import pytest
from mcp_harness import error_code, serve, text_of
from toolkit import make_tool

from tooldir._internal.schema_worker import WALL_BACKSTOP_S

pytestmark = pytest.mark.anyio

TEST_BOUND_S = 120
THRASH = "(a|b)*a(a|b){200}c"  # O(pattern x input) for the linear engine: about 2 s per MiB
POLICY = """
[defer]
mode = "on"
rules = ["NoDefer(echo_eager)", "NoDefer(slow_pattern)", "Defer(*)"]
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.both_rankers
async def test_the_server_answers_other_requests_while_a_slow_input_is_validated(tmp_path: Path) -> None:
    user = tmp_path / "user_tools"
    make_tool(user, "echo_eager", description="Echo text back (always listed).", keywords=["echo"])
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": THRASH}}, "required": ["text"]}
    make_tool(user, "slow_pattern", description="A tool with a costly pattern.", input_schema=schema)
    project = tmp_path / "project"
    project.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    rng = random.Random(3)
    payload = "".join(rng.choice("ab") for _ in range((1 << 20) - 8192))
    finished: dict[str, float] = {}
    with anyio.fail_after(TEST_BOUND_S):
        async with serve(tmp_path, project=project, user_dirs=[user], policy=policy) as s:
            first = await s.call("slow_pattern", {"text": "a" + "b" * 200 + "c"})  # starts the worker
            assert first.is_error is False, text_of(first)

            async def slow() -> None:
                result = await s.call("slow_pattern", {"text": payload})
                finished["slow"] = time.monotonic()
                assert result.is_error is True
                assert error_code(result) == "invalid-input"
                assert (
                    finished["slow"] - started < WALL_BACKSTOP_S + 10
                )  # the budget's wall-clock backstop plus the round trip

            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                await anyio.sleep(0.3)
                names = await s.list_names()
                finished["list"] = time.monotonic()
                echoed = await s.call("echo_eager", {"text": "still here"})
                finished["echo"] = time.monotonic()
            assert "slow_pattern" in names and "echo_eager" in names
            assert echoed.is_error is False and "still here" in text_of(echoed)
            assert finished["list"] < finished["slow"]
            again = await s.call("slow_pattern", {"text": "a" + "b" * 200 + "c"})
            assert again.is_error is False, text_of(again)
