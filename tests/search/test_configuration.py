"""The whole-configuration search (`adaptis plan --gpus N --global-batch-size B`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from adaptis_plan.app.plan import considered_record
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import cluster, load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.search import plan_point as P
from adaptis_plan.search import screen as S
from adaptis_plan.search.space import Point, Request, legal_points
from adaptis_plan.spec.config import PipelineSettings

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


def _pipeline(**settings: object) -> PipelineSettings:
    """A configuration request's pipeline section: `Request`'s default (auto recomputation, the uniform
    split) with `settings`."""
    return PipelineSettings(**{"recompute": "auto", "partition": "uniform", **settings})  # type: ignore[arg-type]


SMALL = ("--model", "llama-2-7b", "--hardware", "h100", "--seq-len", "2048", "--time-limit", "2", "--no-hard-stop")


@pytest.mark.unit
def test_legal_points_respect_every_rule() -> None:
    model = load_model("deepseek-v2-lite")
    hw = cluster(load_hardware("h100"), 64)
    req = Request(gpus=64, global_batch_size=256, seq_len=4096)
    points = legal_points(model, hw, req)
    assert points
    experts = {layer.moe.num_experts for layer in model.layers if layer.moe is not None}
    heads = model.layers[1].attention.num_heads
    for p in points:
        assert p.tp * p.cp * p.pp * p.dp == 64
        assert p.dp * p.micro_batch_size * p.num_microbatches == 256
        assert heads % p.tp == 0 and p.tp <= 8
        assert (p.dp * p.cp) % p.ep == 0 and all(e % p.ep == 0 for e in experts)
        assert p.pp <= model.num_layers and 4096 % (2 * p.cp) == 0
    assert {p.ep for p in points} > {1}  # expert parallelism is searched for a MoE model
    fixed = legal_points(model, hw, Request(64, 256, 4096, fixed={"tp": 2, "pp": 4, "zero": 1}))
    assert fixed and all((p.tp, p.pp, p.zero) == (2, 4, 1) for p in fixed)


@pytest.mark.unit
def test_hybrid_models_take_no_context_parallelism() -> None:
    model = load_model("nemotron-h-8b")
    hw = cluster(load_hardware("h100"), 32)
    assert {p.cp for p in legal_points(model, hw, Request(32, 64, 8192))} == {1}


@pytest.mark.unit
def test_the_screen_chooses_an_interleaving_degree_by_its_closed_form() -> None:
    """Few micro-batches on a deep pipeline: the estimate picks Interleaved1F1B at some degree, within 10%
    of its simulated step, and the screened plan beats 1F1B and the other degree that fits."""
    model = load_model("llama-2-7b")
    hw = cluster(load_hardware("h100"), 16)
    free = Request(gpus=16, global_batch_size=16, seq_len=2048)
    point = Point(2, 8, 1, 1, 1, 1, 1, 16)
    row = S._screen_bound(model, hw, free, point)
    got = S._screen(model, hw, free, row, ("none",))
    screened = got.considered
    assert screened.chunks == row.chunks > 1 and screened.strategy == "Interleaved1F1B"
    assert considered_record(screened)["stages_per_device"] == screened.chunks
    assert row.estimate_s == pytest.approx(got.step.step_time_s, rel=0.10)
    for strategy, k in (("1F1B", None), ("Interleaved1F1B", 2 if screened.chunks != 2 else 4)):
        forced = Request(
            gpus=16, global_batch_size=16, seq_len=2048, pipeline=_pipeline(strategy=strategy, stages_per_device=k)
        )
        other = S._screen(model, hw, forced, S._screen_bound(model, hw, forced, point), ("none",))
        assert other.considered.chunks == (k or 1)
        assert got.step.step_time_s < other.step.step_time_s
    # Interleaved1F1B without a degree: the same choice among the interleaved degrees
    asked = Request(gpus=16, global_batch_size=16, seq_len=2048, pipeline=_pipeline(strategy="Interleaved1F1B"))
    same = S._screen(model, hw, asked, S._screen_bound(model, hw, asked, point), ("none",))
    assert same.considered.chunks == screened.chunks and same.candidate.layout.num_stages == 8 * row.chunks


def _twins() -> tuple:
    """llama-2-7b on 32 H100s: two points with equal cost tables (dp4 x cp2 with micro-batches of 2, dp8
    with 1: the same tokens per rank and ZeRO group of 8), then one with 4 micro-batches."""
    req = Request(gpus=32, global_batch_size=64, seq_len=4096, pipeline=_pipeline(recompute="none"))
    points = (Point(2, 2, 4, 2, 1, 1, 2, 8), Point(2, 2, 8, 1, 1, 1, 1, 8), Point(2, 2, 8, 1, 1, 1, 2, 4))
    return load_model("llama-2-7b"), cluster(load_hardware("h100"), 32), req, points


def _counted(monkeypatch, owner: object, name: str) -> list:  # noqa: ANN001
    """`owner.name` patched to count its calls (the list grows by one per call)."""
    calls: list = []
    real = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.unit
def test_points_with_equal_cost_tables_share_one_screened_plan(monkeypatch) -> None:  # noqa: ANN001
    """The screen simulates a classic plan once per cost table, micro-batch count and schedule; each
    point prices its own whole step around it (here the same: one ZeRO group of 8)."""
    model, hw, req, points = _twins()
    calls = _counted(monkeypatch, S, "classic_candidate")
    memo: dict = {}
    got = [S._screen(model, hw, req, S._screen_bound(model, hw, req, p), ("none",), memo) for p in points]
    assert len(calls) == 2 and got[1].candidate is got[0].candidate and got[2].candidate is not got[0].candidate
    assert got[1].step.step_time_s == pytest.approx(got[0].step.step_time_s, rel=1e-9)


def test_points_with_equal_cost_tables_share_one_pipeline_search(monkeypatch) -> None:  # noqa: ANN001
    """The second point reuses the first one's search and prices its own step around it."""
    from adaptis_plan.search import driver
    from adaptis_plan.search.budget import Deadline, SearchBudget

    model, hw, req, points = _twins()
    calls = _counted(monkeypatch, driver, "search_pipeline")
    searched: dict = {}
    got = []
    for point in points:
        screen = S._screen(model, hw, req, S._screen_bound(model, hw, req, point), ("none",))
        budget = SearchBudget.for_time_limit(1.0)
        got.append(P._plan_point(model, hw, req, screen, budget, Deadline.after(1e9), None, searched)[0])
    assert len(calls) == 2  # the third point (4 micro-batches) searches on its own
    assert got[1].plan is got[0].plan and got[1].training.dp == 8
    assert got[1].step.step_time_s == pytest.approx(got[0].step.step_time_s, rel=0.05)


def test_plan_gpus_reports_the_whole_configuration(adaptis, tmp_path) -> None:
    out = tmp_path / "plan.json"
    r = adaptis("plan", *SMALL, "--gpus", "16", "--global-batch-size", "64", "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    c = d["configuration"]
    assert d["gpus"] == 16 and c["tp"] * c["pp"] * c["dp"] * c["cp"] == 16
    assert c["dp"] * c["micro_batch_size"] * c["num_microbatches"] == 64
    step = d["training_step"]["training_step_time_s"]
    assert d["tokens_per_s"] == pytest.approx(64 * 2048 / step)
    assert 0 < d["mfu"] < 1
    rows = d["configurations"]
    assert {r["status"] for r in rows} <= {
        "planned",
        "screened",
        "pruned",
        "out_of_memory",
        "inapplicable",
        "not_screened",
    }
    timed = [r["step_time_s"] for r in rows if "step_time_s" in r]
    assert min(timed) == pytest.approx(step)
    # the configuration bound is below every plan and is the least bound of any point that may fit
    assert d["configuration_lower_bound_s"] <= step * (1 + 1e-9)
    bounds = [r["lower_bound_s"] for r in rows if r["status"] != "out_of_memory"]
    assert d["configuration_lower_bound_s"] == pytest.approx(min(bounds))
    assert all(r["lower_bound_s"] <= r["step_time_s"] * (1 + 1e-9) for r in rows if "step_time_s" in r)
    # the plan file holds the chosen configuration, and simulate prices the same whole step
    plan = json.loads(out.read_text())
    assert {k: plan["training"][k] for k in ("tp", "pp", "dp", "cp", "zero")} == {
        k: c[k] for k in ("tp", "pp", "dp", "cp", "zero")
    }
    sim = adaptis("simulate", out, "--json")
    assert sim.exit_code == 0, sim.stderr
    assert json.loads(sim.stdout)["training_step"]["training_step_time_s"] == pytest.approx(step, rel=1e-9)


def test_forcing_every_dimension_plans_that_configuration(adaptis, tmp_path) -> None:
    fixed = ["--tp", "2", "--pp", "2", "--dp", "4", "--cp", "1", "--zero", "1", "--micro-batch-size", "2"]
    r = adaptis("plan", *SMALL, "--gpus", "16", "--global-batch-size", "64", *fixed, "-o", tmp_path / "p.json",
                "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert len(d["configurations"]) == 1
    c = d["configuration"]
    assert (c["tp"], c["pp"], c["dp"], c["zero"], c["micro_batch_size"], c["num_microbatches"]) == (2, 2, 4, 1, 2, 8)


def test_same_inputs_same_configuration_plan(adaptis, tmp_path) -> None:
    args = (*SMALL, "--gpus", "16", "--global-batch-size", "32")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert adaptis("plan", *args, "-o", a).exit_code == 0
    assert adaptis("plan", *args, "-o", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--gpus", "16"), "--global-batch-size"),
        (("--global-batch-size", "16", "--pp", "2", "--microbatches", "4"), "--gpus"),
        (("--gpus", "12", "--global-batch-size", "24"), "multiple of 8"),
        (("--gpus", "16", "--global-batch-size", "64", "--tp", "3"), "no legal configuration"),
        (("--gpus", "16", "--global-batch-size", "64", "--costs", "paper"), "--costs"),
        (("--gpus", "0", "--global-batch-size", "64"), "--gpus"),
    ],
)
def test_plan_gpus_bad_input_is_one_line(adaptis, tmp_path, extra, needle) -> None:
    out = tmp_path / "p.json"
    r = adaptis("plan", *SMALL, *extra, "-o", out)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert not out.exists()


def test_no_configuration_fits_exits_3(adaptis, tmp_path) -> None:
    r = adaptis("plan", "--model", str(CONFIGS / "llama-3.1-405b.json"), "--hardware", "h100", "--gpus", "8",
                "--global-batch-size", "8", "-o", tmp_path / "p.json")  # fmt: skip
    assert r.exit_code == 3, r.stderr
    assert "fits in memory" in r.stderr and "GiB" in r.stderr


@pytest.mark.parametrize(
    ("extra", "needle", "code"),
    [
        (("--ep", "2"), "ep the experts", 2),
        (("--strategy", "Bogus"), "unknown strategy", 2),
        (("--gpus", "1048576"), "100,000 nodes", 2),
        # were swallowed by a point's search and planned as its classic fallback
        (("--search", "bogus"), "unknown component 'bogus'", 2),
        (("--head-chunks", "2", "--target", "megatron"), "cannot run a split head", 2),
    ],
)
def test_plan_gpus_refuses_what_cannot_be_planned(adaptis, tmp_path, extra, needle, code) -> None:
    args = ["--model", "tiny-llama", "--hardware", "h100", "--seq-len", "256", "--global-batch-size", "8"]
    if "--gpus" not in extra:
        args += ["--gpus", "8"]
    r = adaptis("plan", *args, *extra, "-o", tmp_path / "p.json")
    assert r.exit_code == code and needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("m", "pp", "k"), [(16, 4, 2), (10, 4, 3), (7, 2, 4), (64, 8, 5)])
def test_the_estimates_warm_up_counts_each_chunk_as_the_interleaved_order_runs_it(m: int, pp: int, k: int) -> None:
    """The screen's memory estimate holds, per device, the chunks of its first forwards exactly as
    Interleaved1F1B's order runs them (a last stage's logits are not spread over the device's chunks)."""
    import numpy as np

    from adaptis_plan.schedules._common import interleaved_orders, microbatch_groups
    from adaptis_plan.search.estimate import _warmup_chunks

    groups = microbatch_groups(m, pp)
    forwards = np.array([min(k * m, 3 * d + 5) for d in range(pp)])
    got = _warmup_chunks(forwards, k, np.array([len(g) for g in groups]))
    for d in range(pp):
        order = interleaved_orders(d, pp, k, groups)[0][: forwards[d]]
        assert got[d].tolist() == [sum(1 for s, _ in order if s // pp == c) for c in range(k)]


@pytest.mark.parametrize(
    ("model_name", "gpus", "batch", "seq", "partition"),
    [
        ("llama-2-7b", 8, 64, 4096, "uniform"),
        ("gemma-7b", 16, 32, 4096, "uniform"),
        ("llama-2-7b", 8, 64, 4096, "ends-as-layers"),
        ("gemma-7b", 16, 32, 4096, "balanced"),  # estimated on other cuts: it proves nothing
    ],
)
def test_a_schedule_the_estimate_proves_overflowing_overflows_when_simulated(
    model_name, gpus, batch, seq, partition
) -> None:  # noqa: ANN001
    """`_estimate`'s held activations are no more than the simulated peak: a degree it marks unfit (the
    screen skips its simulation) overflows when simulated, in every mode it looked at, on the partition
    the screen simulates (a classic request's own)."""
    import random

    from adaptis_plan.cost.source import CostTables
    from adaptis_plan.search.generator import classic_candidate
    from adaptis_plan.search.screen import _screen_bound

    model = load_model(model_name)
    hw = cluster(load_hardware("h100"), gpus)
    req = Request(gpus=gpus, global_batch_size=batch, seq_len=seq)
    if partition != "uniform":
        req = Request(gpus=gpus, global_batch_size=batch, seq_len=seq,
                      pipeline=_pipeline(strategy="Interleaved1F1B", partition=partition))  # fmt: skip
    points = [p for p in legal_points(model, hw, req) if p.pp > 1 and p.pp * p.num_microbatches <= 256]
    random.Random(0).shuffle(points)
    checked = 0
    for p in points[:6]:
        row = _screen_bound(model, hw, req, p)
        for mode, degrees in row.unfit.items():
            costs = CostTables(hw, p.training(req, mode), default_mode=mode).table(model)
            for k in degrees:
                strategy = "1F1B" if k == 1 else "Interleaved1F1B"
                cand = classic_candidate(costs, p.num_microbatches, strategy, partition, k)
                assert not cand.result.fits_memory, (p.label, mode, k)
                checked += 1
    assert checked == 0 if partition == "balanced" else checked >= 10


@pytest.mark.parametrize("pp", [9, 10])
def test_adaptive_plans_more_stages_than_the_decoder_layers_as_without_gpus(pp: int) -> None:
    """tiny-llama has 8 decoder layers + the embedding and the head: adaptive plans pp 9 and 10 without
    --gpus, so with --gpus too (its screen takes the ends-as-layers split there; Megatron's uniform one has
    no decoder layer for each stage and was refused)."""
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    fixed = {"tp": 1, "pp": pp, "dp": 8, "cp": 1, "ep": 1, "zero": 1, "micro_batch_size": 1, "num_microbatches": 4}
    out = make_plan_for(PlanRequest.of(model_arg="tiny-llama", hardware_arg="h100", pp=1, num_microbatches=1,
                                    seq_len=256, gpus=8 * pp, global_batch_size=32, fixed=fixed,
                                    hard_stop=False))  # fmt: skip
    assert out.cluster["configuration"]["pp"] == pp
    assert len(out.layout.bounds) - 1 >= pp


def test_a_classic_request_screens_and_plans_its_own_partition() -> None:
    """Interleaved1F1B one layer per stage (Llama 3's layout: the embedding and the head on stages of their
    own) needs the ends-as-layers partition: Megatron's uniform one has too few decoder layers for it."""
    from adaptis_plan.schedules import ends_as_layers_bounds
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    layers = load_model("tiny-llama").num_layers
    fixed = {"tp": 1, "pp": 2, "dp": 4, "cp": 1, "ep": 1, "zero": 1, "micro_batch_size": 1, "num_microbatches": 4}
    asked = {"model_arg": "tiny-llama", "hardware_arg": "h100", "pp": 1, "num_microbatches": 1, "seq_len": 256,
             "gpus": 8, "global_batch_size": 16, "fixed": fixed, "recompute": "none", "strategy": "Interleaved1F1B",
             "stages_per_device": layers // 2, "hard_stop": False}  # fmt: skip
    with pytest.raises(InputError, match="decoder layers"):
        make_plan_for(PlanRequest.of(**asked))
    out = make_plan_for(PlanRequest.of(**asked, partition="ends-as-layers"))
    assert out.layout.bounds == ends_as_layers_bounds(layers, layers)
    assert out.cluster["configuration"]["pp"] == 2
    adaptive = {**asked, "strategy": "adaptive", "stages_per_device": None}
    with pytest.raises(InputError, match="apply to classic strategies; adaptive searches both"):
        make_plan_for(PlanRequest.of(**adaptive, partition="balanced"))
    for v in (1, 2):  # was dropped (1) or screened as 1F1B at 2 stages per device (2)
        with pytest.raises(InputError, match="apply to classic strategies; adaptive searches both"):
            make_plan_for(PlanRequest.of(**{**adaptive, "stages_per_device": v}))


@pytest.mark.parametrize("found", [None, 1e9])
def test_an_adaptive_request_that_keeps_the_screened_classic_plan_says_so(monkeypatch, found) -> None:  # noqa: ANN001
    """Where the adaptive search at a point finds no plan that fits (None) or none faster, the point keeps
    its screened classic plan; the report says the search ran and lost, instead of suggesting
    `--strategy adaptive` to a user who asked for it."""
    from types import SimpleNamespace

    from adaptis_plan.render.report import classic_lines
    from adaptis_plan.search.budget import Deadline, SearchBudget

    model, hw, req, points = _twins()
    screen = S._screen(model, hw, req, S._screen_bound(model, hw, req, points[0]), ("none",))
    slower = None if found is None else SimpleNamespace(step_time_s=found)
    monkeypatch.setattr(P, "_adaptive", lambda *a, **k: (None if found is None else object(), slower))
    got, _ = P._plan_point(model, hw, req, screen, SearchBudget.for_time_limit(1.0), Deadline.after(1e9), None, {})
    assert got.plan.strategy == screen.schedule[0] and got.step is screen.step
    assert got.plan.info["fallback"] == {"requested": "adaptive", "adaptive_step_time_s": found}
    [line] = classic_lines(SimpleNamespace(search_info=got.plan.info, plan=got.plan))
    assert "--strategy adaptive" not in line and "the screened classic plan is kept" in line
    assert ("no plan that fits" in line) == (found is None)
    classic, _ = P._plan_point(model, hw, dataclasses.replace(req, pipeline=dataclasses.replace(req.pipeline, strategy="1F1B")),
                               screen, SearchBudget.for_time_limit(1.0), Deadline.after(1e9), None, {})  # fmt: skip
    assert "fallback" not in classic.plan.info
    [line] = classic_lines(SimpleNamespace(search_info=classic.plan.info, plan=classic.plan))
    assert "`--strategy adaptive` searches" in line


@pytest.mark.unit
def test_points_priced_equal_go_to_the_simpler_configuration() -> None:
    """llama-2-7b on 32 H100s, batch 256 x 4K: dp 32 with micro-batches of 2 and dp 16 x cp 2 with 4
    hold the same tokens per rank and price the same (cp's KV exchange hides under attention); the
    screen orders, and the search chooses, the one without context parallelism."""
    model, hw = load_model("llama-2-7b"), cluster(load_hardware("h100"), 32)
    req = Request(gpus=32, global_batch_size=256, seq_len=4096)
    dp, cp = Point(1, 1, 32, 1, 1, 2, 2, 4), Point(1, 1, 16, 2, 1, 2, 4, 4)
    got = {p: S._screen(model, hw, req, S._screen_bound(model, hw, req, p), ("none",)) for p in (cp, dp)}
    assert got[dp].step.step_time_s == got[cp].step.step_time_s
    assert dp.preference < cp.preference and cp < dp  # the fields alone would order cp (dp 16) first
    assert sorted([cp, dp], key=lambda p: p.preference) == [dp, cp]
    assert Point(2, 1, 16, 1, 1, 1, 1, 8).preference > dp.preference  # tp 2 before dp 32: more split


def test_plan_gpus_takes_data_parallelism_where_context_parallelism_only_ties(adaptis, tmp_path) -> None:
    out = tmp_path / "plan.json"
    r = adaptis("plan", "--model", "llama-2-7b", "--hardware", "h100", "--gpus", "32", "--global-batch-size", "256",
                "--time-limit", "2", "--no-hard-stop", "-o", out, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    c = json.loads(r.stdout)["configuration"]
    assert (c["tp"], c["pp"], c["cp"], c["dp"]) == (1, 1, 1, 32)


@pytest.mark.unit
def test_extra_classic_baselines_are_labelled_and_not_repeated() -> None:
    """`classic_baselines(extra=...)`: a deeper interleaving on another split joins under "NAME xK/split";
    one equal to a default baseline (Interleaved1F1B x2 uniform; 1F1B on a split that is the uniform one)
    or that does not apply (80 stages for 10 layers) is left out."""
    from adaptis_plan.cost.source import CostTables
    from adaptis_plan.search.generator import classic_baselines
    from adaptis_plan.spec.training import TrainingConfig

    model = load_model("tiny-llama")
    training = TrainingConfig(num_microbatches=8, micro_batch_size=1, seq_len=256, pp=2)
    costs = CostTables(load_hardware("h100"), training).table(model)
    plain = classic_baselines(costs, 8)
    extra = (("Interleaved1F1B", "ends-as-layers", 5), ("InterleavedZeroBubble", "uniform", 2),
             ("Interleaved1F1B", "uniform", 8), ("1F1B", "ends-as-layers", 1))  # fmt: skip
    got = classic_baselines(costs, 8, extra)
    # 1F1B on ends-as-layers is the uniform 1F1B here (5 + 5 layers): left out too
    assert set(got) - set(plain) == {"Interleaved1F1B x5/ends-as-layers"}
    deep = got["Interleaved1F1B x5/ends-as-layers"]
    assert deep.layout.num_stages == 10 and deep.source == "Interleaved1F1B x5/ends-as-layers"


def test_the_screens_interleaving_seeds_the_adaptive_search() -> None:
    """tiny-llama (8 decoder layers) at pp 2 with 16 micro-batches: the screen picks an interleaving deeper
    than the search's own placements or on the ends-as-layers split; the point's adaptive search counts
    Interleaved1F1B and InterleavedZeroBubble there among its classic plans, so it is never slower than
    either."""
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    fixed = {"tp": 1, "pp": 2, "dp": 1, "cp": 1, "ep": 1, "zero": 1, "micro_batch_size": 1, "num_microbatches": 4}
    req = Request(gpus=2, global_batch_size=4, seq_len=256, fixed=fixed, pipeline=_pipeline(recompute="none"))
    model, hw = load_model("tiny-llama"), cluster(load_hardware("h100"), 2)
    point = Point(**fixed)
    got = S._screen(model, hw, req, S._screen_bound(model, hw, req, point), ("none",))
    seeds = P._seeds(model, req, got)
    assert got.schedule[1] > 2 and [s[0] for s in seeds] == ["Interleaved1F1B", "InterleavedZeroBubble"]
    out = make_plan_for(PlanRequest.of(model_arg="tiny-llama", hardware_arg="h100", pp=1, num_microbatches=1,
                                    seq_len=256, gpus=2, global_batch_size=4, fixed=fixed, recompute="none",
                                    hard_stop=False))  # fmt: skip
    k, split = got.schedule[1], seeds[0][1]
    names = [f"{n} x{k}" + ("" if split == "uniform" else f"/{split}") for n, _, _ in seeds]
    assert set(names) <= set(out.baselines)
    assert out.result.step_time_s <= min(out.baselines[n].step_time_s for n in names) * (1 + 1e-9)


def test_plan_gpus_passes_the_pipeline_options_to_each_point(adaptis, tmp_path) -> None:
    """--head-chunks and --search reach every planned point's search (they were dropped with --gpus): the
    plan splits the head as asked, and an ablation keeps its own plan (no classic fallback) and says
    that classic plans were not its candidates."""
    base = ("--model", "llama-2-7b", "--hardware", "h100", "--gpus", "32", "--global-batch-size", "64", "--pp", "4",
            "--time-limit", "2", "--no-hard-stop")  # fmt: skip
    out = tmp_path / "p.json"
    r = adaptis("plan", *base, "--head-chunks", "2", "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(out.read_text())["model"]["head_chunks"] == 2
    r = adaptis("plan", *base, "--search", "partition", "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    summary = r.json()
    assert summary["strategy"] == "adaptive" and summary["search"]["components"] == ["partition"]
    assert "fallback" not in summary["search"]
    r = adaptis("plan", *base, "--search", "partition", "-o", out)
    assert "restricted to partition (--search)" in " ".join(r.stderr.split())


def test_the_whole_step_is_reported_with_every_part_by_plan_and_simulate(adaptis, tmp_path) -> None:
    """The configuration line lists every part of the whole step (the exposed parameter gather was left
    out, so the parts did not add up), and `simulate` on a --gpus plan prints the same whole step."""
    out = tmp_path / "p.json"
    r = adaptis("plan", *SMALL, "--gpus", "16", "--global-batch-size", "64", "-o", out, "--json")
    step = r.json()["training_step"]
    r = adaptis("plan", *SMALL, "--gpus", "16", "--global-batch-size", "64", "-o", out)
    text = " ".join(r.stderr.split())
    assert "ms exposed parameter gather" in text
    s = adaptis("simulate", out)
    assert s.exit_code == 0, s.stderr
    line = " ".join(s.stderr.split())
    assert "whole step, tp" in line and "exposed parameter gather" in line
    from adaptis_plan.units import fmt_time

    assert f"{fmt_time(step['training_step_time_s'], 'ms')} (" in line


def test_one_planned_point_gets_the_budget_two_would_share(monkeypatch) -> None:  # noqa: ANN001
    """Every dimension fixed: one point is planned, with half the budget (two points get a quarter each,
    auto recomputation running up to three searches of it); llama-2-7b tp2 pp4 dp2 zero1 on 16 H100s then
    plans what it plans without --gpus (0.99244 s pipeline step; with a quarter it stopped at 0.99915)."""
    from adaptis_plan.search import configuration as C
    from adaptis_plan.search.budget import Deadline, SearchBudget

    shares: list = []
    real = C._plan_point
    monkeypatch.setattr(C, "_plan_point", lambda *a: shares.append(a[4].schedule_actions) or real(*a))
    budget = SearchBudget.for_time_limit(1.0)
    fixed = {"tp": 2, "pp": 4, "dp": 2, "zero": 1, "cp": 1, "ep": 1, "micro_batch_size": 1}
    for f in (fixed, {k: v for k, v in fixed.items() if k != "zero"}):
        req = Request(gpus=16, global_batch_size=32, seq_len=4096, fixed=f, pipeline=_pipeline(recompute="none"))
        C.search_configuration(load_model("llama-2-7b"), load_hardware("h100"), req, budget=budget,
                               deadline=Deadline.after(1e9))  # fmt: skip
    assert shares == [budget.schedule_actions // 2] + [budget.schedule_actions // 4] * 2


@pytest.mark.parametrize(
    "args",
    [
        (*SMALL, "--gpus", "16", "--global-batch-size", "64"),
        ("--model", "gemma-s", "--hardware", "h200", "--gpus", "8", "--global-batch-size", "32", "--seq-len", "2048"),
    ],
    ids=["small-16", "gemma-s-8"],
)
def test_the_co_design_share_is_reported_against_classic_schedules(adaptis, tmp_path, args) -> None:  # noqa: ANN001
    """At the chosen configuration, no classic plan priced there has a shorter whole step, and the
    configuration classic schedules alone would choose is the least classic step over every priced point."""
    r = adaptis("plan", *args, "-o", tmp_path / "p.json", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    co, step = d["co_design"], d["training_step"]["training_step_time_s"]
    assert co["classic_step_time_s"] >= step * (1 - 1e-9) and co["gain_over_classic"] >= 0
    assert co["gain_over_classic"] == pytest.approx(co["classic_step_time_s"] / step - 1, abs=1e-9)
    priced = [row for row in d["configurations"] if "classic_step_time_s" in row]
    here = next(
        row for row in priced if row["configuration"] == {k: d["configuration"][k] for k in row["configuration"]}
    )
    assert here["classic_step_time_s"] == co["classic_step_time_s"]
    alone = co["classic_only"]
    assert alone["step_time_s"] == min(row["classic_step_time_s"] for row in priced)
    assert alone["step_time_s"] >= step * (1 - 1e-9) and co["gain_over_classic_only"] >= 0
    tokens = d["tokens_per_s"] * step
    assert alone["tokens_per_s_per_gpu"] == pytest.approx(tokens / alone["step_time_s"] / d["gpus"])
    dims = {k: alone["configuration"][k] for k in here["configuration"]}
    assert co["decides_configuration"] is (dims != here["configuration"])
    human = adaptis("plan", *args, "-o", tmp_path / "q.json")
    assert "co-design: here the plan is" in human.stderr and "classic schedules alone would choose" in human.stderr


def test_a_classic_request_reports_no_co_design(adaptis, tmp_path) -> None:  # noqa: ANN001
    r = adaptis(
        "plan",
        *SMALL,
        "--gpus",
        "8",
        "--global-batch-size",
        "32",
        "--strategy",
        "1F1B",
        "-o",
        tmp_path / "p.json",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["co_design"] is None


@pytest.mark.unit
def test_deeper_pipelines_whose_bound_may_win_are_planned_beside_the_best_two() -> None:
    """The screen prices classic schedules; for an adaptive request, beside the best two, each deeper pipeline
    (in the order of its best screened step) whose points' bounds are below the best screened step gets its
    point with the least step without its bubble planned (PLAN_MOST in all); a classic request plans the best
    two; a big pipeline plans its best alone."""
    from types import SimpleNamespace

    def screen(pp: int, mbs: int, step: float, bound: float, m: int = 8) -> S._Screen:
        p = Point(tp=1, pp=pp, dp=64 // pp // mbs, cp=1, ep=1, zero=1, micro_batch_size=mbs, num_microbatches=m)
        return S._Screen(S.Considered(p, bound, "screened"), step=SimpleNamespace(step_time_s=step))  # type: ignore[arg-type]

    rows = [
        screen(1, 1, 1.00, 0.90),
        screen(1, 2, 1.01, 0.90),
        screen(1, 4, 1.02, 0.90),  # fmt: skip
        # one pp 2 point: the one with the least step without its bubble (1.06 x 4 / 5 < 1.05 x 64 / 65)
        screen(2, 1, 1.05, 0.80, m=64),
        screen(2, 2, 1.06, 0.80, m=4),
        screen(4, 1, 1.10, 1.00),  # its bound ties the best step: it cannot win
        screen(8, 1, 1.20, 0.70),
        screen(16, 1, 1.30, 0.60),  # pp 16 would be a fifth point
    ]
    adaptive = Request(64, 512, 4096)
    assert [(g.considered.point.pp, g.considered.point.micro_batch_size) for g in S._to_plan(rows, adaptive)] == [
        (1, 1), (1, 2), (2, 2), (8, 1),
    ]  # fmt: skip
    classic = Request(64, 512, 4096, pipeline=PipelineSettings(strategy="1F1B", recompute="auto", partition="uniform"))
    assert S._to_plan(rows, classic) == rows[:2]
    big = [screen(64, 1, 1.0, 0.5, m=64), *rows]
    assert S._to_plan(big, adaptive) == big[:1]
    # the margin rule sees a deep pipeline's estimate without its closed-form bubble, never below its bound
    row = dataclasses.replace(rows[3].considered, estimate_s=1.5, chunks=1)
    assert S._reachable_s(row, adaptive) == pytest.approx(max(0.8, 1.5 * 64 / 65))
    assert S._reachable_s(row, classic) == 1.5
    assert S._reachable_s(rows[0].considered, adaptive) == rows[0].considered.estimate_s
