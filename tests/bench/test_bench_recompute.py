"""Smoke run of the memory-bound benchmark (`bench/recompute.py`): one tiny case, three plans, the
section's shape, and the section rendered from a record. No fixed result is asserted
beyond what the planner guarantees (auto is never slower than off on the same search)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers_common import table_after as _table_after

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import recompute  # noqa: E402
from bench.paper import Provenance  # noqa: E402

TINY = recompute.RecomputeCase("tiny", "tiny-llama", 2, 4, 128, hardware="cpu", time_limit_s=0.5)
PROV = Provenance("_Reproduce: `python -m bench.run --suites recompute --quick` at commit `abc1234`_")
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def run() -> recompute.CaseRun:
    return recompute.run_case(TINY)


@pytest.mark.slow
def test_three_plans_and_what_auto_chose(run: recompute.CaseRun) -> None:
    assert set(run.rows) == {"none", "full", "auto"}
    off, full, auto = (run.rows[m] for m in ("none", "full", "auto"))
    assert off.error is full.error is auto.error is None
    assert full.stages == {"full": list(range(full.num_stages))} and 0 < full.extra_compute_share < 0.5
    assert full.step_time_s > off.step_time_s and full.lower_bound_s > off.lower_bound_s
    assert auto.stages == {} and auto.chosen.startswith("every classic plan fits memory")
    assert run.classic_fit == run.classic_total > 0 and run.best_classic_s > 0


@pytest.mark.slow
def test_section_table_and_command(run: recompute.CaseRun) -> None:
    text = recompute.section([run], PROV, quick=True, wall_s=1.0)
    assert text.startswith(recompute.HEADING)
    assert "_Reproduce: `python -m bench.run --suites recompute --quick`" in text
    assert TINY.command("auto") in text and "--recompute auto" in text
    rows = _table_after(text, recompute.HEADING)
    assert len(rows) == 1 and rows[0][0] == "tiny" and rows[0][1] == "PP 2, TP 1, 4 mb, seq 128"
    step_off, step_auto = (float(rows[0][k].split(" ")[0]) for k in (3, 5))
    assert step_auto <= step_off and rows[0][9] == "yes"


def test_no_plan_fits_renders_oom() -> None:
    rows = {m: recompute.ModeRow(m, error="no plan fits") for m in recompute.MODES}
    new = recompute.section([recompute.CaseRun(TINY, rows)], PROV)
    assert "| tiny | PP 2, TP 1, 4 mb, seq 128 | 0 of 0 | OOM | OOM | OOM |" in new


def test_section_from_a_record() -> None:
    from bench import records

    rec = records.load("recompute", FIXTURES / "clean")
    text = recompute.render(rec)
    assert text.startswith(recompute.HEADING + "\n\n" + records.reproduce_line(rec) + "\n")
    run = records.from_json(list[recompute.CaseRun], rec["data"])[0]
    assert records.to_json(run) == rec["data"][0]
    row = _table_after(text, recompute.HEADING)[0]
    assert row[3] == recompute._ms(run.rows["none"]) and row[5] == recompute._ms(run.rows["auto"])
