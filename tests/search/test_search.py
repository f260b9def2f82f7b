"""The adaptive planner: partition heuristics, list scheduler, generator invariants.

Property test (hypothesis) over random layer costs, device counts, speeds, memory limits and
micro-batch counts: every adaptive plan is valid, simulates without deadlock, fits memory
whenever the search says so, and is never slower than any feasible classic strategy.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adaptis_plan.core import CostTable, Layout, uniform_costs
from adaptis_plan.errors import InputError
from adaptis_plan.judge.semantics import check_programs
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import candidate_placements, classic_baselines, search_plan
from adaptis_plan.search.listsched import ListPolicy, list_schedule
from adaptis_plan.search.partition import device_balanced_bounds, device_work, min_max_stage_bounds, stage_work


def _costs(work: list[float], num_devices: int, speeds: list[float] | None = None, **kw) -> CostTable:
    c = uniform_costs(len(work), num_devices, **kw)
    w = np.array(work, dtype=float)
    speed = np.array(speeds or [1.0] * num_devices)[:, None]
    return dataclasses.replace(
        c,
        f_s=np.tile(w, (num_devices, 1)) / speed,
        i_s=np.tile(w, (num_devices, 1)) / speed,
        w_s=np.tile(w * 0.5, (num_devices, 1)) / speed,
    )


def _brute_min_max_stage(work: np.ndarray, num_stages: int) -> float:
    import itertools

    best = np.inf
    n = len(work)
    for cuts in itertools.combinations(range(1, n), num_stages - 1):
        b = (0, *cuts, n)
        best = min(best, max(work[b[i] : b[i + 1]].sum() for i in range(num_stages)))
    return best


@given(st.lists(st.floats(0.1, 10), min_size=4, max_size=9), st.integers(2, 4))
@settings(max_examples=40, deadline=None)
def test_min_max_stage_is_optimal(work, num_stages):
    num_stages = min(num_stages, len(work))
    costs = _costs(work, num_stages)
    bounds = min_max_stage_bounds(costs, tuple(range(num_stages)))
    got = stage_work(costs, bounds, tuple(range(num_stages))).max()
    ref = _brute_min_max_stage(np.array(work) * 2.5, num_stages)
    assert got == pytest.approx(ref, rel=1e-9)


def test_heterogeneous_devices_get_proportionate_work():
    costs = _costs([1.0] * 12, 2, speeds=[2.0, 1.0])
    bounds = device_balanced_bounds(costs, (0, 1))
    assert bounds == (0, 8, 12)  # the 2x faster device takes 2/3 of the layers


def test_device_balanced_beats_stage_balanced_on_device_load():
    work = [0.2] + [1.0] * 16 + [6.0]
    costs = _costs(work, 4)
    sd = (0, 1, 2, 3, 3, 2, 1, 0)
    mm = min_max_stage_bounds(costs, sd)
    db = device_balanced_bounds(costs, sd)
    assert device_work(costs, db, sd).max() <= device_work(costs, mm, sd).max() + 1e-12


def test_list_schedule_matches_1f1b_without_split():
    p, m = 4, 8
    costs = uniform_costs(4, p, f=1, i=1, w=1)
    layout = Layout(bounds=(0, 1, 2, 3, 4), stage_device=(0, 1, 2, 3), num_devices=p)
    programs, est = list_schedule(layout, costs, m, ListPolicy(split_backward=False))
    check_programs(layout, programs, m)
    assert est == pytest.approx((m + p - 1) * 3)  # textbook 1F1B with F=1, B=2
    assert simulate(layout, costs, programs, m).step_time_s == pytest.approx(est)


def test_list_schedule_split_beats_fused_and_respects_memory_cap():
    p, m = 4, 8
    costs = uniform_costs(4, p, f=1, i=1, w=1, act=1.0, act_w=0.5, mem_limit=3.0)
    layout = Layout(bounds=(0, 1, 2, 3, 4), stage_device=(0, 1, 2, 3), num_devices=p)
    split, est_split = list_schedule(layout, costs, m, ListPolicy(split_backward=True))
    _, est_fused = list_schedule(layout, costs, m, ListPolicy(split_backward=False))
    assert est_split < est_fused
    res = simulate(layout, costs, split, m)
    assert res.fits_memory, res.peak_memory_bytes


def test_candidate_placements_cover_presets():
    labels = [label for label, _ in candidate_placements(4, 40)]
    assert "sequential" in labels and "loop x2" in labels and "V x2" in labels and "loop x4" in labels
    for _, sd in candidate_placements(4, 40):
        assert sorted(set(sd)) == [0, 1, 2, 3]


def test_more_devices_than_layers_refused():
    costs = uniform_costs(3, 4)
    with pytest.raises(InputError, match="more devices"):
        search_plan(costs, 3, 8, time_limit_s=1)


def test_unknown_component_refused():
    costs = uniform_costs(8, 2)
    with pytest.raises(InputError, match="unknown component"):
        search_plan(costs, 8, 4, components=("partition", "magic"), time_limit_s=1)


@pytest.mark.slow
def test_reproducible_with_seed():
    work = [0.3] + [1.0] * 10 + [4.0]
    costs = _costs(work, 3)
    runs = [
        search_plan(costs, len(work), 9, seed=7, budget=SearchBudget.for_time_limit(3), deadline=Deadline.after(600))
        for _ in range(2)
    ]
    assert not runs[0].aborted and not runs[1].aborted
    assert runs[0].best.layout == runs[1].best.layout
    assert runs[0].best.programs == runs[1].best.programs
    assert runs[0].best.describe() == runs[1].best.describe()


def test_with_fewer_micro_batches_than_devices_the_uniform_split_is_a_candidate_too() -> None:
    """Found by the property test below: one micro-batch over a fast and a slow device (the step is the
    chain, not the busiest device). The balanced partitions' best was 12.62, ZBVZeroBubble's uniform V
    12.08; with the uniform split among the search's own partitions, its order search gets 11.58."""
    costs = _costs([1, 1, 1, 1, 2, 3], 2, [2.0, 1.0], act=1.0, act_w=0.5, out=0.1, bw=10.0, latency=0.01)
    zbv = classic_baselines(costs, 1)["ZBVZeroBubble"]
    out = search_plan(costs, 6, 1, baselines={}, budget=SearchBudget.for_time_limit(1.0), deadline=Deadline.after(600))
    assert zbv.step_s == pytest.approx(12.08)
    assert out.best.step_s <= zbv.step_s * (1 - 0.03)


@st.composite
def _instances(draw):
    num_devices = draw(st.integers(1, 4))
    num_layers = draw(st.integers(num_devices + 2, 14))
    work = draw(st.lists(st.floats(0.05, 8.0), min_size=num_layers, max_size=num_layers))
    speeds = draw(st.lists(st.sampled_from([1.0, 1.0, 2.0]), min_size=num_devices, max_size=num_devices))
    m = draw(st.integers(1, 3 * num_devices))
    act = draw(st.floats(0.5, 2.0))
    # a memory limit between "too small for anything" and "plenty"
    mem = draw(st.sampled_from([np.inf, 6.0 * act * num_layers / num_devices, 1.5 * act * num_layers / num_devices]))
    return (
        _costs(work, num_devices, speeds, act=act, act_w=act / 2, mem_limit=mem, out=0.1, bw=10.0, latency=0.01),
        num_layers,
        m,
    )


#: found by hypothesis: at the 1 s budget only one layout got a CP-SAT order, and the list policies'
#: orders of the loop x2 layout lost 0.6% (one layer per stage) and 0.2% (a faster first device; CP-SAT
#: went to two irregular layouts first) to InterleavedZeroBubble/balanced; small layouts now get a few more
#: orders solved (`generator.SMALL_ORDER_ACTIONS`, `SMALL_ORDER_EXTRA`)
_LOOP_ORDER_CASES = (
    (_costs([6.0, 4.0, 7.0, 4.0, 4.0, 5.0], 3, [1.0] * 3, act=1.0, act_w=0.5, mem_limit=np.inf, out=0.1,
            bw=10.0, latency=0.01), 6, 2),
    (_costs([6.0, 5.5, 3.0, 1.0, 5.5, 6.0, 8.0, 1.0, 0.5, 6.0], 3, [2.0, 1.0, 1.0], act=1.0, act_w=0.5,
            mem_limit=np.inf, out=0.1, bw=10.0, latency=0.01), 10, 3),
)  # fmt: skip


@pytest.mark.slow
@given(_instances())
@example(_LOOP_ORDER_CASES[0])
@example(_LOOP_ORDER_CASES[1])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_search_alone_is_valid_and_never_worse_than_classic(instance):
    """The search with the classic strategies turned off (not candidates, not hints): its own plan
    is valid, fits memory when a classic plan does, and is never slower than any feasible one."""
    costs, num_layers, m = instance
    classic = classic_baselines(costs, m)
    out = search_plan(
        costs, num_layers, m, baselines={}, budget=SearchBudget.for_time_limit(1.0), deadline=Deadline.after(600)
    )
    best = out.best
    assert best.source == "adaptive" and best.origin.startswith("list policy")
    check_programs(best.layout, best.programs, m)  # valid: every (stage, mb) complete, right device
    res = simulate(best.layout, costs, best.programs, m)  # never deadlocks (raises otherwise)
    assert res.step_time_s == pytest.approx(best.result.step_time_s)
    assert res.step_time_s >= res.lower_bound_s * (1 - 1e-9)
    feasible = [c for c in classic.values() if c.feasible]
    if feasible:
        assert res.fits_memory
        worst_gap = res.step_time_s / min(c.step_s for c in feasible)
        assert worst_gap <= 1 + 1e-9, (worst_gap, best.label, min(feasible, key=lambda c: c.step_s).label)


@pytest.mark.slow
@given(
    st.sampled_from(
        [
            "tiny-llama",
            "tiny-gemma",
            "tiny-deepseek",
            "tiny-nemotron-h",
            "gemma-s",
            "deepseek-s",
            "nemotron-h-s",
            "llama-2-s",
            "llama-2-7b",
        ]
    ),
    st.sampled_from(["h200", "a100", "h100-a100-mixed", "cpu"]),
    st.integers(1, 6),
    st.integers(1, 12),
    st.sampled_from([256, 1024, 4096]),
)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_real_models_plan_or_refuse_with_exit_3(model, hardware, pp, mb, seq):
    """Through the same path as `adaptis plan`: a valid, memory-feasible plan whose stored
    prediction is the simulator's, or an InfeasibleError (exit 3) / InputError (exit 2), never a crash."""
    from adaptis_plan.errors import InfeasibleError
    from adaptis_plan.planfile.io import plan_layout, plan_programs
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    req = PlanRequest.of(
        model_arg=model, hardware_arg=hardware, pp=pp, num_microbatches=mb, seq_len=seq, time_limit_s=0.5
    )
    try:
        out = make_plan_for(req)
    except InfeasibleError as e:
        assert e.exit_code == 3 and "device" in str(e)
        return
    except InputError as e:  # e.g. more devices than layers or than the cluster has
        assert e.exit_code == 2
        return
    layout, programs = plan_layout(out.plan), plan_programs(out.plan)
    check_programs(layout, programs, mb)
    res = simulate(layout, out.costs, programs, mb)
    assert res.fits_memory
    assert res.step_time_s == pytest.approx(out.plan.predicted.step_time_s, rel=1e-6)


@pytest.mark.parametrize("deal", ["runs", "spread"])
@pytest.mark.parametrize("num_devices", [2, 3, 4])
def test_exact_packed_layout_reaches_the_best_packing(num_devices: int, deal: str) -> None:
    """Two layer kinds in a repeating pattern, an embedding that costs nothing and a heavy head:
    the layout's device loads are the optimal packing of whole layers (the lower bound's), its cut
    points are a valid partition, every device holds a stage and the devices are numbered in the
    order the layers reach them. Spread dealing gives every device a layer near the start and one
    near the end of the model; dealing in runs gives no more stages than spread dealing."""
    from adaptis_plan.judge.bound import best_packing
    from adaptis_plan.search.partition import exact_packed_layout, layer_work, packed_layouts

    sizes = [0.0] + [3.77, 3.77, 9.09] * 9 + [3.77, 12.28]
    costs = uniform_costs(len(sizes), num_devices, f=0.0, i=0.0, w=0.0)
    costs = dataclasses.replace(costs, f_s=np.tile(sizes, (num_devices, 1)))
    sd, bounds = exact_packed_layout(costs, num_devices, deal)
    Layout(bounds=bounds, stage_device=sd, num_devices=num_devices)  # validates the layout
    assert bounds[0] == 0 and bounds[-1] == len(sizes) and all(a < b for a, b in zip(bounds, bounds[1:], strict=False))
    assert all(a != b for a, b in zip(sd, sd[1:], strict=False))  # a stage is a maximal run on one device
    assert sorted(set(sd)) == list(range(num_devices))
    assert [d for k, d in enumerate(sd) if d not in sd[:k]] == list(range(num_devices))
    best = best_packing(layer_work(costs).min(axis=0), num_devices)
    assert device_work(costs, bounds, sd).max() == pytest.approx(best.max_load, rel=1e-12)
    label = {"runs": "packed exact", "spread": "packed spread"}[deal]
    if len(sd) > num_devices:
        assert any(name == label and layout == sd for name, layout, _ in packed_layouts(costs, num_devices))
    owner = [d for s, d in enumerate(sd) for _ in range(bounds[s + 1] - bounds[s])]
    if deal == "spread":
        n = len(owner)
        assert max(owner.index(d) for d in range(num_devices)) <= num_devices
        assert min(n - 1 - owner[::-1].index(d) for d in range(num_devices)) >= n - 2 * num_devices
    else:
        assert len(sd) <= len(exact_packed_layout(costs, num_devices, "spread")[0])


def test_order_phase_skips_layouts_whose_bound_reaches_the_best_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    # the CP-SAT order phase solves the best plan's own layout and, of the others, only those whose
    # device bound is below the best step found: no order of the rest could beat it
    from adaptis_plan.search import generator
    from adaptis_plan.search.order_instance import device_bound_s

    costs = uniform_costs(16, 4, f=1.0, i=1.1, w=0.3, latency=0.05)
    solved: list[tuple[Layout, bool, float, Layout]] = []
    original = generator._Search._order_one

    def spy(self, start):
        split = any(a.op == "I" for p in start.programs for a in p)
        solved.append((start.layout, split, self.best.step_s, self.best.layout))
        return original(self, start)

    monkeypatch.setattr(generator._Search, "_order_one", spy)
    search_plan(costs, 16, 8, budget=SearchBudget.for_time_limit(10.0), deadline=Deadline.after(60.0))
    assert solved
    for layout, split, best_step, best_layout in solved:
        assert layout == best_layout or device_bound_s(layout, costs, 8, split) < best_step


def test_ranking_microbatches_shortens_only_big_pipelines() -> None:
    from adaptis_plan.search.generator import RANKING_MIN_ROUNDS, ranking_microbatches

    assert ranking_microbatches(4, 16, 24_000) == 16  # 192 actions: ranked on every micro-batch
    assert ranking_microbatches(64, 512, 24_000) == RANKING_MIN_ROUNDS * 64  # 98K: two rounds per device
    assert ranking_microbatches(32, 512, 24_000) == 250  # enough for 24K actions
    assert ranking_microbatches(8, 12, 10) == 12  # never more than the pipeline has


def test_big_pipeline_ranks_on_a_shortened_run_and_plans_at_full_length() -> None:
    """Phases 1-4 run on fewer micro-batches; the plan, its step and its baselines are the full run's,
    and a budget whose ranking runs cover the pipeline searches it at full length."""
    work = [1.0, 2.0, 1.0, 1.5, 1.0, 2.5, 1.0, 1.0, 3.0, 1.0]
    costs = _costs(work, 4)
    m = 48
    short = SearchBudget(ranking_actions=200)  # 3 x 4 x 48 = 576 actions: ranked on 17
    out = search_plan(costs, len(work), m, budget=short, deadline=Deadline(float("inf")))
    phases = {ph["phase"]: ph for ph in out.phases}
    assert phases["full micro-batches"]["ranked_on"] == 17
    assert phases["placement x partition"]["microbatches"] == 17
    assert "microbatches" not in phases["cp-sat order"]
    check_programs(out.best.layout, out.best.programs, m)
    assert out.best.result.num_microbatches == m
    assert out.best.step_s == pytest.approx(simulate(out.best.layout, costs, out.best.programs, m).step_time_s)
    assert all(c.result.num_microbatches == m for c in out.baselines.values())
    assert all(out.best.step_s <= c.step_s * (1 + 1e-9) for c in out.baselines.values() if c.feasible)
    full = search_plan(costs, len(work), m, budget=SearchBudget(), deadline=Deadline(float("inf")))
    assert "full micro-batches" not in {ph["phase"] for ph in full.phases}


def test_a_ranking_run_in_a_worker_finds_what_one_in_turn_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside the classic baselines in a worker, or after them in this process: the same plan and records."""
    from adaptis_plan.search import workers

    work = [1.0, 2.0, 1.0, 1.5, 1.0, 2.5, 1.0, 1.0, 3.0, 1.0]
    costs = _costs(work, 4)
    got = []
    for n in ("1", "2"):
        monkeypatch.setenv(workers.ENV, n)
        out = search_plan(
            costs, len(work), 48, budget=SearchBudget(ranking_actions=200), deadline=Deadline(float("inf"))
        )
        phases = [{k: v for k, v in ph.items() if k != "wall_s"} for ph in out.phases]
        got.append((out.best.layout, out.best.programs, out.best.describe(), phases, out.evaluated))
    assert got[0] == got[1]


def test_windows_too_costly_for_their_budget_leave_the_device_bound() -> None:
    """Programs whose re-timing alone would cost many times the window budget get no window; the plan still
    reports the device bound, which needs no solve, and says no window ran."""
    from adaptis_plan.search.order_instance import device_bound_s

    work = [1.0, 2.0, 1.0, 1.5, 1.0, 2.5, 1.0, 1.0, 3.0, 1.0]
    costs = _costs(work, 4)
    tiny = SearchBudget(order_window_dtime=1e-6, order_full_max_actions=0)
    out = search_plan(costs, len(work), 8, budget=tiny, deadline=Deadline(float("inf")))
    records = out.solver["order_layouts"]
    assert records and all(w["status"] == "NOT_RUN" and w["solved"] == 0 for r in records for w in r["windows"])
    order = out.solver["order"]
    assert order["status"] == "BOUND_ONLY"
    split = any(a.op == "I" for p in out.best.programs for a in p)
    assert order["bound_s"] == pytest.approx(device_bound_s(out.best.layout, costs, 8, split))
    assert order["bound_s"] <= out.best.step_s * (1 + 1e-9)


def test_a_classic_plan_deeper_than_the_presets_is_list_scheduled_on_its_layout(monkeypatch) -> None:  # noqa: ANN001
    """The presets stop at 4 stages per device; a classic baseline at 8 (the configuration search's seed)
    gets the search's list policies on its layout too, after the other phases: the plan is never slower
    than the search without the seed, nor than the seed."""
    from adaptis_plan.search import generator as G

    costs = uniform_costs(34, 2)
    labels: list[str] = []
    real = G._Search.schedule
    monkeypatch.setattr(G._Search, "schedule", lambda self, *a, **k: labels.append(a[2]) or real(self, *a, **k))
    deep = classic_baselines(costs, 8, (("InterleavedZeroBubble", "uniform", 8),))
    assert "InterleavedZeroBubble x8" in deep
    got = search_plan(costs, 34, 8, baselines=deep, budget=SearchBudget.for_time_limit(1.0),
                      deadline=Deadline.after(1e9))  # fmt: skip
    assert "loop x8" in labels and "loop x8" not in [lab for lab, _ in candidate_placements(2, 34)]
    assert got.best.step_s <= deep["InterleavedZeroBubble x8"].step_s * (1 + 1e-9)
    labels.clear()
    plain = search_plan(costs, 34, 8, baselines=classic_baselines(costs, 8), budget=SearchBudget.for_time_limit(1.0),
                        deadline=Deadline.after(1e9))  # fmt: skip
    assert "loop x8" not in labels
    assert got.best.step_s <= plain.best.step_s * (1 + 1e-9)
    assert [p["phase"] for p in got.phases][-1] == "seeded layouts"
    # the winner's layout appeared after the CP-SAT order phase, which then orders it too: the plan has a bound
    assert got.best.layout.num_stages == 16 and got.solver["order"]["bound_s"] is not None
    assert [r for r in got.solver["order_layouts"] if r.get("seeded")][0]["placement"].startswith("loop")
    # withheld until then: the phases before are the plain search's, candidate for candidate
    same = [{k: v for k, v in p.items() if k != "wall_s"} for p in got.phases[:-1]]
    assert same == [{k: v for k, v in p.items() if k != "wall_s"} for p in plain.phases]


def test_the_deepest_interleaving_the_layers_allow_is_among_the_classic_plans() -> None:
    """Without --gpus the search also counts Interleaved1F1B / InterleavedZeroBubble at the deepest degree
    the layers allow (up to 8; Llama 3 405B at pp 16: one layer per stage on ends-as-layers, which beat the
    adaptive plan by 1.3% before), and is never slower than them; none on a big pipeline."""
    from adaptis_plan.search.driver import deep_classic
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    assert deep_classic(128, 16) == (
        ("Interleaved1F1B", "ends-as-layers", 8),
        ("InterleavedZeroBubble", "ends-as-layers", 8),
    )
    assert deep_classic(34, 4) == (("Interleaved1F1B", "uniform", 8), ("InterleavedZeroBubble", "uniform", 8))
    assert deep_classic(10, 4) == ()  # 2 per device: the default baselines
    out = make_plan_for(PlanRequest.of("llama-2-7b", "h100", 4, 16, seq_len=2048, hard_stop=False, time_limit_s=2))
    deep = {k: v for k, v in out.baselines.items() if " x8" in k}
    assert set(deep) == {"Interleaved1F1B x8", "InterleavedZeroBubble x8"}
    assert out.result.step_time_s <= min(v.step_time_s for v in deep.values() if v.fits_memory) * (1 + 1e-9)
    big = make_plan_for(PlanRequest.of("tiny-llama", "h100", 2, 4096, seq_len=256, hard_stop=False, time_limit_s=1))
    assert not any(" x" in k for k in big.baselines)
