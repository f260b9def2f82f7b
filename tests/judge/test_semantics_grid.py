"""One program semantics, four users: the simulator, the executor's lowering, the list scheduler and the
CP-SAT order model all pass the same grid of layouts, and agree with `judge.semantics.replay`.

Grid: devices x micro-batches x placements (sequential, loop, V) with random per-layer costs. For every
cell, the programs of each source (every classic builder that applies, the list scheduler with split and
fused backward, CP-SAT on the small cells) must obey the action contract, replay without deadlock, and:
- the simulator's start/end times equal the replay's with the same durations and link occupancy;
- with links that never queue (infinite bandwidth), they equal CP-SAT's own timing (`list_timing`);
- the lowering's global order contains every action once, keeps each device's order and puts every
  action after the actions it depends on.
"""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from adaptis_plan.core import Action, CostTable, Layout, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.executor.lowering import lower
from adaptis_plan.judge.semantics import check_programs, replay, stage_costs
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.schedules import STRATEGIES, get_spec
from adaptis_plan.search.cpsat_order import solve_order
from adaptis_plan.search.listsched import ListPolicy, list_schedule
from adaptis_plan.search.order_instance import list_timing

DEVICES = (2, 3, 4)
MICROBATCHES = (1, 3, 8)
PLACEMENTS = ("sequential", "loop", "V")


def _costs(num_layers: int, num_devices: int, seed: int, bandwidth: float) -> CostTable:
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.5, 2.0, num_layers)
    rows = np.tile(f, (num_devices, 1))
    return CostTable(
        f_s=rows,
        i_s=rows * rng.uniform(0.8, 1.4, num_layers),
        w_s=rows * rng.uniform(0.3, 1.0, num_layers),
        act_bytes=rng.uniform(1, 3, num_layers),
        act_w_bytes=rng.uniform(0.2, 0.9, num_layers),
        static_bytes=np.zeros(num_layers),
        out_bytes=rng.uniform(0.1, 1.0, num_layers),
        mem_limit_bytes=np.full(num_devices, np.inf),
        link_bw_bytes_per_s=np.full((num_devices, num_devices), bandwidth),
        link_latency_s=np.full((num_devices, num_devices), 0.05),
        layer_kinds=("decoder",) * num_layers,
        device_names=("dev",) * num_devices,
        action_overhead_s=0.01,
    )


def _stage_device(placement: str, p: int) -> tuple[int, ...]:
    if placement == "sequential":
        return tuple(range(p))
    if placement == "loop":
        return tuple(range(p)) * 2
    return tuple(range(p)) + tuple(reversed(range(p)))


def _sources(layout: Layout, costs: CostTable, m: int) -> dict[str, Programs]:
    out: dict[str, Programs] = {}
    p = layout.num_devices
    for name in STRATEGIES:
        spec = get_spec(name)
        try:
            if spec.stage_device(p, layout.num_stages // p) != layout.stage_device:
                continue
            out[name] = spec.build(layout.stage_device, p, m)
        except InputError:
            continue
    for split in (True, False):
        programs, _ = list_schedule(layout, costs, m, ListPolicy(split_backward=split))
        out[f"list-{'split' if split else 'fused'}"] = programs
    if p * m <= 12:
        res = solve_order(layout, costs, m, split_backward=True, time_limit_s=2.0, num_workers=1)
        assert res.payload is not None, res.status
        out["cp-sat"] = res.payload
    return out


def _deps(a: Action, last: int, backward: dict[tuple[int, int], str]) -> list[tuple[int, str, int]]:
    s, op, mb = a
    if op == "F":
        return [(s - 1, "F", mb)] if s > 0 else []
    if op in ("I", "B"):
        return [(s, "F", mb)] + ([(s + 1, backward[(s + 1, mb)], mb)] if s < last else [])
    return [(s, "I", mb)]


CELLS = list(itertools.product(DEVICES, MICROBATCHES, PLACEMENTS))


@pytest.mark.parametrize(("p", "m", "placement"), CELLS, ids=[f"p{p}-m{m}-{pl}" for p, m, pl in CELLS])
def test_every_source_passes_the_shared_grid(p: int, m: int, placement: str) -> None:
    sd = _stage_device(placement, p)
    num_layers = 2 * len(sd)
    layout = Layout(bounds=tuple(range(0, num_layers + 1, 2)), stage_device=sd, num_devices=p)
    seed = zlib.crc32(f"{p}-{m}-{placement}".encode())
    costs = _costs(num_layers, p, seed, bandwidth=4.0)
    free_links = _costs(num_layers, p, seed, bandwidth=np.inf)
    last = layout.num_stages - 1
    for source, programs in _sources(layout, costs, m).items():
        flat = check_programs(layout, programs, m)
        # the simulator is the replay with the stage costs and link occupancy
        sc = stage_costs(layout, costs)
        run = replay(layout, programs, m, sc.durations(), (sc.p2p_act, sc.p2p_grad), (sc.occ_act, sc.occ_grad))
        sim = simulate(layout, costs, programs, m)
        for d in range(p):
            assert sim.times[d] == list(zip(run.starts[d], run.ends[d], strict=True)), (source, d)
        # links that never queue: the simulator and CP-SAT's own timing agree
        sim_free = simulate(layout, free_links, programs, m)
        timing = list_timing(layout, free_links, programs)
        assert timing is not None, source
        for d, program in enumerate(programs):
            for a, (start, end) in zip(program, sim_free.times[d], strict=True):
                assert timing[a] == pytest.approx((start, end), abs=1e-9), (source, str(a))
        # the lowering's global order: every action once, device orders kept, dependencies first
        order = lower(layout, programs, m).order
        assert len(order) == len(flat.op)
        position = {(d, a): i for i, (d, a) in enumerate(order)}
        assert len(position) == len(order)
        for d, program in enumerate(programs):
            assert [position[(d, a)] for a in program] == sorted(position[(d, a)] for a in program), source
        backward = {(a.stage, a.mb): a.op for prog in programs for a in prog if a.op in ("I", "B")}
        seen = {(a.stage, a.op, a.mb): i for i, (_, a) in enumerate(order)}
        for i, (_, a) in enumerate(order):
            assert all(seen[dep] < i for dep in _deps(a, last, backward)), (source, str(a))


def test_stage_costs_are_computed_once_per_layout_and_table_and_shared_read_only() -> None:
    """The search asks the same (layout, table) again and again: one `StageCosts` is kept per pair while
    the table lives, its arrays read-only (every caller shares them), and an equal table of its own
    gets its own."""
    import dataclasses
    import gc

    import adaptis_plan.judge.semantics as semantics
    from adaptis_plan.core import uniform_costs

    costs = uniform_costs(4, 2, f=1.0, i=1.0, w=1.0, mem_limit=1e12)
    layout = Layout(bounds=(0, 2, 4), stage_device=(0, 1), num_devices=2)
    first = stage_costs(layout, costs)
    assert stage_costs(Layout(bounds=(0, 2, 4), stage_device=(0, 1), num_devices=2), costs) is first
    with pytest.raises(ValueError, match="read-only"):
        first.f[0] = 0.0
    slower = dataclasses.replace(costs, f_s=costs.f_s * 2)
    assert stage_costs(layout, slower).f.tolist() == [4.0, 4.0] and first.f.tolist() == [2.0, 2.0]
    assert stage_costs(Layout(bounds=(0, 1, 4), stage_device=(0, 1), num_devices=2), costs).f.tolist() == [1.0, 3.0]
    kept = len(semantics._STAGE_COSTS)
    del costs, slower, first
    gc.collect()
    assert len(semantics._STAGE_COSTS) == kept - 2  # a table that is gone takes its entries along
