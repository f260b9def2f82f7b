"""bench/memory.py: the measured-peak data set and the sweeps are well-formed, the checker rejects broken
rows, and the suite's arithmetic (errors, medians, Spearman, top-1 regret) is right on small fixtures."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import memory as mem  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return mem.load_runs()


def test_every_run_is_well_formed(runs: list[dict]) -> None:
    assert mem.check_runs(runs) == []


def test_the_set_covers_thirty_figures_from_three_sources(runs: list[dict]) -> None:
    assert len(runs) >= 30
    assert len({r["source_key"] for r in runs}) >= 3
    for r in runs:
        assert r["unit"] in mem.UNITS and r["measures"] in mem.MEASURES
        assert r["source"].strip() and r["table"].strip()


def test_every_sweep_is_well_formed(runs: list[dict]) -> None:
    sweeps = mem.load_sweeps()
    assert mem.check_sweeps(sweeps, runs) == []
    assert len(sweeps) >= 4
    for s in sweeps:
        base = mem.base_run(s, runs)
        for c in s["configurations"]:
            assert set(c["changes"]) <= set(base), f"{s['id']}: {c['label']} changes a field the base lacks"


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("source", "", "source"),
        ("unit", "gigs", "unit"),
        ("measures", "nvidia-smi", "measures"),
        ("measured", 99.9, "table: must quote"),
        ("gpus", 7, "gpus"),
        ("recompute", "some", "recompute"),
        ("features", ["fp4"], "features"),
    ],
)
def test_the_checker_rejects_a_broken_run(runs: list[dict], field: str, value: object, complaint: str) -> None:
    bad = copy.deepcopy(runs[0])
    bad[field] = value
    problems = mem.check_run(bad)
    assert any(p.startswith(complaint) for p in problems), problems


def test_the_checker_rejects_a_missing_key_and_a_duplicate_id(runs: list[dict]) -> None:
    bad = copy.deepcopy(runs[0])
    del bad["notes"]
    assert mem.check_run(bad)[0].startswith("keys")
    assert any("duplicate" in p for p in mem.check_runs([runs[0], runs[0]]))


def test_a_sweep_must_name_its_base_and_two_configurations(runs: list[dict]) -> None:
    sweep = copy.deepcopy(mem.load_sweeps()[0])
    sweep["base"] = {"published_run": "no-such-run"}
    sweep["configurations"] = sweep["configurations"][:1]
    problems = mem.check_sweeps([sweep], runs)
    assert any("names no run" in p for p in problems)
    assert any("at least 2 configurations" in p for p in problems)


def test_ranks_share_ties_and_spearman_is_rank_pearson() -> None:
    assert mem.ranks([10.0, 30.0, 20.0, 20.0]) == [1.0, 4.0, 2.5, 2.5]
    assert mem.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert mem.spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # d = (0, 1, -1, 0): 1 - 6 * 2 / (4 * 15) = 0.8
    assert mem.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert mem.spearman([1.0], [2.0]) is None
    assert mem.spearman([1, 1], [1, 2]) is None


def test_top1_regret_is_measured_best_over_our_pick() -> None:
    # we pick index 0 (predicted fastest), measured 80 against the best 100: 25% slower
    assert mem.top1_regret([3.0, 2.0, 1.0], [80.0, 100.0, 50.0]) == pytest.approx(0.25)
    assert mem.top1_regret([1.0, 2.0, None], [80.0, 100.0, 120.0]) == pytest.approx(0.2)
    assert mem.top1_regret([None, None], [1.0, 2.0]) is None


def test_an_out_of_memory_configuration_counts_in_the_fit_verdicts_only() -> None:
    # the source ran out of memory on the first; we refuse it and the second, and predict the third
    row = mem.SweepRow("s", "k", "tokens_per_s_per_gpu", ["a", "b", "c"], [None, 355.0, 353.0], [None, None, 370.0],
                       ["no", "no", None])  # fmt: skip
    assert row.oom_agreement == (2, 3)
    assert row.spearman is None  # one configuration with both figures
    assert row.regret == pytest.approx(355.0 / 353.0 - 1)  # we pick c; b ran faster
    assert row.measured_spread == pytest.approx(355.0 / 353.0)
    assert row.predicted_spread is None


def test_a_sweep_may_state_its_base_inline_and_mark_oom(runs: list[dict]) -> None:
    sweep = copy.deepcopy(next(s for s in mem.load_sweeps() if "run" in s["base"]))
    assert mem.check_sweeps([sweep], runs) == []
    del sweep["base"]["run"]["seq_len"]
    sweep["configurations"][0]["measured"] = "oom"
    problems = mem.check_sweeps([sweep], runs)
    assert any("inline base run" in p for p in problems)
    assert any("positive measured" in p for p in problems)


def test_a_sweep_row_turns_step_times_into_speeds() -> None:
    row = mem.SweepRow("s", "k", "iteration_time_s", ["a", "b"], [2.0, 1.0], [50.0, 100.0], [None, None])
    assert row.spearman == pytest.approx(1.0)
    assert row.regret == pytest.approx(0.0)
    wrong = mem.SweepRow("s", "k", "iteration_time_s", ["a", "b"], [2.0, 1.0], [100.0, 50.0], [None, None])
    assert wrong.spearman == pytest.approx(-1.0)
    assert wrong.regret == pytest.approx(1.0)  # we pick the 2 s configuration; the best takes 1 s


def _row(rid: str, source: str, measured: float, predicted: float | None, features: list[str]) -> mem.MemoryRow:
    gib = mem.GIB
    return mem.MemoryRow(rid, source, "reserved_peak_max_rank", "c", features, measured * gib,
                         predicted_bytes=None if predicted is None else predicted * gib)  # fmt: skip


def test_errors_medians_and_worst_per_source() -> None:
    rows = [
        _row("a", "s1", 80.0, 60.0, []),  # -25%
        _row("b", "s1", 50.0, 55.0, ["compile"]),  # +10%
        _row("c", "s1", 40.0, 38.0, []),  # -5%
        _row("d", "s2", 10.0, 12.0, []),  # +20%
        _row("e", "s2", 10.0, None, []),  # refused: not counted
    ]
    assert rows[0].error == pytest.approx(-0.25)
    sp = mem.spread(rows)
    assert sp["s1"] == pytest.approx((3, 0.10, 0.25))
    assert sp["s2"] == pytest.approx((1, 0.20, 0.20))
    assert sp["all"] == pytest.approx((4, 0.15, 0.25))
    assert sp["plain"] == pytest.approx((3, 0.20, 0.25))
    s = mem.summary(rows, [])
    assert (s["runs"], s["sources"], s["under"]) == (4, 2, 2)
    # signed median of (-25%, +10%, -5%, +20%) is +2.5%, median |error| 15%
    assert s["by_recompute"][""] == pytest.approx((4, 0.025, 0.15))


def test_render_names_both_sections_and_every_run() -> None:
    rows = [_row("a", "s1", 80.0, 60.0, []), _row("b", "s2", 50.0, 55.0, ["compile"])]
    rows[0].static_bytes, rows[0].activation_bytes = 40.0 * mem.GIB, 20.0 * mem.GIB
    sweep = mem.SweepRow("sw", "s1", "tokens_per_s_per_gpu", ["x", "y"], [100.0, 128.0], [90.0, None], [None, "no"])
    rec = {
        "suite": "memory",
        "settings": {},
        "data": {"rows": [r.__dict__ for r in rows], "sweeps": [sweep.__dict__]},
        "provenance": {"commit": "abc", "clean": True, "command": "python -m bench.run --suites memory",
                       "machine": "m", "date": "d", "wall_s": 1.0},
    }  # fmt: skip
    text = mem.render(rec)
    assert mem.HEADING in text and mem.RANKING_HEADING in text
    assert "| a |" in text and "| b |" in text and "-25.0%" in text
    assert "refused" in text and "+28.0%" in text  # our only prediction is the slower one: 128/100 - 1
    assert "1.28x" in text  # fastest / slowest, measured
