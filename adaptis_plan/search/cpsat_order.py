"""CP-SAT order model: the per-device order of F / I / W (or F / B) actions for a fixed layout.

Data flow: `Layout` + `CostTable` + micro-batch count (+ an optional hint `Programs`) ->
`SolveResult` whose payload is `Programs` (each device's actions sorted by the solver's start
times). `solve_order` solves one model of the whole step (small and medium programs; its status
and bound prove how far an order is from the best for the layout); `cpsat_window` improves
programs of any size by a rolling horizon of small window models. Called by the planner after
the partition; the simulator judges the plan, never this model's makespan. `search/` is the only
package that imports ortools; this module imports only `core`, `search.result` and the shared
order instance and greedy hint (`order_instance`, `order_hint`) from the package (no simulator,
no schedule builder).

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
  `order_instance._device_tail`): CP-SAT's own bound was 60 % below the optimum at P=8, M=32 without it.

Scaling: done once in `order_instance._Scaled` (integer time and memory units).

Hint: the caller's programs and a memory-aware greedy list scheduler (`order_hint._greedy_programs`),
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

import math
import time
from collections.abc import Sequence

from ortools.sat.python import cp_model

from adaptis_plan.core import CostTable, Layout, Programs
from adaptis_plan.search._cpsat import clock_stopped, new_solver
from adaptis_plan.search.order_hint import _greedy_programs
from adaptis_plan.search.order_instance import (
    Key,
    Number,
    _backward,
    _complete,
    _device_bound,
    _device_rest,
    _ops,
    _programs_from_starts,
    _Scaled,
)
from adaptis_plan.search.result import SolveResult

#: No LP relaxation: building it for the no-overlap and cumulative constraints took most of a
#: short solve's wall time (1.1 of 2.0 s at P=8, M=32, 1,536 actions), outside the deterministic
#: budget, while its bound added nothing over propagation and the device bound on the paper cases
#: (`python -m bench.zb --sections paper`: the same order bounds on the same layouts, searches
#: 2-3x faster).
_LINEARIZATION_LEVEL = 0


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
    given = None
    if hint is not None and _complete(layout, hint, num_microbatches, split_backward):
        candidates.append(hint)
        given = sc.time_programs(hint)
    if given is not None:  # the given order may sit within rounding of its memory limit (`_Scaled.fitted_to`)
        sc = sc.fitted_to(given, costs, mem_limit_bytes)
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
