"""Human-readable numbers for the dashboard: rates, byte rates, durations, sparklines."""
from __future__ import annotations

from typing import Sequence

_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
SPARK_CHARS = "▁▂▃▄▅▆▇█"


def si(value: float) -> str:
    """3 significant digits with an SI suffix: 0, 12.5, 999, 1.00k, 25.3M."""
    v = float(value)
    if v != v:  # NaN
        return "?"
    for scale, suffix in _SI:
        if abs(v) >= scale * 0.9995:
            return f"{_three(v / scale)}{suffix}"
    if v == 0:
        return "0"
    return _three(v)


def _three(v: float) -> str:
    a = abs(v)
    if a >= 99.95:
        return f"{v:.0f}"
    if a >= 9.995:
        return f"{v:.1f}"
    return f"{v:.2f}"


def count(value: float) -> str:
    """A total: exact below 1000 (30, 999), then as si() (1.23k)."""
    return f"{int(value)}" if abs(value) < 1000 else si(value)


def rate(value: float) -> str:
    return f"{si(value)}/s"


def byte_rate(value: float) -> str:
    return f"{si(value)}B/s"


def nbytes(value: float) -> str:
    return f"{count(value)}B"


def duration(seconds: float) -> str:
    """0:42, 12:05, 3:02:11."""
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def sparkline(values: Sequence[float | None], width: int) -> str:
    """The last `width` values as block characters scaled to their maximum; a value that is
    not known (None: before the series existed) is a blank, a true zero the lowest block."""
    vals = list(values)[-width:]
    known = [v for v in vals if v is not None]
    top = max(known) if known else 0.0
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(SPARK_CHARS[min(len(SPARK_CHARS) - 1, int(v / top * (len(SPARK_CHARS) - 1) + 0.5))])
    return " " * (width - len(out)) + "".join(out)
