"""Against the zero-bubble schedulers on their own abstract pipelines: ZB-H1/H2-style and ZB-V-style
references, the adaptive search, the lower bound; plus the paper cases and the planning-time scale.

Run: `python -m bench.zb [--quick] [--out FILE] [--sections grid,paper,scale]` prints the markdown
section(s) (or writes them into FILE, replacing only these sections); `python -m bench.run
--sections zb` includes them in BENCHMARKS.md.

Data flow: abstract cost tables (`grid_costs`: p stages with F = I = W = 1 and comm 0.01, or
F = 1, I = 1.1, W = 0.9 and comm 0.05; memory 1x / 2x of 1F1B's peak) -> the reference
heuristic (`zb_reference`, the zero-bubble paper's rules, written here from its description) and
`adaptis_plan.search.generator.search_plan` on the same table -> `judge.simulate` times every
plan -> tables. Imports `adaptis_plan` and `bench.common`; no CLI, no rich.

The reference (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 3.1 heuristic):
1. warm-up: as many forwards as memory allows before the first backward; a binary parameter
   decides whether a forward that would delay the first backward still runs;
2. steady state: one F and one B (our I) in turn; a W fills a gap longer than W; a gap shorter
   than W still gets a W if idling would make this device's cumulative bubble the largest of
   all (binary parameter); a W also runs when memory blocks the next forward;
3. a stage keeps at least one more forward done than the next stage; when it is ahead by more
   than one, a binary parameter lets it skip a forward turn for a ready backward;
4. the binary parameters are grid-searched (plus, to make the reference no weaker than the
   description, whether the F / B alternation is strict); the best simulated plan that fits
   memory is the reference;
5. when a stage runs out of forwards and backwards, it runs its remaining W's in order.
On a V placement (ZB-V style) the same rules run per device over its two chunks, forwards and
backwards oldest micro-batch first, later chunk first; torch's handcrafted ZBVZeroBubble order
(the zero-bubble authors' ZB-V) is a second ZB-V-style reference, the better of the two counts.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import Action, CostTable, Layout, Programs, uniform_costs
from adaptis_plan.judge.semantics import stage_costs
from adaptis_plan.judge.simulate import SimResult, simulate

#: The two abstract cost sets: per sequential stage (F, I, W, comm between devices).
COST_SETS: dict[str, tuple[float, float, float, float]] = {
    "F=I=W=1, comm 0.01": (1.0, 1.0, 1.0, 0.01),
    "F=1 I=1.1 W=0.9, comm 0.05": (1.0, 1.1, 0.9, 0.05),
}
#: Activation memory a stage's forward allocates, and the part W still needs after I (F's units).
ACT_PER_STAGE = 1.0
ACT_W_SHARE = 0.5


def grid_costs(
    num_devices: int, cost_set: str, layers_per_stage: int = 1, mem_limit: float = math.inf
) -> CostTable:
    """The abstract pipeline: `num_devices` sequential stages of `layers_per_stage` equal layers
    each (so a V or loop placement can cut it finer), P2P = the comm time between devices."""
    f, i, w, comm = COST_SETS[cost_set]
    k = layers_per_stage
    return uniform_costs(
        num_devices * k,
        num_devices,
        f=f / k,
        i=i / k,
        w=w / k,
        act=ACT_PER_STAGE / k,
        act_w=ACT_PER_STAGE * ACT_W_SHARE / k,
        mem_limit=mem_limit,
        latency=comm,
    )


def with_memory(costs: CostTable, limit: float) -> CostTable:
    return dataclasses.replace(costs, mem_limit_bytes=np.full(costs.num_devices, float(limit)))


def one_f_one_b_peak(num_devices: int, cost_set: str, num_microbatches: int) -> float:
    """1F1B's peak activation memory (max over devices) on the sequential pipeline: the 1x limit."""
    from adaptis_plan.schedules import get_spec

    costs = grid_costs(num_devices, cost_set)
    sd = tuple(range(num_devices))
    layout = Layout(tuple(range(num_devices + 1)), sd, num_devices)
    programs = get_spec("1F1B").build(sd, num_devices, num_microbatches)
    return max(simulate(layout, costs, programs, num_microbatches).peak_memory_bytes)


# ----------------------------------------------------------------------------- the reference heuristic


@dataclass(frozen=True)
class ZBParams:
    """The reference's binary parameters (module docstring, rules 1-4)."""

    extra_warmup_f: bool
    small_gap_w: bool
    skip_f: bool
    strict: bool

    @property
    def label(self) -> str:
        flags = [n for n, on in zip(("extra-F", "small-gap-W", "skip-F", "strict"), dataclasses.astuple(self)) if on]
        return "+".join(flags) or "plain"


ALL_PARAMS = tuple(ZBParams(*bits) for bits in itertools.product((False, True), repeat=4))


def zb_reference_programs(layout: Layout, costs: CostTable, num_microbatches: int, params: ZBParams) -> Programs | None:
    """The reference heuristic's per-device orders for one parameter setting; None if it deadlocks
    (memory full on every device that could move)."""
    st = stage_costs(layout, costs)
    num_stages, num_devices, m = layout.num_stages, layout.num_devices, num_microbatches
    last = num_stages - 1
    inf = math.inf
    f_dur, i_dur, w_dur = st.f.tolist(), st.i.tolist(), st.w.tolist()
    act, act_w = st.act.tolist(), st.act_w.tolist()
    p2p_act, p2p_grad = st.p2p_act.tolist(), st.p2p_grad.tolist()
    room = [float(costs.mem_limit_bytes[d]) - float(st.static[d]) + 1e-9 for d in range(num_devices)]
    dev_stages = [layout.stages_of(d) for d in range(num_devices)]
    f_end = [[inf] * m for _ in range(num_stages)]
    i_end = [[inf] * m for _ in range(num_stages)]
    n_f, n_i = [0] * num_stages, [0] * num_stages
    w_queue: list[deque] = [deque() for _ in range(num_devices)]
    mem = [0.0] * num_devices
    started_b = [False] * num_devices
    turn = ["F"] * num_devices
    idle = [0.0] * num_devices
    last_end = [0.0] * num_devices
    free_at = [0.0] * num_devices
    parked = [False] * num_devices
    remaining = [3 * m * len(dev_stages[d]) for d in range(num_devices)]
    programs: Programs = [[] for _ in range(num_devices)]
    heap = [(0.0, d) for d in range(num_devices)]
    heapq.heapify(heap)

    while heap:
        t, d = heapq.heappop(heap)
        if t != free_at[d] or not remaining[d]:
            continue
        stages = dev_stages[d]
        ready_b, next_b = None, inf
        for s in stages:
            k = n_i[s]
            if k >= m or f_end[s][k] == inf:
                continue
            r = f_end[s][k] if s == last else max(f_end[s][k], i_end[s + 1][k] + p2p_grad[s + 1])
            if r <= t:
                if ready_b is None or (k, -s) < (n_i[ready_b], -ready_b):
                    ready_b = s
            else:
                next_b = min(next_b, r)
        ready_f, next_f, mem_blocked = None, inf, False
        for s in stages:
            k = n_f[s]
            if k >= m:
                continue
            r = 0.0 if s == 0 else f_end[s - 1][k] + p2p_act[s]
            if r > t:
                next_f = min(next_f, r)
            elif mem[d] + act[s] > room[d]:
                mem_blocked = True
            elif ready_f is None or (k, -s) < (n_f[ready_f], -ready_f):
                ready_f = s
        f_left = any(n_f[s] < m for s in stages)
        b_left = any(n_i[s] < m for s in stages)

        def try_w(gap: float) -> bool:
            if not w_queue[d]:
                return False
            s0 = w_queue[d][0][0]
            return gap >= w_dur[s0] or (params.small_gap_w and idle[d] + gap > max(idle))

        op = ""
        if not f_left and not b_left:
            op = "W" if w_queue[d] else ""
        elif not started_b[d]:  # warm-up
            if ready_b is not None:
                op = "B"
            elif ready_f is not None:
                s = ready_f
                if params.extra_warmup_f or not (next_b < t + f_dur[s]):
                    op = "F"
        else:
            want = turn[d]
            if want == "F" and not f_left:
                want = "B"
            if want == "B" and not b_left:
                want = "F"
            # a stage keeps at least one more forward done than the next stage
            if want == "B" and ready_f is not None and ready_f < last and n_f[ready_f] <= n_f[ready_f + 1]:
                want = "F"
            elif (
                want == "F"
                and params.skip_f
                and ready_b is not None
                and all(n_f[s] - n_f[s + 1] > 1 for s in stages if s < last)
            ):
                want = "B"  # ahead by more than one: skip this forward for a ready backward (no bubble)
            if want == "F":
                if ready_f is not None:
                    op = "F"
                elif mem_blocked and w_queue[d]:
                    op = "W"  # recycle memory
                elif ready_b is not None and (mem_blocked or not params.strict):
                    op = "B"
                elif try_w(next_f - t):
                    op = "W"
            else:
                if ready_b is not None:
                    op = "B"
                elif ready_f is not None and not params.strict:
                    op = "F"
                elif try_w(next_b - t):
                    op = "W"
        if not op:
            nxt = min(next_b, next_f)
            free_at[d], parked[d] = nxt, True
            if nxt < inf:
                heapq.heappush(heap, (nxt, d))
            continue
        parked[d] = False
        idle[d] += t - last_end[d]
        target, arrival = -1, inf
        if op == "F":
            s = ready_f
            k = n_f[s]
            end = t + f_dur[s]
            f_end[s][k] = end
            n_f[s] += 1
            mem[d] += act[s]
            turn[d] = "B"
            if s < last:
                target, arrival = layout.stage_device[s + 1], end + p2p_act[s + 1]
            action = Action(s, "F", k)
        elif op == "B":
            s = ready_b
            k = n_i[s]
            end = t + i_dur[s]
            i_end[s][k] = end
            n_i[s] += 1
            mem[d] -= act[s] - act_w[s]
            w_queue[d].append((s, k))
            started_b[d] = True
            turn[d] = "F"
            if s > 0:
                target, arrival = layout.stage_device[s - 1], end + p2p_grad[s]
            action = Action(s, "I", k)
        else:
            s, k = w_queue[d].popleft()
            end = t + w_dur[s]
            mem[d] -= act_w[s]
            action = Action(s, "W", k)
        programs[d].append(action)
        remaining[d] -= 1
        free_at[d] = last_end[d] = end
        heapq.heappush(heap, (end, d))
        if target >= 0 and parked[target] and arrival < free_at[target]:
            free_at[target] = arrival
            heapq.heappush(heap, (arrival, target))
    if any(remaining):
        return None
    return programs


@dataclass(frozen=True)
class Reference:
    """The best reference plan: its name, parameters (or the classic builder) and simulated result."""

    name: str
    layout: Layout
    programs: Programs
    result: SimResult


def zb_reference(layout: Layout, costs: CostTable, num_microbatches: int, name: str) -> Reference | None:
    """The grid-searched reference on `layout`: the fastest memory-feasible plan over `ALL_PARAMS`."""
    best: Reference | None = None
    for params in ALL_PARAMS:
        programs = zb_reference_programs(layout, costs, num_microbatches, params)
        if programs is None:
            continue
        res = simulate(layout, costs, programs, num_microbatches)
        if res.fits_memory and (best is None or res.step_time_s < best.result.step_time_s - 1e-12):
            best = Reference(f"{name} ({params.label})", layout, programs, res)
    return best


def zbv_handcrafted(layout: Layout, costs: CostTable, num_microbatches: int) -> Reference | None:
    """torch's ZBVZeroBubble order (the zero-bubble authors' handcrafted ZB-V) on the V layout, if it fits memory."""
    from adaptis_plan.schedules import get_spec

    programs = get_spec("ZBVZeroBubble").build(layout.stage_device, layout.num_devices, num_microbatches)
    res = simulate(layout, costs, programs, num_microbatches)
    return Reference("ZBVZeroBubble (handcrafted ZB-V)", layout, programs, res) if res.fits_memory else None


def sequential_layout(num_devices: int, layers_per_stage: int = 1) -> Layout:
    k = layers_per_stage
    return Layout(tuple(range(0, num_devices * k + 1, k)), tuple(range(num_devices)), num_devices)


def v_layout(num_devices: int, layers_per_stage: int = 2) -> Layout:
    """2P chunks of `layers_per_stage // 2` layers: device d holds chunk d and chunk 2P-1-d."""
    half = layers_per_stage // 2
    sd = tuple(range(num_devices)) + tuple(reversed(range(num_devices)))
    return Layout(tuple(range(0, 2 * num_devices * half + 1, half)), sd, num_devices)


def best_reference(refs: Sequence[Reference | None]) -> Reference | None:
    found = [r for r in refs if r is not None]
    return min(found, key=lambda r: r.result.step_time_s) if found else None
