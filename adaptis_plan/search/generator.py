"""The generator: joint partition, placement and schedule search (`adaptis plan`'s heart).

Data flow: cost table + micro-batches -> candidates (layout + orders) -> the simulator judges
each survivor -> the best memory-feasible plan, with every classic strategy (uniform and
balanced partitions) evaluated on the same cost model as a candidate and as a baseline.

Phases (each keeps the best so far, as AdaPtis does):
1. placement x partition: sequential, loop and V/zig-zag with 1-4 stages per device, and
   per-round forward/reverse mixtures; each gets a device-balanced partition (heuristic,
   then CP-SAT for the most promising) and an adaptive list-scheduled order; ranked by the
   list scheduler's estimate.
2. schedule: policy variants (I/W split or fused B, depth- or breadth-first forwards,
   in-flight caps) on the best few layouts, judged by the simulator (memory included).
3. partition refinement: move one boundary layer at a time around the busiest device,
   keeping moves that lower the simulated step time (rollback to the best so far).
4. irregular placement: move or swap stages between the busiest and the idlest devices.
5. order refinement with CP-SAT (small and medium pipelines), warm-started from the best order.

Every phase runs a fixed amount of work derived from the problem size (so the same inputs
and seed give the same plan); `time_limit_s` is a hard stop on top. Imports the simulator
and builders; ortools only through `cpsat_*` (lazily).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptis_plan.core import CostTable, Layout, Programs, ProgressFn
from adaptis_plan.errors import InputError
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.schedules import STRATEGIES, get_spec, placement, uniform_bounds
from adaptis_plan.search.listsched import ListPolicy, list_schedule
from adaptis_plan.search.partition import device_balanced_bounds, min_max_stage_bounds

ALL_COMPONENTS = ("partition", "placement", "schedule")

# Which stage -> device maps the plan may use (`plan --target`: what the runtime can execute);
# every candidate the search builds or takes from the classic baselines passes it.
PlacementFilter = Callable[[tuple[int, ...]], bool]


@dataclass
class Candidate:
    label: str
    layout: Layout
    programs: Programs
    estimate_s: float
    result: SimResult | None = None
    source: str = "adaptive"

    @property
    def step_s(self) -> float:
        return self.result.step_time_s if self.result is not None else self.estimate_s

    @property
    def feasible(self) -> bool:
        return self.result is not None and self.result.fits_memory


@dataclass
class SearchOutcome:
    best: Candidate
    baselines: dict[str, Candidate]
    phases: list[dict] = field(default_factory=list)
    solver: dict = field(default_factory=dict)
    evaluated: int = 0
    wall_s: float = 0.0


def classic_candidate(
    costs: CostTable,
    num_layers: int,
    num_microbatches: int,
    strategy: str,
    partition: str = "uniform",
    stages_per_device: int | None = None,
) -> Candidate:
    """One classic strategy as a simulated candidate. Raises InputError when it does not apply."""
    spec = get_spec(strategy)
    p = costs.num_devices
    stage_device = spec.stage_device(p, stages_per_device)
    if len(stage_device) > num_layers - 2 and partition == "uniform":
        raise InputError(
            f"{spec.name}: {len(stage_device)} stages for {num_layers - 2} decoder layers; lower --pp or the stages per device"
        )
    if len(stage_device) > num_layers:
        raise InputError(f"{spec.name}: {len(stage_device)} stages for {num_layers} layers")
    if partition == "uniform":
        bounds = uniform_bounds(num_layers, len(stage_device))
    else:  # the min-max partition (Mist-like): minimize the heaviest stage
        bounds = min_max_stage_bounds(costs, stage_device)
    layout = Layout(bounds=tuple(bounds), stage_device=stage_device, num_devices=p)
    programs = spec.build(stage_device, p, num_microbatches)
    result = simulate(layout, costs, programs, num_microbatches)
    label = spec.name if partition == "uniform" else f"{spec.name}/balanced"
    return Candidate(label, layout, programs, result.step_time_s, result, source=label)


def classic_baselines(costs: CostTable, num_layers: int, num_microbatches: int) -> dict[str, Candidate]:
    """Every classic strategy that applies to this input, with uniform and balanced partitions."""
    out: dict[str, Candidate] = {}
    for name in STRATEGIES:
        for part in ("uniform", "balanced"):
            try:
                cand = classic_candidate(costs, num_layers, num_microbatches, name, part)
            except InputError:
                continue
            out[cand.label] = cand
    return out


def candidate_placements(num_devices: int, num_layers: int, max_chunks: int = 4) -> list[tuple[str, tuple[int, ...]]]:
    """Sequential, loop and zig-zag presets plus per-round forward/reverse mixtures."""
    p = num_devices
    seen: dict[tuple[int, ...], str] = {}
    seen[tuple(range(p))] = "sequential"
    for v in range(2, max_chunks + 1):
        if v * p > num_layers:
            break
        for dirs in itertools.product((0, 1), repeat=v - 1):
            rounds = (0,) + dirs
            sd: list[int] = []
            for r in rounds:
                sd.extend(range(p) if r == 0 else range(p - 1, -1, -1))
            name = "".join("f" if r == 0 else "r" for r in rounds)
            key = tuple(sd)
            if key not in seen:
                label = {("f" * v): f"loop x{v}"}.get(name, f"{name} x{v}")
                if name == "".join("fr"[i % 2] for i in range(v)):
                    label = f"V x{v}"
                seen[key] = label
    return [(label, sd) for sd, label in seen.items()]


def _policies(num_devices: int, split_ok: bool = True) -> list[ListPolicy]:
    pols = [ListPolicy(split_backward=True, depth_first=True, label="zb-depth")]
    pols.append(ListPolicy(split_backward=True, depth_first=False, label="zb-breadth"))
    pols.append(ListPolicy(split_backward=False, depth_first=True, label="fb-depth"))
    for mult in (1, 2):
        cap = tuple(max(1, mult * (num_devices - d)) for d in range(num_devices))
        pols.append(ListPolicy(split_backward=True, depth_first=True, inflight_cap=cap, label=f"zb-cap{mult}"))
    if not split_ok:
        pols = [p for p in pols if not p.split_backward]
    return pols


class _Search:
    def __init__(
        self,
        costs: CostTable,
        num_layers: int,
        num_microbatches: int,
        components: Sequence[str],
        time_limit_s: float,
        seed: int,
        progress: ProgressFn | None,
        placement_ok: PlacementFilter | None = None,
    ) -> None:
        self.placement_ok = placement_ok or (lambda _sd: True)
        self.costs = costs
        self.num_layers = num_layers
        self.m = num_microbatches
        self.p = costs.num_devices
        self.components = set(components)
        self.deadline = time.perf_counter() + time_limit_s
        self.time_limit_s = time_limit_s
        self.seed = seed
        self.progress = progress or (lambda _msg, _frac: None)
        self.evaluated = 0
        self.phases: list[dict] = []
        self.solver: dict = {}
        self.best: Candidate | None = None
        self.skipped_placements = 0

    # -- helpers
    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def schedule(self, layout: Layout, policy: ListPolicy, label: str) -> Candidate:
        self.evaluated += 1
        if "schedule" in self.components:
            programs, est = list_schedule(layout, self.costs, self.m, policy)
            return Candidate(f"{label} / {policy.label}", layout, programs, est)
        programs = self._textbook_order(layout)
        return Candidate(f"{label} / textbook", layout, programs, math.inf)

    def _textbook_order(self, layout: Layout) -> Programs:
        """Schedule search off: the classic order for the placement (1F1B / Interleaved1F1B),
        or a 1F1B-like F/B list order with 1F1B's in-flight caps for other placements."""
        sd = layout.stage_device
        k = layout.num_stages // self.p
        for name in ("1F1B", "Interleaved1F1B"):
            spec = get_spec(name)
            try:
                if spec.stage_device(self.p, k) == sd:
                    return spec.build(sd, self.p, self.m)
            except InputError:
                continue
        cap = tuple(max(1, (self.p - d) * k) for d in range(self.p))
        programs, _ = list_schedule(layout, self.costs, self.m, ListPolicy(split_backward=False, inflight_cap=cap))
        return programs

    def judge(self, cand: Candidate) -> Candidate:
        cand.result = simulate(cand.layout, self.costs, cand.programs, self.m)
        self.consider(cand)
        return cand

    def consider(self, cand: Candidate) -> None:
        if cand.result is None:
            return
        if self.best is None or better(cand, self.best):
            self.best = cand

    def bounds_for(self, stage_device: tuple[int, ...]) -> tuple[int, ...]:
        if "partition" in self.components:
            return device_balanced_bounds(self.costs, stage_device)
        return uniform_bounds(self.num_layers, len(stage_device))

    def partitions_for(self, stage_device: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Distinct candidate partitions: device-balanced and min-max-stage (uniform when partition is off)."""
        if "partition" not in self.components:
            return [uniform_bounds(self.num_layers, len(stage_device))]
        mm = min_max_stage_bounds(self.costs, stage_device)
        out = [device_balanced_bounds(self.costs, stage_device, start=mm)]
        if mm not in out:
            out.append(mm)
        return out

    def log_phase(self, name: str, t0: float, n0: int) -> None:
        self.phases.append(
            {
                "phase": name,
                "best_step_time_s": self.best.step_s if self.best else None,
                "best": self.best.label if self.best else None,
                "evaluated": self.evaluated - n0,
                "wall_s": round(time.perf_counter() - t0, 4),
            }
        )

    # -- phases
    def phase_layouts(self) -> list[Candidate]:
        t0, n0 = time.perf_counter(), self.evaluated
        if "placement" in self.components:
            placements = candidate_placements(self.p, self.num_layers)
        else:
            k = 2 if 2 * self.p <= self.num_layers - 2 else 1
            placements = [("loop x2" if k == 2 else "sequential", placement("loop", self.p, k))]
        placements = [(label, sd) for label, sd in placements if self.placement_ok(sd)]
        base_policy = _policies(self.p)[0]
        cands = []
        # presets first, mixtures after; stop when this phase's share of the time is spent
        placements.sort(key=lambda ls: (not ls[0].startswith(("sequential", "loop", "V")), len(ls[1])))
        phase_end = t0 + 0.45 * self.time_limit_s
        for n, (label, sd) in enumerate(placements):
            if n >= 3 and time.perf_counter() > phase_end:
                self.skipped_placements = len(placements) - n
                break
            for bounds in self.partitions_for(sd):
                layout = Layout(bounds=bounds, stage_device=sd, num_devices=self.p)
                cands.append(self.schedule(layout, base_policy, label))
        cands.sort(key=lambda c: c.estimate_s)
        top = cands[: max(3, len(cands) // 6)]
        if "partition" in self.components:
            seen: set[tuple[int, ...]] = set()
            for c in top[:3]:
                if c.layout.stage_device not in seen:
                    seen.add(c.layout.stage_device)
                    self._cpsat_partition(c)
        for c in top:
            self.judge(c)
        self.log_phase("placement x partition", t0, n0)
        if self.skipped_placements:
            self.phases[-1]["skipped_placements"] = self.skipped_placements
        return top

    def _cpsat_partition(self, cand: Candidate) -> None:
        if self.left() < 0.5:
            return
        from adaptis_plan.search.cpsat_partition import solve_partition

        sd = cand.layout.stage_device
        res = solve_partition(
            self.costs,
            sd,
            hint_bounds=cand.layout.bounds,
            time_limit_s=min(1.0, max(0.2, self.left() * 0.1)),
            num_workers=1,
            seed=self.seed,
        )
        self.solver.setdefault("partition", []).append({"placement": cand.label.split(" / ")[0], **_solve_summary(res)})
        if res.feasible and tuple(res.payload) != cand.layout.bounds:
            layout = Layout(bounds=tuple(res.payload), stage_device=sd, num_devices=self.p)
            alt = self.schedule(layout, ListPolicy(label="zb-depth"), cand.label.split(" / ")[0] + " cpsat")
            self.judge(alt)

    def phase_policies(self, layouts: list[Candidate]) -> None:
        if "schedule" not in self.components:
            return
        t0, n0 = time.perf_counter(), self.evaluated
        ranked = sorted(layouts, key=lambda c: (not c.feasible, c.step_s))[:3]
        for c in ranked:
            base = c.label.split(" / ")[0]
            for pol in _policies(self.p)[1:]:
                if self.left() <= 0:
                    break
                self.judge(self.schedule(c.layout, pol, base))
        self.log_phase("schedule policies", t0, n0)

    def _policy_of(self, cand: Candidate) -> ListPolicy:
        label = cand.label.split(" / ")[-1]
        for pol in _policies(self.p):
            if pol.label == label:
                return pol
        return ListPolicy()

    def phase_refine_partition(self, budget: int) -> None:
        if "partition" not in self.components or self.best is None:
            return
        t0, n0 = time.perf_counter(), self.evaluated
        best = self.best
        pol = self._policy_of(best)
        base = best.label.split(" / ")[0]
        tried: set[tuple[int, ...]] = {best.layout.bounds}
        for _ in range(budget):
            if self.left() <= 0:
                break
            busy = np.array(best.result.busy_s)
            sd = best.layout.stage_device
            hot = int(np.argmax(busy))
            moves = []
            for s, d in enumerate(sd):
                if d != hot:
                    continue
                for k, delta in ((s, +1), (s + 1, -1)):  # shrink stage s from the left or the right
                    if 0 < k < len(sd):
                        b = list(best.layout.bounds)
                        b[k] += delta
                        if b[k - 1] < b[k] < b[k + 1] and tuple(b) not in tried:
                            moves.append(tuple(b))
            improved = False
            for b in moves:
                tried.add(b)
                layout = Layout(bounds=b, stage_device=sd, num_devices=self.p)
                cand = self.judge(self.schedule(layout, pol, base + " refined"))
                if better(cand, best):
                    best, improved = cand, True
            if not improved:
                break
        self.log_phase("partition refinement", t0, n0)

    def phase_irregular(self, budget: int) -> None:
        if "placement" not in self.components or self.best is None:
            return
        t0, n0 = time.perf_counter(), self.evaluated
        best = self.best
        pol = self._policy_of(best)
        for _ in range(budget):
            if self.left() <= 0:
                break
            sd = list(best.layout.stage_device)
            busy = np.array(best.result.busy_s)
            order = np.argsort(busy)
            cold, hot = int(order[0]), int(order[-1])
            moves = []
            for s, d in enumerate(sd):
                if d == hot and sd.count(hot) > 1:
                    moved = sd.copy()
                    moved[s] = cold
                    moves.append(tuple(moved))
                if d == hot:
                    for s2, d2 in enumerate(sd):
                        if d2 == cold:
                            sw = sd.copy()
                            sw[s], sw[s2] = cold, hot
                            moves.append(tuple(sw))
            improved = False
            for msd in moves[:8]:
                if len(set(msd)) < self.p or not self.placement_ok(msd):
                    continue
                layout = Layout(bounds=self.bounds_for(msd), stage_device=msd, num_devices=self.p)
                cand = self.judge(self.schedule(layout, pol, "irregular"))
                if better(cand, best):
                    best, improved = cand, True
            if not improved:
                break
        self.log_phase("irregular placement", t0, n0)

    def phase_cpsat_order(self) -> None:
        if "schedule" not in self.components or self.best is None:
            return
        n_actions = sum(len(p) for p in self.best.programs)
        budget = min(self.left() - 0.2, 4.0)
        if n_actions > 4000 or budget < 0.5:
            self.solver["order"] = {"status": "SKIPPED", "reason": f"{n_actions} actions / {budget:.1f}s left"}
            return
        t0, n0 = time.perf_counter(), self.evaluated
        from adaptis_plan.search.cpsat_order import solve_order

        best = self.best
        split = any(a.op == "I" for p in best.programs for a in p)
        res = solve_order(
            best.layout,
            self.costs,
            self.m,
            split_backward=split,
            hint=best.programs,
            mem_limit_bytes=[float(x) for x in self.costs.mem_limit_bytes],
            time_limit_s=budget,
            num_workers=1,
            seed=self.seed,
        )
        self.solver["order"] = _solve_summary(res)
        if res.feasible:
            self.evaluated += 1
            cand = Candidate(
                best.label.split(" / ")[0] + " / cp-sat order", best.layout, res.payload, res.objective or math.inf
            )
            self.judge(cand)
        self.log_phase("cp-sat order", t0, n0)


def _solve_summary(res) -> dict:
    return {
        "status": res.status,
        "objective_s": res.objective,
        "bound_s": res.bound,
        "gap": res.gap,
        "wall_s": round(res.wall_s, 4),
    }


def better(a: Candidate, b: Candidate) -> bool:
    """Feasible beats infeasible; then shorter step; then lower peak memory."""
    if a.feasible != b.feasible:
        return a.feasible
    if not a.feasible:
        return sum(a.result.overflow_bytes) < sum(b.result.overflow_bytes)
    if a.step_s < b.step_s * (1 - 1e-9):
        return True
    return a.step_s <= b.step_s * (1 + 1e-9) and max(a.result.peak_memory_bytes) < max(b.result.peak_memory_bytes)


def search_plan(
    costs: CostTable,
    num_layers: int,
    num_microbatches: int,
    *,
    components: Sequence[str] = ALL_COMPONENTS,
    time_limit_s: float = 5.0,
    seed: int = 0,
    progress: ProgressFn | None = None,
    baselines: dict[str, Candidate] | None = None,
    placement_ok: PlacementFilter | None = None,
) -> SearchOutcome:
    """Find the best plan for `costs` (P devices = costs.num_devices)."""
    unknown = set(components) - set(ALL_COMPONENTS)
    if unknown:
        raise InputError(
            f"--search = {','.join(components)}: unknown component {sorted(unknown)[0]!r};"
            f" use a comma list of {', '.join(ALL_COMPONENTS)}"
        )
    if costs.num_devices > num_layers:
        raise InputError(f"--pp = {costs.num_devices}: more devices than the model's {num_layers} layers; lower --pp")
    t_start = time.perf_counter()
    s = _Search(costs, num_layers, num_microbatches, components, time_limit_s, seed, progress, placement_ok)
    s.progress("classic baselines", 0.05)
    if baselines is None:
        baselines = classic_baselines(costs, num_layers, num_microbatches)
    s.progress("placement x partition", 0.15)
    top = s.phase_layouts()
    s.progress("schedule policies", 0.35)
    s.phase_policies(top)
    s.progress("partition refinement", 0.5)
    s.phase_refine_partition(budget=6)
    s.progress("irregular placement", 0.65)
    s.phase_irregular(budget=3)
    s.progress("cp-sat order", 0.8)
    s.phase_cpsat_order()
    # every classic plan is a candidate too, so adaptive is never worse than a feasible one
    if set(components) == set(ALL_COMPONENTS):
        for cand in baselines.values():
            if s.placement_ok(cand.layout.stage_device):
                s.consider(cand)
    s.progress("done", 1.0)
    assert s.best is not None
    return SearchOutcome(
        best=s.best,
        baselines=baselines,
        phases=s.phases,
        solver=s.solver,
        evaluated=s.evaluated,
        wall_s=time.perf_counter() - t_start,
    )
