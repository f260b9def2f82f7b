"""The order problem of one layout in model units, shared by the order searches (`cpsat_order`,
`cpsat_window`, `order_hint`): the scaled instance `_Scaled`, its as-soon-as-possible timing and
memory check, and the makespan bound that holds without solving (`device_bound_s`).

Data flow: `Layout` + `CostTable` + micro-batch count -> `_Scaled` (integer durations, P2P delays,
activation demands and capacities), and start times back to `Programs`. Imports `core`,
`judge.semantics` (the stage costs and the dependency replay) and `search.result` (the units);
never ortools.

Scaling, done once in `_Scaled`: times to a power-of-ten unit (`result.time_unit_s`: the
shortest duration or delay spans >= 1000 units, a serial upper bound of the step <= 1e9),
stage durations and P2P delays rounded to nearest; bytes to a power-of-two unit, demands
rounded up and capacities down (conservative); a finer one where a given plan fits in bytes but not
in the coarse unit (`_Scaled.fitted_to`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import OPS, Action, CostTable, Layout, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.judge.semantics import check_programs, replay, stage_costs
from adaptis_plan.search.result import (
    MAX_MEM_UNITS,
    capacity_units,
    demand_units,
    mem_unit_bytes,
    time_unit_s,
    to_time_units,
)

Key = tuple[int, str, int]  # (stage, op, mb)
Number = float  # whole model units in the model, seconds in `list_timing`

_OP_RANK = {"F": 0, "I": 1, "B": 1, "W": 2}
#: the memory scales (largest limit in units) `_Scaled.fitted_to` tries, coarse to fine, for a plan that
#: fits its limits in bytes but not at `MAX_MEM_UNITS` (Llama-3.1-405B at pp 16, 8 stages per device:
#: 483 KB under the limit in bytes, 16 units of 8 KB over it rounded); a model CP-SAT refuses at a
#: finer unit (MODEL_INVALID) is a window or solve that finds nothing, as a refused hint was before
FINER_MEM_UNITS = (MAX_MEM_UNITS << 2, MAX_MEM_UNITS << 4)


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
        max_mem_units: int = MAX_MEM_UNITS,
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
            dur: tuple[dict[str, Number], ...] = tuple(
                {op: to_time_units(x, unit_s) for op, x in row.items()} for row in secs
            )
            delay_act: tuple[Number, ...] = tuple(to_time_units(x, unit_s) for x in act_s)
            delay_grad: tuple[Number, ...] = tuple(to_time_units(x, unit_s) for x in grad_s)
        else:
            dur, delay_act, delay_grad = tuple(secs), tuple(act_s), tuple(grad_s)

        given = costs.mem_limit_bytes[: layout.num_devices] if mem_limit_bytes is None else mem_limit_bytes
        limits = [float(x) for x in given]
        if len(limits) != layout.num_devices:
            raise ValueError(f"mem_limit_bytes has {len(limits)} entries for {layout.num_devices} devices")
        finite = [x for x in limits if math.isfinite(x)]
        unit_b = mem_unit_bytes(max(finite) if finite else 0.0, max_mem_units)
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

    def fitted_to(
        self, timed: dict[Key, tuple[Number, Number]], costs: CostTable, mem_limit_bytes: Sequence[float] | None
    ) -> _Scaled:
        """This instance, or the same on a finer memory unit (`FINER_MEM_UNITS`, the first that does) where
        `timed` (a plan's actions) breaks no memory limit: a plan within rounding of its limit fits in
        bytes but not once every live span's demand is rounded up (the simulator judged it in bytes).
        Times are unchanged; a finer unit only admits more (demands round up less, capacities down less)."""
        if self.hint_feasible(timed):
            return self
        for units in FINER_MEM_UNITS:
            fine = _Scaled.build(
                self.layout, costs, self.num_microbatches, self.split_backward, mem_limit_bytes,
                unit_s=self.unit_s, max_mem_units=units,
            )  # fmt: skip
            if fine.hint_feasible(timed):
                return fine
        return self

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


def _programs_from_starts(sc: _Scaled, starts: Mapping[Key, Number]) -> Programs:
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
