"""The two CP-SAT models of the planner: partition (cut points) and order (per-device programs).

Small hand-checkable instances; every answer is re-checked here independently of the model
(cut points re-costed in floats, programs checked for completeness, re-timed by the list
timing and checked for precedences and memory in bytes). Fast: a few seconds in all.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adaptis_plan.core import Action, CostTable, Layout, Programs, uniform_costs
from adaptis_plan.judge.semantics import check_programs
from adaptis_plan.search.cpsat_order import solve_order
from adaptis_plan.search.cpsat_partition import solve_partition
from adaptis_plan.search.cpsat_window import improve_order_windows
from adaptis_plan.search.order_instance import device_bound_s, list_timing
from adaptis_plan.search.result import SolveResult


def _costs(work: list[float] | np.ndarray, num_devices: int, **kw: float) -> CostTable:
    """A table whose layer l costs work[l] seconds of F (I = W = 0) on every device."""
    work = np.asarray(work, dtype=float)
    table = uniform_costs(len(work), num_devices, **kw)
    zero = np.zeros((num_devices, len(work)))
    return dataclasses.replace(table, f_s=np.tile(work, (num_devices, 1)), i_s=zero, w_s=zero.copy())


def _device_work(costs: CostTable, bounds: tuple[int, ...], stage_device: tuple[int, ...]) -> np.ndarray:
    total = costs.f_s + costs.i_s + costs.w_s
    work = np.zeros(costs.num_devices)
    for s, d in enumerate(stage_device):
        work[d] += total[d, bounds[s] : bounds[s + 1]].sum()
    return work


def _check_sane(result: SolveResult) -> None:
    assert result.feasible, result
    assert result.bound is not None and result.objective is not None
    assert result.bound <= result.objective + 1e-9
    assert result.gap is not None and 0 <= result.gap <= 1
    assert result.wall_s > 0
    if result.hint_objective is not None:
        assert result.objective <= result.hint_objective + 1e-9


# --------------------------------------------------------------------------- partition


def test_partition_sequential_known_optimum() -> None:
    costs = _costs([1, 1, 1, 1, 1, 5], 2)
    result = solve_partition(costs, (0, 1), max_stage_weight=0.0)
    assert result.status == "OPTIMAL" and result.optimal
    assert result.payload == (0, 5, 6)
    assert result.objective == pytest.approx(5.0)
    assert result.bound == pytest.approx(5.0) and result.gap == 0.0
    # the secondary term adds 0.1 x the heaviest stage
    weighted = solve_partition(costs, (0, 1))
    assert weighted.payload == (0, 5, 6) and weighted.objective == pytest.approx(5.5)


def test_partition_three_devices_bottleneck_layer() -> None:
    result = solve_partition(_costs([1, 1, 1, 1, 1, 5], 3), (0, 1, 2), max_stage_weight=0.0)
    assert result.optimal and result.objective == pytest.approx(5.0)
    assert result.payload[-2] == 5  # the heavy layer alone on the last device


def test_partition_heterogeneous_devices_fast_device_gets_more_layers() -> None:
    costs = _costs(np.ones(9), 2)
    f = costs.f_s.copy()
    f[1] *= 0.5  # device 1 runs twice as fast
    costs = dataclasses.replace(costs, f_s=f)
    result = solve_partition(costs, (0, 1), max_stage_weight=0.0)
    assert result.optimal and result.payload == (0, 3, 9)
    assert result.objective == pytest.approx(3.0)
    # same with the fast device first
    flipped = solve_partition(costs, (1, 0), max_stage_weight=0.0)
    assert flipped.optimal and flipped.payload == (0, 6, 9)


def test_partition_memory_limit_moves_the_cut() -> None:
    free = solve_partition(_costs(np.ones(6), 2), (0, 1), max_stage_weight=0.0)
    assert free.payload == (0, 3, 6)
    # static bytes: device 0 holds at most 2 layers
    costs = _costs(np.ones(6), 2, static=1.0, act=0.0, act_w=0.0)
    costs = dataclasses.replace(costs, mem_limit_bytes=np.array([2.5, 10.0]))
    result = solve_partition(costs, (0, 1), max_stage_weight=0.0)
    assert result.optimal and result.payload == (0, 2, 6) and result.objective == pytest.approx(4.0)
    # in-flight activations: 3 micro-batches of stage 0 x 1 byte per layer within 6 bytes
    costs = _costs(np.ones(6), 2, static=0.0, act=1.0, act_w=0.5, mem_limit=6.0)
    result = solve_partition(costs, (0, 1), act_inflight=(3, 1), max_stage_weight=0.0)
    assert result.optimal and result.payload == (0, 2, 6)
    assert solve_partition(costs, (0, 1), max_stage_weight=0.0).payload == (0, 3, 6)


def test_partition_infeasible_memory_and_too_many_stages() -> None:
    costs = _costs(np.ones(6), 2, static=1.0, mem_limit=2.0)
    result = solve_partition(costs, (0, 1))
    assert result.status == "INFEASIBLE" and result.payload is None and result.objective is None
    assert not result.feasible
    too_many = solve_partition(_costs(np.ones(3), 4), (0, 1, 2, 3))
    assert too_many.status == "INFEASIBLE" and too_many.payload is None


def test_partition_interleaved_heterogeneous_against_hint_and_recosting() -> None:
    rng = np.random.default_rng(7)
    num_devices, stage_device = 4, (0, 1, 2, 3, 3, 2, 1, 0)  # V placement
    work = rng.uniform(0.5, 1.5, 34)
    work[-1] = 4.0
    costs = _costs(work, num_devices)
    f = costs.f_s / np.linspace(1.0, 1.6, num_devices)[:, None]
    costs = dataclasses.replace(costs, f_s=f)
    hint = tuple(round(j * 34 / 8) for j in range(9))
    result = solve_partition(costs, stage_device, hint_bounds=hint, time_limit_s=5.0, max_stage_weight=0.0)
    _check_sane(result)
    bounds = result.payload
    assert bounds[0] == 0 and bounds[-1] == 34 and all(a < b for a, b in zip(bounds, bounds[1:], strict=False))
    # the objective is the heaviest device's work (to the model's rounding)
    assert result.objective == pytest.approx(_device_work(costs, bounds, stage_device).max(), rel=1e-4)
    assert result.objective <= _device_work(costs, hint, stage_device).max() + 1e-6
    assert result.bound >= work.sum() / np.linspace(1.0, 1.6, num_devices).sum() - 1e-6  # <= perfect balance


def test_partition_memory_feasible_in_bytes() -> None:
    rng = np.random.default_rng(3)
    costs = _costs(rng.uniform(0.5, 1.5, 20), 4, act=0.0, act_w=0.0)
    costs = dataclasses.replace(
        costs,
        static_bytes=rng.uniform(1e9, 2e9, 20),
        act_bytes=rng.uniform(1e8, 3e8, 20),
        mem_limit_bytes=np.full(4, 12e9),
    )
    inflight = (4, 3, 2, 1)
    result = solve_partition(costs, (0, 1, 2, 3), act_inflight=inflight)
    _check_sane(result)
    b = result.payload
    for s in range(4):
        used = costs.static_bytes[b[s] : b[s + 1]].sum() + inflight[s] * costs.act_bytes[b[s] : b[s + 1]].sum()
        assert used <= 12e9


def test_partition_tiny_time_limit_still_returns_the_hint() -> None:
    result = solve_partition(_costs(np.ones(40), 8), tuple(range(8)), time_limit_s=1e-4)
    assert result.feasible and result.objective is not None


# --------------------------------------------------------------------------- order


def _layout(style: str, num_devices: int, num_stages_per_device: int, layers_per_stage: int = 1) -> Layout:
    if style == "sequential":
        stage_device = tuple(range(num_devices))
    elif style == "loop":
        stage_device = tuple(s % num_devices for s in range(num_devices * num_stages_per_device))
    else:  # v
        stage_device = tuple(range(num_devices)) + tuple(reversed(range(num_devices)))
    num_stages = len(stage_device)
    return Layout(tuple(range(0, num_stages * layers_per_stage + 1, layers_per_stage)), stage_device, num_devices)


def _gpipe(layout: Layout, num_microbatches: int, split_backward: bool = True) -> Programs:
    """All forwards (mb by mb, down the stages), then all backwards (mb by mb, up the stages)."""
    programs: Programs = [[] for _ in range(layout.num_devices)]
    for m in range(num_microbatches):
        for s in range(layout.num_stages):
            programs[layout.stage_device[s]].append(Action(s, "F", m))
    for m in range(num_microbatches):
        for s in reversed(range(layout.num_stages)):
            ops = ("I", "W") if split_backward else ("B",)
            programs[layout.stage_device[s]].extend(Action(s, op, m) for op in ops)
    return programs


def _check_programs(layout: Layout, costs: CostTable, programs: Programs, num_mb: int, split: bool) -> float:
    """Complete, deadlock-free, precedences hold when re-timed; returns the re-timed makespan."""
    check_programs(layout, programs, num_mb, backward="split" if split else "fused")
    timed = list_timing(layout, costs, programs)
    assert timed is not None, "the solver's orders deadlock"
    bwd = "I" if split else "B"
    for (s, op, m), (start, _) in timed.items():
        d = layout.stage_device[s]
        if op == "F" and s > 0:
            lag = costs.p2p_s(layout.stage_device[s - 1], d, costs.out_bytes[layout.bounds[s] - 1])
            assert start >= timed[Action(s - 1, "F", m)][1] + lag - 1e-9
        if op == bwd:
            assert start >= timed[Action(s, "F", m)][1] - 1e-9
            if s + 1 < layout.num_stages:
                lag = costs.p2p_s(layout.stage_device[s + 1], d, costs.out_bytes[layout.bounds[s + 1] - 1])
                assert start >= timed[Action(s + 1, bwd, m)][1] + lag - 1e-9
        if op == "W":
            assert start >= timed[Action(s, "I", m)][1] - 1e-9
    for program in programs:  # one action at a time per device, in program order
        for a, b in zip(program, program[1:], strict=False):
            assert timed[b][0] >= timed[a][1] - 1e-9
    return max(end for _, end in timed.values())


def _device_lower_bound(layout: Layout, costs: CostTable, num_mb: int) -> float:
    return float(num_mb * _device_work(costs, layout.bounds, layout.stage_device).max())


@pytest.mark.parametrize("num_devices", [2, 3, 4])
@pytest.mark.parametrize("num_mb", [4, 8])
@pytest.mark.parametrize("style", ["sequential", "v"])
def test_order_grid_complete_and_better_than_gpipe(num_devices: int, num_mb: int, style: str) -> None:
    layout = _layout(style, num_devices, 2)
    costs = uniform_costs(layout.num_layers, num_devices, f=1.0, i=1.0, w=0.8, out=1.0, bw=10.0)
    gpipe = _gpipe(layout, num_mb)
    result = solve_order(layout, costs, num_mb, hint=gpipe, time_limit_s=3.0)
    _check_sane(result)
    assert result.status in ("OPTIMAL", "FEASIBLE")
    makespan = _check_programs(layout, costs, result.payload, num_mb, True)
    assert makespan <= result.objective + 1e-6  # ASAP re-timing of the same orders is never later
    gpipe_makespan = max(end for _, end in list_timing(layout, costs, gpipe).values())
    assert result.objective <= gpipe_makespan + 1e-6
    assert result.objective >= _device_lower_bound(layout, costs, num_mb) - 1e-6
    assert result.bound >= _device_lower_bound(layout, costs, num_mb) - 1e-6  # bound sanity


@pytest.mark.parametrize("num_devices", [2, 3, 4])
@pytest.mark.parametrize("num_mb", [4, 8])
def test_order_v_placement_reaches_the_device_bound(num_devices: int, num_mb: int) -> None:
    # F = I = W = 1, no P2P: the busiest device works M x 3 x 2 stages; the last device can
    # start only after the forward has crossed the other P - 1 devices
    layout = _layout("v", num_devices, 2)
    costs = uniform_costs(layout.num_layers, num_devices)
    result = solve_order(layout, costs, num_mb, time_limit_s=5.0)
    assert result.optimal
    assert result.objective == pytest.approx(num_mb * 3 * 2 + num_devices - 1)
    assert result.bound == pytest.approx(result.objective)
    _check_programs(layout, costs, result.payload, num_mb, True)


@pytest.mark.parametrize("num_devices", [2, 4])
def test_device_bound_counts_the_gradients_way_down(num_devices: int) -> None:
    # sequential, F = 1, I = 2, W = 0: the last device starts after P - 1 forwards, works 3 M,
    # and the last input gradient still runs down P - 1 stages (no W to fill that time): the
    # classic 1F1B step (M + P - 1) x 3, which the order solve also proves optimal
    num_mb = 4
    layout = _layout("sequential", num_devices, 1)
    costs = uniform_costs(layout.num_layers, num_devices, f=1.0, i=2.0, w=0.0)
    assert device_bound_s(layout, costs, num_mb, True) == pytest.approx(3 * (num_mb + num_devices - 1))
    result = solve_order(layout, costs, num_mb, hint=_gpipe(layout, num_mb), time_limit_s=5.0)
    assert result.optimal and result.objective == pytest.approx(3 * (num_mb + num_devices - 1))
    # with W = 1 the device's own W work (M) covers that much of the way down (I of P - 1
    # stages, then W of stage 0)
    costs_w = uniform_costs(layout.num_layers, num_devices, f=1.0, i=2.0, w=1.0)
    way_down = 2 * (num_devices - 1) + 1
    expected = num_devices - 1 + 4 * num_mb + max(0, way_down - num_mb)
    assert device_bound_s(layout, costs_w, num_mb, True) == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(4))
def test_device_bound_never_exceeds_a_proven_optimum(seed: int) -> None:
    # random small layouts and costs: the bound is a bound (the solve's optimum is never below it)
    rng = np.random.default_rng(seed)
    num_devices, num_layers, num_mb = 2, 4, 3
    stage_device = (0, 1, 1, 0) if seed % 2 else (0, 1, 0, 1)
    layout = Layout((0, 1, 2, 3, 4), stage_device, num_devices)
    base = uniform_costs(num_layers, num_devices)
    draw = lambda: np.tile(rng.uniform(0.1, 2.0, num_layers), (num_devices, 1))  # noqa: E731
    costs = dataclasses.replace(base, f_s=draw(), i_s=draw(), w_s=draw() * (seed % 3) / 2)
    for split in (True, False):
        result = solve_order(
            layout, costs, num_mb, split_backward=split, hint=_gpipe(layout, num_mb, split), time_limit_s=10.0
        )
        assert result.optimal
        assert device_bound_s(layout, costs, num_mb, split) <= result.objective + 1e-3


def test_order_windows_grow_until_the_device_bound() -> None:
    # V on 3 devices, F = I = W = 1, from GPipe's order with windows of 8 actions: the search
    # ends at the device bound (M x 6 + P - 1) and says OPTIMAL
    num_devices, num_mb = 3, 6
    layout = _layout("v", num_devices, 2)
    costs = uniform_costs(layout.num_layers, num_devices)
    result, stats = improve_order_windows(
        layout,
        costs,
        num_mb,
        _gpipe(layout, num_mb),
        window_actions=8,
        deterministic_time=20.0,
        window_deterministic_time=0.05,
        time_limit_s=120.0,
    )
    assert result.status == "OPTIMAL" and stats.improved > 0
    assert result.objective == pytest.approx(num_mb * 6 + num_devices - 1)
    _check_programs(layout, costs, result.payload, num_mb, True)


def test_order_without_split_backward() -> None:
    layout = _layout("loop", 3, 2)
    costs = uniform_costs(layout.num_layers, 3, f=1.0, i=1.0, w=1.0, out=1.0, bw=4.0)
    result = solve_order(layout, costs, 6, split_backward=False, hint=_gpipe(layout, 6, False), time_limit_s=5.0)
    _check_sane(result)
    assert all(a.op in "FB" for p in result.payload for a in p)
    _check_programs(layout, costs, result.payload, 6, False)
    assert result.objective >= _device_lower_bound(layout, costs, 6) - 1e-6


def _peak_bytes(layout: Layout, costs: CostTable, programs: Programs) -> list[float]:
    """Peak activation bytes per device: F's start to I's end (act - act_w), to W's end (act_w)."""
    timed = list_timing(layout, costs, programs)
    peaks = []
    for d in range(layout.num_devices):
        events = []
        for (s, op, m), (_, end) in timed.items():
            if layout.stage_device[s] != d or op == "F":
                continue
            layers = list(layout.layers(s))
            demand = (
                costs.act_bytes[layers].sum() - costs.act_w_bytes[layers].sum()
                if op == "I"
                else costs.act_w_bytes[layers].sum()
            )
            events += [(timed[Action(s, "F", m)][0], demand), (end, -demand)]
        used, peak = 0.0, 0.0
        for _, delta in sorted(events):
            used += delta
            peak = max(peak, used)
        peaks.append(peak)
    return peaks


def test_order_memory_limit_is_respected() -> None:
    num_mb = 8
    layout = _layout("sequential", 4, 1, layers_per_stage=2)
    costs = uniform_costs(layout.num_layers, 4, f=1.0, i=1.0, w=1.0, act=1.0, act_w=0.5)
    free = solve_order(layout, costs, num_mb, time_limit_s=5.0)
    limit = [8.0] * 4  # 4 micro-batches of 2 layers in flight
    result = solve_order(layout, costs, num_mb, mem_limit_bytes=limit, time_limit_s=5.0)
    _check_sane(result)
    _check_programs(layout, costs, result.payload, num_mb, True)
    assert max(_peak_bytes(layout, costs, result.payload)) <= 8.0 + 1e-9
    assert result.objective >= free.objective - 1e-9


def test_order_infeasible_memory() -> None:
    layout = _layout("sequential", 2, 1, layers_per_stage=2)
    costs = uniform_costs(layout.num_layers, 2, act=1.0, act_w=0.5, static=1.0)
    tight = solve_order(layout, costs, 4, mem_limit_bytes=[1.0, 1.0])  # static alone overflows
    assert tight.status == "INFEASIBLE" and tight.payload is None and not tight.feasible
    one_mb = solve_order(layout, costs, 4, mem_limit_bytes=[3.5, 3.5], time_limit_s=5.0)  # < one mb's 2 bytes
    assert one_mb.status == "INFEASIBLE" and one_mb.payload is None


def test_order_bad_hint_is_ignored() -> None:
    layout = _layout("sequential", 2, 1)
    costs = uniform_costs(2, 2)
    broken = _gpipe(layout, 4)
    broken[0].pop()
    result = solve_order(layout, costs, 4, hint=broken)
    assert result.optimal and result.objective == pytest.approx(4 * 3 + 1)


def test_order_single_worker_is_reproducible() -> None:
    layout = _layout("loop", 3, 2)
    costs = uniform_costs(layout.num_layers, 3, f=1.0, i=1.2, w=0.7, out=1.0, bw=5.0)
    runs = [solve_order(layout, costs, 4, num_workers=1, seed=3, time_limit_s=5.0) for _ in range(2)]
    assert runs[0].optimal  # reproducible when the solve ends by proof, not by the clock
    assert runs[0].payload == runs[1].payload and runs[0].objective == runs[1].objective


def test_order_tiny_time_limit_still_returns_the_hint() -> None:
    layout = _layout("v", 4, 2)
    costs = uniform_costs(layout.num_layers, 4)
    result = solve_order(layout, costs, 16, time_limit_s=1e-4)
    assert result.feasible
    _check_programs(layout, costs, result.payload, 16, True)


def _irregular_instance(seed: int) -> tuple[Layout, CostTable, Programs]:
    """7 one-layer stages dealt over 3 devices, random F / I / W, a critical-path list schedule."""
    from adaptis_plan.search.listsched import ListPolicy, critical_path_priority, list_schedule

    rng = np.random.default_rng(seed)
    num_devices, num_stages = 3, 7
    stage_device = tuple(int(x) for x in rng.permutation(np.arange(num_stages) % num_devices))
    layout = Layout(tuple(range(num_stages + 1)), stage_device, num_devices)
    draw = lambda: np.tile(rng.uniform(0.2, 2.0, num_stages), (num_devices, 1))  # noqa: E731
    costs = dataclasses.replace(uniform_costs(num_stages, num_devices), f_s=draw(), i_s=draw(), w_s=draw() * 0.5)
    programs, _ = list_schedule(
        layout, costs, 6, ListPolicy(), priority=critical_path_priority(layout, costs, True, 1.0)
    )
    return layout, costs, programs


@pytest.mark.parametrize("seed", range(6))
def test_double_justification_keeps_the_contract_and_never_lengthens_the_step(seed: int) -> None:
    from adaptis_plan.search.cpsat_window import _justify
    from adaptis_plan.search.order_instance import _Scaled

    layout, costs, programs = _irregular_instance(seed)
    sc = _Scaled.build(layout, costs, 6, True, None)
    timed = sc.time_programs(programs)
    justified = _justify(sc, programs, timed)
    check_programs(layout, justified, 6, backward="split")
    after = sc.time_programs(justified)
    assert after is not None and sc.hint_feasible(after)  # micro-batch order per (stage, op) kept
    assert max(e for _, e in after.values()) <= max(e for _, e in timed.values())


def test_order_windows_go_on_after_a_double_justification(monkeypatch: pytest.MonkeyPatch) -> None:
    # on this instance the windows stop at 56.18 on their own; the justification moves actions into
    # gaps no window holds, after which the windows reach 55.53
    import adaptis_plan.search.cpsat_window as cpsat_window

    layout, costs, programs = _irregular_instance(26)

    def windows() -> tuple[SolveResult, object]:
        return improve_order_windows(
            layout,
            costs,
            6,
            programs,
            window_actions=8,
            deterministic_time=1.0,
            window_deterministic_time=0.02,
            time_limit_s=60.0,
        )

    with_it, stats = windows()
    monkeypatch.setattr(cpsat_window, "_justify", lambda sc, programs, timed: [list(p) for p in programs])
    without, stats_without = windows()
    assert stats.justified >= 1 and stats_without.justified == 0
    assert with_it.objective < without.objective - 0.5
    _check_programs(layout, costs, with_it.payload, 6, True)


def _at_the_memory_limit() -> tuple[Layout, CostTable, Programs, list[float]]:
    """GPipe on 2 devices with 4 micro-batches, its limit its exact peak (4 x 1,000,000,064 bytes): each
    span's 500,000,032 bytes round up to the next 256 (the default unit at this limit), 64 and not to 16."""
    layout = _layout("sequential", 2, 1)
    costs = uniform_costs(2, 2, f=1.0, i=1.0, w=1.0, act=1_000_000_064.0, act_w=500_000_032.0)
    programs = _gpipe(layout, 4)
    limit = [4 * 1_000_000_064.0] * 2
    assert max(_peak_bytes(layout, costs, programs)) == limit[0]
    return layout, costs, programs, limit


def test_order_windows_start_from_a_plan_within_rounding_of_memory() -> None:
    # the plan fits in bytes; rounded up at the default memory unit it would not, and the windows would
    # refuse it as their start (MODEL_INVALID): they re-scale memory to a finer unit and improve on it
    layout, costs, programs, limit = _at_the_memory_limit()
    result, stats = improve_order_windows(
        layout, costs, 4, programs, mem_limit_bytes=limit, window_actions=8, deterministic_time=5.0,
        window_deterministic_time=0.5, time_limit_s=60.0,
    )  # fmt: skip
    assert result.status == "OPTIMAL" and stats.windows > 0
    assert result.objective < result.hint_objective
    _check_programs(layout, costs, result.payload, 4, True)
    assert max(_peak_bytes(layout, costs, result.payload)) <= limit[0]


def test_order_keeps_a_hint_within_rounding_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # the given order is the solve's start (its objective is the hint's) though it breaks the default
    # unit's rounding; the greedy orders are replaced by that same order, so no other start exists
    layout, costs, programs, limit = _at_the_memory_limit()
    monkeypatch.setattr("adaptis_plan.search.cpsat_order._greedy_programs", lambda sc, reserve_ahead: programs)
    result = solve_order(layout, costs, 4, hint=programs, mem_limit_bytes=limit, time_limit_s=10.0)
    _check_sane(result)
    assert result.hint_objective == pytest.approx(_check_programs(layout, costs, programs, 4, True))
    _check_programs(layout, costs, result.payload, 4, True)
    assert max(_peak_bytes(layout, costs, result.payload)) <= limit[0]


def test_finer_memory_units_only_where_the_plan_needs_them() -> None:
    from adaptis_plan.search.order_instance import _Scaled

    layout, costs, programs, limit = _at_the_memory_limit()
    coarse = _Scaled.build(layout, costs, 4, True, limit)
    timed = coarse.time_programs(programs)
    fine = coarse.fitted_to(timed, costs, limit)
    assert not coarse.hint_feasible(timed) and fine.hint_feasible(timed)
    assert fine.dur == coarse.dur and fine.unit_s == coarse.unit_s  # times unchanged
    early = _gpipe(layout, 2)  # half the micro-batches: fits at the default unit, which is kept
    half = _Scaled.build(layout, costs, 2, True, limit)
    assert half.fitted_to(half.time_programs(early), costs, limit) is half
