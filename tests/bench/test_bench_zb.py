"""The zero-bubble comparison harness (`bench/zb.py`) and the paper-profile loader, on tiny inputs.

The reference heuristic is checked against what the zero-bubble paper says it achieves (near
zero bubble with 2x memory on F = I = W); the harness's sections render from real (tiny) runs.
No fixed result of the search is asserted: its numbers change as it is tuned.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from adaptis_plan.judge.bound import lower_bound  # noqa: E402
from adaptis_plan.judge.semantics import check_programs  # noqa: E402
from bench import records, zb  # noqa: E402
from bench.paper_profile import paper_costs  # noqa: E402

UNIT = next(iter(zb.COST_SETS))  # F = I = W = 1, comm 0.01
FIXTURE = Path(__file__).parent / "fixtures" / "zb-quick.json"


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
    data = {"grid": {"wall_s": 1.0, "results": records.to_json(results)}}
    rec = records.record("zb", zb.settings(True, ["grid"]), data, "python -m bench.zb --parts grid --quick")
    again = json.loads(json.dumps(rec))  # as written to and read from bench/results/zb.json
    assert zb.results_from_record(again) == {"grid": results}
    text = zb.render(again)
    assert text == zb.render(rec)
    assert text.startswith("## Against the zero-bubble schedulers") and text.count("\n## ") == 0
    assert "`python -m bench.zb --parts grid --quick`" in text
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


def _rows(text: str, after: str) -> list[list[str]]:
    """The first table after the line starting with `after`: its body rows' cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    table = []
    for line in lines[start:]:
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif table:
            break
    return table[2:]


def test_render_of_a_fixture_record_has_three_sections_with_their_values() -> None:
    rec = json.loads(FIXTURE.read_text())
    text = zb.render(rec)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h.split(" (")[0].split(",")[0] for h in headings] == [
        "## Against the zero-bubble schedulers",
        "## The paper's cases on the author's profiled costs",
        "## Planning time",
    ]
    assert text.count(records.reproduce_line(rec)) == 3
    walls = [float(x) for x in re.findall(r"_Wall time of this part: (\d+) s\._", text)]
    assert walls == [round(rec["data"][p]["wall_s"]) for p in zb.PARTS]
    (seq,) = _rows(text, "### Sequential placement")
    assert seq[4:8] == ["ZB-H", "30.50", "30.25", "0.9918"]
    (free,) = _rows(text, "### Free placement")
    assert free[7] == "1.0172" and free[10] == "1F1B refined by CP-SAT"
    (case,) = _rows(text, "| case |")
    assert case[0] == "gemma-s 2K" and case[5] == "1.0169" and case[8] == "OPTIMAL" and case[10] == "0.40%"
    times = _rows(text, "| micro-batches |")
    assert [r[0] for r in times] == [str(m) for m in zb.PLANTIME_MB]
    assert times[0][1] == "1.2 / 1.1 / 1.053" and times[1][1].endswith("(aborted)") and times[2][1] == "–"


def test_a_record_with_one_part_renders_only_that_section() -> None:
    rec = json.loads(FIXTURE.read_text())
    del rec["data"]["grid"], rec["data"]["paper"]
    text = zb.render(rec)
    assert text.startswith("## Planning time") and "## Against" not in text and "## The paper" not in text


def test_the_sections_state_the_records_search_budget_not_the_modules() -> None:
    rec = json.loads(FIXTURE.read_text())
    rec["settings"]["search_time_limit_s"] = 7.0
    text = zb.render(rec)
    assert text.count("--time-limit 7`") == 2 and f"--time-limit {zb.BENCH_TIME_LIMIT_S:g}`" not in text
