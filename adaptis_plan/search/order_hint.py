"""The greedy order: a memory-aware list schedule of one layout's actions (`_greedy_programs`), the
hint of the CP-SAT order model (`cpsat_order.solve_order`).

Data flow: `_Scaled` (`order_instance`) -> `Programs`. Imports `core` and `order_instance` only;
never ortools.
"""

from __future__ import annotations

import heapq

from adaptis_plan.core import Action, Programs
from adaptis_plan.search.order_instance import _OP_RANK, Key, Number, _backward, _ops, _Scaled


def _greedy_programs(sc: _Scaled, reserve_ahead: bool = True) -> Programs:
    """A memory-aware list schedule: repeatedly start the action that can start earliest.

    Ties: I/B before F before W, deeper stage first. An F may start only when the device has
    room; an mb's first F on a device reserves the activations of all the device's stages for
    that mb (released at each stage's I/W/B end), so the oldest mb in flight can always
    proceed: no memory deadlock whenever one mb fits. If even that fails, memory is ignored
    (the hint is then infeasible and the solver repairs or proves infeasibility).
    """
    layout, num_mb = sc.layout, sc.num_microbatches
    num_stages, sd = layout.num_stages, layout.stage_device
    bwd = _backward(sc.split_backward)
    ops = _ops(sc.split_backward)
    stages_of = [layout.stages_of(d) for d in range(layout.num_devices)]
    first_stage = {d: stages[0] for d, stages in enumerate(stages_of) if stages}
    reserve = {d: sum(sc.act[s] for s in stages_of[d]) for d in first_stage}

    def demand(d: int, s: int) -> int:
        if not reserve_ahead:
            return sc.act[s]
        return reserve[d] if s == first_stage[d] else 0

    cap = [sc.binding_capacity(d) for d in range(layout.num_devices)]
    nxt = {(s, op): 0 for s in range(num_stages) for op in ops}
    end: dict[Key, Number] = {}
    free: list[Number] = [0] * layout.num_devices
    # memory a device holds: every span ends with an action of that device, which is scheduled
    # before any later F there, so the memory an F sees is exactly what is not yet released
    held = [0] * layout.num_devices
    programs: Programs = [[] for _ in range(layout.num_devices)]
    ignore_memory = False

    def ready(s: int, op: str, m: int) -> Number | None:
        if op == "F":
            deps = [((s - 1, "F", m), sc.delay_act[s])] if s > 0 else []
        elif op == bwd:
            deps = [((s, "F", m), 0)] + ([((s + 1, bwd, m), sc.delay_grad[s + 1])] if s + 1 < num_stages else [])
        else:
            deps = [((s, bwd, m), 0)]
        if any(k not in end for k, _ in deps):
            return None
        return max([0] + [end[k] + lag for k, lag in deps])

    def fits(d: int, demand: int) -> bool:
        limit = cap[d]
        return limit is None or ignore_memory or held[d] + demand <= limit

    def best(d: int) -> tuple | None:
        found = None
        for s in stages_of[d]:
            for op in ops:
                m = nxt[(s, op)]
                if m >= num_mb:
                    continue
                r = ready(s, op, m)
                if r is None:
                    continue
                if op == "F" and not fits(d, demand(d, s)):
                    continue
                start = max(free[d], r)
                key = (start, _OP_RANK[op], -s, m, d, s, op)
                if found is None or key < found:
                    found = key
        return found

    heap = [c for c in (best(d) for d in range(layout.num_devices)) if c is not None]
    heapq.heapify(heap)
    remaining = num_stages * len(ops) * num_mb
    while remaining:
        if not heap:
            if ignore_memory:
                raise RuntimeError("greedy order deadlocked without memory limits")  # cannot happen: DAG
            ignore_memory = True
            heap = [c for c in (best(d) for d in range(layout.num_devices)) if c is not None]
            heapq.heapify(heap)
            continue
        cand = heapq.heappop(heap)
        if best(cand[4]) != cand:  # stale: the device's fresh best was pushed when it changed
            continue
        start, _, _, m, d, s, op = cand
        finish = start + sc.dur[s][op]
        end[(s, op, m)] = finish
        free[d] = finish
        nxt[(s, op)] += 1
        remaining -= 1
        programs[d].append(Action(s, op, m))
        if op == "F":
            held[d] += demand(d, s)
        elif op == bwd:
            held[d] -= sc.act[s] - sc.act_w[s]  # act_w is 0 without split backward
        elif op == "W":
            held[d] -= sc.act_w[s]
        for dd in {d, sd[s - 1] if s > 0 else d, sd[s + 1] if s + 1 < num_stages else d}:
            c = best(dd)
            if c is not None:
                heapq.heappush(heap, c)
    return programs
