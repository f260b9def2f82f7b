"""CP-SAT partition model: choose the layer cut points for a fixed placement.

Data flow: `CostTable` + placement (`stage_device`) -> `SolveResult` whose payload is the
`Layout.bounds` tuple (num_stages + 1 cut points). Called by the planner before the order
model; the simulator judges the resulting plan. `search/` is the only package that imports
ortools; this module imports only `core` and `search.result` from the package.

Model (one `_add_*` method per constraint family), in the order encoding of the cut points:
`ge[s][l]` is true iff `cut[s] <= l` (layer l sits in stage s or later), so layer l is in
stage s iff `ge[s][l] - ge[s+1][l] = 1` and everything below is linear in these literals:
- cut points `0 = cut[0] < cut[1] < ... < cut[S] = L` (every stage non-empty), as
  `ge[s][l] <= ge[s][l+1]` and `ge[s+1][l] <= ge[s][l-1]`;
- stage work = the F+I+W of its layers on the stage's own device row (heterogeneous devices
  differ); device work = the sum over its stages; objective
  `max device work + max_stage_weight * max stage work` (balanced stages flow better);
- memory per device: static bytes of its layers + sum over its stages of
  `act_inflight[stage] * act_bytes(stage)` <= the device's memory limit.

Why the order encoding rather than integer cut points read through `add_element` over prefix
sums: the element model's LP relaxation is nearly empty, so its proven bound stays far below
the order encoding's at the same time limit (figures in experiments/findings-readme.md).
Presolve probing of the ~L x S literals is switched off: at a hundred layers and tens of
stages it alone takes seconds.

Scaling, done once in `_Scaled`: times to a power-of-ten unit (`result.time_unit_s`: the
cheapest layer spans >= 1000 units; the objective, which multiplies times by `_OBJ_DEN`,
stays <= 1e9), rounded to nearest per layer so prefix sums stay exact integers; bytes to a
power-of-two unit (`result.mem_unit_bytes`), demands rounded up per layer and capacities
down, so a model-feasible partition fits in bytes. The objective is
`_OBJ_DEN * max_device + round(_OBJ_DEN * max_stage_weight) * max_stage` in time units.

Hint (`_greedy_hint`): the best, by (memory overflow, the model's objective), of greedy fills
at the smallest budget found by binary search (per stage: the min-max-stage partition; per
device; per device with an even share per stage), an even split and the caller's
`hint_bounds`, each polished by moving single boundary layers off the worst device. It is
passed to CP-SAT only when it fits in memory (an over-memory hint misled the search more
than none). If the solver stops before loading any solution, the memory-feasible hint is
returned as a FEASIBLE result (it satisfies every constraint of the model). A feasible hint
also narrows every cut point to where a stage costing at most the hint's objective allows
(`_cut_windows`, a valid reduction that shrinks the encoding on big models).

Time: `time_limit_s` covers the whole call; the solver gets what is left, at least 20 %.

Reproducibility: with `num_workers=1` and a fixed `seed` the search is deterministic; the
answer is then identical run to run whenever the solve ends by proof before the time limit.
With several workers CP-SAT is not bit-reproducible (workers race), though an OPTIMAL status
always means the same objective value.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from adaptis_plan.core import CostTable
from adaptis_plan.search._cpsat import clock_stopped, new_solver
from adaptis_plan.search.result import (
    SolveResult,
    capacity_units,
    demand_units,
    mem_unit_bytes,
    time_unit_s,
    to_time_units,
)

#: Denominator of the objective weights (max_stage_weight is resolved to 1/_OBJ_DEN).
_OBJ_DEN = 1000

Bounds = tuple[int, ...]


@dataclass(frozen=True)
class _Scaled:
    """The instance in integer units, computed once.

    `work[d]` is the F+I+W prefix sum (len L+1) of device row d; `mem[k]` is the prefix sum of
    static + k * activation memory units (len L+1) for in-flight count k; `capacity[d]` is the
    device's memory limit in units (None: unlimited).
    """

    stage_device: tuple[int, ...]
    act_inflight: tuple[int, ...]
    work: tuple[tuple[int, ...], ...]
    mem: dict[int, tuple[int, ...]]
    capacity: tuple[int | None, ...]
    unit_s: float
    stage_weight: int

    @classmethod
    def build(
        cls,
        costs: CostTable,
        stage_device: tuple[int, ...],
        act_inflight: tuple[int, ...],
        max_stage_weight: float,
    ) -> _Scaled:
        layer_work = np.asarray(costs.f_s + costs.i_s + costs.w_s, dtype=float)
        positive = layer_work[layer_work > 0]
        horizon = float(layer_work.sum(axis=1).max()) * _OBJ_DEN * 2 if layer_work.size else 0.0
        unit_s = time_unit_s(horizon, float(positive.min()) if positive.size else 0.0)
        work = tuple(
            tuple(int(v) for v in np.concatenate([[0], np.cumsum([to_time_units(x, unit_s) for x in row])]))
            for row in layer_work
        )
        limits = [float(x) for x in costs.mem_limit_bytes]
        finite = [x for x in limits if np.isfinite(x)]
        reference = max(finite) if finite else float(np.sum(costs.static_bytes) + np.sum(costs.act_bytes))
        unit_b = mem_unit_bytes(reference)
        static = np.cumsum([0] + [demand_units(x, unit_b) for x in costs.static_bytes])
        act = np.cumsum([0] + [demand_units(x, unit_b) for x in costs.act_bytes])
        mem = {k: tuple(int(v) for v in static + k * act) for k in sorted(set(act_inflight))}
        capacity = tuple(capacity_units(x, unit_b) for x in limits)
        return cls(
            stage_device=stage_device,
            act_inflight=act_inflight,
            work=work,
            mem=mem,
            capacity=capacity,
            unit_s=unit_s,
            stage_weight=int(round(max_stage_weight * _OBJ_DEN)),
        )

    @property
    def num_layers(self) -> int:
        return len(self.work[0]) - 1

    @property
    def num_stages(self) -> int:
        return len(self.stage_device)

    def objective(self, bounds: Bounds) -> int:
        """The model's objective (scaled integer) of a partition."""
        stage = [self.work[d][bounds[s + 1]] - self.work[d][bounds[s]] for s, d in enumerate(self.stage_device)]
        device = [0] * len(self.work)
        for s, d in enumerate(self.stage_device):
            device[d] += stage[s]
        return _OBJ_DEN * max(device) + self.stage_weight * max(stage)

    def memory_feasible(self, bounds: Bounds) -> bool:
        used = [0] * len(self.capacity)
        for s, d in enumerate(self.stage_device):
            row = self.mem[self.act_inflight[s]]
            used[d] += row[bounds[s + 1]] - row[bounds[s]]
        return all(cap is None or u <= cap for u, cap in zip(used, self.capacity, strict=True))

    def to_seconds(self, value: float) -> float:
        return float(value) * self.unit_s / _OBJ_DEN


def _greedy_fill(sc: _Scaled, limit: int, mode: str) -> Bounds | None:
    """Give each stage, in model order, the most layers that keep it under its budget and its
    device within memory, leaving one layer for every later stage; None if the layers do not
    all fit. Budgets: `stage` mode, `limit` per stage; `device` mode, `limit` per device;
    `share` mode, `limit` per device and `limit / (stages on the device)` per stage."""
    num_layers, num_stages = sc.num_layers, sc.num_stages
    per_device = [0] * len(sc.work)
    for d in sc.stage_device:
        per_device[d] += 1
    dev_work = [0] * len(sc.work)
    dev_mem = [0] * len(sc.capacity)
    bounds = [0]
    start = 0
    for s, d in enumerate(sc.stage_device):
        latest = num_layers - (num_stages - 1 - s)
        row, mem = sc.work[d], sc.mem[sc.act_inflight[s]]
        if mode == "stage":
            budget = limit
        elif mode == "device":
            budget = limit - dev_work[d]
        else:
            budget = min(limit - dev_work[d], limit // per_device[d])
        stop = min(latest, bisect.bisect_right(row, row[start] + budget) - 1)
        cap = sc.capacity[d]
        if cap is not None:
            stop = min(stop, bisect.bisect_right(mem, mem[start] + cap - dev_mem[d]) - 1)
        if stop <= start:
            return None
        dev_work[d] += row[stop] - row[start]
        dev_mem[d] += mem[stop] - mem[start]
        bounds.append(stop)
        start = stop
    return tuple(bounds) if start == num_layers else None


def _bisect_limit(sc: _Scaled, mode: str) -> Bounds | None:
    """The fill at the smallest budget it meets, by binary search (memory can make the fill
    fail for large budgets too, so the search keeps the best fill it saw)."""
    lo, hi = 0, sum(row[-1] for row in sc.work)
    best = _greedy_fill(sc, hi, mode)
    while lo < hi:
        mid = (lo + hi) // 2
        found = _greedy_fill(sc, mid, mode)
        if found is None:
            lo = mid + 1
        else:
            best, hi = found, mid
    return best


def _score(sc: _Scaled, bounds: Sequence[int]) -> tuple[int, int, int]:
    """(memory overflow, objective, sum of squared device work): what `_polish` lowers, in order."""
    work = [0] * len(sc.work)
    mem = [0] * len(sc.capacity)
    for s, d in enumerate(sc.stage_device):
        work[d] += sc.work[d][bounds[s + 1]] - sc.work[d][bounds[s]]
        row = sc.mem[sc.act_inflight[s]]
        mem[d] += row[bounds[s + 1]] - row[bounds[s]]
    overflow = sum(max(0, u - cap) for u, cap in zip(mem, sc.capacity, strict=True) if cap is not None)
    return overflow, sc.objective(tuple(bounds)), sum(w * w for w in work)


def _polish(sc: _Scaled, bounds: Bounds, max_moves: int = 2000) -> Bounds:
    """Move single boundary layers off the worst device (the most overflowing one, else the
    busiest) while the score drops (AdaPtis' move-one-layer refinement)."""
    cut = list(bounds)
    score = _score(sc, cut)
    for _ in range(max_moves):
        work = [0] * len(sc.work)
        over = [0] * len(sc.capacity)
        for s, d in enumerate(sc.stage_device):
            work[d] += sc.work[d][cut[s + 1]] - sc.work[d][cut[s]]
            row = sc.mem[sc.act_inflight[s]]
            over[d] += row[cut[s + 1]] - row[cut[s]]
        over = [u - cap if cap is not None else 0 for u, cap in zip(over, sc.capacity, strict=True)]
        worst = max(range(len(work)), key=lambda d: (over[d] > 0, over[d] if over[d] > 0 else work[d]))
        best_move, best_score = None, score
        for s, d in enumerate(sc.stage_device):
            if d != worst:
                continue
            for j, delta in ((s, +1), (s + 1, -1)):  # shrink stage s from the left or the right
                if 0 < j < sc.num_stages and cut[j - 1] < cut[j] + delta < cut[j + 1]:
                    cut[j] += delta
                    trial = _score(sc, cut)
                    cut[j] -= delta
                    if trial < best_score:
                        best_move, best_score = (j, delta), trial
        if best_move is None:
            break
        cut[best_move[0]] += best_move[1]
        score = best_score
    return tuple(cut)


def _greedy_hint(sc: _Scaled, hint_bounds: Bounds | None = None) -> Bounds | None:
    """The best hint by (memory overflow, the model's objective): greedy fills, an even split
    and the caller's bounds, each polished by single-layer moves; None with more stages than layers."""
    num_layers, num_stages = sc.num_layers, sc.num_stages
    if num_stages > num_layers:
        return None
    even = tuple(round(j * num_layers / num_stages) for j in range(num_stages + 1))
    candidates = [b for b in (_bisect_limit(sc, mode) for mode in ("stage", "share", "device")) if b is not None]
    candidates.append(even)
    if hint_bounds is not None:
        candidates.append(tuple(int(x) for x in hint_bounds))
    return min((_polish(sc, b) for b in candidates), key=lambda b: _score(sc, b)[:2])


def _cut_windows(sc: _Scaled, upper_bound: int | None) -> list[tuple[int, int]]:
    """(lowest, highest) value of each cut point.

    Always cut[0] = 0, cut[S] = L and cut[s] in [s, L - S + s]. With `upper_bound` (the
    scaled objective of a known solution) no stage of a solution at least as good works more
    than upper_bound // _OBJ_DEN, so cut[s] is at most how far stages 0..s-1 can reach at that
    budget each and at least where stages s..S-1 must start to cover the rest: valid domain
    reductions that shrink the order encoding on big models.
    """
    num_layers, num_stages = sc.num_layers, sc.num_stages
    windows = [(0, 0)] + [(s, num_layers - num_stages + s) for s in range(1, num_stages)] + [(num_layers, num_layers)]
    if upper_bound is None:
        return windows
    budget = upper_bound // _OBJ_DEN
    reach = [0] * (num_stages + 1)
    for s, d in enumerate(sc.stage_device):
        row = sc.work[d]
        reach[s + 1] = bisect.bisect_right(row, row[reach[s]] + budget) - 1
    start = [num_layers] * (num_stages + 1)
    for s in range(num_stages - 1, -1, -1):
        row = sc.work[sc.stage_device[s]]
        start[s] = bisect.bisect_left(row, row[start[s + 1]] - budget)
    return [(max(lo, start[s]), min(hi, reach[s])) for s, (lo, hi) in enumerate(windows)]


class PartitionModel:
    """Cut points for a fixed placement, in the order encoding. Build, `add_hint`, then `solve()`.

    `ge[s][l]` is true iff cut[s] <= l, i.e. layer l sits in stage s or later; layer l is in
    stage s iff `ge[s][l] - ge[s+1][l]` is 1, so work and memory are linear in these literals.
    Entries fixed by the domain (cut[s] in [s, L - S + s]) are the constants 0 / 1.
    """

    def __init__(self, sc: _Scaled, upper_bound: int | None = None) -> None:
        self.sc = sc
        self.windows = _cut_windows(sc, upper_bound)
        self.model = cp_model.CpModel()
        self.ge: list[list[cp_model.IntVar | int]] = []
        self.stage_work: list[cp_model.IntVar] = []
        horizon = max(row[-1] for row in sc.work)
        self.max_device = self.model.new_int_var(0, horizon, "max_device_work")
        self.max_stage = self.model.new_int_var(0, horizon, "max_stage_work")
        self._add_cut_points()
        self._add_stage_work()
        self._add_device_work()
        self._add_memory()
        self._add_objective()

    def _in_stage(self, stage: int, weights: Sequence[int]) -> cp_model.LinearExprT:
        """sum of `weights[l]` over the layers of `stage` (weights per layer, len L)."""
        lower, upper = self.ge[stage], self.ge[stage + 1]
        return sum(w * (lower[layer] - upper[layer]) for layer, w in enumerate(weights) if w)

    def _add_cut_points(self) -> None:
        # order encoding of strictly increasing cut points: every stage holds at least one layer
        num_layers, num_stages = self.sc.num_layers, self.sc.num_stages
        for s in range(num_stages + 1):
            row: list[cp_model.IntVar | int] = []
            lo, hi = self.windows[s]
            for layer in range(num_layers):
                if layer >= hi:
                    row.append(1)
                elif layer < lo:
                    row.append(0)
                else:
                    row.append(self.model.new_bool_var(f"cut{s}_le_{layer}"))
            self.ge.append(row)
        for s in range(1, num_stages):
            for layer in range(num_layers - 1):
                self._add_le(self.ge[s][layer], self.ge[s][layer + 1])  # cut[s] <= l  =>  cut[s] <= l+1
        for s in range(num_stages - 1):
            for layer in range(1, num_layers):
                self._add_le(self.ge[s + 1][layer], self.ge[s][layer - 1])  # cut[s+1] <= l  =>  cut[s] <= l-1

    def _add_le(self, a: cp_model.IntVar | int, b: cp_model.IntVar | int) -> None:
        if not (isinstance(a, int) and isinstance(b, int)):
            self.model.add(a <= b)

    def _add_stage_work(self) -> None:
        # a stage's work is counted on its own device's row (heterogeneous devices differ)
        for s, d in enumerate(self.sc.stage_device):
            row = self.sc.work[d]
            work = self.model.new_int_var(0, row[-1], f"work_stage{s}")
            self.model.add(work == self._in_stage(s, [b - a for a, b in zip(row, row[1:], strict=False)]))
            self.stage_work.append(work)

    def _add_device_work(self) -> None:
        # the heaviest device bounds the step time; the heaviest stage, the pipeline's flow
        for d in sorted(set(self.sc.stage_device)):
            stages = [s for s, dd in enumerate(self.sc.stage_device) if dd == d]
            self.model.add(self.max_device >= sum(self.stage_work[s] for s in stages))
        for work in self.stage_work:
            self.model.add(self.max_stage >= work)

    def _add_memory(self) -> None:
        # static bytes of the device's layers + in-flight activations of each of its stages
        for d in sorted(set(self.sc.stage_device)):
            cap = self.sc.capacity[d]
            if cap is None:
                continue
            terms = []
            for s, dd in enumerate(self.sc.stage_device):
                if dd == d:
                    row = self.sc.mem[self.sc.act_inflight[s]]
                    terms.append(self._in_stage(s, [b - a for a, b in zip(row, row[1:], strict=False)]))
            self.model.add(sum(terms) <= cap)

    def _add_objective(self) -> None:
        self.model.minimize(_OBJ_DEN * self.max_device + self.sc.stage_weight * self.max_stage)

    def add_hint(self, bounds: Bounds) -> None:
        """A complete hint: every literal, stage work and both maxima."""
        for s, row in enumerate(self.ge):
            for layer, lit in enumerate(row):
                if not isinstance(lit, int):
                    self.model.add_hint(lit, bounds[s] <= layer)
        work = [self.sc.work[d][bounds[s + 1]] - self.sc.work[d][bounds[s]] for s, d in enumerate(self.sc.stage_device)]
        for var, value in zip(self.stage_work, work, strict=True):
            self.model.add_hint(var, value)
        device: dict[int, int] = {}
        for s, d in enumerate(self.sc.stage_device):
            device[d] = device.get(d, 0) + work[s]
        self.model.add_hint(self.max_device, max(device.values()))
        self.model.add_hint(self.max_stage, max(work))

    def solve(
        self, time_limit_s: float, num_workers: int, seed: int, deterministic_time: float | None = None
    ) -> tuple[str, Bounds | None, float, float, bool]:
        """(status name, cut points or None, objective, best bound, clock stopped), objective and bound scaled."""
        solver = new_solver(time_limit_s, num_workers, seed, deterministic_time)
        # probing thousands of order literals ate whole time limits in presolve (4 s for 130 layers x 64 stages)
        solver.parameters.cp_model_probing_level = 0
        status = solver.solve(self.model)
        name = solver.status_name(status)
        stopped = clock_stopped(solver, status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return name, None, math.nan, solver.best_objective_bound, stopped
        num_layers = self.sc.num_layers
        bounds = tuple(
            num_layers - sum(lit if isinstance(lit, int) else int(solver.boolean_value(lit)) for lit in row)
            for row in self.ge
        )
        return name, bounds, solver.objective_value, solver.best_objective_bound, stopped


def solve_partition(
    costs: CostTable,
    stage_device: tuple[int, ...],
    *,
    act_inflight: Sequence[int] | None = None,
    hint_bounds: tuple[int, ...] | None = None,
    time_limit_s: float = 2.0,
    num_workers: int = 2,
    seed: int = 0,
    max_stage_weight: float = 0.1,
    deterministic_time: float | None = None,
) -> SolveResult[tuple[int, ...]]:
    """Cut points (payload: `bounds`, num_stages + 1 entries) for the placement `stage_device`.

    `act_inflight[stage]` is how many micro-batches of that stage hold activations at the
    schedule's peak (default 1 for every stage). Objective and bound are in seconds of
    `max device work + max_stage_weight * max stage work`. Infeasible memory (or more stages
    than layers) gives status INFEASIBLE and payload None; it never raises for that.
    `deterministic_time` is the solver's work budget (reproducible with one worker);
    `time_limit_s` then only aborts a solve the machine is too slow or busy to finish.
    """
    start = time.perf_counter()
    stage_device = tuple(int(d) for d in stage_device)
    num_stages = len(stage_device)
    if num_stages == 0 or any(not 0 <= d < costs.num_devices for d in stage_device):
        raise ValueError(f"stage_device = {stage_device}: needs >= 1 stage, devices in 0..{costs.num_devices - 1}")
    inflight = tuple(int(k) for k in act_inflight) if act_inflight is not None else (1,) * num_stages
    if len(inflight) != num_stages or any(k < 0 for k in inflight):
        raise ValueError(f"act_inflight = {inflight}: needs {num_stages} counts >= 0, one per stage")
    if hint_bounds is not None and (
        len(hint_bounds) != num_stages + 1
        or hint_bounds[0] != 0
        or hint_bounds[-1] != costs.num_layers
        or any(a >= b for a, b in zip(hint_bounds, hint_bounds[1:], strict=False))
    ):
        raise ValueError(
            f"hint_bounds = {hint_bounds}: needs {num_stages + 1} increasing cut points 0..{costs.num_layers}"
        )
    if num_stages > costs.num_layers:
        return SolveResult("INFEASIBLE", None, None, time.perf_counter() - start, None)

    sc = _Scaled.build(costs, stage_device, inflight, max_stage_weight)
    hint = _greedy_hint(sc, hint_bounds)
    if hint is not None and not sc.memory_feasible(hint):
        hint = None
    model = PartitionModel(sc, sc.objective(hint) if hint is not None else None)
    hint_objective = None
    if hint is not None:
        # an over-memory hint misleads the search more than none (measured: no solution in 2 s)
        model.add_hint(hint)
        hint_objective = sc.to_seconds(sc.objective(hint))
    # the time limit covers the whole call; the solver always gets a moment to load the hint
    solver_s = max(time_limit_s - (time.perf_counter() - start), 0.2 * time_limit_s)
    status, bounds, objective, bound, stopped = model.solve(solver_s, num_workers, seed, deterministic_time)
    if bounds is None and status == "UNKNOWN" and hint is not None and hint_objective is not None:
        # the hint satisfies every constraint of the model: a solution the solver ran out of time to load
        status, bounds, objective = "FEASIBLE", hint, sc.objective(hint)
        bound = min(bound, objective)
    return SolveResult(
        status=status,
        objective=sc.to_seconds(objective) if bounds is not None else None,
        bound=sc.to_seconds(bound) if status != "INFEASIBLE" and math.isfinite(bound) else None,
        wall_s=time.perf_counter() - start,
        payload=bounds,
        hint_objective=hint_objective,
        clock_stopped=stopped,
    )
