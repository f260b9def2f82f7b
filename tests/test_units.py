"""The one byte formatter and the one time formatter (`adaptis_plan.units`)."""

from __future__ import annotations

import math

import pytest

from adaptis_plan.units import fmt_bytes, fmt_time

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("nbytes", "unit", "text"),
    [
        (0, None, "0 B"),
        (96, None, "96 B"),
        (1536, None, "1.5 KiB"),
        (512 * 2**20, None, "512 MiB"),
        (1.5 * 2**30, None, "1.5 GiB"),
        (3 * 2**40, None, "3 TiB"),
        (0.0466 * 2**30, "GiB", "0.0466 GiB"),
        (81.234 * 2**30, "GiB", "81.2 GiB"),
        (1234.5 * 2**30, "GiB", "1,234 GiB"),
        (-2 * 2**20, None, "-2 MiB"),
    ],
)
def test_fmt_bytes(nbytes: float, unit: str | None, text: str) -> None:
    assert fmt_bytes(nbytes, unit) == text


@pytest.mark.parametrize(
    ("seconds", "unit", "text"),
    [
        (0.0, None, "0 s"),
        (4.567, None, "4.57 s"),
        (0.0123, None, "12.3 ms"),
        (789e-6, None, "789 us"),
        (1234.0, None, "1,234 s"),
        (0.5, "ms", "500 ms"),
        (2.5, "ms", "2,500 ms"),
    ],
)
def test_fmt_time(seconds: float, unit: str | None, text: str) -> None:
    assert fmt_time(seconds, unit) == text


def test_suffix_off_for_table_columns() -> None:
    assert fmt_time(0.0123, "ms", suffix=False) == "12.3"
    assert fmt_bytes(2**31, "GiB", suffix=False) == "2"


def test_non_finite_values_are_shown_not_raised() -> None:
    assert fmt_time(math.inf) == "inf s"
    assert fmt_bytes(math.nan, "GiB") == "nan GiB"


def test_a_value_that_rounds_to_a_thousand_is_not_written_in_exponent_form() -> None:
    """999.5 <= x < 1000 at three significant digits is 1000, which %g writes "1e+03" (a 999.6 ms step
    was reported as "1e+03 ms")."""
    from adaptis_plan.units import fmt_bytes, fmt_time

    assert fmt_time(0.9996, "ms", suffix=False) == "1,000"
    assert fmt_time(0.9996) == "1,000 ms"
    assert fmt_time(0.99949, "ms") == "999 ms"
    assert fmt_bytes(999.7 * 2**20, "MiB") == "1,000 MiB"
    assert "e+" not in fmt_time(999.9) and "e+" not in fmt_time(-0.9997)
