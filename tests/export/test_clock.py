"""TSC -> realtime conversion: through the calibration triples, drift corrected, in integers."""
import numpy as np
import pytest

from sigmatrace.correlate.clock import CalibPoint, ClockModel

REAL0 = 1_700_000_000_000_000_000


def _triples(hz, tsc0, times_ns, real0=REAL0):
    return [CalibPoint(tsc0 + round(t * hz / 1e9), 10**9 + t, real0 + t) for t in times_ns]


def test_two_triples_correct_drift():
    # nominal 2.4 GHz, really 40 ppm faster: the start and end triples give the real rate
    hz = 2.4e9 * (1 + 40e-6)
    m = ClockModel.fit(_triples(hz, 7 * 10**11, [0, 10**10]), tsc_hz_hint=2.4e9)
    t = np.array([0, 12345, 5 * 10**9, 10**10], dtype=np.int64)
    got = m.tsc_to_ns(np.array([7 * 10**11 + round(x * hz / 1e9) for x in t], dtype=np.uint64))
    assert np.array_equal(got, REAL0 + t)
    assert m.drift_ppm == pytest.approx(40, abs=0.01)
    assert m.notes == []


def test_full_precision_of_realtime():
    """Realtime ns need 61 bits: a float64 timeline would lose the last 8 ns."""
    m = ClockModel.fit(_triples(1e9, 0, [0, 10**9]))
    tsc = np.arange(1000, 1010, dtype=np.uint64)
    assert list(m.tsc_to_ns(tsc) - REAL0) == list(range(1000, 1010))


def test_piecewise_between_triples_and_extrapolation():
    # the TSC runs 5 ppm slower relative to realtime in the second second: each segment follows
    # its own triples
    G = 10**9
    pts = [CalibPoint(G, 0, REAL0), CalibPoint(2 * G, 0, REAL0 + G), CalibPoint(3 * G, 0, REAL0 + 2 * G + 5000)]
    m = ClockModel.fit(pts)
    got = m.tsc_to_ns(np.array([G + G // 2, 2 * G, 2 * G + G // 2, 3 * G], dtype=np.uint64)) - REAL0
    assert list(got) == [G // 2, G, G + G // 2 + 2500, 2 * G + 5000]
    # outside, the rate of the whole span (2 s + 5 us over 2e9 ticks)
    out = m.tsc_to_ns(np.array([5 * G], dtype=np.uint64)) - REAL0
    assert list(out) == [4 * G + 10000]
    assert m.residual_ns() == pytest.approx(2500, abs=1e-3)
    assert m.notes == []


def test_realtime_step_is_dropped_and_reported():
    pts = _triples(1e9, 1000, [0, 10**9, 2 * 10**9, 3 * 10**9])
    pts[2] = CalibPoint(pts[2].tsc, 0, pts[2].real_ns + 5 * 10**8)     # NTP stepped realtime
    m = ClockModel.fit(pts)
    assert m.points == 3 and len(m.notes) == 1 and "clock step" in m.notes[0]
    assert int(m.tsc_to_ns(np.array([1000 + 2 * 10**9], dtype=np.uint64))[0]) == REAL0 + 2 * 10**9


def test_one_triple_uses_the_rate_hint():
    m = ClockModel.fit([CalibPoint(10**6, 0, REAL0)], tsc_hz_hint=2e9)
    assert int(m.tsc_to_ns(np.array([3 * 10**6], dtype=np.uint64))[0]) == REAL0 + 10**6


def test_no_calibration_is_reported():
    m = ClockModel.fit([], None, fallback_real_ns=REAL0)
    assert "no calibration" in m.notes[0]
    assert int(m.tsc_to_ns(np.array([10], dtype=np.uint64))[0]) == REAL0 + 10


def test_monotonic_streams():
    # CLOCK_MONOTONIC readings (eBPF streams) go through the (mono, real) pairs
    pts = [CalibPoint(1, 5 * 10**9, REAL0), CalibPoint(2, 6 * 10**9, REAL0 + 10**9 + 100)]
    m = ClockModel.fit(pts)
    got = m.mono_to_ns(np.array([5 * 10**9, 5_500_000_000, 6 * 10**9], dtype=np.uint64)) - REAL0
    assert list(got) == [0, 500_000_050, 10**9 + 100]
