"""Timestamp normalisation: each process's TSC (and CLOCK_MONOTONIC) readings to CLOCK_REALTIME ns.

A process records calibration triples (TSC, CLOCK_MONOTONIC, CLOCK_REALTIME): the live block's
start and end triples and CALIB records in its streams.  Realtime is the common time base of all
processes and nodes (PTP-synchronised on real clusters).  Between two triples the conversion is
linear through both, so a TSC whose rate differs from its nominal value (drift) is corrected by
the start and end pairs; before the first and after the last triple it extrapolates with the
rate measured over the whole span, the least noisy estimate there is.

Arithmetic stays in integers where precision matters: realtime ns need 61 bits, more than a
float64 holds, so only the (small) distance from the nearest triple goes through a float.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

# A segment whose rate differs from the whole span's by more than this is a clock step (an NTP
# jump, a bad triple): the later triple is dropped and reported.
MAX_SEGMENT_RATE_DEVIATION = 0.01
NOMINAL_TSC_HZ = 1e9


@dataclass
class CalibPoint:
    tsc: int
    mono_ns: int
    real_ns: int


@dataclass
class ClockModel:
    """Converts one process's TSC and CLOCK_MONOTONIC readings to realtime ns."""

    tsc: np.ndarray            # int64, increasing
    real: np.ndarray           # int64
    mono: np.ndarray           # int64 (0 where a triple lacks it)
    ns_per_tick: float         # over the whole calibrated span
    tsc_hz_hint: float | None  # what the runtime estimated (live block), for drift reporting
    notes: list[str] = field(default_factory=list)

    @classmethod
    def fit(cls, points: list[CalibPoint], tsc_hz_hint: float | None = None,
            fallback_real_ns: int | None = None) -> "ClockModel":
        """The model through `points`; with none, a nominal one anchored at `fallback_real_ns`."""
        notes: list[str] = []
        # damaged CALIB records (reported by the reader) may hold values beyond int64: unusable
        points = [p for p in points if max(p.tsc, p.mono_ns, p.real_ns) < 1 << 63 and min(p.tsc, p.mono_ns, p.real_ns) >= 0]
        pts = sorted({(p.tsc, p.real_ns, p.mono_ns) for p in points if p.tsc and p.real_ns})
        # one triple per TSC value, real increasing with TSC
        hz = tsc_hz_hint if tsc_hz_hint and tsc_hz_hint > 0 else None
        clean = _in_order([p for i, p in enumerate(pts) if not i or p[0] != pts[i - 1][0]], notes, hz)
        if len(clean) >= 3:
            clean = _drop_steps(clean, notes)
        if not clean:
            notes.append("no calibration: timestamps are TSC at a nominal rate, not aligned with other processes")
            anchor = int(fallback_real_ns or 0)
            clean = [(0, anchor, 0)]
        if len(clean) == 1:
            if hz is None:
                hz = NOMINAL_TSC_HZ
                if not notes:
                    notes.append("one calibration triple and no TSC rate: rate assumed 1 GHz")
            ns_per_tick = 1e9 / hz
        else:
            ns_per_tick = (clean[-1][1] - clean[0][1]) / (clean[-1][0] - clean[0][0])
        arr = np.array(clean, dtype=np.int64).reshape(-1, 3)
        return cls(arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), ns_per_tick, tsc_hz_hint, notes)

    @property
    def points(self) -> int:
        return len(self.tsc)

    @property
    def tsc_hz(self) -> float:
        return 1e9 / self.ns_per_tick

    @property
    def drift_ppm(self) -> float | None:
        """How far the measured TSC rate is from the runtime's estimate, in parts per million."""
        if not self.tsc_hz_hint or self.points < 2:
            return None
        return (self.tsc_hz / self.tsc_hz_hint - 1.0) * 1e6

    def tsc_to_ns(self, tsc: np.ndarray) -> np.ndarray:
        """Realtime ns (int64) of TSC readings."""
        t = np.asarray(tsc).astype(np.int64, copy=False)
        return _piecewise(t, self.tsc, self.real, self.ns_per_tick)

    def mono_to_ns(self, mono: np.ndarray) -> np.ndarray:
        """Realtime ns of CLOCK_MONOTONIC readings (streams whose clock is MONOTONIC)."""
        m = np.asarray(mono).astype(np.int64, copy=False)
        ok = self.mono > 0
        if ok.sum() == 0:
            # no monotonic reading: anchor on the process's first realtime, at rate 1
            return m - m[:1].min(initial=0) + self.real[0] if len(m) else m
        mono, real = self.mono[ok], self.real[ok]
        rate = 1.0 if len(mono) < 2 else (real[-1] - real[0]) / (mono[-1] - mono[0])
        return _piecewise(m, mono, real, rate)

    def residual_ns(self) -> float:
        """Largest distance of a triple from the straight line through the first and last: how
        far from linear the clock was (0 with two triples or fewer)."""
        if self.points < 3:
            return 0.0
        line = (self.tsc - self.tsc[0]).astype(np.float64) * self.ns_per_tick
        return float(np.max(np.abs((self.real - self.real[0]).astype(np.float64) - line)))


def _piecewise(x: np.ndarray, xs: np.ndarray, ys: np.ndarray, outer_rate: float) -> np.ndarray:
    """Linear interpolation through (xs, ys) in integer-anchored arithmetic; outside, the line of
    slope `outer_rate` through the nearest end point."""
    if len(xs) == 1:
        return ys[0] + np.rint((x - xs[0]).astype(np.float64) * outer_rate).astype(np.int64)
    if len(x) and len(xs) == 2 and x.min() >= xs[0] and x.max() <= xs[1]:
        # the common case, everything between the start and end triples: one line
        return ys[0] + np.rint((x - xs[0]).astype(np.float64) * outer_rate).astype(np.int64)
    seg = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    rates = np.diff(ys).astype(np.float64) / np.diff(xs).astype(np.float64)
    rate = rates[seg]
    rate = np.where(x < xs[0], outer_rate, rate)
    rate = np.where(x > xs[-1], outer_rate, rate)
    base = np.where(x > xs[-1], len(xs) - 1, seg)
    return ys[base] + np.rint((x - xs[base]).astype(np.float64) * rate).astype(np.int64)


def _in_order(points: list[tuple[int, int, int]], notes: list[str], hz: float | None) -> list[tuple[int, int, int]]:
    """Triples (sorted by TSC) whose realtime increases with it; the others are dropped.

    Each triple that follows the last one kept, unless keeping the largest such set drops fewer
    (or as many, and its rate is nearer the runtime's estimate `hz`): then one damaged triple far
    ahead in realtime is dropped instead of every triple after it."""
    greedy: list[int] = []
    for i, p in enumerate(points):
        if not greedy or p[1] > points[greedy[-1]][1]:
            greedy.append(i)
    if len(greedy) == len(points):
        return points
    # the longest strictly increasing run of realtimes (patience sorting)
    tails: list[int] = []          # tails[k]: index of the smallest realtime ending a run of k + 1
    tail_real: list[int] = []
    prev = [-1] * len(points)
    for i, p in enumerate(points):
        k = bisect.bisect_left(tail_real, p[1])
        prev[i] = tails[k - 1] if k else -1
        tails[k:k + 1], tail_real[k:k + 1] = [i], [p[1]]
    longest, i = [], tails[-1]
    while i >= 0:
        longest.append(i)
        i = prev[i]
    longest.reverse()
    keep = set(longest if len(longest) > len(greedy) or
               (len(longest) == len(greedy) and hz and _off_rate(points, longest, hz) < _off_rate(points, greedy, hz))
               else greedy)
    last = None
    for i, p in enumerate(points):
        if i in keep:
            last = p
        else:
            how = "goes back" if last is not None and p[1] <= last[1] else "jumps ahead"
            notes.append(f"calibration triple at tsc {p[0]} {how} in realtime; dropped")
    return [p for i, p in enumerate(points) if i in keep]


def _off_rate(points: list[tuple[int, int, int]], kept: list[int], hz: float) -> float:
    """How far the rate through the first and last kept triples is from `hz` (relative)."""
    a, b = points[kept[0]], points[kept[-1]]
    if len(kept) < 2 or b[0] == a[0]:
        return 0.0
    return abs((b[1] - a[1]) / (b[0] - a[0]) * hz / 1e9 - 1.0)


def _drop_steps(points: list[tuple[int, int, int]], notes: list[str]) -> list[tuple[int, int, int]]:
    """Drop triples whose segment rate departs from the typical (median) rate: a realtime step."""
    overall = float(np.median([(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(points, points[1:])]))
    kept = [points[0]]
    for p in points[1:]:
        rate = (p[1] - kept[-1][1]) / (p[0] - kept[-1][0])
        if abs(rate / overall - 1.0) > MAX_SEGMENT_RATE_DEVIATION:
            notes.append(f"calibration triple at tsc {p[0]} is off the clock's rate by "
                         f"{(rate / overall - 1.0) * 100:.1f}% (a clock step?); dropped")
            continue
        kept.append(p)
    return kept
