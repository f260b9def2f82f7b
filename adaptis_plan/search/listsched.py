"""Adaptive list scheduler: builds per-device F / I / W (or F / B) orders for any layout.

Data flow: layout + cost table + policy -> `Programs` (+ its own makespan estimate, used only
to rank candidates; the simulator judges the survivors). Pure Python; no solver.

The scheduler replays the pipeline in time. Whenever a device becomes free it picks, among
the actions whose inputs have arrived:
1. a backward for inputs (I, or B when backward is not split): it frees memory and lies on
   the critical path (oldest micro-batch first, later stage first);
2. else a forward F, if the device's activation memory (and the policy's in-flight cap)
   allows it (oldest micro-batch first; `depth_first` prefers later stages);
3. else a pending W, which therefore fills the bubbles (zero-bubble style);
otherwise it idles until the next arrival. The oldest micro-batch not yet through its
backward on a device may always run its F, so the memory cap can slow a schedule but never
deadlock it. The `inflight_cap` per device bounds forwards in flight (F done, I/B not yet).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import Action, CostTable, Layout, Programs
from adaptis_plan.judge.semantics import stage_costs


@dataclass(frozen=True)
class ListPolicy:
    split_backward: bool = True
    depth_first: bool = True
    inflight_cap: tuple[int, ...] | None = None  # per device; None = memory only
    mem_limit_bytes: tuple[float, ...] | None = None  # per device; None = the cost table's limits
    label: str = "adaptive"


def list_schedule(
    layout: Layout, costs: CostTable, num_microbatches: int, policy: ListPolicy = ListPolicy()
) -> tuple[Programs, float]:
    """Per-device orders and the scheduler's own makespan estimate."""
    st = stage_costs(layout, costs)
    n_stage = layout.num_stages
    n_dev = layout.num_devices
    last = n_stage - 1
    m_total = num_microbatches
    split = policy.split_backward
    dev_stages = [layout.stages_of(d) for d in range(n_dev)]
    limits = policy.mem_limit_bytes or tuple(float(x) for x in costs.mem_limit_bytes)
    act_cap = [limits[d] - st.static[d] for d in range(n_dev)]
    cap = policy.inflight_cap or tuple([math.inf] * n_dev)

    inf = math.inf
    f_end = np.full((n_stage, m_total), inf)
    b_end = np.full((n_stage, m_total), inf)  # I, or B when not split
    next_f = [0] * n_stage
    next_b = [0] * n_stage
    pending_w: list[list[tuple[int, int]]] = [[] for _ in range(n_dev)]  # (mb, stage) ready to W
    mem = [0.0] * n_dev
    inflight = [0] * n_dev
    free_at = [0.0] * n_dev
    remaining = [len(dev_stages[d]) * m_total * (3 if split else 2) for d in range(n_dev)]
    programs: Programs = [[] for _ in range(n_dev)]
    heap = [(0.0, d) for d in range(n_dev) if remaining[d]]
    heapq.heapify(heap)
    makespan = 0.0
    parked: set[int] = set()

    while heap:
        t, d = heapq.heappop(heap)
        if t != free_at[d]:
            continue
        # --- gather candidates
        best_b = None  # (ready, key, stage, mb)
        next_known = inf
        for s in dev_stages[d]:
            m = next_b[s]
            if m >= m_total:
                continue
            fe = f_end[s, m]
            if fe == inf:
                continue
            ready = fe if s == last else b_end[s + 1, m] + st.p2p_grad[s + 1]
            ready = max(ready, fe)
            if ready <= t:
                key = (m, -s)
                if best_b is None or key < best_b[1]:
                    best_b = (ready, key, s, m)
            elif ready < next_known:
                next_known = ready
        choice = None
        if best_b is not None:
            s, m = best_b[2], best_b[3]
            choice = ("I" if split else "B", s, m)
        else:
            best_f = None
            oldest = min((next_b[s] for s in dev_stages[d]), default=m_total)
            for s in dev_stages[d]:
                m = next_f[s]
                if m >= m_total:
                    continue
                ready = 0.0 if s == 0 else f_end[s - 1, m] + st.p2p_act[s]
                if ready == inf:
                    continue
                if ready > t:
                    next_known = min(next_known, ready)
                    continue
                if m > oldest and (inflight[d] >= cap[d] or mem[d] + st.act[s] > act_cap[d]):
                    continue
                key = (m, -s if policy.depth_first else s)
                if best_f is None or key < best_f[0]:
                    best_f = (key, s, m)
            if best_f is not None:
                choice = ("F", best_f[1], best_f[2])
            elif pending_w[d]:
                m, s = min(pending_w[d])
                pending_w[d].remove((m, s))
                choice = ("W", s, m)
        if choice is None:
            # idle until an arrival we know of, or until any device finishes an action
            free_at[d] = next_known
            parked.add(d)
            if next_known < inf:
                heapq.heappush(heap, (next_known, d))
            continue
        parked.discard(d)
        op, s, m = choice
        if op == "F":
            dur = st.f[s]
            f_end[s, m] = t + dur
            next_f[s] += 1
            mem[d] += st.act[s]
            inflight[d] += 1
        elif op in ("I", "B"):
            dur = st.i[s] if split else st.b[s]
            b_end[s, m] = t + dur
            next_b[s] += 1
            inflight[d] -= 1
            if split:
                mem[d] -= st.act[s] - st.act_w[s]
                pending_w[d].append((m, s))
            else:
                mem[d] -= st.act[s]
        else:
            dur = st.w[s]
            mem[d] -= st.act_w[s]
        programs[d].append(Action(s, op, m))
        end = t + dur
        makespan = max(makespan, end)
        remaining[d] -= 1
        free_at[d] = end
        if remaining[d]:
            heapq.heappush(heap, (end, d))
        # only the neighbour this action feeds can have gained a ready action: wake it on arrival
        if op == "F" and s < last:
            target, arrival = layout.stage_device[s + 1], end + st.p2p_act[s + 1]
        elif op in ("I", "B") and s > 0:
            target, arrival = layout.stage_device[s - 1], end + st.p2p_grad[s]
        else:
            target = -1
        if target in parked and arrival < free_at[target]:
            free_at[target] = arrival
            heapq.heappush(heap, (arrival, target))
    if any(remaining):
        stuck = [d for d in range(n_dev) if remaining[d]]
        raise RuntimeError(f"list scheduler could not place every action (devices {stuck})")
    return programs, makespan
