"""Human-readable sizes and durations: the one byte formatter and the one time formatter.

Data flow: stage 0, beside `core` and `errors`; every message, table and report that shows
bytes or seconds to a person formats them here, so the same quantity reads the same way in
an error line, a terminal table and an SVG title. Imports nothing from the package.

Both formatters show three significant digits (a thousands-separated whole number from 1,000
up), in the largest unit the value reaches, or in the unit asked for: a message that compares
two sizes ("needs 81.2 GiB but has 72.0 GiB") names one unit for both.
"""

from __future__ import annotations

import math

BYTE_UNITS: dict[str, int] = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
TIME_UNITS: dict[str, float] = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 999.5:  # three significant digits would round it to 1000, which %g writes 1e+03
        return f"{value:,.0f}"
    return f"{value:.3g}"


def fmt_bytes(nbytes: float, unit: str | None = None, *, suffix: bool = True) -> str:
    """'1.5 GiB', '512 MiB', '96 B'; `unit` fixes the unit ('GiB'); `suffix=False` leaves it off (table columns)."""
    if unit is None:
        unit = next((u for u in ("TiB", "GiB", "MiB", "KiB") if abs(nbytes) >= BYTE_UNITS[u]), "B")
    text = _number(nbytes / BYTE_UNITS[unit])
    return f"{text} {unit}" if suffix else text


def fmt_gib(nbytes: float) -> str:
    """'12.3 GiB': one decimal, as the configuration search's reasons state sizes."""
    return f"{nbytes / BYTE_UNITS['GiB']:.1f} GiB"


def fmt_time(seconds: float, unit: str | None = None, *, suffix: bool = True) -> str:
    """'12.3 ms', '4.56 s', '789 us'; `unit` fixes the unit ('ms'); `suffix=False` leaves it off (table columns)."""
    if unit is None:
        a = abs(seconds)
        unit = "s" if a >= 1.0 or a == 0.0 or not math.isfinite(a) else ("ms" if a >= 1e-3 else "us")
    text = _number(seconds / TIME_UNITS[unit])
    return f"{text} {unit}" if suffix else text


def fmt_duration(seconds: float) -> str:
    """A wall time a person waits for: '40 s', '12 min', '4.9 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["BYTE_UNITS", "TIME_UNITS", "fmt_bytes", "fmt_duration", "fmt_time"]
