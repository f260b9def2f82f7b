"""The outer pipeline search: head-chunk variants, a target runtime's rules and recomputation around
the generator, for one pipeline shape (PP devices, M micro-batches).

Contract: `search_pipeline(model, tables, pp=..., num_microbatches=..., budget=..., deadline=...)`
needs nothing but a model, a cost-table builder (`cost.source.CostTables`), the pipeline shape and a
budget, so a whole-configuration search (TP x PP x DP ...) can call it once per configuration.
It returns the best candidate with its record; the caller judges it (`judge.simulate.judged`)
and writes the plan.

Data flow: `CostTables` -> one cost table per head variant -> `search.generator.search_plan` on
each (the budget split evenly) -> with a target other than adaptis, the same again within its
rules when the best plan breaks them -> `search.recompute` (`recompute="auto"`) -> the runtime's
own order (a target that runs its own schedule). `classic_pipeline` is the same inputs' classic
strategy. Imports `cost`, `judge`, `schedules`, `inputs` and `search`; never `planfile`,
`app.plan` or the CLI; no solver at import time.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from adaptis_plan.core import ALL_COMPONENTS, CostTable, ProgressFn
from adaptis_plan.cost.recompute import recomputes
from adaptis_plan.cost.source import CostTables
from adaptis_plan.errors import InputError
from adaptis_plan.judge.bound import lower_bound
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.schedules.targets import Target, get_target
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import (
    Candidate,
    LazyBaselines,
    PlacementFilter,
    SearchOutcome,
    better,
    classic_candidate,
    search_plan,
)
from adaptis_plan.search.head_chunks import head_split_options
from adaptis_plan.search.recompute import (
    cannot_win,
    memory_may_bind,
    recompute_report,
    result_summary,
    search_recompute,
    why_not_recompute,
)
from adaptis_plan.search.workers import pmap, workers
from adaptis_plan.spec.config import PipelineSettings
from adaptis_plan.spec.model import ModelSpec

#: A model variant (its head split or not) and its cost table.
Variant = tuple[ModelSpec, CostTable]


@dataclass(frozen=True)
class PipelineOptions:
    """What the outer search may vary, and the runtime it plans for.

    `head_chunks`: None tries the unsplit head and, when it outweighs a stage, one split
    (`search.head_chunks.head_split_options`); 1 never splits; k > 1 plans with k chunks.
    `recompute`: "auto" chooses per stage (the builder's `default_mode` must then be "none");
    any other mode is the builder's own. `target`: the runtime (`schedules.targets`). `classic`:
    classic plans (strategy, partition, stages per device) among the baselines besides every
    strategy's default (`generator.classic_baselines`), as candidates and hints of the search; None:
    the deepest interleaving the layers allow (`deep_classic`), except on a big pipeline (more than
    `SearchBudget.ranking_actions` actions at one stage per device).
    """

    components: tuple[str, ...] = ALL_COMPONENTS
    seed: int = 0
    head_chunks: int | None = None
    recompute: str = "none"
    target: str = "adaptis"
    classic: tuple[tuple[str, str, int], ...] | None = None

    @classmethod
    def of(
        cls,
        pipeline: PipelineSettings,
        seed: int,
        recompute: str,
        classic: tuple[tuple[str, str, int], ...] | None = None,
    ) -> PipelineOptions:
        """The options of a request's pipeline section (`spec.config.PipelineSettings`) and search seed,
        under `recompute` (the request's mode as resolved for this search)."""
        return cls(pipeline.components, seed, pipeline.head_chunks, recompute, pipeline.target, classic)


#: the deepest interleaving `deep_classic` seeds: one layer per stage at pp 16 on a 128-layer model
#: (Llama 3 405B's layout), where the bubble of Interleaved1F1B falls as 1 / degree
MAX_SEED_CHUNKS = 8


def deep_classic(num_layers: int, pp: int) -> tuple[tuple[str, str, int], ...]:
    """Interleaved1F1B and InterleavedZeroBubble at the most stages per device the layers allow (up to
    `MAX_SEED_CHUNKS`), on Megatron's uniform split where it has a decoder layer for every stage, else
    on ends-as-layers (torchtitan's default, the embedding and the head counted as layers); none where
    that is 2 or fewer (the default baselines' degree). The search's own placements stop at
    `SearchBudget.max_chunks`: a runtime's deeper interleaving must not beat the adaptive plan unseen."""
    k = min(MAX_SEED_CHUNKS, num_layers // pp)
    if k <= 2:
        return ()
    return interleaved_classic("uniform" if pp * k <= num_layers - 2 else "ends-as-layers", k)


def interleaved_classic(partition: str, stages_per_device: int) -> tuple[tuple[str, str, int], ...]:
    """`PipelineOptions.classic` entries for Interleaved1F1B (1F1B at one stage per device) and
    InterleavedZeroBubble on `partition` at `stages_per_device`."""
    names = ("Interleaved1F1B" if stages_per_device > 1 else "1F1B", "InterleavedZeroBubble")
    return tuple((name, partition, stages_per_device) for name in names)


@dataclass
class PipelinePlan:
    """The chosen candidate, the model and costs it was made on, the classic baselines (unsplit
    head, the builder's `default_mode`), and the record that goes into the plan's `search` field.

    `modes` is one recompute mode per layer; `recompute_info` what `--recompute auto` tried (empty
    otherwise); `unrestricted` the best plan without the target's rules (None for adaptis).
    """

    strategy: str
    model: ModelSpec
    costs: CostTable
    best: Candidate
    modes: list[str]
    baselines: Mapping[str, Candidate]
    info: dict = field(default_factory=dict)
    recompute_info: dict = field(default_factory=dict)
    unrestricted: SimResult | None = None


def forced_head_split(model: ModelSpec, head_chunks: int | None, pp: int, target: Target) -> ModelSpec | None:
    """`model` with its head in `head_chunks` vocabulary chunks (None when it is not to be split);
    refused in one line where `target` cannot run a split head."""
    if head_chunks is None or head_chunks <= 1:
        return None
    from adaptis_plan.inputs.models.transform import split_head

    forced = split_head(model, head_chunks)
    if pp > forced.num_layers:
        raise InputError(f"--pp = {pp}: more devices than the {forced.num_layers} layers; lower --pp")
    if (why := target.head_problem(forced.num_head_chunks)) is not None:
        raise InputError(
            f"--head-chunks = {head_chunks} with --target {target.name}: {why}; use --head-chunks 1 or --target adaptis"
        )
    return forced


def _prepare(
    model: ModelSpec,
    tables: CostTables,
    pp: int,
    num_microbatches: int,
    head_chunks: int | None,
    target_name: str,
    classic: tuple[tuple[str, str, int], ...] = (),
) -> tuple[CostTable, ModelSpec | None, Target, Mapping[str, Candidate]]:
    """The unsplit model's costs, the forced head split, the target and the classic baselines (with
    `classic`'s, `PipelineOptions`)."""
    costs = tables.table(model)
    target = get_target(target_name)
    forced = forced_head_split(model, head_chunks, pp, target)
    return costs, forced, target, LazyBaselines(costs, num_microbatches, classic)


def search_pipeline(
    model: ModelSpec,
    tables: CostTables,
    *,
    pp: int,
    num_microbatches: int,
    budget: SearchBudget,
    deadline: Deadline,
    options: PipelineOptions = PipelineOptions(),
    progress: ProgressFn | None = None,
) -> PipelinePlan:
    """The best adaptive plan for `model` on `pp` devices with `num_microbatches` micro-batches.

    The search gets all of `budget` (with a target other than adaptis, split by
    `budget.target_share` between the unrestricted search and the one within the target's rules).
    Recompute "auto" starts from exactly `--recompute none`'s search; where memory binds, it then
    also runs the forced modes' searches that their lower bounds do not rule out, each on the same
    budget, and the per-stage candidates on `budget.recompute_share` of it (`_auto_recompute`): it
    can do up to 3 + `recompute_share` times the work of a forced mode. `baselines` in the result
    are the classic plans in `tables.default_mode` (no recomputation for auto), whatever is chosen.
    """
    classic = options.classic
    if classic is None:  # not on a big pipeline, where two more classic plans cost seconds
        big = 3 * pp * num_microbatches > budget.ranking_actions
        classic = () if big else deep_classic(model.num_layers, pp)
        options = dataclasses.replace(options, classic=classic)
    costs, forced, target, baselines = _prepare(
        model, tables, pp, num_microbatches, options.head_chunks, options.target, classic
    )
    shape = _Shape(forced, target, pp, num_microbatches, options, deadline, progress)
    chosen = _mode_search(_variants(tables, model, costs, shape), baselines, shape, budget)
    variants = chosen.variants
    modes = [tables.default_mode] * chosen.model.num_layers
    rc_info: dict = {}
    if options.recompute == "auto":
        chosen, modes, rc_info = _auto_recompute(model, tables, chosen, shape, budget)
    model, costs, outcome = chosen.model, chosen.costs, chosen.outcome
    unrestricted, unrestricted_info = chosen.unrestricted, chosen.unrestricted_info
    best = _final(chosen, modes, shape)
    info = {
        "source": best.label,
        "plan": best.describe(),
        "components": list(options.components),
        "phases": outcome.phases,
        "solver": outcome.solver,
        "candidates_evaluated": outcome.evaluated,
        "head_chunks": model.num_head_chunks,
        "head_chunk_options": [m.num_head_chunks for m, _ in variants],
        "seed": options.seed,
        "costs": tables.source,
        "budget": budget.summary(),
        "aborted": deadline.aborted,
        "abort_phase": deadline.where,
    }
    _record_target(info, target, unrestricted, unrestricted_info)
    info["recompute"] = recompute_record(
        options.recompute, modes, rc_info, model, costs, tables, best, num_microbatches
    )
    return PipelinePlan("adaptive", model, costs, best, modes, baselines, info, rc_info, unrestricted)


def classic_pipeline(
    model: ModelSpec,
    tables: CostTables,
    strategy: str,
    *,
    pp: int,
    num_microbatches: int,
    partition: str | None = None,
    stages_per_device: int | None = None,
    head_chunks: int | None = None,
    target: str = "adaptis",
) -> PipelinePlan:
    """The classic `strategy` (torch's name) on the same inputs, refused when `target` cannot run it."""
    costs, forced, tgt, baselines = _prepare(model, tables, pp, num_microbatches, head_chunks, target)
    if forced is not None:
        model, costs = forced, tables.table(forced)
    modes = [tables.default_mode] * model.num_layers
    best = classic_candidate(costs, num_microbatches, strategy, partition or "uniform", stages_per_device)
    why = tgt.placement_problem(best.layout.stage_device, pp)
    if why is not None:
        raise InputError(
            f"--strategy {strategy} with --target {tgt.name}: {why}; choose a strategy {tgt.runtime} can"
            " run, or --strategy adaptive"
        )
    info = {
        "source": best.label,
        "partition": partition or "uniform",
        "head_chunks": model.num_head_chunks,
        "costs": tables.source,
    }
    _record_target(info, tgt, None, {})
    info["recompute"] = recompute_record(tables.default_mode, modes, {}, model, costs, tables, best, num_microbatches)
    return PipelinePlan(strategy, model, costs, best, modes, baselines, info)


def _record_target(info: dict, target: Target, unrestricted: SimResult | None, where: dict) -> None:
    if target.name != "adaptis":
        info["target"] = target.name
        if unrestricted is not None:
            info["unrestricted"] = {"step_time_s": unrestricted.step_time_s, **where}


def _search_variants(
    variants: Sequence[Variant],
    num_microbatches: int,
    baselines: Mapping[str, Candidate],
    options: PipelineOptions,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    placement_ok: PlacementFilter | None,
) -> tuple[int, SearchOutcome]:
    """(index of the best variant, its search outcome): the generator on each variant in turn, each
    with an equal share of `budget` under one `deadline`; the classic baselines go with the first
    (unsplit) one. `placement_ok` restricts every candidate layout (a target's rules)."""
    share = budget.scaled(1.0 / len(variants))
    best_k, outcome = 0, None
    for k, (m, costs) in enumerate(variants):
        got = search_plan(
            costs,
            m.num_layers,
            num_microbatches,
            components=options.components,
            seed=options.seed,
            progress=progress,
            baselines=baselines if k == 0 else {},
            placement_ok=placement_ok,
            budget=share,
            deadline=deadline,
        )
        if outcome is None or better(got.best, outcome.best):
            best_k, outcome = k, got
    assert outcome is not None
    return best_k, outcome


@dataclass(frozen=True)
class _Shape:
    """What every search of one `search_pipeline` call shares besides the cost tables and budget."""

    forced: ModelSpec | None
    target: Target
    pp: int
    num_microbatches: int
    options: PipelineOptions
    deadline: Deadline
    progress: ProgressFn | None


@dataclass
class _ModeSearch:
    """One uniform recompute mode's search, what `--recompute MODE` runs: the model variants (head
    splits) and their tables, the classic plans on the unsplit table, the best variant and its
    outcome, and with a target other than adaptis the best plan without its rules."""

    variants: list[Variant]
    baselines: Mapping[str, Candidate]
    k_best: int
    outcome: SearchOutcome
    unrestricted: SimResult | None = None
    unrestricted_info: dict = field(default_factory=dict)
    final: Candidate | None = None  # `_final`'s, once computed

    @property
    def model(self) -> ModelSpec:
        return self.variants[self.k_best][0]

    @property
    def costs(self) -> CostTable:
        return self.variants[self.k_best][1]


def _variants(tables: CostTables, model: ModelSpec, costs: CostTable, shape: _Shape) -> list[Variant]:
    """The model variants one mode's search plans, with their tables in `tables.default_mode`
    (`costs`: the unsplit model's): the forced head split alone, or the model and its head splits."""
    if shape.forced is not None:
        return [(shape.forced, tables.table(shape.forced))]
    variants = [(model, costs)]
    if shape.options.head_chunks is None and "partition" in shape.options.components:
        variants += [(v, tables.table(v)) for v in head_split_options(model, costs)]
    return variants


def _mode_search(
    variants: list[Variant], baselines: Mapping[str, Candidate], shape: _Shape, budget: SearchBudget
) -> _ModeSearch:
    """One mode's search on `budget` (`variants` from `_variants`): each variant, the classic plans
    with the unsplit one (`baselines`), then within the target's rules when the best breaks them."""
    options, pp, m = shape.options, shape.pp, shape.num_microbatches
    target = shape.target
    # classic plans are candidates only on the cost table they were built on (the unsplit head)
    searched = baselines if shape.forced is None else {}
    restricted = target.name != "adaptis"
    share = budget.scaled(budget.target_share) if restricted else budget

    def run(chosen: Sequence[Variant], placement_ok: PlacementFilter | None) -> tuple[int, SearchOutcome]:
        return _search_variants(chosen, m, searched, options, share, shape.deadline, shape.progress, placement_ok)

    k_best, outcome = run(variants, None)
    got = _ModeSearch(variants, baselines, k_best, outcome)
    if restricted:
        # what the restriction costs: the same search without it, beside the restricted one
        best_model = variants[k_best][0]
        got.unrestricted = outcome.best.result or simulate(
            outcome.best.layout, variants[k_best][1], outcome.best.programs, m
        )
        got.unrestricted_info = {
            "stage_device": list(outcome.best.layout.stage_device),
            "head_chunks": best_model.num_head_chunks,
        }
        if target.problem(outcome.best.layout.stage_device, pp, best_model.num_head_chunks) is not None:
            # the best plan needs what the target cannot run: search within its rules
            runnable = [k for k, (v, _) in enumerate(variants) if target.head_problem(v.num_head_chunks) is None]
            k_run, got.outcome = run([variants[k] for k in runnable], target.placement_filter(pp))
            got.k_best = runnable[k_run]
    return got


def _final(search: _ModeSearch, modes: Sequence[str], shape: _Shape) -> Candidate:
    """The plan `search` gives: its best, or for a runtime that runs its own schedule that schedule's
    order on the best layout (or one of the runtime's classic plans, when `modes` are uniform: those
    were costed in that mode)."""
    if search.final is None:
        best, target, pp = search.outcome.best, shape.target, shape.pp
        if target.runtime_schedule(best.layout.num_stages // pp) is not None:
            same_costs = search.baselines if len(set(modes)) == 1 else {}
            best = _with_runtime_order(target, best, search.costs, same_costs, shape.num_microbatches)
        search.final = best
    return search.final


#: The forced modes recompute "auto" also searches where memory binds, likeliest to fit first.
FORCED_MODES = ("full", "selective")


def _auto_recompute(
    model: ModelSpec, tables: CostTables, plain: _ModeSearch, shape: _Shape, budget: SearchBudget
) -> tuple[_ModeSearch, list[str], dict]:
    """Recompute "auto" after `plain` (exactly `--recompute none`'s search): (the kept search, one
    mode per layer of its model, the record).

    When memory cannot bind (every classic plan fits) or no device of the plain plan is near its
    limit, nothing more is searched. Otherwise each forced mode whose lower bound leaves room for a
    faster plan is searched as `--recompute MODE` searches it (its head variants and classic plans,
    the same `budget`; under an expired `deadline` that search ends at once with its classic plans,
    the forced mode's own fallback), then the per-stage recompute lists of `search.recompute` on
    the plain search's model share `budget.recompute_share` of the work; the fastest feasible plan
    is kept. So auto is never slower than a forced mode on the same budget, and plans wherever one
    does, as long as the time limit does not cut the searches short.
    """
    m, options, deadline = shape.num_microbatches, shape.options, shape.deadline
    none = ["none"] * plain.model.num_layers
    if not memory_may_bind(plain.baselines):
        return plain, none, {"reason": "every classic plan fits memory (GPipe included): memory does not bind"}
    best, best_modes, best_label = plain, none, ""
    incumbent = _final(plain, none, shape)  # what is compared: the plan each search gives
    rows: list[dict] = []
    cannot: dict[str, float] = {}
    found: list[str] = []  # forced modes whose search found a plan that fits
    if why_not_recompute(plain.outcome, plain.costs)[1] is None:
        forced = []
        for mode in FORCED_MODES:
            mode_tables = dataclasses.replace(tables, default_mode=mode)
            variants = _variants(mode_tables, model, mode_tables.table(model), shape)
            forced.append((mode, variants, min(lower_bound(table, shape.pp, m) for _, table in variants)))
        # the incumbent only improves: a mode that cannot beat the plain plan is never searched, and the
        # others may run side by side; which of them count is decided below, in order, as one by one
        ahead = [(mode, variants) for mode, variants, bound in forced if not cannot_win(bound, incumbent)]
        done = {}
        if len(ahead) > 1 and workers() > 1:
            quiet = dataclasses.replace(shape, progress=None)  # a worker never prints
            found_plans = pmap(functools.partial(_forced_search, quiet, budget), ahead)
            done = dict(zip([mode for mode, _ in ahead], found_plans, strict=True))
        for mode, variants, bound in forced:
            label = f"{mode} everywhere"
            if cannot_win(bound, incumbent):
                cannot[label] = bound
                continue
            got = done.get(mode) or _forced_search(shape, budget, (mode, variants))
            got_modes = [mode] * got.model.num_layers
            cand = _final(got, got_modes, shape)
            assert cand.result is not None
            blocks = sum(recomputes(layer.kind) for layer in got.model.layers)
            rows.append({"label": label, **result_summary(cand.result), "recomputed_layers": blocks})
            if cand.feasible:
                found.append(mode)
            if cand.feasible and better(cand, incumbent):
                best, best_modes, best_label, incumbent = got, got_modes, label, cand
    restrict = shape.target.placement_filter(shape.pp) if shape.target.name != "adaptis" else None
    rc = search_recompute(
        functools.partial(tables.table, plain.model),
        plain.costs,
        plain.outcome,
        [layer.kind for layer in plain.model.layers],
        m,
        components=options.components,
        seed=options.seed,
        budget=budget.scaled(budget.recompute_share),
        deadline=deadline,
        progress=shape.progress,
        placement_ok=restrict,
        beat=incumbent,
        searched_modes=found,
    )
    info = rc.info
    info["candidates"] = rows + info["candidates"]
    if cannot:
        info["cannot_win"] = {**cannot, **info.get("cannot_win", {})}
    if rc.outcome is not plain.outcome:
        kept = _ModeSearch([(plain.model, rc.costs)], plain.baselines, 0, rc.outcome)
        kept.unrestricted, kept.unrestricted_info = plain.unrestricted, plain.unrestricted_info
        if better(_final(kept, rc.modes, shape), incumbent):
            return kept, rc.modes, info
        info.pop("chosen", None)
    if best is not plain:
        info["chosen"] = best_label
        info.pop("reason", None)
        return best, best_modes, info
    info.setdefault("reason", "no candidate gave a faster plan than the one without recomputation")
    return plain, none, info


def _forced_search(shape: _Shape, budget: SearchBudget, job: tuple[str, list[Variant]]) -> _ModeSearch:
    """`--recompute MODE`'s search of `job` = (mode, its model variants and tables), as recompute auto
    runs it (`_auto_recompute`; module level, for the worker processes)."""
    mode, variants = job
    model, costs = variants[0]
    # the classic plans apply to the unsplit head only (a forced split searches without them)
    classic = shape.options.classic or ()  # set by `search` before any job
    baselines = LazyBaselines(costs, shape.num_microbatches, classic) if shape.forced is None else {}
    return _mode_search(variants, baselines, _labelled(shape, f"{mode} everywhere"), budget)


def _labelled(shape: _Shape, label: str) -> _Shape:
    """`shape` with its progress messages prefixed by the recompute candidate they come from."""
    progress = shape.progress
    if progress is None:
        return shape
    return dataclasses.replace(shape, progress=lambda msg, frac: progress(f"recompute ({label}): {msg}", frac))


def _with_runtime_order(
    target: Target, best: Candidate, costs: CostTable, baselines: Mapping[str, Candidate], num_microbatches: int
) -> Candidate:
    """For a runtime that runs its own schedule (Megatron): the searched layout with that schedule's
    order, or that schedule's classic plans (uniform / balanced partition) when one of them is
    better; the prediction is then what the runtime runs."""
    from adaptis_plan.schedules import get_spec

    pp = best.layout.num_devices
    name = target.runtime_schedule(best.layout.num_stages // pp)
    if name is None:
        raise ValueError(
            f"target {target} runs no schedule of its own at {best.layout.num_stages // pp} stages per device"
        )
    programs = get_spec(name).build(best.layout.stage_device, pp, num_microbatches)
    result = simulate(best.layout, costs, programs, num_microbatches)
    # a seeded classic layout (say InterleavedZeroBubble's) keeps its layout but not its order: the
    # plan is labelled by the order it runs, as `classic_baselines` labels a classic plan
    stages_per_device = best.layout.num_stages // pp
    source = best.source
    if source != "adaptive":
        source = name + (
            f" x{stages_per_device}" if stages_per_device != get_spec(name).default_stages_per_device else ""
        )
        source += "" if best.partition in ("", "uniform") else f"/{best.partition}"
    chosen = dataclasses.replace(
        best,
        programs=programs,
        source=source,
        estimate_s=result.step_time_s,
        result=result,
        policy=f"{target.runtime}'s {name} order",
        hint=None,
        list_policy=None,
        origin=f"{target.runtime}'s {name} order",
    )
    for cand in baselines.values():
        ok = target.placement_problem(cand.layout.stage_device, pp) is None
        same = target.runtime_schedule(cand.layout.num_stages // pp) == cand.policy  # a classic plan's schedule
        if ok and same and cand.result is not None and better(cand, chosen):
            chosen = cand
    return chosen


def recompute_record(
    requested: str,
    modes: list[str],
    rc_info: dict,
    model: ModelSpec,
    costs: CostTable,
    tables: CostTables,
    best: Candidate,
    num_microbatches: int,
) -> dict:
    """The plan's `search.recompute`: what was asked, which stages recompute, the compute it adds,
    and (auto) what was tried against the best plan without recomputation."""
    info: dict = {"requested": requested, **rc_info}
    if any(m != "none" for m in modes):
        plain = tables.table(model, ["none"] * model.num_layers)
        kinds = [layer.kind for layer in model.layers]
        info.update(recompute_report(modes, costs, plain, best.layout, kinds, num_microbatches))
    return info
