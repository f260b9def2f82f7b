"""bench.consistency: the case list, the forced values next to a free pick, the verdict, the table, and one
small case end to end."""

from __future__ import annotations

import pytest
from helpers_common import bench_record

from bench import consistency as c
from bench.common import REPO

FREE = {"tp": 2, "pp": 1, "dp": 32, "cp": 1, "ep": 1, "zero": 2, "micro_batch_size": 1, "num_microbatches": 8,
        "recompute": "auto", "strategy": "adaptive", "stages_per_device": 1}  # fmt: skip


def _case(name: str) -> c.Case:
    return next(k for k in c.CASES if k.name == name)


@pytest.mark.unit
def test_cases_cover_the_families_sizes_and_hardware():
    names = [k.name for k in c.CASES]
    assert len(c.CASES) >= 20 and len(set(names)) == len(names)
    assert {k.family for k in c.CASES} == set(c.FAMILIES) == {"heterogeneous", "moe", "hybrid", "dense"}
    assert min(k.gpus for k in c.CASES) == 8 and max(k.gpus for k in c.CASES) == 16384
    assert {k.hardware for k in c.CASES} == {"h100", "a100"}
    models = {f: {k.model.rsplit("/", 1)[-1] for k in c.CASES if k.family == f} for f in c.FAMILIES}
    assert {"gemma-7b.json", "gemma-2-9b.json", "gemma-3-4b-it.json", "gemma-3-27b.json"} <= models["heterogeneous"]
    assert {"qwen3-30b-a3b.json", "mixtral-8x7b.json", "deepseek-v2-lite.json"} <= models["moe"]
    assert {"nemotron-h-8b.json", "jamba-v0.1.json"} <= models["hybrid"]
    assert {"llama-2-7b", "llama-3.1-70b.json", "llama-3.1-405b.json", "gpt-neox-20b.json", "falcon-40b.json"} <= (
        models["dense"]
    )
    assert all({k.hardware for k in c.CASES if k.family == f} == {"h100", "a100"} for f in c.FAMILIES)
    for k in c.CASES:
        assert k.model == "llama-2-7b" or (REPO / k.model).is_file(), k.model
        assert k.global_batch_size % 8 == 0 and k.seq_len in (2048, 4096, 8192), k.name
    assert set(c.QUICK) <= set(names)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "model", "gpus", "batch", "seq"),
    [
        ("gemma-3-27b 64 h100", "tests/data/configs/gemma-3-27b.json", 64, 256, 4096),
        ("qwen3-30b-a3b 64 h100", "tests/data/configs/qwen3-30b-a3b.json", 64, 512, 4096),
        ("gemma-3-4b 16 h100", "tests/data/configs/gemma-3-4b-it.json", 16, 256, 4096),
        ("llama-3.1-405b 16384 h100", "tests/data/configs/llama-3.1-405b.json", 16384, 2048, 8192),
    ],
)
def test_the_required_cases_are_there(name, model, gpus, batch, seq):
    k = _case(name)
    assert (k.model, k.hardware, k.gpus, k.global_batch_size, k.seq_len) == (model, "h100", gpus, batch, seq)
    assert k.command() == (f"adaptis plan --model {model} --hardware h100 --gpus {gpus} --global-batch-size {batch}"
                           f" --seq-len {seq} -o plan.json")  # fmt: skip


@pytest.mark.unit
def test_experts_are_forced_exactly_for_the_models_that_have_them():
    from adaptis_plan.inputs.models.load import load_model

    for model in sorted({k.model for k in c.CASES}):
        has = any(layer.moe is not None for layer in load_model(str(REPO / model) if "/" in model else model).layers)
        assert {k.experts for k in c.CASES if k.model == model} == {has}, model


@pytest.mark.unit
def test_gemma_3_27b_is_the_published_shape():
    from adaptis_plan.inputs.models.load import load_model

    m = load_model(str(REPO / "tests/data/configs/gemma-3-27b.json"))
    decoders = [layer for layer in m.layers if layer.kind == "decoder"]
    assert (m.hidden_size, m.vocab_size, len(decoders)) == (5376, 262208, 62)
    a = decoders[0].attention
    assert (a.num_heads, a.num_kv_heads, a.head_dim) == (32, 16, 128)
    assert decoders[0].mlp.intermediate_size == 21504
    # every 6th layer attends globally, the rest over a 1024-token window
    windows = [d.attention.sliding_window for d in decoders]
    assert windows == [None if (i + 1) % 6 == 0 else 1024 for i in range(62)]


@pytest.mark.unit
def test_forced_values_are_the_neighbours_of_the_free_pick():
    got = c.forced_values(FREE, gpus=64, global_batch_size=256, experts=False)
    assert got == [("zero", 0), ("zero", 1), ("zero", 3), ("pp", 2), ("tp", 4), ("tp", 1), ("cp", 2),
                   ("micro_batch_size", 2)]  # fmt: skip
    moe = c.forced_values({**FREE, "tp": 1, "ep": 8, "micro_batch_size": 4}, 64, 512, experts=True)
    assert ("ep", 16) in moe and ("ep", 4) in moe and ("micro_batch_size", 8) in moe and ("micro_batch_size", 2) in moe
    assert not any(d == "tp" and v == 0 for d, v in moe)


@pytest.mark.unit
def test_forced_values_stay_within_the_gpus_and_the_batch():
    pick = {**FREE, "tp": 8, "pp": 3, "dp": 1, "micro_batch_size": 4}
    vals = c.forced_values(pick, gpus=24, global_batch_size=4, experts=False)
    assert ("tp", 16) in vals and ("tp", 4) in vals
    assert ("pp", 6) in vals and [v for d, v in vals if d == "pp"] == [6]  # 3 / 2 is not whole
    assert [v for d, v in vals if d == "micro_batch_size"] == [2]  # 8 is more than the batch of 4
    assert [v for d, v in vals if d == "zero"] == [0, 1, 3]
    assert not any(d == "ep" for d, _ in vals)  # no experts
    assert [v for d, v in c.forced_values({**pick, "pp": 24}, 24, 4, False) if d == "pp"] == [12]  # 48 > 24 GPUs


def _run(tps: float | None, dim: str | None = "pp", value: int | None = 2) -> c.Run:
    return c.Run(1.0, dict(FREE) if tps else None, tps, reason=None if tps else "no configuration fits",
                 dimension=dim, value=value)  # fmt: skip


@pytest.mark.unit
def test_verdict_counts_only_forced_runs_above_the_margin():
    free = _run(1000.0, None, None)
    forced = [_run(1002.9, "pp", 2), _run(1003.1, "tp", 4), _run(None, "cp", 2), _run(1010.0, "zero", 1)]
    v = c.verdict(free, forced)
    assert v.best is forced[3] and v.ratio == pytest.approx(1.01)
    assert [r.dimension for r in v.beats] == ["zero", "tp"]  # 1002.9 is within 0.3%
    assert c.verdict(free, [forced[2]]) == c.Verdict(None, None, ())
    slower = c.verdict(free, [_run(900.0)])
    assert slower.ratio == pytest.approx(0.9) and slower.beats == ()


@pytest.mark.unit
def test_table_names_the_pick_the_best_forced_and_the_beats():
    case = _case("gemma-3-4b 16 h100")
    res = c.CaseResult(case, _run(1000.0, None, None), [_run(1020.0, "tp", 4), _run(None, "cp", 2)])
    text = c.table([res])
    row = text.splitlines()[2]
    assert row.startswith("| gemma-3-4b 16 h100 | tp2 pp1 dp32 cp1 ep1 zero2 mbs1 M8 adaptive | 1,000 |")
    assert "`--tp 4`" in row and "1.0200" in row and "+2.0%" in row
    assert c.summary([res])["forced_refused"] == 1 and c.summary([res])["cases_beaten"] == 1
    assert "`--cp 2`: no configuration fits" in c.refusals([res])


@pytest.mark.unit
def test_reason_is_the_last_stderr_line():
    assert c.reason_of("warning: x\n\nerror: --tp = 3: does not divide 32 heads; pass --tp 2\n", 1).startswith(
        "error: --tp = 3"
    )
    assert c.reason_of("", 2) == "exit 2"


@pytest.mark.slow
def test_one_small_case_end_to_end():
    case = c.Case("tiny", "dense", "tiny-llama", "h100", 2, 4, 512)
    res = c.run_case(case, dimensions=("pp",))
    k = res.free.configuration
    assert res.free.reason is None and k is not None and res.free.tokens_per_s_per_gpu > 0
    assert k["tp"] * k["pp"] * k["dp"] * k["cp"] == 2
    assert [(r.dimension, r.value) for r in res.forced] == [("pp", 2 * k["pp"])] + ([("pp", 1)] if k["pp"] == 2 else [])
    for r in res.forced:  # a forced run plans at its value or says why not
        assert (r.configuration is not None and r.configuration["pp"] == r.value) or r.reason
    v = res.verdict
    assert v.ratio is None or v.ratio > 0
    assert c.table([res]).splitlines()[2].startswith("| tiny | ")


def _record(results: list[c.CaseResult]) -> dict:
    from bench import records

    return bench_record(c.SUITE, {"results": records.to_json(results)}, {"margin": c.MARGIN})


@pytest.mark.unit
def test_the_report_renders_a_section_only_once_a_record_exists():
    from pathlib import Path

    from bench import records, report

    recs = records.load_all(Path(__file__).resolve().parent / "fixtures" / "clean")
    res = c.CaseResult(_case("llama-2-7b 8 h100"), _run(1000.0, None, None), [_run(990.0, "tp", 2)])
    without = report.sections(recs)
    with_it = report.sections({**recs, c.SUITE: _record([res])})
    assert c.SUITE not in without and {k: with_it[k] for k in without} == without
    section = with_it[c.SUITE]
    assert section.startswith(c.HEADING) and report.TITLES[c.SUITE] == c.HEADING
    assert "| llama-2-7b 8 h100 | tp2 pp1 dp32 cp1 ep1 zero2 mbs1 M8 adaptive | 1,000 | – | `--tp 2`:" in section
    assert "| 0.9900 | none |" in section and "0 forced runs in 0 cases beat" in section
    assert c.results_from_record(_record([res])) == [res]
    # the free plan's co-design share, and the configuration classic schedules alone would choose
    classic = {**res.free.configuration, "strategy": "1F1B", "pp": 1}
    res.free.co_design = {"gain_over_classic": 0.05, "decides_configuration": True, "gain_over_classic_only": 0.02,
                          "classic_only": {"configuration": classic, "tokens_per_s_per_gpu": 980.0}}  # fmt: skip
    section = report.sections({**recs, c.SUITE: _record([res])})[c.SUITE]
    assert "| +5.0%; classic alone: tp2 pp1 dp32 cp1 ep1 zero2 mbs1 M8 1F1B at 980 (+2.0%) |" in section
    assert "the co-designed pipeline decides the configuration in 1 cases" in section
    assert c.results_from_record(_record([res])) == [res]
