"""The plan report's search lines: CP-SAT's verdict on the plan's order and the abort note."""

from __future__ import annotations

import pytest

from adaptis_plan.render.report import search_lines

pytestmark = pytest.mark.unit


def test_order_status_bound_and_gap_are_reported() -> None:
    info = {"solver": {"order": {"status": "OPTIMAL", "bound_s": 0.5, "gap": 0.0}}, "aborted": False}
    (line,) = search_lines(info, 0.5)
    assert "CP-SAT OPTIMAL" in line and "proven optimal" in line and "500 ms" in line and "0.00%" in line


def test_not_proven_and_aborted_searches_say_so() -> None:
    info = {
        "solver": {"order": {"status": "FEASIBLE", "bound_s": 0.45, "gap": 0.1}},
        "aborted": True,
        "abort_phase": "cp-sat windows",
    }
    lines = search_lines(info, 0.5)
    assert "not proven optimal" in lines[0] and "10.00%" in lines[0]
    assert "--time-limit cut the search short (during cp-sat windows)" in lines[1]
    assert search_lines({"solver": {"order": {"status": "NOT_RUN"}}}, 1.0)[0].startswith("order: CP-SAT did not run")


def test_a_rounding_sized_negative_share_is_not_shown_as_minus_zero() -> None:
    """A plan at its lower bound within float error read "this plan is -0.0% above it"."""
    from adaptis_plan.render.report import _share

    assert _share(-1e-12) == "0.0%" and _share(0.0) == "0.0%"
    assert _share(-0.002) == "-0.2%" and _share(0.036) == "3.6%"
