"""CP-SAT order model: the per-device order of F / I / W (or F / B) actions for a fixed layout.

Data flow: `Layout` + `CostTable` + micro-batch count (+ an optional hint `Programs`) ->
`SolveResult` whose payload is `Programs` (each device's actions sorted by the solver's start
times). Two entry points: `solve_order`, one model of the whole step (small and medium
programs; its status and bound prove how far an order is from the best for the layout), and
`improve_order_windows`, a rolling horizon of small window models for any size (see there). Called by the planner after the partition; the simulator judges the plan, never this
model's makespan. `search/` is the only package that imports ortools; this module imports
only `core` and `search.result` from the package (no simulator, no schedule builder).

Model (one `_add_*` method per constraint family), all in integer time units:
- one fixed-size interval per action: F, I, W per (stage, mb) when `split_backward`, else F, B;
  durations are the stage's layer sums on the stage's own device row;
- `add_no_overlap` per device;
- precedences: F(s,mb) after F(s-1,mb) + P2P; I/B(s,mb) after F(s,mb) and after
  I/B(s+1,mb) + P2P; W(s,mb) after I(s,mb). P2P between stage s-1 and s is
  `costs.p2p_s(dev(s-1), dev(s), out_bytes[bounds[s]-1])`, zero on one device;
- memory per device (only where the limit can bind): `add_cumulative` over spans from F's
  start to I's end (demand act - act_w) and from F's start to W's end (demand act_w), or to
  B's end (demand act); capacity = limit - the device's static bytes. Measured on this
  machine, the cumulative form solves where a reservoir per device finds nothing in 10 s;
- symmetry breaking: the micro-batches of one (stage, op) run in mb order;
- objective: the makespan, with a redundant device bound (nothing on a device starts before
  its first stage's F of mb 0, then the device works serially, and after its last I / B the
  gradient still runs down the stages below, less the W work the device can do meanwhile:
  `_device_tail`): CP-SAT's own bound was 60 % below the optimum at P=8, M=32 without it.

Scaling, done once in `_Scaled`: times to a power-of-ten unit (`result.time_unit_s`: the
shortest duration or delay spans >= 1000 units, a serial upper bound of the step <= 1e9),
stage durations and P2P delays rounded to nearest; bytes to a power-of-two unit, demands
rounded up and capacities down (conservative).

Hint: the caller's programs and a memory-aware greedy list scheduler (`_greedy_programs`),
each timed by `judge.semantics.replay` (the order + the model's precedences, as soon as possible, in
the model's integer units, so a hint is exactly feasible under the model when its order keeps
mb order per (stage, op) and its peak memory fits). The best feasible one (smallest makespan)
is passed to CP-SAT as a complete hint and also caps the horizon. The greedy runs twice when
memory can bind: once reserving, at an mb's first F on a device, the activations of all of
the device's stages for that mb (deadlock-free whenever one mb fits), once without (tighter
when it does not deadlock). If the solver stops before loading any solution (presolve of
the largest models can eat a short limit), the feasible hint comes back as a FEASIBLE result:
it satisfies every constraint of the model. The reported bound is never below the device
bound, which holds without solving.

Time: `time_limit_s` covers the whole call (scaling, greedy, model building, solve); the
solver gets what is left, at least 20 % of it, and can overrun by its presolve (measured up
to ~0.8 s at P=16, M=64).

Reproducibility: `num_workers=1` with a fixed `seed` gives the same search every run, hence
the same answer whenever the solve ends by proof before the wall-clock limit. Several workers
race and are not bit-reproducible (an OPTIMAL status still means the same makespan).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from adaptis_plan.core import OPS, Action, CostTable, Layout, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.judge.semantics import check_programs, replay, stage_costs
from adaptis_plan.search._cpsat import clock_stopped, new_solver
from adaptis_plan.search.result import (
    SolveResult,
    capacity_units,
    demand_units,
    mem_unit_bytes,
    time_unit_s,
    to_time_units,
)

Key = tuple[int, str, int]  # (stage, op, mb)
Number = float  # whole model units in the model, seconds in `list_timing`

_OP_RANK = {"F": 0, "I": 1, "B": 1, "W": 2}

#: No LP relaxation: building it for the no-overlap and cumulative constraints took most of a
#: short solve's wall time (1.1 of 2.0 s at P=8, M=32, 1,536 actions), outside the deterministic
#: budget, while its bound added nothing over propagation and the device bound on the paper cases
#: (`python -m bench.zb --sections paper`: the same order bounds on the same layouts, searches
#: 2-3x faster).
_LINEARIZATION_LEVEL = 0


def _ops(split_backward: bool) -> tuple[str, ...]:
    return ("F", "I", "W") if split_backward else ("F", "B")


def _backward(split_backward: bool) -> str:
    return "I" if split_backward else "B"


def _complete(layout: Layout, programs: Programs, num_microbatches: int, split_backward: bool) -> bool:
    """Whether `programs` obey the action contract with this model's one kind of backward."""
    try:
        check_programs(layout, programs, num_microbatches, backward="split" if split_backward else "fused")
    except InputError:
        return False
    return True


def list_timing(layout: Layout, costs: CostTable, programs: Programs) -> dict[Action, tuple[float, float]] | None:
    """(start_s, end_s) of every action when each device runs its program in order as soon as the
    precedences and P2P delays of the order model allow (memory ignored); None on deadlock.

    The model's own semantics in seconds, unrounded: a quick re-timing for tests and hints, not
    the simulator.
    """
    num_microbatches = 1 + max((a.mb for program in programs for a in program), default=0)
    sc = _Scaled.build(layout, costs, num_microbatches, True, None, unit_s=1.0, integer=False)
    timed = sc.time_programs(programs)
    return None if timed is None else {Action(*key): value for key, value in timed.items()}


@dataclass(frozen=True)
class _Scaled:
    """The instance in model units, computed once.

    `dur[s][op]` stage durations, `delay_act[s]` (stage s-1's activation to s) and
    `delay_grad[s]` (stage s's gradient back to s-1) P2P delays in time units, all from
    `judge.semantics.stage_costs`; `act[s]`, `act_w[s]` activation demands and `capacity[d]`
    (None: unlimited) in memory units.
    """

    layout: Layout
    num_microbatches: int
    split_backward: bool
    unit_s: float
    dur: tuple[dict[str, Number], ...]
    delay_act: tuple[Number, ...]
    delay_grad: tuple[Number, ...]
    act: tuple[int, ...]
    act_w: tuple[int, ...]
    capacity: tuple[int | None, ...]

    @classmethod
    def build(
        cls,
        layout: Layout,
        costs: CostTable,
        num_microbatches: int,
        split_backward: bool,
        mem_limit_bytes: Sequence[float] | None,
        unit_s: float | None = None,
        integer: bool = True,
    ) -> _Scaled:
        sd = layout.stage_device
        st = stage_costs(layout, costs)
        secs = [{"F": f, "I": i, "W": w, "B": b} for f, i, w, b in zip(st.f, st.i, st.w, st.b, strict=True)]
        secs = [{op: float(x) for op, x in row.items()} for row in secs]
        act_s, grad_s = [float(x) for x in st.p2p_act], [float(x) for x in st.p2p_grad]
        if unit_s is None:
            serial = num_microbatches * (sum(x["F"] + x["B"] for x in secs) + sum(act_s) + sum(grad_s))
            positive = [x for row in secs for x in row.values() if x > 0] + [x for x in act_s + grad_s if x > 0]
            unit_s = time_unit_s(serial, min(positive, default=0.0))
        if integer:
            dur = tuple({op: to_time_units(x, unit_s) for op, x in row.items()} for row in secs)
            delay_act: tuple[Number, ...] = tuple(to_time_units(x, unit_s) for x in act_s)
            delay_grad: tuple[Number, ...] = tuple(to_time_units(x, unit_s) for x in grad_s)
        else:
            dur, delay_act, delay_grad = tuple(secs), tuple(act_s), tuple(grad_s)

        given = costs.mem_limit_bytes[: layout.num_devices] if mem_limit_bytes is None else mem_limit_bytes
        limits = [float(x) for x in given]
        if len(limits) != layout.num_devices:
            raise ValueError(f"mem_limit_bytes has {len(limits)} entries for {layout.num_devices} devices")
        finite = [x for x in limits if math.isfinite(x)]
        unit_b = mem_unit_bytes(max(finite) if finite else 0.0)
        act_b, act_w_b = [float(x) for x in st.act], [float(x) for x in st.act_w]
        if split_backward:
            # two spans: rounded up separately, so together they cover act_bytes
            act_w = tuple(demand_units(x, unit_b) for x in act_w_b)
            act = tuple(demand_units(a - aw, unit_b) + aw_u for a, aw, aw_u in zip(act_b, act_w_b, act_w, strict=True))
        else:
            act, act_w = tuple(demand_units(a, unit_b) for a in act_b), (0,) * len(sd)
        capacity = []
        for d, limit in enumerate(limits):
            capacity.append(capacity_units(limit - float(st.static[d]), unit_b))
        return cls(
            layout, num_microbatches, split_backward, unit_s, dur, delay_act, delay_grad, act, act_w, tuple(capacity)
        )

    def duration(self, stage: int, op: str) -> Number:
        return self.dur[stage][op]

    def binding_capacity(self, device: int) -> int | None:
        """The device's capacity if it can bind (all mbs of all its stages at once would not fit), else None."""
        cap = self.capacity[device]
        total = self.num_microbatches * sum(self.act[s] for s in self.layout.stages_of(device))
        return None if cap is None or cap >= total else cap

    def time_programs(self, programs: Programs) -> dict[Key, tuple[Number, Number]] | None:
        """Each action as soon as its device's previous action and its precedences allow (the
        dependency replay of `judge.semantics`, in model units, links never queueing); None when
        the programs break the action contract or deadlock."""
        num_stages = self.layout.num_stages
        durations = np.zeros((num_stages, len(OPS)))
        for s, row in enumerate(self.dur):
            for op, x in row.items():
                durations[s, OPS.index(op)] = x
        p2p = (np.asarray(self.delay_act, dtype=float), np.asarray(self.delay_grad, dtype=float))
        try:
            run = replay(self.layout, programs, self.num_microbatches, durations, p2p)
        except InputError:
            return None
        timed: dict[Key, tuple[Number, Number]] = {}
        for d, program in enumerate(programs):
            for a, start, end in zip(program, run.starts[d], run.ends[d], strict=True):
                timed[(a.stage, a.op, a.mb)] = (start, end)
        return timed

    def spans(self, timed: dict[Key, tuple[Number, Number]], device: int) -> list[tuple[Number, Number, int]]:
        """Memory spans (start, end, demand) of the device under the model's semantics."""
        bwd = _backward(self.split_backward)
        out = []
        for s in self.layout.stages_of(device):
            for m in range(self.num_microbatches):
                start = timed[(s, "F", m)][0]
                if self.act[s] - self.act_w[s]:
                    out.append((start, timed[(s, bwd, m)][1], self.act[s] - self.act_w[s]))
                if self.act_w[s]:
                    out.append((start, timed[(s, "W", m)][1], self.act_w[s]))
        return out

    def hint_feasible(self, timed: dict[Key, tuple[Number, Number]]) -> bool:
        """Whether timed actions satisfy the model's mb order and memory (precedences hold by construction)."""
        ops = _ops(self.split_backward)
        for s in range(self.layout.num_stages):
            for op in ops:
                for m in range(1, self.num_microbatches):
                    if timed[(s, op, m - 1)][1] > timed[(s, op, m)][0]:
                        return False
        for d in range(self.layout.num_devices):
            cap = self.binding_capacity(d)
            if cap is None:
                continue
            events = sorted((t, delta) for a, b, dem in self.spans(timed, d) for t, delta in ((a, dem), (b, -dem)))
            # a span [a, b) no longer counts at b: releases sort before allocations at one time
            used = 0
            for _, delta in events:
                used += delta
                if used > cap:
                    return False
        return True


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
        return cap[d] is None or ignore_memory or held[d] + demand <= cap[d]

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


def _backward_tail(sc: _Scaled, stage: int) -> int:
    """Least time from B(stage)'s end to B(0)'s end: the B chain below it with its P2P delays."""
    return int(sum(sc.dur[s]["B"] + sc.delay_grad[s + 1] for s in range(stage)))


def _device_tail(sc: _Scaled, device: int) -> int:
    """Least time the step still runs after the device's last I / B, beyond what the device itself
    can fill.

    The device's last I (or B) is one of its lowest stage s0 (an I of a higher stage of that mb
    would still have I of s0 after it). The gradient then still has to go down every stage below
    s0 (with its P2P delays) and, with split backward, W(0) after I(0) on stage 0's device. Without
    split backward the device has nothing left to do meanwhile; with it, only its W's, at most all
    of them, remain. So the step ends at least max(0, chain - the device's W work) after the device
    has done everything else.
    """
    stages = sc.layout.stages_of(device)
    s0 = stages[0]
    if not sc.split_backward:
        return _backward_tail(sc, s0)
    chain = sum(sc.dur[s]["I"] + sc.delay_grad[s + 1] for s in range(s0))
    if s0 > 0:
        chain += sc.dur[0]["W"]
    own_w = sc.num_microbatches * sum(sc.dur[s]["W"] for s in stages)
    return int(max(0, chain - own_w))


def _device_rest(sc: _Scaled, device: int) -> int:
    """Least time from the device's first action to the end of the step: all its work back to
    back, then `_device_tail` (the device must hold a stage)."""
    stages = sc.layout.stages_of(device)
    work = sc.num_microbatches * sum(int(sc.dur[s][op]) for s in stages for op in _ops(sc.split_backward))
    return work + _device_tail(sc, device)


def _device_bound(sc: _Scaled) -> int:
    """A makespan bound that holds without solving: per device, the forward chain before its first
    stage, then `_device_rest`."""
    best = 0
    for d in range(sc.layout.num_devices):
        stages = sc.layout.stages_of(d)
        if not stages:
            continue
        head = int(sum(sc.dur[s]["F"] + sc.delay_act[s + 1] for s in range(stages[0])))
        best = max(best, head + _device_rest(sc, d))
    return best


def device_bound_s(layout: Layout, costs: CostTable, num_microbatches: int, split_backward: bool) -> float:
    """`_device_bound` in seconds: no order of the layout's actions ends sooner (model semantics:
    links never queue; memory ignored, which only makes it lower)."""
    sc = _Scaled.build(layout, costs, num_microbatches, split_backward, [math.inf] * layout.num_devices)
    return _device_bound(sc) * sc.unit_s


class OrderModel:
    """Interval model of one layout's actions. Build, optionally `add_hint`, then `solve()`."""

    def __init__(self, sc: _Scaled, horizon: int) -> None:
        self.sc = sc
        self.horizon = horizon
        self.model = cp_model.CpModel()
        self.start: dict[Key, cp_model.IntVar] = {}
        self.interval: dict[Key, cp_model.IntervalVar] = {}
        self.span_size: list[tuple[cp_model.IntVar, Key, Key]] = []
        self.makespan = self.model.new_int_var(0, horizon, "makespan")
        self._add_actions()
        self._add_no_overlap()
        self._add_precedences()
        self._add_mb_order()
        self._add_memory()
        self._add_makespan()
        self._add_device_bounds()

    def _end(self, key: Key) -> cp_model.LinearExpr:
        return self.start[key] + self.sc.dur[key[0]][key[1]]

    def _add_actions(self) -> None:
        # one fixed-size interval per action
        for s in range(self.sc.layout.num_stages):
            for op in _ops(self.sc.split_backward):
                size = int(self.sc.dur[s][op])
                for m in range(self.sc.num_microbatches):
                    key = (s, op, m)
                    var = self.model.new_int_var(0, max(0, self.horizon - size), f"start_{s}{op}{m}")
                    self.start[key] = var
                    self.interval[key] = self.model.new_fixed_size_interval_var(var, size, f"{s}{op}{m}")

    def _add_no_overlap(self) -> None:
        # a device runs one action at a time
        for d in range(self.sc.layout.num_devices):
            stages = set(self.sc.layout.stages_of(d))
            self.model.add_no_overlap([iv for key, iv in self.interval.items() if key[0] in stages])

    def _add_precedences(self) -> None:
        # activations flow down the stages, gradients back up, W after its I
        sc, num_stages = self.sc, self.sc.layout.num_stages
        bwd = _backward(sc.split_backward)
        for m in range(sc.num_microbatches):
            for s in range(num_stages):
                if s > 0:
                    self.model.add(self.start[(s, "F", m)] >= self._end((s - 1, "F", m)) + int(sc.delay_act[s]))
                self.model.add(self.start[(s, bwd, m)] >= self._end((s, "F", m)))
                if s + 1 < num_stages:
                    self.model.add(self.start[(s, bwd, m)] >= self._end((s + 1, bwd, m)) + int(sc.delay_grad[s + 1]))
                if sc.split_backward:
                    self.model.add(self.start[(s, "W", m)] >= self._end((s, "I", m)))

    def _add_mb_order(self) -> None:
        # symmetry breaking: mbs of one (stage, op) are interchangeable, so run them in order
        for s in range(self.sc.layout.num_stages):
            for op in _ops(self.sc.split_backward):
                for m in range(1, self.sc.num_microbatches):
                    self.model.add(self.start[(s, op, m)] >= self._end((s, op, m - 1)))

    def _add_memory(self) -> None:
        # activations live from F's start to I's (act - act_w) / W's (act_w) / B's (act) end
        sc = self.sc
        bwd = _backward(sc.split_backward)
        for d in range(sc.layout.num_devices):
            cap = sc.binding_capacity(d)
            if cap is None:
                continue
            intervals, demands = [], []
            for s in sc.layout.stages_of(d):
                parts = [(bwd, sc.act[s] - sc.act_w[s])] + ([("W", sc.act_w[s])] if sc.split_backward else [])
                for m in range(sc.num_microbatches):
                    for op, demand in parts:
                        if demand <= 0:
                            continue
                        size = self.model.new_int_var(0, self.horizon, f"mem_{s}{op}{m}")
                        end = self._end((s, op, m))
                        intervals.append(
                            self.model.new_interval_var(self.start[(s, "F", m)], size, end, f"live_{s}{op}{m}")
                        )
                        demands.append(demand)
                        self.span_size.append((size, (s, "F", m), (s, op, m)))
            self.model.add_cumulative(intervals, demands, cap)

    def _add_makespan(self) -> None:
        # the step ends with the last mb of every (stage, op) (mb order makes it the latest)
        last = self.sc.num_microbatches - 1
        for s in range(self.sc.layout.num_stages):
            for op in _ops(self.sc.split_backward):
                self.model.add(self.makespan >= self._end((s, op, last)))
        self.model.minimize(self.makespan)

    def _add_device_bounds(self) -> None:
        # redundant: nothing on a device starts before its first stage's F of mb 0, and the
        # step then lasts at least `_device_rest` longer; CP-SAT's own bound is far weaker on
        # big models
        sc = self.sc
        for d in range(sc.layout.num_devices):
            stages = sc.layout.stages_of(d)
            if stages:
                self.model.add(self.makespan >= self.start[(stages[0], "F", 0)] + _device_rest(sc, d))

    def device_lower_bound(self) -> int:
        """The constant behind `_add_device_bounds`: a makespan bound that holds without solving."""
        return _device_bound(self.sc)

    def add_hint(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        """A complete hint: every start, span size and the makespan."""
        for key, var in self.start.items():
            self.model.add_hint(var, int(timed[key][0]))
        for size, first, last in self.span_size:
            self.model.add_hint(size, int(timed[last][1] - timed[first][0]))
        self.model.add_hint(self.makespan, int(max(e for _, e in timed.values())))

    def solve(
        self, time_limit_s: float, num_workers: int, seed: int, deterministic_time: float | None = None
    ) -> tuple[str, Programs | None, float, float, bool]:
        """(status name, programs or None, objective, best bound, clock stopped); objective and
        bound in time units."""
        solver = new_solver(time_limit_s, num_workers, seed, deterministic_time)
        # presolve probing took 4 s of wall time (1.0 deterministic) at P=16, M=64 with memory
        solver.parameters.presolve_probing_deterministic_time_limit = 0.1
        solver.parameters.linearization_level = _LINEARIZATION_LEVEL
        status = solver.solve(self.model)
        name = solver.status_name(status)
        stopped = clock_stopped(solver, status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return name, None, math.nan, solver.best_objective_bound, stopped
        starts = {key: int(solver.value(var)) for key, var in self.start.items()}
        programs = _programs_from_starts(self.sc, starts)
        return name, programs, solver.objective_value, solver.best_objective_bound, stopped


def _programs_from_starts(sc: _Scaled, starts: dict[Key, Number]) -> Programs:
    """Each device's actions sorted by start time."""

    def order(a: Action) -> tuple:
        start = starts[(a.stage, a.op, a.mb)]
        # zero-length actions can share a start: keep precedence order (F down, I/B up, W last)
        return (start, start + sc.dur[a.stage][a.op], _OP_RANK[a.op], a.stage if a.op == "F" else -a.stage, a.mb)

    programs: Programs = [[] for _ in range(sc.layout.num_devices)]
    for key in starts:
        programs[sc.layout.stage_device[key[0]]].append(Action(*key))
    for program in programs:
        program.sort(key=order)
    return programs


def solve_order(
    layout: Layout,
    costs: CostTable,
    num_microbatches: int,
    *,
    split_backward: bool = True,
    hint: Programs | None = None,
    mem_limit_bytes: Sequence[float] | None = None,
    time_limit_s: float = 3.0,
    num_workers: int = 2,
    seed: int = 0,
    deterministic_time: float | None = None,
) -> SolveResult[Programs]:
    """The per-device action order minimizing the makespan (payload: `Programs`).

    `mem_limit_bytes` per device overrides `costs.mem_limit_bytes` (inf: no limit on that
    device). `hint` is used when it is complete for the layout and deadlock-free; with the
    built-in greedy order, the better feasible one starts the search. Objective, bound and
    `hint_objective` are makespans in seconds (model units, see `result`). Infeasible memory
    gives status INFEASIBLE and payload None; it never raises for that. `deterministic_time`
    is the solver's work budget (reproducible with one worker); `time_limit_s` then only aborts
    a solve the machine is too slow or busy to finish (`clock_stopped` in the result).
    """
    t0 = time.perf_counter()
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches = {num_microbatches}: must be >= 1")
    if costs.num_layers != layout.num_layers or costs.num_devices < layout.num_devices:
        raise ValueError(
            f"cost table ({costs.num_devices} devices x {costs.num_layers} layers) does not cover the layout"
            f" ({layout.num_devices} devices x {layout.num_layers} layers)"
        )
    sc = _Scaled.build(layout, costs, num_microbatches, split_backward, mem_limit_bytes)
    if any(cap is not None and cap < 0 for cap in sc.capacity):
        return SolveResult("INFEASIBLE", None, None, time.perf_counter() - t0, None)

    candidates = []
    if hint is not None and _complete(layout, hint, num_microbatches, split_backward):
        candidates.append(hint)
    candidates.append(_greedy_programs(sc, reserve_ahead=True))
    if any(sc.binding_capacity(d) is not None for d in range(layout.num_devices)):
        candidates.append(_greedy_programs(sc, reserve_ahead=False))  # tighter when it does not deadlock
    timed_hints = [t for t in (sc.time_programs(p) for p in candidates) if t is not None]
    feasible = [t for t in timed_hints if sc.hint_feasible(t)]
    serial = num_microbatches * (sum(sum(row[op] for op in _ops(split_backward)) for row in sc.dur))
    serial += num_microbatches * (sum(sc.delay_act) + sum(sc.delay_grad))
    chosen, hint_objective, horizon = None, None, int(serial)
    if feasible:
        chosen = min(feasible, key=lambda t: max(e for _, e in t.values()))
        horizon = int(max(e for _, e in chosen.values()))
        hint_objective = horizon * sc.unit_s
    elif timed_hints:
        chosen = timed_hints[0]
        horizon = max(horizon, int(max(e for _, e in chosen.values())))

    model = OrderModel(sc, horizon)
    if chosen is not None:
        model.add_hint(chosen)
    # the time limit covers the whole call; the solver always gets a moment to load the hint
    solver_s = max(time_limit_s - (time.perf_counter() - t0), 0.2 * time_limit_s)
    status, programs, objective, bound, stopped = model.solve(solver_s, num_workers, seed, deterministic_time)
    if programs is None and status == "UNKNOWN" and feasible and chosen is not None:
        # the hint satisfies every constraint of the model: it is a solution the solver ran out of time to load
        status, programs, objective = (
            "FEASIBLE",
            _programs_from_starts(sc, {k: v[0] for k, v in chosen.items()}),
            horizon,
        )
    if programs is not None:
        # never report less than the bound that holds without solving, nor more than the objective
        known = bound if math.isfinite(bound) else 0
        bound = min(max(known, model.device_lower_bound()), objective)
    return SolveResult(
        status=status,
        objective=objective * sc.unit_s if programs is not None else None,
        bound=bound * sc.unit_s if status != "INFEASIBLE" and math.isfinite(bound) else None,
        wall_s=time.perf_counter() - t0,
        payload=programs,
        hint_objective=hint_objective,
        clock_stopped=stopped,
    )


# ----------------------------------------------------------------------------- rolling horizon


def _successors(sc: _Scaled, key: Key) -> list[tuple[Key, Number]]:
    """The actions that depend on `key` (not counting the device order), with the delay between them."""
    s, op, m = key
    bwd = _backward(sc.split_backward)
    last = sc.layout.num_stages - 1
    if op == "F":
        out = [((s, bwd, m), 0)]
        if s < last:
            out.append(((s + 1, "F", m), sc.delay_act[s + 1]))
        return out
    if op == bwd:
        out = [((s, "W", m), 0)] if sc.split_backward else []
        if s > 0:
            out.append(((s - 1, bwd, m), sc.delay_grad[s]))
        return out
    return []


def _predecessors(sc: _Scaled, key: Key) -> list[tuple[Key, Number]]:
    s, op, m = key
    bwd = _backward(sc.split_backward)
    if op == "F":
        return [((s - 1, "F", m), sc.delay_act[s])] if s > 0 else []
    if op == bwd:
        out = [((s, "F", m), 0)]
        if s + 1 < sc.layout.num_stages:
            out.append(((s + 1, bwd, m), sc.delay_grad[s + 1]))
        return out
    return [((s, "I", m), 0)]


class WindowModel:
    """One rolling-horizon subproblem: reorder the actions of a window of the current schedule.

    Everything before the window keeps its order and times; everything after keeps its order
    per device, and its effect on the step is the longest path through it from each window
    action (`tail`), which is exact for as-soon-as-possible timing with that order fixed. So the
    objective, max over window actions of end + tail (and per device, the window's last end +
    the device's first later action's path), is the step time the new window order gives.
    Memory: spans that start before the window are fixed there; spans still open after the
    window are held to the horizon (what the device holds at the window's end stays held).
    """

    def __init__(
        self,
        sc: _Scaled,
        programs: Programs,
        timed: dict[Key, tuple[Number, Number]],
        window: dict[int, tuple[int, int]],
        tail: dict[Key, Number],
        horizon: int,
        where: dict[Key, tuple[int, int]],
    ) -> None:
        self.sc = sc
        self.programs = programs
        self.window = window
        self.model = cp_model.CpModel()
        self.start: dict[Key, cp_model.IntVar] = {}
        self.keys_on: dict[int, list[Key]] = {}
        self.horizon = horizon
        for d, (lo, hi) in window.items():
            self.keys_on[d] = [tuple(a) for a in programs[d][lo:hi]]  # type: ignore[misc]
        # a list in device and program order for every loop that builds the model (a set's order
        # follows string hashing, which differs per process: the model, hence the answer, would too)
        self.ordered: list[Key] = [k for keys in self.keys_on.values() for k in keys]
        self.inside: set[Key] = set(self.ordered)
        # an action outside the window is "before" it when it precedes the window on its device
        # (devices without window actions: when it starts before the window does)
        first = min(timed[k][0] for k in self.ordered) if self.ordered else 0

        def is_before(key: Key) -> bool:
            d, i = where[key]
            if d in window:
                return i < window[d][0]
            return timed[key][0] < first

        self.is_before = is_before
        self.objective = self.model.new_int_var(0, horizon, "step")
        self._add_actions(timed)
        self._add_precedences(timed)
        self._add_no_overlap()
        self._add_mb_order(timed)
        self._add_memory(timed)
        self._add_objective(timed, tail)

    def _end(self, key: Key) -> cp_model.LinearExpr:
        return self.start[key] + int(self.sc.dur[key[0]][key[1]])

    def _add_actions(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        # a window action starts after its device's last earlier action
        for d, keys in self.keys_on.items():
            lo = self.window[d][0]
            ready = int(timed[tuple(self.programs[d][lo - 1])][1]) if lo > 0 else 0  # type: ignore[index]
            for key in keys:
                size = int(self.sc.dur[key[0]][key[1]])
                self.start[key] = self.model.new_int_var(ready, max(ready, self.horizon - size), f"s_{key}")

    def _add_precedences(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        # dependencies from fixed earlier actions are constants, among window actions constraints
        for key in self.ordered:
            for pred, lag in _predecessors(self.sc, key):
                if pred in self.inside:
                    self.model.add(self.start[key] >= self._end(pred) + int(lag))
                elif pred in timed and self.is_before(pred):
                    self.model.add(self.start[key] >= int(timed[pred][1] + lag))

    def _add_no_overlap(self) -> None:
        for keys in self.keys_on.values():
            self.model.add_no_overlap(
                [
                    self.model.new_fixed_size_interval_var(self.start[k], int(self.sc.dur[k[0]][k[1]]), f"i_{k}")
                    for k in keys
                ]
            )

    def _add_mb_order(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        # the micro-batches of one (stage, op) keep their order, as in the full model
        groups: dict[tuple[int, str], list[Key]] = {}
        for key in self.ordered:
            groups.setdefault((key[0], key[1]), []).append(key)
        for keys in groups.values():
            keys.sort(key=lambda k: k[2])
            for a, b in zip(keys, keys[1:], strict=False):
                self.model.add(self.start[b] >= self._end(a))

    def _add_memory(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        sc = self.sc
        bwd = _backward(sc.split_backward)
        top = self.horizon + 1
        for d, keys in self.keys_on.items():
            cap = sc.binding_capacity(d)
            if cap is None or not keys:
                continue
            window_start = min(int(timed[k][0]) for k in keys)
            intervals, demands = [], []
            for s in sc.layout.stages_of(d):
                parts = [(bwd, sc.act[s] - sc.act_w[s])] + ([("W", sc.act_w[s])] if sc.split_backward else [])
                for m in range(sc.num_microbatches):
                    f_key = (s, "F", m)
                    for op, demand in parts:
                        rel = (s, op, m)
                        if demand <= 0:
                            continue
                        f_in, r_in = f_key in self.inside, rel in self.inside
                        f_before, r_before = not f_in and self.is_before(f_key), not r_in and self.is_before(rel)
                        if f_before and r_before:
                            if timed[rel][1] <= window_start:
                                continue
                            iv = self.model.new_interval_var(
                                int(timed[f_key][0]), int(timed[rel][1] - timed[f_key][0]), int(timed[rel][1]), ""
                            )
                        elif f_before and r_in:
                            start = int(timed[f_key][0])
                            size = self.model.new_int_var(0, top, "")
                            iv = self.model.new_interval_var(start, size, self._end(rel), "")
                        elif f_before:
                            iv = self.model.new_interval_var(int(timed[f_key][0]), top - int(timed[f_key][0]), top, "")
                        elif f_in and r_in:
                            size = self.model.new_int_var(0, top, "")
                            iv = self.model.new_interval_var(self.start[f_key], size, self._end(rel), "")
                        elif f_in:
                            size = self.model.new_int_var(0, top, "")
                            iv = self.model.new_interval_var(self.start[f_key], size, top, "")
                        else:
                            continue
                        intervals.append(iv)
                        demands.append(int(demand))
            if intervals:
                self.model.add_cumulative(intervals, demands, cap)

    def _add_objective(self, timed: dict[Key, tuple[Number, Number]], tail: dict[Key, Number]) -> None:
        # step = max over window actions of end + the longest path after it through the fixed rest
        for key in self.ordered:
            later = [
                lag + self.sc.dur[nxt[0]][nxt[1]] + tail[nxt]
                for nxt, lag in _successors(self.sc, key)
                if nxt not in self.inside and nxt in tail and not self.is_before(nxt)
            ]
            self.model.add(self.objective >= self._end(key) + int(max(later, default=0)))
        for d, keys in self.keys_on.items():
            hi = self.window[d][1]
            if not keys or hi >= len(self.programs[d]):
                continue
            nxt = tuple(self.programs[d][hi])
            path = int(self.sc.dur[nxt[0]][nxt[1]] + tail[nxt])  # type: ignore[index]
            for key in keys:
                self.model.add(self.objective >= self._end(key) + path)
        self.model.minimize(self.objective)

    def add_hint(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        for key, var in self.start.items():
            self.model.add_hint(var, int(timed[key][0]))

    def solve(
        self, time_limit_s: float, seed: int, deterministic_time: float
    ) -> tuple[int, dict[Key, int] | None, float, bool]:
        """(status, window starts or None, deterministic time spent, clock stopped)."""
        solver = new_solver(time_limit_s, 1, seed, deterministic_time)
        solver.parameters.presolve_probing_deterministic_time_limit = 0.05
        solver.parameters.linearization_level = _LINEARIZATION_LEVEL
        status = solver.solve(self.model)
        stopped = clock_stopped(solver, status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return status, None, solver.deterministic_time, stopped
        starts = {key: int(solver.value(var)) for key, var in self.start.items()}
        return status, starts, solver.deterministic_time, stopped


def _tails(sc: _Scaled, programs: Programs, timed: dict[Key, tuple[Number, Number]]) -> dict[Key, Number]:
    """Per action, the longest path after it to the end of the step (durations and delays of the
    actions it leads to, through dependencies and its device's order), for the fixed order."""
    next_on_device: dict[Key, Key] = {}
    for program in programs:
        for a, b in zip(program, program[1:], strict=False):
            next_on_device[tuple(a)] = tuple(b)  # type: ignore[index]
    tail: dict[Key, Number] = {}
    for key in sorted(timed, key=lambda k: (timed[k][0], timed[k][1]), reverse=True):
        best: Number = 0
        succ = _successors(sc, key)
        nd = next_on_device.get(key)
        if nd is not None:
            succ = [*succ, (nd, 0)]
        for nxt, lag in succ:
            if nxt in tail:
                best = max(best, lag + sc.dur[nxt[0]][nxt[1]] + tail[nxt])
        tail[key] = best
    return tail


def _justify(sc: _Scaled, programs: Programs, timed: dict[Key, tuple[Number, Number]]) -> Programs:
    """Double justification of a timed order (the forward-backward improvement of project
    scheduling): the order of the two passes below, read off as programs.

    Right pass: every action, latest-ending first, as late as its successors (already placed)
    and its device allow, into the latest gap of its device that holds it, with the step's end
    as the horizon. Left pass: every action, earliest right-justified start first, as early as
    its predecessors and its device allow, into the earliest gap. Precedences are the model's
    (`_successors` / `_predecessors`, with their P2P delays) plus its micro-batch order per
    (stage, op). Neither pass lengthens the step: an action's old slot is still free when it
    is placed (everything placed before it moved away from it), so it lands at least as well.
    What changes is the order: an action jumps into a gap another one left, which no window of
    consecutive actions can do. Memory is not modelled here; the caller re-times and checks."""
    keys = list(timed)
    index = {k: n for n, k in enumerate(keys)}
    m = sc.num_microbatches
    dur = [sc.dur[k[0]][k[1]] for k in keys]
    dev = [sc.layout.stage_device[k[0]] for k in keys]
    succ: list[list[tuple[int, Number]]] = [[] for _ in keys]
    pred: list[list[tuple[int, Number]]] = [[] for _ in keys]
    for n, k in enumerate(keys):
        for other, lag in _successors(sc, k):
            succ[n].append((index[other], lag))
        for other, lag in _predecessors(sc, k):
            pred[n].append((index[other], lag))
        if k[2] + 1 < m:  # micro-batch order per (stage, op)
            nxt = index[(k[0], k[1], k[2] + 1)]
            succ[n].append((nxt, 0))
            pred[nxt].append((n, 0))
    # precedence rank for ties at equal times (zero-length actions): F down, I / B up, W last
    stages = sc.layout.num_stages
    rank = [(k[0] if k[1] == "F" else 2 * stages - k[0] if k[1] != "W" else 3 * stages, k[2]) for k in keys]
    horizon = max(e for _, e in timed.values())
    devices = sc.layout.num_devices

    def place(order: list[int], late: bool) -> list[Number]:
        starts: list[Number] = [0] * len(keys)
        busy: list[list[tuple[Number, Number]]] = [[] for _ in range(devices)]  # sorted (start, end)
        for n in order:
            p, slots = dur[n], busy[dev[n]]
            if late:
                t = min([horizon] + [starts[v] - lag for v, lag in succ[n]]) - p  # latest start
                j = bisect.bisect_right(slots, (t + p, math.inf))
                while j > 0 and slots[j - 1][1] > t:  # overlaps an earlier-placed action: go before it
                    t = min(t, slots[j - 1][0] - p)
                    j -= 1
            else:
                t = max([0] + [starts[u] + dur[u] + lag for u, lag in pred[n]])  # earliest start
                j = bisect.bisect_left(slots, (t, -math.inf))
                if j > 0 and slots[j - 1][1] > t:
                    j -= 1
                while j < len(slots) and slots[j][0] < t + p:  # overlaps a later-placed action: go after it
                    t = max(t, slots[j][1])
                    j += 1
            starts[n] = t
            bisect.insort(slots, (t, t + p))
        return starts

    ends = [timed[k][1] for k in keys]
    right = place(sorted(range(len(keys)), key=lambda n: (-ends[n], -rank[n][0], -rank[n][1])), late=True)
    left = place(sorted(range(len(keys)), key=lambda n: (right[n], rank[n])), late=False)
    return _programs_from_starts(sc, {k: left[n] for n, k in enumerate(keys)})


@dataclass(frozen=True)
class WindowStats:
    """What a rolling-horizon pass did: windows solved, windows whose new order was kept."""

    windows: int
    improved: int
    justified: int = 0  # double justifications that shortened the step


#: Deterministic time charged per window for each action of the whole programs: around every
#: window the programs are re-ordered, re-timed and their tails recomputed, about 3.5 us of wall
#: time per action on one core, where a unit of the solver's deterministic time is about 1 s.
#: Without it a 200k-action program (PP 64, 512 micro-batches) spent a long limit's window work
#: on re-timing alone and met the wall-clock abort (55.6 s at --time-limit 60).
_RETIME_DTIME_PER_ACTION = 4e-6
#: Deterministic time charged per action for a double justification (`_justify`: two placement
#: passes with gap search, then the re-timing), about 5 x a re-timing's wall time.
_JUSTIFY_DTIME_PER_ACTION = 2e-5


def _shorter(sc: _Scaled, programs: Programs, best: Number) -> tuple[dict[Key, tuple[Number, Number]], Number] | None:
    """(timing, makespan) of `programs` under the model when they keep its micro-batch order and
    memory and end before `best`; else None."""
    timed = sc.time_programs(programs)
    if timed is None or not sc.hint_feasible(timed):
        return None
    makespan = max(e for _, e in timed.values())
    return (timed, makespan) if makespan < best else None


def _window_positions(total: int, size: int) -> list[int]:
    """First-action positions of the windows of `size` actions that cover `total` by half a
    window's steps, alternately from both ends inwards (the fill and the drain hold the bubbles)."""
    step = max(1, size // 2)
    starts_fwd = list(range(0, max(total - size, 0) + 1, step))
    if starts_fwd[-1] != max(total - size, 0):
        starts_fwd.append(max(total - size, 0))
    positions = [x for pair in itertools.zip_longest(starts_fwd, reversed(starts_fwd)) for x in pair if x is not None]
    return list(dict.fromkeys(positions))[: len(starts_fwd)]


def improve_order_windows(
    layout: Layout,
    costs: CostTable,
    num_microbatches: int,
    programs: Programs,
    *,
    split_backward: bool = True,
    mem_limit_bytes: Sequence[float] | None = None,
    window_actions: int = 1500,
    deterministic_time: float = 2.0,
    window_deterministic_time: float = 0.25,
    time_limit_s: float = 60.0,
    seed: int = 0,
) -> tuple[SolveResult[Programs], WindowStats]:
    """Improve a long program window by window (rolling horizon), where one model is too big.

    Windows of `window_actions` consecutive actions (by start time) slide over the step by
    half a window (from both ends of the step inwards: the fill and the drain hold the bubbles); each is solved by `WindowModel` with `window_deterministic_time` of work and
    kept when the re-timed whole step gets shorter and still fits memory (both under this
    module's model semantics). Programs already at the device bound come back at once as
    OPTIMAL. A pass that keeps no window doubles each window's length and work for the next
    pass (small windows make the quick local moves; longer ones the moves small ones cannot
    see: on nemotron-h-s 2K, V x4, 10 units of work reach the device bound this way, 684.98,
    where fixed 60-action windows stop at 695.52). Before the windows grow, a pass that kept
    nothing tries a double justification (`_justify`), which moves actions into gaps far from
    them; when it shortens the step, the windows start over at their first size (on the paper's
    nemotron-h-s 4K, author's costs, the product's windows stopped at 687.14, 2.2% above the
    lower bound; with it, 685.32, 1.9%; on nemotron-h-m 4K the new start led the windows to a
    worse end, 1540.24 -> 1549.12: it is a restart, not a guaranteed gain). The
    search ends when the next pass could not afford even one window of it, or with the total
    `deterministic_time` (counted in the solver's own work units, so the same programs always
    give the same result) or the wall-clock abort `time_limit_s`, or once the order meets the
    device bound. Status OPTIMAL when it does, else FEASIBLE, with the best programs; the bound
    is the device bound (it holds without solving); None payload when the
    programs do not fit this model (wrong backward kind, deadlock, memory).
    """
    t0 = time.perf_counter()
    sc = _Scaled.build(layout, costs, num_microbatches, split_backward, mem_limit_bytes)
    stats = WindowStats(0, 0)
    if not _complete(layout, programs, num_microbatches, split_backward):
        return SolveResult("MODEL_INVALID", None, None, time.perf_counter() - t0, None), stats
    current = [list(p) for p in programs]
    timed = sc.time_programs(current)
    if timed is None or not sc.hint_feasible(timed):
        return SolveResult("MODEL_INVALID", None, None, time.perf_counter() - t0, None), stats
    best = max(e for _, e in timed.values())
    hint_objective = best * sc.unit_s
    bound = min(_device_bound(sc), best)
    if best <= bound:  # already at the bound no order of these stages can beat: nothing to improve
        return (
            SolveResult(
                "OPTIMAL", best * sc.unit_s, bound * sc.unit_s, time.perf_counter() - t0, current, best * sc.unit_s
            ),
            stats,
        )
    total = sum(len(p) for p in current)
    size = max(8, min(window_actions, total))
    positions = _window_positions(total, size)
    first_size, first_window_dtime = size, window_deterministic_time
    spent, kept_in_pass, windows, kept, justified = 0.0, 0, 0, 0, 0
    stopped = False
    at = 0
    order: list[Key] = []
    tail: dict[Key, Number] = {}
    where: dict[Key, tuple[int, int]] = {}
    stale = True  # the order by start time, tails and positions follow `current`; rebuilt after a kept window
    while spent + 1e-9 < deterministic_time:
        left_s = time_limit_s - (time.perf_counter() - t0)
        if left_s <= 0:
            stopped = True
            break
        if stale:
            order = sorted(timed, key=lambda k: (timed[k][0], timed[k][1], _OP_RANK[k[1]], k[0], k[2]))
            tail = _tails(sc, current, timed)
            where = {tuple(a): (d, i) for d, program in enumerate(current) for i, a in enumerate(program)}  # type: ignore[misc]
            stale = False
        pos = positions[at]
        window: dict[int, tuple[int, int]] = {}
        for key in order[pos : pos + size]:
            d, i = where[key]
            lo, hi = window.get(d, (i, i + 1))
            window[d] = (min(lo, i), max(hi, i + 1))
        model = WindowModel(sc, current, timed, window, tail, int(best), where)
        model.add_hint(timed)
        status, starts, used, stopped = model.solve(
            left_s, seed, min(window_deterministic_time, deterministic_time - spent)
        )
        # each window is charged at least a quarter of its budget (building it costs work too)
        # and the re-timing of the whole programs around it, which grows with their length
        spent += max(used, window_deterministic_time / 4) + total * _RETIME_DTIME_PER_ACTION
        windows += 1
        if starts is not None:
            trial = list(current)
            changed = False
            for d, (lo, hi) in window.items():
                part = sorted(
                    current[d][lo:hi],
                    key=lambda a: (starts[tuple(a)], _OP_RANK[a.op], a.stage if a.op == "F" else -a.stage, a.mb),
                )
                if part != current[d][lo:hi]:
                    trial[d] = current[d][:lo] + part + current[d][hi:]
                    changed = True
            better = _shorter(sc, trial, best) if changed else None
            if better is not None:
                current, (timed, best), stale = trial, better, True
                kept += 1
                kept_in_pass += 1
        if stopped or best <= bound:
            break
        at += 1
        if at >= len(positions):
            cost = total * _JUSTIFY_DTIME_PER_ACTION  # in work units, and about as many seconds at most
            if not kept_in_pass and spent + cost <= deterministic_time:
                if time.perf_counter() - t0 + cost >= time_limit_s:  # the wall-clock abort, said as such
                    stopped = True
                    break
                # nothing kept this pass: first a double justification, whose moves no window
                # holds; when it shortens the step, the windows start over from their first size
                spent += cost
                trial = _justify(sc, current, timed)
                better = _shorter(sc, trial, best)
                if better is not None:
                    current, (timed, best), stale = trial, better, True
                    justified += 1
                    size, window_deterministic_time = first_size, first_window_dtime
                    positions = _window_positions(total, size)
                    at = 0
                    if best <= bound:
                        break
                    continue
            if not kept_in_pass:
                # nothing kept this pass: windows twice as long (a move that spans more actions),
                # each searched twice as hard, while the budget lasts
                window_deterministic_time *= 2
                if window_deterministic_time > deterministic_time - spent:
                    break
                if size < total:
                    size = min(total, 2 * size)
                    positions = _window_positions(total, size)
            at, kept_in_pass = 0, 0
    result = SolveResult(
        status="OPTIMAL" if best <= bound else "FEASIBLE",
        objective=best * sc.unit_s,
        bound=bound * sc.unit_s,
        wall_s=time.perf_counter() - t0,
        payload=current,
        hint_objective=hint_objective,
        clock_stopped=stopped,
    )
    return result, WindowStats(windows, kept, justified)
