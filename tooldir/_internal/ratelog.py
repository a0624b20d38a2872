"""Repeated log lines rate-limited (``serve:starve``): a client that makes the server log the same
warning thousands of times a second (refused requests, failed ``accept()``, timed-out requests)
must not fill the disk. :class:`RateLimitFilter` passes the first :data:`BURST` records of one
message template per :data:`WINDOW_S` seconds, marks the last one it passes, drops the rest, and
says how many it dropped on the first line of that template after the window (or in
:meth:`RateLimitFilter.summary` at exit). A template is the logger, level and unformatted message,
so lines that differ only in their arguments (a peer's address) count as similar."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

BURST = 5
WINDOW_S = 60.0
_MAX_KEYS = 1024  # distinct templates remembered (the oldest is forgotten first)


class RateLimitFilter(logging.Filter):
    def __init__(self, *, burst: int = BURST, window_s: float = WINDOW_S) -> None:
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self._lock = threading.Lock()
        # template -> [window start, records passed, records dropped]
        self._seen: OrderedDict[tuple[str, int, str], list[float]] = OrderedDict()
        self._last: dict[tuple[str, int, str], str] = {}  # the last dropped line of a template

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        with self._lock:
            state = self._seen.get(key)
            if state is None or now - state[0] >= self.window_s:
                dropped = 0 if state is None else int(state[2])
                self._seen[key] = [now, 1, 0]
                self._seen.move_to_end(key)
                while len(self._seen) > _MAX_KEYS:
                    self._last.pop(self._seen.popitem(last=False)[0], None)
                self._last.pop(key, None)
                if dropped:
                    record.msg = f"{record.msg} [{dropped} similar line(s) suppressed before this one]"
                return True
            if state[1] < self.burst:
                state[1] += 1
                if state[1] == self.burst:
                    record.msg = f"{record.msg} [similar lines suppressed for the next {self.window_s:g} s]"
                return True
            state[2] += 1
        try:
            last = record.getMessage()
        except Exception:  # a record that cannot be formatted is reported by logging itself
            last = str(record.msg)
        with self._lock:
            if key in self._seen:
                self._last[key] = last[:500]
        return False

    def summary(self) -> list[str]:
        """One line per template with dropped records not yet reported (they are then forgotten)."""
        with self._lock:
            lines = [
                f"{int(s[2])} similar line(s) suppressed, the last: {self._last.get(k, k[2])}"
                for k, s in self._seen.items()
                if s[2]
            ]
            for state in self._seen.values():
                state[2] = 0
            self._last.clear()
        return lines
