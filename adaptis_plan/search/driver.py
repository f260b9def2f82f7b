"""The outer pipeline search: head-chunk variants, a target runtime's rules and recomputation around
the generator, for one pipeline shape (PP devices, M micro-batches).

Contract: `search_pipeline(model, tables, pp=..., num_microbatches=..., budget=..., deadline=...)`
needs nothing but a model, a cost-table builder (`cost.source.CostTables`), the pipeline shape and a
budget, so a whole-configuration search (TP x PP x DP ...) can call it once per configuration.
It returns the best candidate with its record; the caller judges it (`judge.simulate.with_expected`)
and writes the plan.

Data flow: `CostTables` -> one cost table per head variant -> `search.generator.search_plan` on
each (the budget split evenly) -> with a target other than adaptis, the same again within its
rules when the best plan breaks them -> `search.recompute` (`recompute="auto"`) -> the runtime's
own order (a target that runs its own schedule). `classic_pipeline` is the same inputs' classic
strategy. Imports `cost`, `judge`, `schedules`, `inputs` and `search`; never `planfile`,
`usecases` or the CLI; no solver at import time.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from adaptis_plan.core import CostTable, ProgressFn
from adaptis_plan.cost.source import CostTables
from adaptis_plan.errors import InputError
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.schedules.targets import Target, get_target
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import (
    ALL_COMPONENTS,
    Candidate,
    PlacementFilter,
    SearchOutcome,
    better,
    classic_baselines,
    classic_candidate,
    search_plan,
)
from adaptis_plan.search.head_chunks import head_split_options
from adaptis_plan.search.recompute import memory_may_bind, recompute_report, search_recompute
from adaptis_plan.spec.model import ModelSpec

#: A model variant (its head split or not) and its cost table.
Variant = tuple[ModelSpec, CostTable]


@dataclass(frozen=True)
class PipelineOptions:
    """What the outer search may vary, and the runtime it plans for.

    `head_chunks`: None tries the unsplit head and, when it outweighs a stage, one split
    (`search.head_chunks.head_split_options`); 1 never splits; k > 1 plans with k chunks.
    `recompute`: "auto" chooses per stage (the builder's `default_mode` must then be "none");
    any other mode is the builder's own. `target`: the runtime (`schedules.targets`).
    """

    components: tuple[str, ...] = ALL_COMPONENTS
    seed: int = 0
    head_chunks: int | None = None
    recompute: str = "none"
    target: str = "adaptis"


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
    baselines: dict[str, Candidate]
    info: dict = field(default_factory=dict)
    recompute_info: dict = field(default_factory=dict)
    unrestricted: SimResult | None = None


def forced_head_split(model: ModelSpec, head_chunks: int | None, pp: int) -> ModelSpec | None:
    """`model` with its head in `head_chunks` vocabulary chunks (None when it is not to be split)."""
    if head_chunks is None or head_chunks <= 1:
        return None
    from adaptis_plan.inputs.models.transform import split_head

    forced = split_head(model, head_chunks)
    if pp > forced.num_layers:
        raise InputError(f"--pp = {pp}: more devices than the {forced.num_layers} layers; lower --pp")
    return forced


def _prepare(
    model: ModelSpec, tables: CostTables, pp: int, num_microbatches: int, head_chunks: int | None, target_name: str
) -> tuple[CostTable, ModelSpec | None, Target, dict[str, Candidate]]:
    """The unsplit model's costs, the forced head split, the target and the classic baselines."""
    costs = tables.table(model)
    forced = forced_head_split(model, head_chunks, pp)
    target = get_target(target_name)
    if forced is not None and target.head_problem(forced.num_head_chunks):
        raise InputError(
            f"--head-chunks = {head_chunks} with --target {target.name}: {target.head_problem(forced.num_head_chunks)};"
            " use --head-chunks 1 or --target adaptis"
        )
    return costs, forced, target, classic_baselines(costs, model.num_layers, num_microbatches)


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

    With recompute "auto" where memory may bind, `budget.recompute_share` of the work goes to the
    recompute candidates; with a target other than adaptis, the rest is split by
    `budget.target_share` between the unrestricted search and the one within the target's rules.
    """
    costs, forced, target, baselines = _prepare(
        model, tables, pp, num_microbatches, options.head_chunks, options.target
    )
    restricted = target.name != "adaptis"
    if forced is not None:
        variants = [(forced, tables.table(forced))]
    else:
        variants = [(model, costs)]
        if options.head_chunks is None and "partition" in options.components:
            variants += [(m, tables.table(m)) for m in head_split_options(model, costs)]
    # classic plans are candidates only on the cost table they were built on (the unsplit head)
    searched = baselines if forced is None else {}
    auto = options.recompute == "auto"
    rc_share = budget.recompute_share if auto and memory_may_bind(baselines) else 0.0
    plain = budget.scaled(1.0 - rc_share)
    share = plain.scaled(budget.target_share) if restricted else plain

    def run(chosen: Sequence[Variant], placement_ok: PlacementFilter | None) -> tuple[int, SearchOutcome]:
        return _search_variants(chosen, num_microbatches, searched, options, share, deadline, progress, placement_ok)

    k_best, outcome = run(variants, None)
    unrestricted, unrestricted_info = None, {}
    if restricted:
        # what the restriction costs: the same search without it, beside the restricted one
        best_model = variants[k_best][0]
        unrestricted = outcome.best.result or simulate(
            outcome.best.layout, variants[k_best][1], outcome.best.programs, num_microbatches
        )
        unrestricted_info = {
            "stage_device": list(outcome.best.layout.stage_device),
            "head_chunks": best_model.num_head_chunks,
        }
        if target.problem(outcome.best.layout.stage_device, pp, best_model.num_head_chunks) is not None:
            # the best plan needs what the target cannot run: search within its rules
            runnable = [k for k, (m, _) in enumerate(variants) if target.head_problem(m.num_head_chunks) is None]
            k_run, outcome = run([variants[k] for k in runnable], target.placement_filter(pp))
            k_best = runnable[k_run]
    model, costs = variants[k_best]
    modes, rc_info = [tables.default_mode] * model.num_layers, {}
    if auto:
        restrict = target.placement_filter(pp) if restricted else None
        modes, costs, outcome, rc_info = _auto_recompute(
            model, tables, costs, outcome, baselines, num_microbatches, options, restrict, budget.scaled(rc_share),
            deadline, progress,
        )  # fmt: skip
    best = outcome.best
    if target.runtime_schedule(best.layout.num_stages // pp) is not None:
        # the classic baselines were costed without recomputation: they compete only when none is chosen
        same_costs = baselines if all(m == tables.default_mode for m in modes) else {}
        best = _with_runtime_order(target, best, costs, same_costs, num_microbatches)
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
    best = classic_candidate(
        costs, model.num_layers, num_microbatches, strategy, partition or "uniform", stages_per_device
    )
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
    baselines: dict[str, Candidate],
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


def _auto_recompute(
    model: ModelSpec,
    tables: CostTables,
    costs: CostTable,
    outcome: SearchOutcome,
    baselines: dict[str, Candidate],
    num_microbatches: int,
    options: PipelineOptions,
    placement_ok: PlacementFilter | None,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
) -> tuple[list[str], CostTable, SearchOutcome, dict]:
    """Recompute "auto" after the search without recomputation: when memory can bind, the recompute
    candidates (`search.recompute`) share `budget` under `deadline`; when it cannot, nothing more is
    searched (the plan is recompute "none"'s)."""
    if not memory_may_bind(baselines):
        reason = "every classic plan fits memory (GPipe included): memory does not bind"
        return ["none"] * model.num_layers, costs, outcome, {"reason": reason}
    rc = search_recompute(
        functools.partial(tables.table, model),
        costs,
        outcome,
        [layer.kind for layer in model.layers],
        num_microbatches,
        components=options.components,
        seed=options.seed,
        budget=budget,
        deadline=deadline,
        progress=progress,
        placement_ok=placement_ok,
    )
    return rc.modes, rc.costs, rc.outcome, rc.info


def _with_runtime_order(
    target: Target, best: Candidate, costs: CostTable, baselines: dict[str, Candidate], num_microbatches: int
) -> Candidate:
    """For a runtime that runs its own schedule (Megatron): the searched layout with that schedule's
    order, or that schedule's classic plans (uniform / balanced partition) when one of them is
    better; the prediction is then what the runtime runs."""
    from adaptis_plan.schedules import get_spec

    pp = best.layout.num_devices
    name = target.runtime_schedule(best.layout.num_stages // pp)
    programs = get_spec(name).build(best.layout.stage_device, pp, num_microbatches)
    result = simulate(best.layout, costs, programs, num_microbatches)
    chosen = dataclasses.replace(
        best,
        programs=programs,
        estimate_s=result.step_time_s,
        result=result,
        policy=f"{target.runtime}'s {name} order",
        hint=None,
        list_policy=None,
        origin=f"{target.runtime}'s {name} order",
    )
    for key, cand in baselines.items():
        ok = target.placement_problem(cand.layout.stage_device, pp) is None
        same = target.runtime_schedule(cand.layout.num_stages // pp) == key.split("/")[0]
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
