"""The generator: joint partition, placement and schedule search (`adaptis plan`'s heart).

Data flow: cost table + micro-batches + `SearchBudget` -> candidates (layout + orders) -> the
simulator judges each survivor -> the best memory-feasible plan, with every classic strategy
(uniform and balanced partitions) evaluated on the same cost model as a candidate, as a
baseline and as a hint for CP-SAT. Imports the judge and the classic builders; ortools only
through `cpsat_*` (lazily).

Phases (each keeps the best so far, as AdaPtis does):
1. placement x partition: sequential, loop and V/zig-zag with 1-4 stages per device, and
   per-round forward/reverse mixtures; each gets a device-balanced and a min-max-stage
   partition (then CP-SAT for the most promising placements) and a list-scheduled order;
   ranked by the list scheduler's estimate, the best simulated.
2. schedule: the list policies (`policy_portfolio`: W lookahead, forward yield, F/B
   alternation, memory reservation, fused backward, ...) on the best few layouts.
3. partition refinement: move one boundary layer at a time around the busiest device,
   keeping moves that lower the simulated step time (rollback to the best so far).
4. irregular placement: move or swap stages between the busiest and the idlest devices.
5. CP-SAT order on the best few layouts, hinted from the best order known for each layout from
   any source (list policies, classic strategies): the whole model where it is small enough
   (its status and proven bound are reported; it starts from the search's own best order for
   the layout), then rolling-horizon windows on any size, from the search's own best order
   first and then from a better order of another source (a classic strategy's), if one remains.
6. seeded layouts: the list policies on classic plans whose placement the presets do not make (a
   deeper interleaving: the whole-configuration screen's, or the deepest the layers allow,
   `classic_baselines(extra=...)`, `driver.PipelineOptions.classic`), last, so the phases before find
   what they find without them; where the best plan is on such a layout, phase 5's CP-SAT order runs on
   it (the plan's order bound; `solver.order_layouts` marks the record `seeded`).
Packed irregular placements (`partition.packed_layouts`, the exact best packing of whole layers
among them) join phase 1 after the presets. A big pipeline (more than `SearchBudget.ranking_actions`
actions per candidate on one stage per device) runs phases 1-4 on a shortened run of its
micro-batches (`ranking_microbatches`: the fill, at least two rounds of steady state and the drain,
which is what tells the candidates apart), then schedules the best `RESCHEDULED` layouts at the full
count and judges them there; phase 5 and every step the plan reports run at the full count.

Determinism: every phase does a fixed amount of work from the `SearchBudget` (list-scheduled
actions, simulated candidates, CP-SAT deterministic time on one worker), so the same inputs,
seed and budget give the same plan on any machine under any load. The wall clock is only a
hard abort (`Deadline`); a search it cuts short says so (`SearchOutcome.aborted`).
"""

from __future__ import annotations

import array
import contextlib
import functools
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, cast

import numpy as np

from adaptis_plan.core import ALL_COMPONENTS, Action, CostTable, Layout, LazyMapping, Programs, ProgressFn
from adaptis_plan.errors import InputError
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.schedules import STRATEGIES, ScheduleSpec, get_spec, placement, uniform_bounds
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.listsched import ListPolicy, list_schedule
from adaptis_plan.search.partition import (
    classic_bounds,
    device_balanced_bounds,
    min_max_stage_bounds,
    packed_layouts,
    sampled_packed_layouts,
)
from adaptis_plan.search.workers import Background, Pool

if TYPE_CHECKING:
    from adaptis_plan.search.priority import PriorityResult

#: the `origin` of `classic_baselines`' extra plans: the search withholds them until its last phase
#: (`phase_seeded`), so that the phases before find what they find without them
SEEDED = "seeded classic"
#: a layout with at most this many actions is small: its whole-step CP-SAT order solves in milliseconds
#: (36 actions: 7 ms), so `phase_cpsat_order` orders up to SMALL_ORDER_EXTRA more such layouts than the
#: budget's `order_layouts`
SMALL_ORDER_ACTIONS = 200
SMALL_ORDER_EXTRA = 3

# Which stage -> device maps the plan may use (`plan --target`: what the runtime can execute);
# every candidate the search builds or takes from the classic baselines passes it.
PlacementFilter = Callable[[tuple[int, ...]], bool]

#: Seconds per action the wall-clock abort assumes before it has measured this machine.
_INITIAL_SECONDS_PER_ACTION = 1e-5

#: A shortened ranking run (`ranking_microbatches`) holds at least this many micro-batches per device.
RANKING_MIN_ROUNDS = 2
#: Layouts of a shortened ranking run scheduled again at the full micro-batch count.
RESCHEDULED = 2
#: The CP-SAT windows do not start on programs whose re-timing around one window alone would cost more
#: than this many times the window budget (`cpsat_window.RETIME_DTIME_PER_ACTION`): 37.5K actions at a
#: whole-configuration point's default share, 150K for one pipeline at the default limit.
WINDOW_OVERRUN = 10


@dataclass
class Candidate:
    """One plan the search considered: its layout, per-device orders and how it was made.

    `placement` names the stage -> device map ("sequential", "V x2", "loop x3", "frr x3",
    "irregular", or a classic strategy's preset), `partition` how the layers were cut
    ("device-balanced", "min-max", "cp-sat", "refined", "uniform", "balanced"), `policy` what
    ordered the actions (a list policy's name, "cp-sat order", "cp-sat windows", "textbook", or
    the classic strategy), `source` "adaptive" or the classic strategy's label, `hint` where a
    CP-SAT order started from.
    """

    layout: Layout
    programs: Programs
    estimate_s: float
    result: SimResult | None = None
    placement: str = ""
    partition: str = ""
    policy: str = ""
    source: str = "adaptive"
    hint: str | None = None
    list_policy: ListPolicy | None = None
    origin: str = ""

    def __post_init__(self) -> None:
        # where the plan's order comes from at the root: a list policy, a classic strategy, or
        # (for CP-SAT orders) the root of the order it was hinted with
        if not self.origin:
            self.origin = self.source if self.source != "adaptive" else f"list policy {self.policy}"

    @property
    def label(self) -> str:
        """Display name: the classic label, or "placement / policy" for the search's own plans."""
        if self.source != "adaptive":
            return self.source
        return f"{self.placement} / {self.policy}"

    @property
    def step_s(self) -> float:
        return self.result.step_time_s if self.result is not None else self.estimate_s

    @property
    def feasible(self) -> bool:
        return self.result is not None and self.result.fits_memory

    def describe(self) -> dict[str, str | None]:
        return {
            "source": self.source,
            "placement": self.placement,
            "partition": self.partition,
            "policy": self.policy,
            "hint": self.hint,
            "origin": self.origin,
        }


@dataclass
class SearchOutcome:
    """The best plan, the classic baselines, and the record of the search.

    `phases`, `solver` and `evaluated` are deterministic (work, statuses, bounds) except the
    `wall_s` entries; `aborted` says the wall-clock abort cut the search short (`abort_phase`).
    """

    best: Candidate
    baselines: Mapping[str, Candidate]
    phases: list[dict] = field(default_factory=list)
    solver: dict = field(default_factory=dict)
    evaluated: int = 0
    wall_s: float = 0.0
    aborted: bool = False
    abort_phase: str | None = None
    budget: SearchBudget | None = None


def classic_candidate(
    costs: CostTable,
    num_microbatches: int,
    strategy: str,
    partition: str = "uniform",
    stages_per_device: int | None = None,
) -> Candidate:
    """One classic strategy as a simulated candidate. Raises InputError when it does not apply."""
    spec = get_spec(strategy)
    return _classic_on(
        costs, num_microbatches, spec, partition, _classic_layout(costs, spec, partition, stages_per_device)
    )


def _classic_on(
    costs: CostTable, num_microbatches: int, spec: ScheduleSpec, partition: str, layout: Layout
) -> Candidate:
    """`spec`'s textbook order on `layout` (its `_classic_layout` for `partition`), simulated."""
    programs = spec.build(layout.stage_device, costs.num_devices, num_microbatches)
    result = simulate(layout, costs, programs, num_microbatches)
    label = spec.name if partition == "uniform" else f"{spec.name}/{partition}"
    return Candidate(
        layout,
        programs,
        result.step_time_s,
        result,
        placement=spec.placement,
        partition=partition,
        policy=spec.name,
        source=label,
    )


def _classic_layout(
    costs: CostTable, spec: ScheduleSpec, partition: str, stages_per_device: int | None = None
) -> Layout:
    """A classic strategy's layout: its placement and `partition` (`classic_bounds`). Raises InputError
    when the strategy has more stages than the partition has layers to give them."""
    stage_device = spec.stage_device(costs.num_devices, stages_per_device)
    try:
        bounds = classic_bounds(costs, stage_device, partition)
    except InputError as e:
        raise InputError(f"{spec.name}: {e}") from None
    return Layout(bounds=tuple(bounds), stage_device=stage_device, num_devices=costs.num_devices)


def classic_baselines(
    costs: CostTable, num_microbatches: int, extra: Sequence[tuple[str, str, int]] = ()
) -> dict[str, Candidate]:
    """Every classic strategy that applies to this input, with uniform and balanced partitions, then
    the `extra` (strategy, partition, stages per device) ones a caller knows to be strong (the
    whole-configuration screen's interleaving degree and split), labelled "NAME[ xK][/partition]" (xK
    where K is not the strategy's default); one that is already a baseline, or does not apply, is left
    out.

    Always complete (the plan report lists every feasible classic strategy), whatever the clock. Where
    the balanced partition is the uniform one (a model of equal layers), the balanced entry is the
    uniform plan under its own label: the same layout and programs simulate to the same result."""
    out: dict[str, Candidate] = {}
    for name in STRATEGIES:
        spec = get_spec(name)
        uniform: Candidate | None = None
        for part in ("uniform", "balanced"):
            try:
                layout = _classic_layout(costs, spec, part)
                if uniform is not None and layout == uniform.layout:
                    cand = replace(uniform, partition=part, source=f"{uniform.source}/balanced")
                else:
                    cand = _classic_on(costs, num_microbatches, spec, part, layout)
            except InputError:  # the strategy does not apply (its layout or its order)
                continue
            if part == "uniform":
                uniform = cand
            out[cand.label] = cand
    for name, part, k in extra:
        spec = get_spec(name)
        try:
            layout = _classic_layout(costs, spec, part, k)
        except InputError:
            continue
        if any(c.policy == spec.name and c.layout == layout for c in out.values()):
            continue
        label = spec.name + (f" x{k}" if k != spec.default_stages_per_device else "")
        label += "" if part == "uniform" else f"/{part}"
        out[label] = replace(_classic_on(costs, num_microbatches, spec, part, layout), source=label, origin=SEEDED)
    return out


class LazyBaselines(LazyMapping[str, Candidate]):
    """`classic_baselines(costs, num_microbatches, extra)`, computed on first use: a big pipeline's
    search (`search_plan`) starts its ranking run in a worker first, then computes them beside it."""

    def __init__(self, costs: CostTable, num_microbatches: int, extra: Sequence[tuple[str, str, int]] = ()) -> None:
        self._args = (costs, num_microbatches, tuple(extra))

    def _compute(self) -> dict[str, Candidate]:
        return classic_baselines(*self._args)


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


def policy_portfolio() -> list[ListPolicy]:
    """The list policies the search tries, most often best first (a greedy cover of the zero-bubble
    grids' cells, then the paper cases'); each is the best policy somewhere. The first ranks layouts."""
    return [
        ListPolicy(alternate=True),
        ListPolicy(alternate=True, w_lookahead="all", f_yield=1.0, yield_warmup_only=True),
        ListPolicy(alternate=True, f_yield=0.5, eager_w=True),
        ListPolicy(w_lookahead="all", f_yield=0.5, yield_warmup_only=True),
        ListPolicy(alternate=True, f_yield=1.0, yield_warmup_only=True),
        ListPolicy(alternate=True, w_lookahead="all", f_yield=0.5, yield_warmup_only=True, eager_w=True),
        ListPolicy(w_lookahead="all", f_yield=0.5),
        ListPolicy(alternate=True, w_lookahead="backward", f_yield=1.0, yield_warmup_only=True, reserve_oldest=True),
        ListPolicy(f_yield=0.5, reserve_oldest=True),
        ListPolicy(alternate=True, f_yield=1.0, yield_warmup_only=True, reserve_oldest=True),
        ListPolicy(alternate=True, f_yield=0.5, yield_warmup_only=True, reserve_oldest=True),
        ListPolicy(),
        ListPolicy(split_backward=False),
    ]


def _splits_backward(programs: Programs) -> bool:
    """Whether the programs run the backward as I + W (else as one B)."""
    return any(a.op == "I" for p in programs for a in p)


def _layout_key(layout: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return layout.bounds, layout.stage_device


class _Search:
    def __init__(
        self,
        costs: CostTable,
        num_layers: int,
        num_microbatches: int,
        components: Sequence[str],
        budget: SearchBudget,
        deadline: Deadline,
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
        self.budget = budget
        self.deadline = deadline
        self.seed = seed
        self.progress = progress or (lambda _msg, _frac: None)
        self.portfolio = policy_portfolio()
        self.evaluated = 0  # list schedules and orders built
        self.judged = 0  # simulations
        self.actions = 0  # list-scheduled actions
        self.phases: list[dict] = []
        self.solver: dict = {}
        self.best: Candidate | None = None
        self.by_layout: dict[tuple, Candidate] = {}  # best judged plan per layout, any source
        self.by_layout_own: dict[tuple, Candidate] = {}  # ... whose order comes from a list policy
        self.rate_schedule = _INITIAL_SECONDS_PER_ACTION
        self.rate_simulate = _INITIAL_SECONDS_PER_ACTION
        self._phase_cap = 0
        self._phase_count = 0
        self._order_records: dict[tuple, dict] = {}  # layout -> its CP-SAT order record

    # -- work accounting
    def num_actions(self, layout: Layout, split: bool = True) -> int:
        return layout.num_stages * self.m * (3 if split else 2)

    def start_phase(self, share: float) -> tuple[float, int, int]:
        self._phase_cap = self.actions + int(share * self.budget.schedule_actions)
        self._phase_count = 0
        return time.perf_counter(), self.evaluated, self.actions

    def affordable(self, layout: Layout, what: str, minimum: int | None = 1) -> bool:
        """Whether the phase's work budget (which always allows `minimum` schedules; None: not
        counted against it) and the wall clock allow one more list schedule (and its simulation)."""
        n = self.num_actions(layout)
        if minimum is not None and self._phase_count >= minimum and self.actions + n > self._phase_cap:
            return False
        if not self.deadline.can_afford(n * (self.rate_schedule + self.rate_simulate)):
            self.deadline.abort(what)
            return False
        return True

    # -- candidates
    def schedule(
        self,
        layout: Layout,
        policy: ListPolicy,
        placement_label: str,
        partition: str,
        done: tuple[Programs, float] | None = None,
    ) -> Candidate:
        """`policy`'s list schedule of `layout` as a candidate (`done`: that schedule, already made in a
        worker: `phase_full_length`)."""
        self.evaluated += 1
        self._phase_count += 1
        t0 = time.perf_counter()
        if "schedule" in self.components:
            programs, est = done or list_schedule(layout, self.costs, self.m, policy)
            name, used = policy.name, policy
        else:
            programs, est, name, used = self._textbook_order(layout), math.inf, "textbook", None
        n = sum(len(p) for p in programs)
        self.actions += n
        if done is None:
            self.rate_schedule = max(self.rate_schedule * 0.5, (time.perf_counter() - t0) / max(n, 1))
        return Candidate(
            layout, programs, est, placement=placement_label, partition=partition, policy=name, list_policy=used
        )

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
        t0 = time.perf_counter()
        cand.result = simulate(cand.layout, self.costs, cand.programs, self.m)
        n = sum(len(p) for p in cand.programs)
        self.rate_simulate = max(self.rate_simulate * 0.5, (time.perf_counter() - t0) / max(n, 1))
        self.judged += 1
        self.consider(cand)
        return cand

    def consider(self, cand: Candidate) -> None:
        if cand.result is None:
            return
        key = _layout_key(cand.layout)
        known = self.by_layout.get(key)
        if known is None or better(cand, known):
            self.by_layout[key] = cand
        own = self.by_layout_own.get(key)
        if cand.origin.startswith("list policy") and (own is None or better(cand, own)):
            self.by_layout_own[key] = cand
        if cand.source == "adaptive" and (self.best is None or better(cand, self.best)):
            self.best = cand

    def partitions_for(self, stage_device: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
        """Distinct candidate partitions: device-balanced and min-max-stage (uniform when partition is off)."""
        if "partition" not in self.components:
            return [("uniform", uniform_bounds(self.num_layers, len(stage_device)))]
        mm = min_max_stage_bounds(self.costs, stage_device)
        out = [("device-balanced", device_balanced_bounds(self.costs, stage_device, start=mm))]
        if mm != out[0][1]:
            out.append(("min-max", mm))
        # with no more micro-batches than devices, the fill and drain decide the step (a single
        # micro-batch: the step is the chain), which the balance above ignores: the classic
        # strategies' uniform split too
        if self.m <= self.p and len(stage_device) <= self.num_layers - 2:
            uni = uniform_bounds(self.num_layers, len(stage_device))
            if all(uni != b for _, b in out):
                out.append(("uniform", uni))
        return out

    def bounds_for(self, stage_device: tuple[int, ...]) -> tuple[int, ...]:
        return self.partitions_for(stage_device)[0][1]

    def log_phase(self, name: str, started: tuple[float, int, int], **extra: object) -> None:
        t0, n0, a0 = started
        self.phases.append(
            {
                "phase": name,
                "best_step_time_s": self.best.step_s if self.best else None,
                "best": self.best.label if self.best else None,
                "evaluated": self.evaluated - n0,
                "actions_scheduled": self.actions - a0,
                **extra,
                "wall_s": round(time.perf_counter() - t0, 4),
            }
        )

    # -- phases
    def phase_layouts(self) -> list[Candidate]:
        started = self.start_phase(self.budget.layout_share)
        if "placement" in self.components:
            placements = candidate_placements(self.p, self.num_layers, self.budget.max_chunks)
        else:
            k = 2 if 2 * self.p <= self.num_layers - 2 else 1
            placements = [("loop x2" if k == 2 else "sequential", placement("loop", self.p, k))]
        placements = [(label, sd) for label, sd in placements if self.placement_ok(sd)]
        # presets first, mixtures after, fewer stages first; then the packed irregular placements
        placements.sort(key=lambda ls: (not ls[0].startswith(("sequential", "loop", "V")), len(ls[1])))
        packed: dict[tuple[int, ...], tuple[int, ...]] = {}
        if {"placement", "partition"} <= self.components:
            for label, sd, bounds in packed_layouts(self.costs, self.p):
                if self.placement_ok(sd) and all(sd != other for _, other in placements):
                    placements.append((label, sd))
                    packed[sd] = bounds
        base = self.portfolio[0]
        cands: list[Candidate] = []
        skipped = 0
        for n, (label, sd) in enumerate(placements):
            parts = [("packed", packed[sd])] if sd in packed else self.partitions_for(sd)
            layouts = [Layout(bounds=b, stage_device=sd, num_devices=self.p) for _, b in parts]
            if not all(self.affordable(lay, "placement x partition", self.budget.min_placements) for lay in layouts):
                skipped = len(placements) - n
                break
            for (pname, _), layout in zip(parts, layouts, strict=True):
                cands.append(self.schedule(layout, base, label, pname))
        cands.sort(key=lambda c: (c.estimate_s, c.layout.num_stages))
        if "partition" in self.components:
            seen: set[tuple[int, ...]] = set()
            for c in cands:
                if len(seen) >= self.budget.partition_solves:
                    break
                if c.layout.stage_device not in seen:
                    seen.add(c.layout.stage_device)
                    alt = self._cpsat_partition(c, base)
                    if alt is not None:
                        cands.append(alt)
            cands.sort(key=lambda c: (c.estimate_s, c.layout.num_stages))
        top = cands[: max(1, self.budget.judged_layouts)]
        for c in top:
            if not self.deadline.can_afford(self.num_actions(c.layout) * self.rate_simulate):
                self.deadline.abort("placement x partition")
                break
            self.judge(c)
        top = [c for c in top if c.result is not None]
        self.log_phase("placement x partition", started, placements_skipped=skipped)
        return top

    def _cpsat_partition(self, cand: Candidate, policy: ListPolicy) -> Candidate | None:
        if self.deadline.expired():
            self.deadline.abort("cp-sat partition")
            return None
        from adaptis_plan.search.cpsat_partition import solve_partition

        sd = cand.layout.stage_device
        res = solve_partition(
            self.costs,
            sd,
            hint_bounds=cand.layout.bounds,
            time_limit_s=max(self.deadline.left(), 0.01),
            num_workers=1,
            seed=self.seed,
            deterministic_time=self.budget.partition_dtime,
        )
        if res.clock_stopped:
            self.deadline.abort("cp-sat partition")
        self.solver.setdefault("partition", []).append({"placement": cand.placement, **_solve_summary(res)})
        cuts = cast(tuple[int, ...], res.payload)  # set when feasible
        if res.feasible and tuple(cuts) != cand.layout.bounds:
            layout = Layout(bounds=tuple(cuts), stage_device=sd, num_devices=self.p)
            if self.affordable(layout, "cp-sat partition", minimum=None):
                return self.schedule(layout, policy, cand.placement, "cp-sat")
        return None

    def phase_policies(self, layouts: list[Candidate]) -> None:
        if "schedule" not in self.components:
            return
        started = self.start_phase(self.budget.policy_share)
        ranked = sorted(layouts, key=lambda c: (not c.feasible, c.step_s, c.layout.num_stages))
        distinct: list[Candidate] = []
        for c in ranked:
            if all(_layout_key(c.layout) != _layout_key(d.layout) for d in distinct):
                distinct.append(c)
        distinct = distinct[: self.budget.policy_layouts]
        # policy by policy across the layouts, so a small budget still tries the best policies everywhere
        for pol in self.portfolio[1:]:
            for c in distinct:
                if not self.affordable(c.layout, "schedule policies", minimum=len(distinct)):
                    self.log_phase("schedule policies", started)
                    return
                self.judge(self.schedule(c.layout, pol, c.placement, c.partition))
        self.log_phase("schedule policies", started)

    def phase_seeded(self, seeded: Sequence[Candidate]) -> None:
        """The seeded classic plans (`classic_baselines(extra=...)`: a deeper interleaving), withheld until
        now so that the phases before find what they find without them: each becomes a candidate, then
        the list policies run on the layouts of those whose stage -> device map the presets do not make,
        on `policy_share` of the work (at least the first policy on each), the best policies first. A plan
        better than the best found becomes the plan. `search_plan` runs it only where the search varies
        every component (classic plans are candidates)."""
        seeded = [c for c in seeded if self.placement_ok(c.layout.stage_device)]
        for c in seeded:
            self.consider(c)
        presets = {sd for _, sd in candidate_placements(self.p, self.num_layers, self.budget.max_chunks)}
        layouts = {_layout_key(c.layout): c for c in seeded if c.layout.stage_device not in presets}
        seeds = list(layouts.values())  # one per layout (Interleaved1F1B and InterleavedZeroBubble share theirs)
        if not seeds:
            return
        started = self.start_phase(self.budget.policy_share)
        self._schedule_seeded(seeds)
        self._order_seeded_winner({_layout_key(c.layout) for c in seeds})
        self.log_phase("seeded layouts", started)

    def _schedule_seeded(self, seeds: Sequence[Candidate]) -> None:
        """The list policies, best first, on each seeded layout while the phase's work allows."""
        for pol in self.portfolio:
            for c in seeds:
                if not self.affordable(c.layout, "seeded layouts", minimum=len(seeds)):
                    return
                label = f"{c.placement} x{c.layout.num_stages // self.p}"
                self.judge(self.schedule(c.layout, pol, label, c.partition))

    def _order_seeded_winner(self, keys: set) -> None:
        """CP-SAT order (`_order_one`) on the best plan's layout when a seeded layout (`keys`) holds it:
        phase 5 ran before that layout existed, so without this the plan would have no order bound. The
        other seeded layouts are not ordered: they lost to the best plan (one order solve at most)."""
        best = self.best
        if best is None or not best.feasible:
            return
        key = _layout_key(best.layout)
        if key not in keys or key in self._order_records or self.deadline.expired():
            return
        rec = self._order_one(best)
        self.solver.setdefault("order_layouts", []).append({**rec, "seeded": True})

    def _policy_of(self, cand: Candidate) -> ListPolicy:
        return cand.list_policy or self.portfolio[0]

    def phase_refine_partition(self) -> None:
        if "partition" not in self.components or self.best is None or self.best.result is None:
            return
        started = self.start_phase(self.budget.refine_share)
        best = self.best
        pol = self._policy_of(best)
        tried: set[tuple[int, ...]] = {best.layout.bounds}
        for _ in range(self.budget.refine_rounds):
            busy = np.array(_judged(best).busy_s)
            sd = best.layout.stage_device
            hot = int(np.argmax(busy))
            moves = []
            for s, d in enumerate(sd):
                if d != hot:
                    continue
                for k, delta in ((s, +1), (s + 1, -1)):  # shrink stage s from the left or the right
                    if 0 < k < len(sd):
                        cut = list(best.layout.bounds)
                        cut[k] += delta
                        if cut[k - 1] < cut[k] < cut[k + 1] and tuple(cut) not in tried:
                            moves.append(tuple(cut))
            improved = False
            for b in moves:
                tried.add(b)
                layout = Layout(bounds=b, stage_device=sd, num_devices=self.p)
                if not self.affordable(layout, "partition refinement"):
                    self.log_phase("partition refinement", started)
                    return
                cand = self.judge(self.schedule(layout, pol, best.placement, "refined"))
                if better(cand, best):
                    best, improved = cand, True
            if not improved:
                break
        self.log_phase("partition refinement", started)

    def phase_irregular(self) -> None:
        if "placement" not in self.components or self.best is None or self.best.result is None:
            return
        started = self.start_phase(self.budget.irregular_share)
        best = self.best
        pol = self._policy_of(best)
        for _ in range(self.budget.irregular_rounds):
            sd = list(best.layout.stage_device)
            busy = np.array(_judged(best).busy_s)
            order = np.argsort(busy, kind="stable")
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
            for msd in moves[: self.budget.irregular_moves]:
                if len(set(msd)) < self.p or not self.placement_ok(msd):
                    continue
                parts = self.partitions_for(msd)
                layout = Layout(bounds=parts[0][1], stage_device=msd, num_devices=self.p)
                if not self.affordable(layout, "irregular placement"):
                    self.log_phase("irregular placement", started)
                    return
                cand = self.judge(self.schedule(layout, pol, "irregular", parts[0][0]))
                if better(cand, best):
                    best, improved = cand, True
            if not improved:
                break
        self.log_phase("irregular placement", started)

    def phase_full_length(self, ranked: _Ranked, deadline: Deadline) -> None:
        """Phases 1-4 ran on a shortened run of this pipeline's micro-batches (`ranking_microbatches`,
        `_rank`): the best `RESCHEDULED` layouts there, each with its best list policy, are scheduled
        and judged at the full count. Their records join this search's, marked with the micro-batches
        they ran on."""
        self.phases.extend({**ph, "microbatches": ranked.m} for ph in ranked.phases)
        self.solver.update(ranked.solver)
        self.evaluated += ranked.evaluated
        self.judged += ranked.judged
        self.actions += ranked.actions
        self.rate_schedule, self.rate_simulate = ranked.rate_schedule, ranked.rate_simulate
        started = self.start_phase(0.0)
        picks = [(layout, policy or self.portfolio[0], label, part) for layout, policy, label, part in ranked.picks]
        # the second pick is list-scheduled in a worker while this process schedules and judges the first
        ahead: Background | None = None
        if len(picks) > 1 and "schedule" in self.components and Pool(2).parallel:
            ahead = Background(functools.partial(_list_schedule_codes, picks[1][0], self.costs, self.m, picks[1][1]))
        with ahead or contextlib.nullcontext():
            for n, (layout, policy, placement_label, partition) in enumerate(picks):
                if not self.affordable(layout, "full micro-batches", minimum=None):
                    break
                done = _decoded(ahead.result()) if n == 1 and ahead is not None else None
                self.judge(self.schedule(layout, policy, placement_label, partition, done))
            if ahead is not None:
                ahead.cancel()  # the clock stopped the loop first: the second pick is not wanted
        self.log_phase("full micro-batches", started, ranked_on=ranked.m)

    def phase_critical_path(self) -> None:
        """Critical-path ranks (`search.priority`) on the best known layouts and on random deals of
        the optimal packing: plain ranks on each, then the local search over the ranks on the best
        `priority_layouts` of them (by the list scheduler's estimate), each result judged."""
        b = self.budget
        if "schedule" not in self.components or b.priority_actions <= 0 or self.best is None:
            return
        from adaptis_plan.search.priority import MB_WEIGHTS

        if b.priority_actions < 2 * len(MB_WEIGHTS) * self.num_actions(self.best.layout):
            return  # not even the plain ranks on two layouts: a pipeline too big for this budget
        left = b.priority_actions

        started = self.start_phase(0.0)
        ranked = sorted(
            (c for c in self.by_layout.values() if c.feasible and self.placement_ok(c.layout.stage_device)),
            key=lambda c: (c.step_s, c.layout.num_stages, c.label),
        )
        pool: list[tuple[Layout, str, str]] = []
        for c in ranked[: b.priority_layouts]:
            pool.append((c.layout, c.placement, c.partition))
        if {"placement", "partition"} <= self.components and b.packed_samples > 0:
            sampled = sampled_packed_layouts(
                self.costs,
                self.p,
                self.m,
                samples=b.packed_samples,
                keep=b.packed_ranked,
                seed=self.seed,
                stop=self.deadline.expired,
            )
            if self.deadline.expired():
                self.deadline.abort("critical path")
            for sd, bounds in sampled:
                layout = Layout(bounds=bounds, stage_device=sd, num_devices=self.p)
                if self.placement_ok(sd) and all(layout != other for other, _, _ in pool):
                    pool.append((layout, "packed sample", "packed"))
        policy = ListPolicy()
        plain: list[tuple] = []
        for n, (layout, placement_label, partition) in enumerate(pool):
            if len(MB_WEIGHTS) * self.num_actions(layout) > left // 2:
                break  # half of the phase's work at most goes to ranking layouts
            if not self.deadline.can_afford(len(MB_WEIGHTS) * self.num_actions(layout) * self.rate_schedule):
                self.deadline.abort("critical path")
                break
            res = self._priority(layout, policy, len(MB_WEIGHTS))
            left -= res.actions
            plain.append((res.estimate_s, n, layout, placement_label, partition, res))
        # successive halving: the best half by the estimate so far gets a longer local search, until
        # `priority_layouts` remain; they share what is left of the work
        plain.sort(key=lambda x: (x[0], x[1]))
        alive = plain[: max(b.priority_layouts, b.priority_halving)]
        rounds: list[int] = []
        round_actions = left // 4  # each halving round: a quarter of what is left after ranking
        while len(alive) > b.priority_layouts:
            scored = []
            for _, n, layout, placement_label, partition, before in alive:
                per_layout = max(1, round_actions // len(alive) // self.num_actions(layout))
                if not self.deadline.can_afford(per_layout * self.num_actions(layout) * self.rate_schedule):
                    self.deadline.abort("critical path")
                    break
                res = self._priority(layout, policy, per_layout, before)
                left -= res.actions
                scored.append((res.estimate_s, n, layout, placement_label, partition, res))
            rounds.append(len(alive))
            scored.sort(key=lambda x: (x[0], x[1]))
            alive = scored[: max(b.priority_layouts, len(alive) // 2)]
            if self.deadline.aborted:
                break
        share = max(left, 0) // max(len(alive), 1)
        for _, _, layout, placement_label, partition, before in alive:
            per_layout = share // self.num_actions(layout)
            if not self.deadline.can_afford(per_layout * self.num_actions(layout) * self.rate_schedule):
                self.deadline.abort("critical path")
                break
            res = self._priority(layout, policy, per_layout, before)
            self.judge(
                Candidate(
                    layout,
                    res.programs,
                    res.estimate_s,
                    placement=placement_label,
                    partition=partition,
                    policy="critical path",
                )
            )
        self.log_phase("critical path", started, layouts_ranked=len(plain), halving=rounds, layouts_searched=len(alive))

    def _priority(
        self, layout: Layout, policy: ListPolicy, schedules: int, start: PriorityResult | None = None
    ) -> PriorityResult:
        from adaptis_plan.search.priority import priority_search

        t0 = time.perf_counter()
        res = priority_search(
            layout, self.costs, self.m, schedules=schedules, policy=policy, seed=self.seed, start=start
        )
        self.evaluated += res.schedules
        self.actions += res.actions
        self.rate_schedule = max(self.rate_schedule * 0.5, (time.perf_counter() - t0) / max(res.actions, 1))
        return res

    def phase_cpsat_order(self) -> None:
        """CP-SAT on the best few distinct layouts, each hinted with the best order known for it."""
        if "schedule" not in self.components or not self.by_layout:
            return
        started = self.start_phase(0.0)
        ranked = sorted(
            (c for c in self.by_layout.values() if c.feasible and self.placement_ok(c.layout.stage_device)),
            key=lambda c: (c.step_s, c.layout.num_stages, c.label),
        )
        records: list[dict] = []
        for c in ranked:
            # a small layout's whole-step order solves in milliseconds: a few more are ordered at any budget
            small = sum(map(len, c.programs)) <= SMALL_ORDER_ACTIONS
            if len(records) >= self.budget.order_layouts + (SMALL_ORDER_EXTRA if small else 0):
                break
            if self.deadline.expired():
                self.deadline.abort("cp-sat order")
                break
            # a layout whose order bound already reaches the best plan cannot improve on it
            # (the best plan's own layout is still solved: its bound is the plan's proof)
            if self.best is not None and c.layout != self.best.layout and self._order_bound(c) >= self.best.step_s:
                continue
            records.append(self._order_one(c))
        self.solver["order_layouts"] = records
        self.log_phase("cp-sat order", started)

    def _order_bound(self, cand: Candidate) -> float:
        """Seconds no order of the candidate's layout can beat (`order_instance.device_bound_s`)."""
        from adaptis_plan.search.order_instance import device_bound_s

        return device_bound_s(cand.layout, self.costs, self.m, _splits_backward(cand.programs))

    def _order_one(self, start: Candidate) -> dict:
        """The CP-SAT order models on `start`'s layout, each result judged as a candidate: the whole
        step when it is small enough, then windows; returns the record the plan file keeps."""
        layout = start.layout
        key = _layout_key(layout)
        limits = [float(x) for x in self.costs.mem_limit_bytes[: self.p]]
        # the whole model starts from the search's own best order for the layout when there is one
        # (its proven bound does not depend on the hint); another source's order still hints the
        # windows below when it is better
        start = self.by_layout_own.get(key, start)
        hint_from = start.label
        record: dict = {
            "placement": start.placement,
            "partition": start.partition,
            "hint": hint_from,
            "hint_step_time_s": start.step_s,
        }
        self._order_whole(start, limits, record)
        # windows from the search's own best order for the layout first, with the whole window
        # budget; then, only if an order of another source (a classic strategy's) is still better
        # for this layout, from that one with half the budget
        record["windows"] = self._order_windows(start, key, limits)
        record["step_time_s"] = self.by_layout[key].step_s
        self._order_records[key] = record
        return record

    def _order_whole(self, start: Candidate, limits: list[float], record: dict) -> None:
        """The whole-step order model (`cpsat_order.solve_order`) from `start`'s order, when its
        programs are small enough for the budget; its summary goes to `record["full"]`."""
        from adaptis_plan.search.cpsat_order import solve_order

        layout = start.layout
        split = _splits_backward(start.programs)
        hint_from = start.label
        n_actions = sum(len(p) for p in start.programs)
        b = self.budget
        if n_actions <= b.order_full_max_actions and b.order_full_dtime > 0:
            res = solve_order(
                layout,
                self.costs,
                self.m,
                split_backward=split,
                hint=start.programs,
                mem_limit_bytes=limits,
                time_limit_s=max(self.deadline.left(), 0.01),
                num_workers=1,
                seed=self.seed,
                deterministic_time=b.order_full_dtime,
            )
            if res.clock_stopped:
                self.deadline.abort("cp-sat order")
            record["full"] = _solve_summary(res)
            if res.feasible:
                self.evaluated += 1
                self.judge(
                    Candidate(
                        layout,
                        cast(Programs, res.payload),  # set when feasible
                        res.objective or math.inf,
                        placement=start.placement,
                        partition=start.partition,
                        policy="cp-sat order",
                        hint=hint_from,
                        origin=start.origin,
                    )
                )

    def _order_windows(self, start: Candidate, key: tuple, limits: list[float]) -> list[dict]:
        """The window models (`cpsat_window.improve_order_windows`) from the layout's best orders
        (see `_order_one`); one record per window run."""
        from adaptis_plan.search.cpsat_window import RETIME_DTIME_PER_ACTION, improve_order_windows
        from adaptis_plan.search.order_instance import device_bound_s

        layout = start.layout
        b = self.budget
        windows: list[dict] = []
        for share, pick in ((1.0, self.by_layout_own.get), (0.5, self.by_layout.get)):
            current = pick(key)
            if current is None or b.order_window_dtime <= 0 or self.deadline.expired():
                continue
            if share < 1.0:
                own = self.by_layout_own.get(key)
                if own is not None and not better(current, own):
                    continue
            if sum(len(p) for p in current.programs) * RETIME_DTIME_PER_ACTION > (
                WINDOW_OVERRUN * b.order_window_dtime * share
            ):
                # re-timing the whole programs around a single window would cost many times the window
                # budget: no window is solved; the device bound still holds (it needs no solve)
                split = _splits_backward(current.programs)
                bound = device_bound_s(layout, self.costs, self.m, split)
                windows.append(
                    {"hint": current.label, "status": "NOT_RUN", "solved": 0, "kept": 0, "device_bound_s": bound}
                )
                continue
            res, stats = improve_order_windows(
                layout,
                self.costs,
                self.m,
                current.programs,
                split_backward=_splits_backward(current.programs),
                mem_limit_bytes=limits,
                window_actions=b.order_window_actions,
                deterministic_time=b.order_window_dtime * share,
                window_deterministic_time=b.order_window_step_dtime,
                time_limit_s=max(self.deadline.left(), 0.01),
                seed=self.seed,
            )
            if res.clock_stopped:
                self.deadline.abort("cp-sat windows")
            windows.append(
                {
                    "hint": current.label,
                    "status": res.status,
                    "solved": stats.windows,
                    "kept": stats.improved,
                    "device_bound_s": res.bound,
                }
            )
            if res.feasible and stats.improved:
                self.evaluated += 1
                self.judge(
                    Candidate(
                        layout,
                        cast(Programs, res.payload),  # set when feasible
                        res.objective or math.inf,
                        placement=start.placement,
                        partition=start.partition,
                        policy="cp-sat windows",
                        hint=current.label,
                        origin=current.origin,
                    )
                )
        return windows

    def plan_bound(self, best: Candidate) -> dict:
        """The order solve behind the chosen plan's layout: status, proven bound and gap (vs its simulated step)."""
        rec = self._order_records.get(_layout_key(best.layout))
        if rec is None:
            return {"status": "NOT_RUN", "bound_s": None, "gap": None}
        full = rec.get("full")
        bound = None
        status = "WINDOWS_ONLY"
        if full is not None:
            status, bound = full["status"], full["bound_s"]
        if full is None and rec.get("windows") and all(w.get("status") == "NOT_RUN" for w in rec["windows"]):
            status = "BOUND_ONLY"  # no window was solved (`WINDOW_OVERRUN`)
        for win in rec.get("windows", []):
            device = win.get("device_bound_s")
            if device is not None:
                bound = device if bound is None else max(bound, device)
            if win.get("status") == "OPTIMAL":
                status = "OPTIMAL"  # the order already met the device bound
        if bound is None:
            return {"status": status, "bound_s": None, "gap": None}
        step = best.step_s
        gap = max(0.0, (step - bound) / step) if step > 0 else 0.0
        if gap <= 1e-6:
            # the plan meets a proven bound (within the model's time rounding): no order of these
            # stages is faster
            status = "OPTIMAL"
        return {"status": status, "bound_s": bound, "gap": gap, "scope": "order, for this partition and placement"}


def _solve_summary(res) -> dict:
    return {
        "status": res.status,
        "objective_s": res.objective,
        "bound_s": res.bound,
        "gap": res.gap,
        "clock_stopped": res.clock_stopped,
        "wall_s": round(res.wall_s, 4),
    }


def better(a: Candidate, b: Candidate) -> bool:
    """Feasible beats infeasible; then shorter step; then lower peak memory."""
    if a.feasible != b.feasible:
        return a.feasible
    if not a.feasible:
        return sum(_judged(a).overflow_bytes) < sum(_judged(b).overflow_bytes)
    if a.step_s < b.step_s * (1 - 1e-9):
        return True
    return a.step_s <= b.step_s * (1 + 1e-9) and max(_judged(a).peak_memory_bytes) < max(_judged(b).peak_memory_bytes)


def _judged(c: Candidate) -> SimResult:
    """The simulator's verdict on a candidate that has one."""
    if c.result is None:
        raise ValueError(f"candidate {c.label} was not simulated")
    return c.result


def ranking_microbatches(num_devices: int, num_microbatches: int, ranking_actions: int) -> int:
    """The micro-batches phases 1-4 rank candidates on: all of them up to `ranking_actions` actions per
    candidate on one stage per device (3 x pp x M), else enough for that many, and at least
    `RANKING_MIN_ROUNDS` x pp (the fill, a steady state and the drain of every placement tried)."""
    if 3 * num_devices * num_microbatches <= ranking_actions:
        return num_microbatches
    wanted = max(RANKING_MIN_ROUNDS * num_devices, -(-ranking_actions // (3 * num_devices)))
    return min(num_microbatches, wanted)


@dataclass
class _Ranked:
    """What a ranking run (`_rank`) hands back: its records, its work, and the best `RESCHEDULED`
    layouts with their best list policies, placements and partitions."""

    m: int
    phases: list[dict]
    solver: dict
    evaluated: int
    judged: int
    actions: int
    rate_schedule: float
    rate_simulate: float
    picks: list[tuple[Layout, ListPolicy | None, str, str]]


def _rank(
    costs: CostTable,
    num_layers: int,
    m: int,
    components: Sequence[str],
    budget: SearchBudget,
    deadline: Deadline,
    seed: int,
    placement_ok: PlacementFilter | None,
    progress: ProgressFn | None = None,
) -> _Ranked:
    """Phases 1-4 on `m` micro-batches (a shortened run: `ranking_microbatches`). Module level: it runs
    in a worker process beside the classic baselines (`search_plan`), there without progress."""
    r = _Search(costs, num_layers, m, components, budget, deadline, seed, progress, placement_ok)
    _heuristic_phases(r)
    best = sorted(
        (c for c in r.by_layout_own.values() if c.result is not None),
        key=lambda c: (not c.feasible, c.step_s, c.layout.num_stages, c.label),
    )[:RESCHEDULED]
    return _Ranked(
        m, r.phases, r.solver, r.evaluated, r.judged, r.actions, r.rate_schedule, r.rate_simulate,
        [(c.layout, c.list_policy, c.placement, c.partition) for c in best],
    )  # fmt: skip


def _list_schedule_codes(layout: Layout, costs: CostTable, m: int, policy: ListPolicy) -> tuple[list, float]:
    """`list_schedule` in a worker: its programs as compact codes (`_decoded`), which a process pipe
    carries many times faster than a list of `Action`s, and its estimate."""
    programs, est = list_schedule(layout, costs, m, policy)
    codes = [
        (array.array("i", [a.stage for a in p]).tobytes(), "".join(a.op for a in p), array.array("i", [a.mb for a in p]).tobytes())
        for p in programs
    ]  # fmt: skip
    return codes, est


def _decoded(got: tuple[list, float]) -> tuple[Programs, float]:
    """The programs and estimate `_list_schedule_codes` encoded."""
    codes, est = got
    programs: Programs = []
    for stages, ops, mbs in codes:
        s, b = array.array("i"), array.array("i")
        s.frombytes(stages)
        b.frombytes(mbs)
        # Action(stage, op, mb) without its Python-level __new__: the same tuples, built in C
        programs.append(list(map(tuple.__new__, itertools.repeat(Action), zip(s, ops, b, strict=True))))
    return programs, est


def _heuristic_phases(s: _Search) -> None:
    """Phases 1-4 (module docstring) on `s`."""
    s.progress("placement x partition", 0.15)
    top = s.phase_layouts()
    s.progress("schedule policies", 0.35)
    s.phase_policies(top)
    s.progress("partition refinement", 0.5)
    s.phase_refine_partition()
    s.progress("irregular placement", 0.65)
    s.phase_irregular()


def check_components(components: Sequence[str]) -> None:
    """Raise one InputError line for a `--search` component that is not one of `ALL_COMPONENTS`."""
    unknown = set(components) - set(ALL_COMPONENTS)
    if unknown:
        raise InputError(
            f"--search = {','.join(components)}: unknown component {sorted(unknown)[0]!r};"
            f" use a comma list of {', '.join(ALL_COMPONENTS)}"
        )


def search_plan(
    costs: CostTable,
    num_layers: int,
    num_microbatches: int,
    *,
    components: Sequence[str] = ALL_COMPONENTS,
    time_limit_s: float = 5.0,
    seed: int = 0,
    progress: ProgressFn | None = None,
    baselines: Mapping[str, Candidate] | None = None,
    placement_ok: PlacementFilter | None = None,
    budget: SearchBudget | None = None,
    deadline: Deadline | None = None,
) -> SearchOutcome:
    """Find the best plan for `costs` (P devices = costs.num_devices).

    `budget` (default `SearchBudget.for_time_limit(time_limit_s)`) fixes the work, so the plan
    is reproducible; `deadline` (default `time_limit_s` from now) is the hard wall-clock abort.
    `baselines` are the classic candidates (computed when None; `{}` searches without them: the
    plan then comes from the search's own policies only).
    """
    check_components(components)
    if costs.num_devices > num_layers:
        raise InputError(f"--pp = {costs.num_devices}: more devices than the model's {num_layers} layers; lower --pp")
    t_start = time.perf_counter()
    budget = budget or SearchBudget.for_time_limit(time_limit_s)
    deadline = deadline or Deadline.after(time_limit_s)
    s = _Search(costs, num_layers, num_microbatches, components, budget, deadline, seed, progress, placement_ok)
    m_rank = ranking_microbatches(s.p, num_microbatches, budget.ranking_actions)
    ranking: Background | None = None
    if m_rank < num_microbatches:
        # a big pipeline: its ranking run goes to a worker while this process computes the classic
        # baselines, which cost about as much at this size (in turn, with progress, with one worker)
        job = functools.partial(
            _rank, costs, num_layers, m_rank, tuple(components), budget, deadline, seed, placement_ok
        )
        ranking = Background(job, inline=functools.partial(job, progress=progress))
    with ranking or contextlib.nullcontext():
        s.progress("classic baselines", 0.05)
        if baselines is None:
            baselines = classic_baselines(costs, num_microbatches)
        # classic plans are candidates (and CP-SAT hints) only when the search may choose everything
        classic_ok = set(components) == set(ALL_COMPONENTS)
        if classic_ok:
            for cand in baselines.values():
                if s.placement_ok(cand.layout.stage_device) and cand.origin != SEEDED:
                    s.consider(cand)
        if ranking is not None:
            s.phase_full_length(ranking.result(), deadline)
        else:
            _heuristic_phases(s)
    s.progress("critical path", 0.72)
    s.phase_critical_path()
    s.progress("cp-sat order", 0.8)
    s.phase_cpsat_order()
    s.progress("seeded layouts", 0.9)
    if classic_ok:
        s.phase_seeded([c for c in baselines.values() if c.origin == SEEDED])
    best = s.best
    if classic_ok:
        for cand in baselines.values():
            if s.placement_ok(cand.layout.stage_device) and (best is None or better(cand, best)):
                best = cand
    if best is None:  # aborted before any candidate: the first allowed placement, list-scheduled
        allowed = [(label, sd) for label, sd in candidate_placements(s.p, num_layers, 1) if s.placement_ok(sd)]
        if not allowed:
            raise InputError("no stage -> device placement passes the target's filter; choose another --target")
        label, sd = allowed[0]
        layout = Layout(uniform_bounds(num_layers, len(sd)), sd, s.p)
        best = s.judge(s.schedule(layout, s.portfolio[0], label, "uniform"))
    s.solver["order"] = s.plan_bound(best)
    s.progress("done", 1.0)
    return SearchOutcome(
        best=best,
        baselines=baselines,
        phases=s.phases,
        solver=s.solver,
        evaluated=s.evaluated,
        wall_s=time.perf_counter() - t_start,
        aborted=deadline.aborted,
        abort_phase=deadline.where,
        budget=budget,
    )
