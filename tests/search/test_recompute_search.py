"""Recomputation as a search decision (adaptis_plan/search/recompute.py) and `plan --recompute`.

A synthetic memory-bound pipeline (every block keeps 10 bytes per micro-batch without
recomputation, 1 with it; 4 blocks per device fill a 45-byte device at one micro-batch in
flight) checks that auto recomputes where memory binds, keeps the plan only when it simulates
faster, and leaves plans alone where memory does not bind (the paper's small cases at 2K).
"""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest

from adaptis_plan.core import Action, CostTable, Layout, uniform_costs
from adaptis_plan.cost.recompute import stage_recompute
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import classic_baselines, search_plan
from adaptis_plan.search.recompute import (
    MIN_CANDIDATE_ACTIONS,
    held_at_peak,
    memory_bound_devices,
    memory_may_bind,
    recompute_candidates,
    search_recompute,
)
from adaptis_plan.usecases import PlanRequest, make_plan_for

KINDS = ["embedding"] + ["decoder"] * 8 + ["head"]
ALL = ("partition", "placement", "schedule")


def _table(modes: list[str], mem_limit: float = 45.0) -> CostTable:
    """2 devices; blocks: F 1, I 1, W 1, act 10 (full: act 1 and I 2), act_w 4; tiny embedding and head."""
    n = len(KINDS)
    c = uniform_costs(n, 2, act=10.0, act_w=4.0, mem_limit=mem_limit)
    full = np.array([m == "full" and k == "decoder" for m, k in zip(modes, KINDS, strict=True)])
    tiny = np.array([k != "decoder" for k in KINDS])
    f = np.where(tiny, 0.1, 1.0)
    return dataclasses.replace(
        c,
        f_s=np.tile(f, (2, 1)),
        i_s=np.tile(np.where(full, 2.0, f), (2, 1)),
        w_s=np.tile(f, (2, 1)),
        act_bytes=np.where(tiny, 1.0, np.where(full, 1.0, 10.0)),
        act_w_bytes=np.where(tiny, 1.0, 4.0),
        layer_kinds=tuple(KINDS),
    )


def _plain(mem_limit: float = 45.0):  # noqa: ANN202
    costs = _table(["none"] * len(KINDS), mem_limit)
    return costs, search_plan(costs, len(KINDS), 8, time_limit_s=2.6)  # a fifth of the default work


def test_memory_bound_devices_and_bytes_held_at_the_peak() -> None:
    """One device, F0 F1 I0 W0 ...: the peak (after F1, or after I0 when act_w > act) and who holds it."""
    costs = uniform_costs(2, 1, act=3.0, act_w=1.0, mem_limit=6.5)
    layout = Layout(bounds=(0, 1, 2), stage_device=(0, 0), num_devices=1)
    prog = [Action(0, "F", 0), Action(1, "F", 0), Action(0, "F", 1), Action(1, "I", 0), Action(1, "W", 0)]
    prog += [Action(0, "I", 0), Action(0, "W", 0), Action(1, "F", 1), Action(1, "B", 1), Action(0, "B", 1)]
    r = simulate(layout, costs, [prog], 2)
    assert r.peak_memory_bytes == [9.0]  # 3 forwards in flight
    assert list(held_at_peak(layout, costs, [prog], r)) == [6.0, 3.0]
    assert memory_bound_devices(layout, costs, r) == [0]  # it does not even fit
    roomy = dataclasses.replace(costs, mem_limit_bytes=np.array([12.0]))
    assert memory_bound_devices(layout, roomy, simulate(layout, roomy, [prog], 2)) == []  # 9 + 3 fits in 12
    near = dataclasses.replace(costs, mem_limit_bytes=np.array([9.5]))  # fits, but 9 + 3 would not
    assert memory_bound_devices(layout, near, simulate(layout, near, [prog], 2)) == [0]
    # within 10% of the limit counts too, even when one more micro-batch would fit
    small = uniform_costs(2, 1, act=0.25, act_w=0.125, static=4.5, mem_limit=10.0)
    r = simulate(layout, small, [prog], 2)
    assert r.peak_memory_bytes == [9.75] and memory_bound_devices(layout, small, r) == [0]  # 9.75 + 0.25 fits


@pytest.mark.slow
def test_candidates_rank_early_blocks_first_and_include_full_everywhere() -> None:
    costs, plain = _plain()
    r = plain.best.result
    cands = recompute_candidates(plain.best.layout, costs, plain.best.programs, r, KINDS)
    labels = [label for label, _ in cands]
    assert labels[0] == "full, heaviest 4 of the blocks" and labels[1] == "full everywhere"
    assert cands[0][1] == ["none"] + ["full"] * 4 + ["none"] * 5  # the earliest blocks hold the most
    assert cands[1][1] == ["none"] + ["full"] * 8 + ["none"]
    assert any(label.startswith("selective") for label in labels)
    assert len({tuple(m) for _, m in cands}) == len(cands)  # no duplicates
    assert all(m[0] == m[-1] == "none" for _, m in cands)  # embedding and head never recompute


@pytest.mark.slow
def test_auto_recomputes_where_memory_binds_and_keeps_only_a_faster_plan() -> None:
    # 35 bytes per device: the search finds no plan without recomputation that fits
    table = functools.partial(_table, mem_limit=35.0)
    costs, plain = _plain(35.0)
    p = plain.best.result
    assert not p.fits_memory and memory_bound_devices(plain.best.layout, costs, p)
    out = search_recompute(table, costs, plain, KINDS, 8, components=ALL, seed=0, **_budget(20.0))
    r = out.outcome.best.result
    assert r.fits_memory, (r.peak_memory_bytes, r.mem_limit_bytes)
    assert any(m == "full" for m in out.modes)
    assert out.info["chosen"] and out.info["without"]["step_time_s"] == p.step_time_s
    assert len(out.info["candidates"]) >= 3
    # the kept plan is stage-uniform and its table is the one its modes give: it re-simulates the same
    layout = out.outcome.best.layout
    stage_recompute(layout.bounds, out.modes, KINDS)
    again = simulate(layout, table(out.modes), out.outcome.best.programs, 8)
    assert again.step_time_s == r.step_time_s and np.array_equal(out.costs.i_s, table(out.modes).i_s)
    assert r.lower_bound_s == again.lower_bound_s > p.lower_bound_s  # the bound of its own costs
    # 45 bytes: the plan without recomputation fits, and no candidate is faster: it is kept; the
    # candidates its step rules out by their tables' lower bounds are not even searched
    costs, plain = _plain(45.0)
    out = search_recompute(_table, costs, plain, KINDS, 8, components=ALL, seed=0, **_budget(5.0))
    step = plain.best.result.step_time_s
    ruled_out = out.info.get("cannot_win", {})
    assert out.outcome is plain and out.modes == ["none"] * len(KINDS)
    assert out.info["candidates"] and len(out.info["candidates"]) + len(ruled_out) >= 3
    assert all(c["step_time_s"] >= step for c in out.info["candidates"])
    assert all(bound >= step for bound in ruled_out.values())
    assert "faster" in out.info["reason"]  # says why it kept the plain plan; the facts are asserted above


def test_the_budget_decides_how_many_recompute_candidates_run() -> None:
    """Each candidate's search gets at least MIN_CANDIDATE_ACTIONS of work: a small budget tries only
    the likeliest and lists the others as not tried."""
    table = functools.partial(_table, mem_limit=35.0)
    costs, plain = _plain(35.0)
    budget = SearchBudget.for_time_limit(5.0).scaled(0.5)
    out = search_recompute(
        table, costs, plain, KINDS, 8, components=ALL, seed=0, budget=budget,
        deadline=Deadline.after(60.0),
    )  # fmt: skip
    runs = max(1, budget.schedule_actions // MIN_CANDIDATE_ACTIONS)
    assert len(out.info["candidates"]) == runs and out.info["not_tried"]


def _budget(time_limit_s: float) -> dict:
    return {"budget": SearchBudget.for_time_limit(time_limit_s), "deadline": Deadline.after(60.0)}


def test_auto_leaves_plans_alone_when_memory_does_not_bind() -> None:
    costs, plain = _plain(mem_limit=float("inf"))
    out = search_recompute(_table, costs, plain, KINDS, 8, components=ALL, seed=0, **_budget(1.0))
    assert out.outcome is plain and out.modes == ["none"] * len(KINDS)
    assert out.info["reason"].startswith("no device comes within 10% of its memory limit")
    assert out.info["candidates"] == []
    assert not memory_may_bind(classic_baselines(costs, 8))


@pytest.mark.parametrize("model", ["gemma-s", "deepseek-s", "nemotron-h-s", "llama-2-s"])
def test_memory_does_not_bind_on_the_papers_small_cases_at_2k(model: str) -> None:
    """The paper's S cases (PP 4, 16 micro-batches, seq 2048, h200, analytic costs): memory does not
    bind (no device comes near its limit without recomputation), so auto recomputes nothing and
    tries no recompute candidate: it is the search without recomputation."""
    out = make_plan_for(
        PlanRequest.of(model, "h200", 4, 16, seq_len=2048, recompute="auto", time_limit_s=1.0, hard_stop=False)
    )
    assert {s.recompute for s in out.plan.stages} == {"none"}
    info = out.search_info["recompute"]
    assert info["requested"] == "auto" and not info.get("candidates"), info
    assert "memory" in info["reason"]


def _tiny(recompute: str, **kw: object) -> PlanRequest:
    return PlanRequest.of(
        "tiny-llama", "cpu", 2, 4, seq_len=128, recompute=recompute, time_limit_s=2.0, hard_stop=False, **kw
    )  # type: ignore[arg-type]


def test_auto_plans_as_none_where_memory_does_not_bind() -> None:
    none, auto = make_plan_for(_tiny("none")), make_plan_for(_tiny("auto"))
    for a, b in ((none.plan, auto.plan),):
        da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
        assert da["training"].pop("recompute") == "none" and db["training"].pop("recompute") == "auto"
        assert da["search"].pop("recompute") == {"requested": "none"}
        assert db["search"].pop("recompute")["reason"].startswith("every classic plan fits memory")
        for d in (da, db):
            d["search"].pop("phases"), d["search"].pop("solver")  # wall times
        assert json.dumps(da, sort_keys=True) == json.dumps(db, sort_keys=True)


def test_forced_modes_are_recorded_per_stage_and_classic_auto_is_none() -> None:
    full = make_plan_for(_tiny("full"))
    assert {s.recompute for s in full.plan.stages} == {"full"} and full.plan.training.recompute == "full"
    info = full.search_info["recompute"]
    assert info["requested"] == "full" and info["stages"]["full"] == list(range(len(full.plan.stages)))
    assert 0 < info["extra_compute_share"] < 0.5
    classic = make_plan_for(_tiny("auto", strategy="1F1B"))
    assert classic.plan.training.recompute == "none" and {s.recompute for s in classic.plan.stages} == {"none"}
    sel = make_plan_for(_tiny("selective", strategy="1F1B"))
    assert {s.recompute for s in sel.plan.stages} == {"selective"}
    assert sel.result.step_time_s > classic.result.step_time_s  # it reruns the attention cores


def test_bad_recompute_request_is_one_clear_line() -> None:
    from adaptis_plan.errors import InputError

    with pytest.raises(InputError, match=r"--recompute = 'always': use one of none, selective, op, full, auto"):
        make_plan_for(_tiny("always"))


TINY = ("--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "128")


@pytest.mark.parametrize("mode", ["full", "selective", "op"])
def test_cli_recompute_plans_re_simulate_to_the_same_figures(adaptis, tmp_path, mode: str) -> None:  # noqa: ANN001
    path = tmp_path / "p.json"
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "--recompute", mode, "-o", path, "--json")
    assert r.exit_code == 0, r.stderr
    planned = r.json()
    # a stage of decoder layers recomputes in the mode; one holding only the embedding or the head
    # has nothing to recompute (`cost.recompute.recomputes`) and says none
    last = max(s["layers"][1] for s in planned["stages"])
    decoders = [i for i, s in enumerate(planned["stages"]) if s["layers"][0] < last - 1 and s["layers"][1] > 1]
    assert [s["recompute"] for s in planned["stages"]] == [
        mode if i in decoders else "none" for i in range(len(planned["stages"]))
    ]
    assert decoders and planned["search"]["recompute"]["stages"][mode] == decoders
    sim = adaptis("simulate", path, "--json").json()
    assert sim["stored_differs"] is False
    for key in ("step_time_s", "lower_bound_s", "peak_memory_bytes", "bubble_ratio"):
        assert sim[key] == planned[key], key
    # the stages are what counts: with its first stage not recomputing, that stage's device holds more
    data = json.loads(path.read_text())
    data["stages"][0]["recompute"] = "none"
    path.write_text(json.dumps(data))
    plain = adaptis("simulate", path, "--json").json()
    d = data["stages"][0]["device"]
    assert plain["peak_memory_bytes"][d] > sim["peak_memory_bytes"][d]
    assert plain["lower_bound_s"] <= sim["lower_bound_s"] and plain["step_time_s"] <= sim["step_time_s"]


def test_cli_bare_recompute_flag_means_full_and_the_report_says_where(adaptis, tmp_path) -> None:  # noqa: ANN001
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "--recompute", "-o", tmp_path / "p.json")
    assert r.exit_code == 0, r.stderr
    assert "recomputation (full): full on stages 0-" in r.stderr
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["training"]["recompute"] == "full" and {s["recompute"] for s in data["stages"]} == {"full"}
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "-o", tmp_path / "q.json")
    assert "recomputation (auto): none" in r.stderr


# ----------------------------------------------------------------------------- auto against the forced modes
FORCED = ("none", "selective", "full")


def _small_memory_hardware(tmp_path, hbm_bytes: float) -> str:  # noqa: ANN001
    """The `cpu` profile with `hbm_bytes` per device: tiny-llama's activations then bind memory."""
    from importlib.resources import files

    data = json.loads(files("adaptis_plan.profiles").joinpath("cpu.json").read_text())
    for device in data["device_types"].values():
        device["hbm_bytes"] = int(hbm_bytes)
    path = tmp_path / f"cpu-{int(hbm_bytes)}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _plan_step(req: PlanRequest) -> float | None:
    """The plan's simulated step, None when no plan fits memory (`plan` exits 3)."""
    from adaptis_plan.errors import InfeasibleError

    try:
        return make_plan_for(req).result.step_time_s
    except InfeasibleError:
        return None


@pytest.mark.parametrize(
    ("pp", "num_microbatches", "hbm_bytes", "target"),
    [
        (4, 16, 100e6, "adaptis"),  # recomputing in full is fastest, none and selective fit too
        (4, 16, 80e6, "adaptis"),  # full is a quarter faster than none
        # Megatron runs its own order: the plans are compared in that order, not the searched one
        (4, 16, 180e6, "megatron"),
        pytest.param(4, 16, 120e6, "adaptis", marks=pytest.mark.slow),  # none is fastest: memory binds, not enough
        pytest.param(2, 8, 125e6, "adaptis", marks=pytest.mark.slow),  # forced full finds no plan that fits
    ],
)
def test_auto_is_never_slower_than_a_forced_mode_where_memory_binds(
    tmp_path,  # noqa: ANN001
    pp: int,
    num_microbatches: int,
    hbm_bytes: float,
    target: str,
) -> None:
    """tiny-llama at 1K tokens on CPU ranks with 80-180 MB each (90% usable): auto's plan fits
    whenever a forced mode's does, and is no slower than any of them on the same deterministic
    budget (auto runs their searches where their lower bounds leave room)."""
    hw = _small_memory_hardware(tmp_path, hbm_bytes)

    def req(mode: str) -> PlanRequest:
        return PlanRequest.of(
            "tiny-llama", hw, pp, num_microbatches, seq_len=1024, recompute=mode, time_limit_s=1.0, hard_stop=False,
            target=target,
        )  # fmt: skip

    forced = {mode: _plan_step(req(mode)) for mode in FORCED}
    feasible = {mode: step for mode, step in forced.items() if step is not None}
    assert feasible, forced  # the case plans at all
    auto = _plan_step(req("auto"))
    assert auto is not None, forced
    assert auto <= min(feasible.values()) * (1 + 1e-9), (auto, forced)


@pytest.mark.slow
def test_auto_plans_the_250_layer_pipeline_that_full_recomputation_plans(tmp_path) -> None:  # noqa: ANN001
    """250 LLaMA-2-S layers, PP 32, 256 micro-batches at 8K tokens on h200 with the default limit (the
    same layers per stage and activations per device as 500 layers at PP 64 x 512 at 4K, a quarter of
    the work): no plan without recomputation fits, and the search is cut short at once (the classic
    plans take the time), so each forced mode's search is its classic plans. auto used to skip every recompute
    candidate then and exit 3 where `--recompute full` plans a step 4% above its bound; it now
    searches the forced modes (their classic plans at least) and plans no slower than full."""
    from adaptis_plan.inputs.models.load import load_model

    base = load_model("llama-2-s")
    blocks = base.layers[1:-1]
    layers = [base.layers[0], *(blocks[i % len(blocks)] for i in range(248)), base.layers[-1]]
    spec = tmp_path / "llama-2-s-250.json"
    spec.write_text(base.model_copy(update={"name": "llama-2-s-250", "layers": layers}).model_dump_json())

    def req(mode: str) -> PlanRequest:
        return PlanRequest.of(str(spec), "h200", 32, 256, seq_len=8192, recompute=mode)

    full = make_plan_for(req("full"))
    auto = make_plan_for(req("auto"))
    assert auto.result.fits_memory and full.result.fits_memory
    assert auto.result.step_time_s <= full.result.step_time_s * (1 + 1e-9)
    info = auto.search_info["recompute"]
    assert not info["without"]["fits_memory"]
    assert any(row["label"] == "full everywhere" and row["fits_memory"] for row in info["candidates"])
    assert auto.result.lower_bound_s <= auto.result.step_time_s
