"""Recomputation as a search decision (`plan --recompute auto`): which stages recompute, and the
best plan over those choices.

Data flow: the best plan without recomputation (exactly `--recompute none`'s search) ->
`why_not_recompute` / `memory_bound_devices` (does memory bind at all?) -> the caller
(`search.driver`) runs the forced modes' own searches where their lower bounds leave room
(`cannot_win`) -> `recompute_candidates` (per-layer recompute lists, full or selective: the
memory-bound devices' stages heaviest first, some or all of them, and the model's blocks heaviest
first, whatever the layout) -> `table_for` (the caller's cost-table builder, bound to the model)
builds one cost table per list -> `search_recompute` drops the lists no plan on which can beat
the best so far (lower bounds), runs the generator (`search_plan`) on the others, makes every
stage of each winner run one mode, re-simulates it on that table, and keeps the plan that
simulates fastest (the plain plan included). An orchestration layer outside the generator, called
by `search.driver`. Imports `core`, `judge`, `cost.recompute` and the generator; no solver at
import time.

Why these candidates. Recomputing a layer costs one more forward (full) or attention core
(selective) per micro-batch, and frees its activations between F and I: it pays off only where
memory limits how many micro-batches a device keeps in flight, and there it should free the
bytes that fill the device at its peak first: those of the stages with the most micro-batches in
flight (the early stages of the pipeline, under every schedule), times their activation size.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptis_plan.core import CostTable, Layout, Programs, ProgressFn
from adaptis_plan.cost.recompute import check_modes, recomputes, stage_recompute, strongest_per_stage
from adaptis_plan.judge.bound import lower_bound
from adaptis_plan.judge.semantics import stage_costs
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import (
    Candidate,
    PlacementFilter,
    SearchOutcome,
    better,
    search_plan,
)

# A candidate recompute list (one mode per layer) -> its cost table (`cost.source.CostTables.table` of one model).
TableFor = Callable[[Sequence[str]], CostTable]

# Fractions of the memory-bound stages, and of the blocks (heaviest first) recomputed in full,
# besides all of them.
HEAVIEST_FRACTIONS = (0.25, 0.5, 0.75)
# A plan this close to its own lower bound cannot gain more from recomputation (which only adds work).
NEAR_BOUND = 0.01
# A device whose peak reaches this fraction of its memory limit counts as memory-bound.
BOUND_FRACTION = 0.9
# The least work one recompute candidate's search gets (list-scheduled actions; the default
# search, `--time-limit 5`, has 120,000): below it a search finds too little to judge a candidate.
MIN_CANDIDATE_ACTIONS = 60_000


@dataclass
class RecomputeOutcome:
    """The kept plan: `modes` per layer (every stage uniform), its cost table and search outcome,
    and `info` (JSON-ready: why recomputation was or was not tried, what each candidate gave)."""

    modes: list[str]
    costs: CostTable
    outcome: SearchOutcome
    info: dict = field(default_factory=dict)


def memory_may_bind(baselines: Mapping[str, Candidate]) -> bool:
    """Whether memory can limit the schedule at all: some classic plan runs out of memory. When
    every one fits, GPipe included (all micro-batches in flight), no order is held back by memory."""
    return any(not c.feasible for c in baselines.values())


def memory_bound_devices(layout: Layout, costs: CostTable, result: SimResult) -> list[int]:
    """Devices whose peak comes within `BOUND_FRACTION` of their limit (or over it), or leaves no
    room for one more micro-batch of their heaviest stage: there memory, not compute, decides how
    many micro-batches the schedule keeps in flight (a schedule rarely fills the last few percent:
    its orders admit whole micro-batches of whole stages)."""
    sc = stage_costs(layout, costs)
    bound = []
    for d in range(layout.num_devices):
        stages = layout.stages_of(d)
        if not stages:
            continue
        limit, peak = result.mem_limit_bytes[d], result.peak_memory_bytes[d]
        one_more = max(max(sc.act[s], sc.act_w[s]) for s in stages)
        if peak >= BOUND_FRACTION * limit or peak + one_more > limit:
            bound.append(d)
    return bound


def held_at_peak(layout: Layout, costs: CostTable, programs: Programs, result: SimResult) -> np.ndarray:
    """Activation bytes each stage holds at its device's memory peak (the first one): act for
    every micro-batch past its F and not through its I / B, act_w for those past I awaiting W."""
    sc = stage_costs(layout, costs)
    held = np.zeros(layout.num_stages)
    for d, prog in enumerate(programs):
        if not prog:
            continue
        levels = [level for _, level in result.memory_timeline[d][1:]]
        peak_at = int(np.argmax(levels))
        state: dict[tuple[int, int], str] = {}
        for a in prog[: peak_at + 1]:
            if a.op == "F":
                state[(a.stage, a.mb)] = "act"
            elif a.op == "I":
                state[(a.stage, a.mb)] = "act_w"
            else:  # W or B: nothing of this micro-batch is left
                state.pop((a.stage, a.mb), None)
        for (s, _), what in state.items():
            held[s] += sc.act[s] if what == "act" else sc.act_w[s]
    return held


def recompute_candidates(
    layout: Layout, costs: CostTable, programs: Programs, result: SimResult, kinds: Sequence[str]
) -> list[tuple[str, list[str]]]:
    """(label, one mode per layer) to try, from the best plan without recomputation and the
    model's layers:

    - the memory-bound devices' stages in that plan, heaviest first (by the bytes each holds at
      its device's peak): full recomputation of growing fractions of them, then all of them;
    - the whole model, heaviest first, whatever the layout: a layer's activations stay in flight
      while the micro-batch crosses every later layer and comes back, so under any schedule the
      early layers hold the most (1F1B keeps P - d micro-batches on device d); layers ranked by
      act_bytes x (layers after it + 1), full recomputation of growing fractions, then all;
    - selective recomputation of the memory-bound devices' stages, and of the whole model.

    Listed likeliest first; duplicates and lists that recompute nothing are dropped. The search re-partitions for each
    list, so the layout-free ranking matters: freeing memory lets it choose another layout.
    """
    num_layers = len(kinds)
    bound = set(memory_bound_devices(layout, costs, result))
    held = held_at_peak(layout, costs, programs, result)
    stages = [s for s in range(layout.num_stages) if layout.stage_device[s] in bound]
    stages = [s for s in stages if any(recomputes(kinds[j]) for j in layout.layers(s))]
    stages.sort(key=lambda s: (-held[s], s))
    by_stage = [[j for j in layout.layers(s) if recomputes(kinds[j])] for s in stages]
    blocks = [j for j in range(num_layers) if recomputes(kinds[j])]
    blocks.sort(key=lambda j: (-float(costs.act_bytes[j]) * (num_layers - j), j))
    by_layer = [[j] for j in blocks]

    def modes_for(groups: Sequence[Sequence[int]], mode: str) -> list[str]:
        out = ["none"] * num_layers
        for group in groups:
            for j in group:
                out[j] = mode
        return out

    def fractions(groups: list[list[int]], what: str) -> list[tuple[str, list[str]]]:
        n = len(groups)
        ks = sorted({max(1, math.ceil(q * n)) for q in HEAVIEST_FRACTIONS} - {n})
        return [(f"full, heaviest {k} {what}", modes_for(groups[:k], "full")) for k in ks]

    blocks_part = fractions(by_layer, "of the blocks")
    stages_part = fractions(by_stage, f"of the {len(stages)} memory-bound stages")
    # the likeliest first (when time runs out the rest are skipped): half of the blocks, all of
    # them (= full everywhere: `search.driver` runs the forced modes' own searches first and drops
    # it when that search found a plan), the memory-bound stages, the other fractions, selective
    # last (it frees little: see cost.recompute)
    raw: list[tuple[str, list[str]]] = blocks_part[len(blocks_part) // 2 :][:1]
    raw.append(("full everywhere", modes_for(by_layer, "full")))
    raw.append((f"full, all {len(stages)} memory-bound stages", modes_for(by_stage, "full")))
    raw += blocks_part + stages_part
    raw.append((f"selective, the {len(stages)} memory-bound stages", modes_for(by_stage, "selective")))
    raw.append(("selective everywhere", modes_for(by_layer, "selective")))
    out, seen = [], set()
    for label, modes in raw:
        if tuple(modes) in seen or all(m == "none" for m in modes):
            continue
        seen.add(tuple(modes))
        out.append((label, modes))
    return out


def why_not_recompute(plain: SearchOutcome, plain_costs: CostTable) -> tuple[list[int], str | None]:
    """(the plain plan's memory-bound devices, why no recomputation is worth trying: None when some
    may be). Recomputation only adds work; it can pay only where memory holds the plan back."""
    r = plain.best.result
    assert r is not None
    bound = memory_bound_devices(plain.best.layout, plain_costs, r)
    if not bound:
        return bound, f"no device comes within {1 - BOUND_FRACTION:.0%} of its memory limit without recomputation"
    return bound, None


def cannot_win(bound_s: float, best: Candidate | None) -> bool:
    """Whether a cost table with this lower bound holds no plan faster than `best` (when feasible)."""
    return best is not None and best.feasible and bound_s >= best.step_s


def search_recompute(
    table_for: TableFor,
    plain_costs: CostTable,
    plain: SearchOutcome,
    kinds: Sequence[str],
    num_microbatches: int,
    *,
    components: Sequence[str],
    seed: int,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None = None,
    placement_ok: PlacementFilter | None = None,
    beat: Candidate | None = None,
    searched_modes: Sequence[str] = (),
) -> RecomputeOutcome:
    """The best plan over `plain` (the generator's outcome on `plain_costs`, no recomputation) and
    the per-stage recompute lists of `recompute_candidates`, in order, each searched with an equal
    share of `budget`'s work (so the outcome does not depend on the machine); lists the `deadline`
    leaves no time for are skipped (`info["skipped"]`, and the deadline records the abort).

    Nothing is tried when no device is memory-bound (`why_not_recompute`) or the plain plan is
    within `NEAR_BOUND` of its lower bound; `info["reason"]` says which. A list whose table's lower
    bound is no less than the best feasible step so far, `beat`'s included (a plan found elsewhere,
    the forced modes' searches), is not searched: no plan on it can win (`info["cannot_win"]`). Each
    candidate's winner is made stage-uniform (`strongest_per_stage`) and re-simulated on that table
    before it is compared; only one that fits memory can replace the plain plan (when none fits,
    the plain plan is what is reported). `searched_modes` leaves out the lists that recompute
    every block in one of these modes (the caller's own searches of those forced modes found plans).
    (One function: past its signature and this description, its body is some 70 lines.)
    """
    none = ["none"] * len(kinds)
    best = RecomputeOutcome(none, plain_costs, plain)
    r = plain.best.result
    assert r is not None
    bound, why = why_not_recompute(plain, plain_costs)
    info: dict = {
        "memory_bound_devices": bound,
        "without": result_summary(r),
        "candidates": [],
    }
    best.info = info
    if why is not None:
        info["reason"] = why
        return best
    if r.fits_memory and r.step_time_s <= r.lower_bound_s * (1 + NEAR_BOUND):
        info["reason"] = f"the plan without recomputation is within {NEAR_BOUND:.0%} of its lower bound"
        return best
    cands = recompute_candidates(plain.best.layout, plain_costs, plain.best.programs, r, kinds)
    cands = [(label, modes) for label, modes in cands if _uniform(modes, kinds) not in searched_modes]
    incumbent = beat if beat is not None and better(beat, plain.best) else plain.best
    tables = [table_for(modes) for _, modes in cands]
    num_devices = plain.best.layout.num_devices
    bounds = [lower_bound(t, num_devices, num_microbatches) for t in tables]
    runnable = [n for n, lb in enumerate(bounds) if not cannot_win(lb, incumbent)]
    if len(runnable) < len(cands):
        info["cannot_win"] = {cands[n][0]: bounds[n] for n in range(len(cands)) if n not in runnable}
    # each candidate gets at least MIN_CANDIDATE_ACTIONS of work; the budget decides how many of
    # the likeliest are tried (the rest are listed as not tried)
    runs = min(len(runnable), max(1, budget.schedule_actions // MIN_CANDIDATE_ACTIONS))
    if runs < len(runnable):
        info["not_tried"] = [cands[n][0] for n in runnable[runs:]]
        runnable = runnable[:runs]
    share = budget.scaled(1.0 / max(len(runnable), 1))
    for k, n in enumerate(runnable):
        (label, modes), costs = cands[n], tables[n]
        if cannot_win(bounds[n], incumbent):  # a faster plan has been found meanwhile
            info.setdefault("cannot_win", {})[label] = bounds[n]
            continue
        if deadline.expired():  # the time is a hard limit: the rest are not tried
            deadline.abort("recompute candidates")
            info["skipped"] = [cands[j][0] for j in runnable[k:]]
            break
        out = search_plan(
            costs,
            len(kinds),
            num_microbatches,
            components=components,
            seed=seed,
            progress=_scaled(progress, k, len(runnable), label),
            placement_ok=placement_ok,
            baselines={},  # the search's own policies: classic plans are judged once, without recomputation
            budget=share,
            deadline=deadline,
        )
        kept_modes, kept_costs, cand = _stage_uniform(out.best, modes, costs, kinds, table_for, num_microbatches)
        out.best = cand
        assert cand.result is not None
        row = {"label": label, **result_summary(cand.result), "recomputed_layers": sum(m != "none" for m in kept_modes)}
        info["candidates"].append(row)
        if cand.feasible and better(cand, best.outcome.best):
            best = RecomputeOutcome(kept_modes, kept_costs, out, info)
            info["chosen"] = label
            if better(cand, incumbent):
                incumbent = cand
    if "chosen" not in info:
        info["reason"] = (
            "no candidate simulated faster than the plan without recomputation"
            if r.fits_memory
            else "no candidate fits memory either"
        )
    return best


def _uniform(modes: Sequence[str], kinds: Sequence[str]) -> str | None:
    """The mode `modes` give every decoder block when it is one (a forced mode's table), else None."""
    blocks = {m for m, k in zip(modes, kinds, strict=True) if recomputes(k)}
    return blocks.pop() if len(blocks) == 1 else None


def _stage_uniform(
    cand: Candidate,
    modes: Sequence[str],
    costs: CostTable,
    kinds: Sequence[str],
    table_for: TableFor,
    num_microbatches: int,
) -> tuple[list[str], CostTable, Candidate]:
    """The candidate with every stage running its strongest mode, re-simulated when that changed
    the table (the same orders: stronger recomputation only keeps fewer bytes, so it still fits)."""
    uniform = strongest_per_stage(cand.layout.bounds, modes, kinds)
    eff = [m if recomputes(k) else "none" for m, k in zip(uniform, kinds, strict=True)]
    before = [m if recomputes(k) else "none" for m, k in zip(modes, kinds, strict=True)]
    if eff == before and cand.result is not None:
        return eff, costs, cand
    check_modes(eff, len(kinds))
    table = table_for(eff)
    result = simulate(cand.layout, table, cand.programs, num_microbatches)
    again = dataclasses.replace(cand, estimate_s=result.step_time_s, result=result)
    return eff, table, again


def recompute_report(
    modes: Sequence[str],
    costs: CostTable,
    plain_costs: CostTable,
    layout: Layout,
    kinds: Sequence[str],
    num_microbatches: int,
) -> dict:
    """What the kept plan recomputes and what that costs: the stages and their modes, and the
    compute it adds per step (seconds summed over devices, and as a share of all the step's work)."""
    per_stage = stage_recompute(layout.bounds, modes, kinds)
    extra = 0.0
    for s, d in enumerate(layout.stage_device):
        lo, hi = layout.bounds[s], layout.bounds[s + 1]
        extra += float(np.sum(costs.i_s[d, lo:hi] - plain_costs.i_s[d, lo:hi]))
    extra *= num_microbatches
    work = 0.0
    for s, d in enumerate(layout.stage_device):
        lo, hi = layout.bounds[s], layout.bounds[s + 1]
        work += float(np.sum(costs.f_s[d, lo:hi] + costs.i_s[d, lo:hi] + costs.w_s[d, lo:hi]))
    work *= num_microbatches
    # "op" (only ever requested, never chosen by auto) is listed where a stage runs it, so plans without
    # it keep their record unchanged
    shown = ("selective", "op", "full") if "op" in per_stage else ("selective", "full")
    return {
        "stages": {mode: [s for s, m in enumerate(per_stage) if m == mode] for mode in shown},
        "extra_compute_s": extra,
        "extra_compute_share": extra / work if work > 0 else 0.0,
    }


def result_summary(r: SimResult) -> dict:
    """A simulated plan's row in `info`: step, bubble, bound, whether it fits."""
    return {
        "step_time_s": r.step_time_s,
        "bubble_ratio": r.bubble_ratio,
        "lower_bound_s": r.lower_bound_s,
        "fits_memory": r.fits_memory,
    }


def _scaled(progress: ProgressFn | None, n: int, total: int, label: str) -> ProgressFn | None:
    if progress is None:
        return None
    return lambda msg, frac: progress(f"recompute ({label}): {msg}", (n + frac) / total)
