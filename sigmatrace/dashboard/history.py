"""Rates and 60-second histories from successive samples of cumulative counters.

The live block holds totals only (counters that grow).  Each refresh adds one sample: a dict of
every counter the dashboard follows, keyed by what it counts.  A rate is the difference between
the newest sample and the one about `rate_window` seconds older, divided by the time between
them; a history is the same thing taken over consecutive one-second steps.  Nothing here is per
event: the cost is per sample and per counter shown.
"""
from __future__ import annotations

import bisect
from typing import Hashable, Mapping


class CounterHistory:
    """Samples of cumulative counters kept for `span` seconds (plus one rate window)."""

    def __init__(self, span: float = 60.0, rate_window: float = 1.0):
        self.span = span
        self.rate_window = rate_window
        self._times: list[float] = []
        self._values: list[Mapping[Hashable, float]] = []
        self._window_start = 0  # index of the sample one rate window before the newest

    def add(self, t: float, values: Mapping[Hashable, float]) -> None:
        if self._times and t <= self._times[-1]:
            return  # a clock that did not move: nothing new to learn
        self._times.append(t)
        self._values.append(values)
        horizon = t - self.span - 2 * self.rate_window
        drop = bisect.bisect_left(self._times, horizon) - 1
        if drop > 0:
            del self._times[:drop]
            del self._values[:drop]
        self._window_start = max(0, bisect.bisect_right(self._times, t - self.rate_window) - 1)

    @property
    def newest(self) -> Mapping[Hashable, float]:
        return self._values[-1] if self._values else {}

    def total(self, key: Hashable) -> float | None:
        return self.newest.get(key)

    def rate(self, key: Hashable) -> float | None:
        """Per-second rate of `key` over the last rate window; None until two samples at least
        a fifth of a window apart both hold the key, or when the counter went backwards."""
        if len(self._times) < 2:
            return None
        return self._rate_between(key, self._window_start, len(self._times) - 1, self.rate_window / 5)

    def history(self, key: Hashable, seconds: int = 60, until: float | None = None) -> list[float | None]:
        """Rates over consecutive one-second steps ending at the newest sample (or the last one
        taken at `until`: a paused display keeps its picture), oldest first; None where the
        counter was not followed yet."""
        out: list[float | None] = []
        end = len(self._times) - 1 if until is None else bisect.bisect_right(self._times, until) - 1
        if end < 1:
            return [None] * seconds
        t1 = self._times[end]
        for k in range(1, seconds + 1):
            start = bisect.bisect_right(self._times, t1 - k) - 1
            if start < 0 or start >= end:
                out.append(None)
                if start < 0:
                    out.extend([None] * (seconds - k))
                    break
                continue
            out.append(self._rate_between(key, start, end, 0.2))
            end = start
        out.reverse()
        return out

    def _rate_between(self, key: Hashable, i: int, j: int, min_dt: float) -> float | None:
        dt = self._times[j] - self._times[i]
        if dt < min_dt:
            return None
        a = self._values[i].get(key)
        b = self._values[j].get(key)
        if a is None or b is None or b < a:
            return None
        return (b - a) / dt
