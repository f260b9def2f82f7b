"""The zero-bubble comparison harness (`bench/zb.py`) and the paper-profile loader, on tiny inputs.

The reference heuristic is checked against what the zero-bubble paper says it achieves (near
zero bubble with 2x memory on F = I = W); the harness's sections render from real (tiny) runs.
No fixed result of the search is asserted: its numbers change as it is tuned.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from adaptis_plan.judge.bound import lower_bound  # noqa: E402
from adaptis_plan.judge.semantics import check_programs  # noqa: E402
from bench import zb  # noqa: E402
from bench.paper_profile import paper_costs  # noqa: E402

UNIT = next(iter(zb.COST_SETS))  # F = I = W = 1, comm 0.01


def test_reference_is_valid_fits_memory_and_reaches_near_zero_bubble_at_2x() -> None:
    p, m = 4, 16
    limit = 2 * zb.one_f_one_b_peak(p, UNIT, m)
    costs = zb.grid_costs(p, UNIT, 1, limit)
    layout = zb.sequential_layout(p)
    ref = zb.zb_reference(layout, costs, m, "ZB-H")
    assert ref is not None
    check_programs(layout, ref.programs, m, backward="split")
    assert ref.result.fits_memory
    # ZB-H2: zero bubble beyond the unavoidable fill; here only the P2P hops remain
    assert ref.result.step_time_s <= lower_bound(costs, p, m) + (p - 1) * 0.01 + 1e-9


def test_one_x_memory_is_one_f_one_b_peak() -> None:
    assert zb.one_f_one_b_peak(4, UNIT, 8) == pytest.approx(4 * zb.ACT_PER_STAGE)


def test_grid_cell_runs_and_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zb, "BENCH_TIME_LIMIT_S", 0.5)
    cells = [zb.GridCell(4, 8, UNIT, 2, "sequential"), zb.GridCell(4, 8, UNIT, 1, "free")]
    results = [zb.run_cell(c) for c in cells]
    for r in results:
        assert r.fits and not r.aborted and r.ref_step is not None
        assert r.step >= r.lower_bound * (1 - 1e-9)
    text = zb.grid_section(results, "python -m bench.zb --sections grid --quick")
    assert "## Against the zero-bubble schedulers" in text
    assert "### Sequential placement" in text and "### Free placement" in text
    assert text.count("| F=I=W=1, comm 0.01 |") == 2


def test_paper_profile_costs_follow_the_csv() -> None:
    costs, num_layers = paper_costs("gemma-s", 4096, 4)
    assert num_layers == 34
    assert costs.f_s[0, 0] == 0.0  # embedding: no profile entry
    assert costs.f_s[0, 1] == pytest.approx(1.0) and costs.i_s[0, 1] == pytest.approx(1.65)
    assert costs.f_s[0, -1] == pytest.approx(5.72) and costs.w_s[0, -1] == pytest.approx(0.58)
    ds, _ = paper_costs("deepseek-s", 2048, 4)
    assert ds.f_s[0, 1] == pytest.approx(1.0) and ds.f_s[0, 4] == pytest.approx(2.62)  # dense, then MoE


def test_replace_sections_touches_only_its_own() -> None:
    doc = "# Benchmarks\n\nintro\n\n## A\n\nold a\n\n## B\n\nold b\n"
    new = zb.replace_sections(doc, "## B\n\nnew b\n\n## C\n\nnew c\n")
    assert "old a" in new and "old b" not in new and "new b" in new and new.rstrip().endswith("new c")
