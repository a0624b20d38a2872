from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _no_thread_leaks() -> Iterator[None]:
    """Every thread a test starts (watcher worker, observer, emitters) has ended when it returns."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 10
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    leaked = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not leaked, f"threads leaked: {leaked}"
