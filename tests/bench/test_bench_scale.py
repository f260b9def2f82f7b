"""bench.scale and bench.comm render from their records alone; the summary's figures are the rows'."""

from __future__ import annotations

import pytest
from helpers_common import bench_record

from bench import comm, records, scale

pytestmark = pytest.mark.unit


def _rec(suite: str, data: dict) -> dict:
    return bench_record(suite, data)


def test_scale_summary_counts_only_uncalibrated_predictions() -> None:
    rows = [
        scale.ScaleRow("a", "s1", "a100-80gb", 8, "tp1", 100.0, predicted=110.0, free=120.0),
        scale.ScaleRow("b", "s2", "h100-80gb", 4096, "tp8", 100.0, predicted=80.0, free=90.0),
        scale.ScaleRow(
            "c", "s2", "h100-80gb", 16, "tp8", 100.0, predicted=102.0, free=101.0, used_for_calibration=True
        ),
        scale.ScaleRow("d", "s3", "a100-80gb", 64, "tp2", 100.0, forced_error="out of memory"),
    ]
    s = scale.summary(rows)
    assert (s["runs"], s["sources"], s["refused"]) == (2, 2, 1)
    assert s["median_abs_error"] == pytest.approx(0.15) and s["worst_abs_error"] == pytest.approx(0.2)
    assert s["free_slower"] == 0 and s["mean_gain"] == pytest.approx((120 / 110 + 90 / 80) / 2)
    assert (s["min_gpus"], s["max_gpus"]) == (8, 4096)
    text = scale.render(_rec("scale", {"rows": records.to_json(rows)}))
    assert text.startswith(scale.HEADING)
    assert "| c* |" in text and "+10.0%" in text and "-20.0%" in text and "d: out of memory" in text


def test_scale_reports_the_unstated_interleaving_beside_the_headline() -> None:
    """A run whose source does not state its interleaving keeps 1F1B in the headline; the best degree that
    fits is its own column and summary line (and "none fits" counts as 1F1B there)."""
    rows = [
        scale.ScaleRow(
            "a", "s1", "h100-80gb", 64, "tp8 pp4", 100.0, predicted=80.0, interleaved=95.0, interleaved_vp=4
        ),
        scale.ScaleRow("b", "s1", "h100-80gb", 64, "tp8 pp8", 100.0, predicted=70.0, interleaved_note="none fits"),
        scale.ScaleRow("c", "s2", "a100-80gb", 8, "tp8 pp1", 100.0, predicted=104.0),
    ]
    s = scale.summary(rows)
    assert s["worst_abs_error"] == pytest.approx(0.3)  # the headline is 1F1B's
    u = s["unstated_vp"]
    assert (u["runs"], u["fits"]) == (2, 1)
    assert u["plain"] == pytest.approx((0.25, 0.3)) and u["best"] == pytest.approx((0.175, 0.3))
    text = scale.render(_rec("scale", {"rows": records.to_json(rows)}))
    assert "| vp4 -5.0% |" in text and "| none fits |" in text
    assert "from 25.0% to 17.5%" in text and "Mist (EuroSys'25)" in text


def test_alternatives_are_reported_beside_the_headline_never_in_it() -> None:
    """A run's alternatives (e.g. the data set's previous settings) have their own column and summary line;
    the headline and the counted figures stay the stated settings'."""
    rows = [
        scale.ScaleRow("a", "s1", "a100-80gb", 64, "tp8 pp4 vp3", 100.0, predicted=90.0,
                       alternatives=[scale.AltPrediction("previous: 1F1B", predicted=95.0)]),
        scale.ScaleRow("b", "s1", "a100-80gb", 64, "tp8 pp8 vp6", 100.0, predicted=70.0,
                       alternatives=[scale.AltPrediction("previous: 1F1B", refused="out of memory"),
                                     scale.AltPrediction("other", predicted=99.0)]),
        scale.ScaleRow("c", "s2", "h100-80gb", 8, "tp1", 100.0, predicted=120.0),
    ]  # fmt: skip
    s = scale.summary(rows)
    assert s["worst_abs_error"] == pytest.approx(0.3) and s["median_abs_error"] == pytest.approx(0.2)
    assert s["previous"] == {"runs": 1, "median": pytest.approx(0.2), "worst": pytest.approx(0.3)}
    text = scale.render(_rec("scale", {"rows": records.to_json(rows)}))
    assert "| previous: 1F1B: -5.0% |" in text and "| previous: 1F1B: refused; other: -1.0% |" in text
    assert "the counted median |error| would be 20.0% and the worst 30.0%" in text
    # an interleaving degree from the rule: its previous reading was the best degree that fits
    rows[2].interleaved, rows[2].interleaved_vp, rows[2].from_rule = 100.0, 4, ["virtual_stages"]
    assert scale.summary(rows)["previous"] == {"runs": 2, "median": pytest.approx(0.05), "worst": pytest.approx(0.3)}


def test_figures_per_source_and_device_count_and_show_apart() -> None:
    rows = [
        scale.ScaleRow("a", "s1", "a100-80gb", 8, "tp1", 100.0, predicted=110.0),
        scale.ScaleRow("b", "s1", "a100-40gb", 8, "tp1", 100.0, predicted=70.0, used_for_calibration=True),
        scale.ScaleRow("c", "s1", "h100-80gb", 8, "tp1", 100.0, predicted=95.0),
        scale.ScaleRow("d", "s2", "h100-80gb", 8, "tp1", 100.0, predicted=80.0, used_for_calibration=True),
        scale.ScaleRow("e", "s2", "h100-80gb", 8, "tp1", 100.0, forced_error="out of memory"),
    ]
    s = scale.summary(rows)
    assert (s["runs"], s["not_counted"], s["not_counted_sources"]) == (2, 2, ["s1", "s2"])
    groups = {(g[0], g[1]): g[2:] for g in s["by_source_device"]}
    assert groups[("s1", "a100")] == (1, pytest.approx(0.1), pytest.approx(0.1), 1, pytest.approx(0.3),
                                      pytest.approx(0.3), 0)  # fmt: skip
    assert groups[("s2", "h100")] == (0, None, None, 1, pytest.approx(0.2), pytest.approx(0.2), 1)
    text = scale.render(_rec("scale", {"rows": records.to_json(rows)}))
    assert "| s1 | a100 | 1 | 10.0% | 10.0% | 1 | 30.0% | 30.0% | 0 |" in text
    assert "| s2 | h100 | 0 | - | - | 1 | 20.0% | 20.0% | 1 |" in text


def test_the_headline_takes_the_runs_own_settings_and_sweeps_only_the_rules() -> None:
    """Stated settings are never replaced: the forced request is the run's, its runtime is the run's, and
    only settings the rule gave are swept beside it."""
    from bench.published_runs import FROM_RULE, load_runs

    for run in load_runs():
        cfg = scale.forced_request_args(run)
        assert cfg["fixed"]["micro_batch_size"] == run["micro_batch_size"]
        assert (cfg["stages_per_device"] or 1) == run["virtual_stages"] and cfg["recompute"] == run["recompute"]
        assert scale.runtime(run) == {k: run[k] for k in ("dp_overlap", "attention", "tp_comm_overlap")}
        assert scale.from_rule(run) == [k for k, v in run["settings"].items() if v.startswith(FROM_RULE)]
        for alt in run.get("alternatives", []):
            other = scale.with_alternative(run, alt)
            assert other is not run and scale.forced_request_args(run) == cfg  # the run itself is untouched


def test_an_unstated_micro_batch_is_reported_beside_the_headline_not_in_it() -> None:
    """A run whose source does not state its micro-batch size keeps 1 in the headline; the best size that
    fits is its own column and summary line, with all counted runs' figures at those sizes."""
    rows = [
        scale.ScaleRow(
            "a", "s1", "h100-80gb", 64, "tp8 pp1", 100.0, predicted=70.0, best_mbs=4, best_mbs_predicted=97.0
        ),
        scale.ScaleRow(
            "b", "s1", "h100-80gb", 64, "tp8 pp8", 100.0, predicted=90.0, best_mbs=1, best_mbs_predicted=90.0
        ),
        scale.ScaleRow("c", "s2", "a100-80gb", 8, "tp8 pp1", 100.0, predicted=120.0),
    ]
    s = scale.summary(rows)
    assert s["worst_abs_error"] == pytest.approx(0.3)  # the headline is micro-batch 1's
    m = s["unstated_mbs"]
    assert (m["runs"], m["moved"]) == (2, 1)
    assert m["plain"] == pytest.approx((0.2, 0.3)) and m["best"] == pytest.approx((0.065, 0.1))
    assert m["all"] == pytest.approx((0.1, 0.2))
    text = scale.render(_rec("scale", {"rows": records.to_json(rows)}))
    assert "| mbs4 -3.0% |" in text and "| mbs1 -10.0% |" in text
    assert "from 20.0% to 6.5%" in text and "the median would be 10.0% and the worst 20.0%" in text
    assert scale.summary(rows[2:])["unstated_mbs"] is None


def test_scale_renders_the_planning_times_against_their_targets() -> None:
    walls = [
        scale.WallRow(
            "fast", "m.json", ["--gpus", "64"], 10.0, wall_s=3.5, configuration="tp4 pp8", tokens_per_s_per_gpu=1.0
        ),
        scale.WallRow("slow", "m.json", ["--gpus", "512"], 10.0, wall_s=20.5, configuration="tp4 pp64"),
        scale.WallRow("broken", "m.json", [], 10.0, wall_s=1.0, error="error: bad input"),
    ]
    rows = [scale.ScaleRow("a", "s1", "a100-80gb", 8, "tp1", 100.0, predicted=101.0)]
    text = scale.render(_rec("scale", {"rows": records.to_json(rows), "walls": records.to_json(walls)}))
    assert "| fast | `adaptis plan --model m.json --gpus 64 --no-hard-stop` | 3.5 | 10 | met | tp4 pp8 |" in text
    assert "| slow |" in text and "| 20.5 | 10 | MISS |" in text
    assert "| 1.0 | 10 | MISS | error: bad input |" in text
    assert "Planning time" not in scale.render(_rec("scale", {"rows": records.to_json(rows)}))


def test_comm_renders_every_dimension_of_a_case() -> None:
    rows = [comm.CommRow("PP2 x TP2 x DP2", 8, True, 0.5, {"dp": 0.02, "tp": 0.3}, {"dp": 0.002, "tp": 0.01})]
    text = comm.render(_rec("comm", {"rows": records.to_json(rows)}))
    assert text.startswith(comm.HEADING)
    assert "| PP2 x TP2 x DP2 | 8 | yes | 500.0 | dp | 20.0 | 2.0 |" in text
    assert "|  |  |  |  | tp | 300.0 | 10.0 |" in text


def test_megatron_runs_interleave_only_at_degrees_that_divide_the_layers_per_stage() -> None:
    """Megatron-LM takes layers per virtual stage dividing the layers per pipeline stage; other runtimes
    get VP_TRIED, each virtual stage keeping a layer."""
    megatron = {"source_key": "megatron_core_h100_2024", "pp": 16, "model": {"num_layers": 112},
                "global_batch_size": 3072, "dp": 48, "micro_batch_size": 1}  # fmt: skip
    assert scale.interleaving_degrees(megatron) == [7]
    assert scale.interleaving_degrees({**megatron, "pp": 8}) == [2, 7, 14]
    assert scale.interleaving_degrees({**megatron, "pp": 5}) == []  # pp does not divide the layers
    assert scale.interleaving_degrees({**megatron, "global_batch_size": 48 * 24}) == []  # nor the micro-batches
    llama = {"source_key": "llama3_2024", "pp": 16, "model": {"num_layers": 126}}
    assert scale.interleaving_degrees(llama) == [2, 3, 4, 6]
