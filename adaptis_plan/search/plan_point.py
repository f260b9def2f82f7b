"""Point planning: the full pipeline search at a screened point of the configuration search (`_plan_point`),
or the point's screened classic plan where the search finds none that fits or none faster.

Data flow: the screened points `search.screen._to_plan` picks -> `_presearch` (their distinct adaptive
searches side by side, `workers.pmap`) -> `_plan_point` (each point's search, `driver.search_pipeline`,
or its classic plan, `driver.classic_pipeline`, judged and priced as a whole step) -> a `Choice` and the
point's planned row -> `search.configuration`. Imports the pipeline search and the judge.

Each point's search runs under the request's target, components (--search) and head split, and counts
the screen's classic schedule at its degree and split among its classic plans (`_seeds`); a big pipeline
(pp x M >= `BIG_PIPELINE`) is searched under its screened recompute mode only (`_search_inputs`). A
point whose search finds no plan that fits, or none faster, keeps its screened classic plan (for an
adaptive request its `search.fallback` says so, with the search's own whole step); an ablation (--search)
keeps its own plan. Points whose cost tables are equal in every recompute mode their search may use share
one search (`_search_key`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from adaptis_plan.core import ALL_COMPONENTS, ProgressFn
from adaptis_plan.cost.source import CostTables
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.judge.simulate import judged
from adaptis_plan.judge.training_step import TrainingStep, training_step
from adaptis_plan.search import driver
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.estimate import _split
from adaptis_plan.search.screen import BIG_PIPELINE, Considered, _Screen, _screened_step_s, _table_key
from adaptis_plan.search.space import RECOMPUTE_LADDER, Point, Request
from adaptis_plan.search.workers import pmap, workers
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig


@dataclass(frozen=True)
class Choice:
    """A planned configuration: its point, training config, cluster, pipeline plan and whole step; the one
    `search.configuration.search_configuration` returns also holds every legal point's row (`considered`)
    and the configuration-level lower bound."""

    point: Point
    training: TrainingConfig
    hardware: HardwareProfile
    plan: driver.PipelinePlan
    step: TrainingStep
    considered: list[Considered]
    lower_bound_s: float


def _plan_point(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    got: _Screen,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    searched: dict[tuple, driver.PipelinePlan | None],
) -> tuple[Choice, Considered]:
    """The full pipeline search at a screened point; its screened classic plan when the search finds
    none better: the planned configuration and the point's row, planned (a new row). `searched` holds
    the searches already run (`_adaptive`)."""
    p, row = got.considered.point, got.considered
    recompute, training, tables = _search_inputs(req, got, hw)
    planned: driver.PipelinePlan | None = None
    step: TrainingStep | None = None
    if req.pipeline.adaptive:
        # auto searches without recomputation and, where memory binds, each forced mode and per-stage
        # choices (`driver`): never worse than the uniform mode the screen needed
        planned, step = _adaptive(
            model, hw, p, training, tables, recompute, _seeds(model, req, got), req, budget, deadline, progress,
            searched,
        )  # fmt: skip
    ablation = set(req.pipeline.components) != set(ALL_COMPONENTS)  # --search: classic plans are no candidates
    if step is None or (step.step_time_s > _screened_step_s(got) and not ablation):
        # the screened classic plan (it fits): a classic request's own, or adaptive's fallback
        searched_step = None if step is None else step.step_time_s
        strategy, chunks = got.schedule
        training = p.training(req, got.mode)
        tables = got.tables or CostTables(hw, training, default_mode=got.mode)
        planned = driver.classic_pipeline(
            model, tables, strategy, pp=p.pp, num_microbatches=p.num_microbatches,
            partition=_split(model, req, p.pp * chunks), stages_per_device=chunks, head_chunks=req.pipeline.head_chunks,
            target=req.pipeline.target,
        )  # fmt: skip
        best = planned.best
        best.result = judged(best.layout, planned.costs, best.programs, p.num_microbatches, best.result)
        if req.pipeline.adaptive:  # the report says why the search's own plan was not kept
            planned.info["fallback"] = {"requested": "adaptive", "adaptive_step_time_s": searched_step}
        step = got.step
        kept = (strategy, got.mode)
    else:
        assert planned is not None  # _adaptive returns a step with its plan
        kept = (planned.strategy, recompute)
    assert step is not None  # the screened point fits: it has a step
    classic_step_s, classic_strategy = row.classic_step_s, row.classic_strategy
    for name, classic_s in _classic_steps(hw, p, training, planned):
        if classic_step_s is None or classic_s < classic_step_s:
            classic_step_s, classic_strategy = classic_s, name
    planned_row = replace(
        row, status="planned", step_time_s=step.step_time_s, strategy=kept[0], recompute=kept[1],
        classic_step_s=classic_step_s, classic_strategy=classic_strategy,
    )  # fmt: skip
    return Choice(p, training, hw, planned, step, [], math.inf), planned_row


def _classic_steps(
    hw: HardwareProfile, p: Point, training: TrainingConfig, planned: driver.PipelinePlan
) -> list[tuple[str, float]]:
    """(name, whole step) of each classic plan the pipeline search at `p` started from that fits
    (`driver.PipelinePlan.baselines`: every classic strategy on the uniform and the balanced split)."""
    out = []
    for name, cand in planned.baselines.items():
        if cand.result is None or not cand.result.fits_memory:
            continue
        step = training_step(
            cand.layout, cand.programs, cand.result, planned.model, training, hw, planned.costs.device_names
        )
        out.append((name, step.step_time_s))
    return out


def _seeds(model: ModelSpec, req: Request, got: _Screen) -> tuple[tuple[str, str, int], ...]:
    """The classic plans a point's adaptive search also starts from (`driver.PipelineOptions.classic`):
    Interleaved1F1B (1F1B at one stage per device) and InterleavedZeroBubble at the degree and on the
    split the screen found (`_Screen.schedule`, `_split`), where these are not already baselines (the
    search's own placements go to 4 stages per device, its classic baselines are uniform at the default
    degree): Llama 3 405B on 8,192 H100s at pp 16 screens Interleaved1F1B x8 on ends-as-layers."""
    _, chunks = got.schedule
    split = _split(model, req, got.considered.point.pp * chunks)
    return () if split == "uniform" and chunks <= 2 else driver.interleaved_classic(split, chunks)


def _adaptive(
    model: ModelSpec,
    hw: HardwareProfile,
    p: Point,
    training: TrainingConfig,
    tables: CostTables,
    recompute: str,
    seeds: tuple[tuple[str, str, int], ...],
    req: Request,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    searched: dict[tuple, driver.PipelinePlan | None],
) -> tuple[driver.PipelinePlan | None, TrainingStep | None]:
    """The pipeline search at `p` and its whole step, or (None, None) when no plan fits.

    The search reads only the cost tables, pp, M and its options: a point whose tables equal, in every
    recompute mode it may use, those of a point already searched (dp x cp and the micro-batch size
    trading places at the same tokens and ZeRO group per rank) reuses that search, from `searched`,
    and prices its own step around it."""
    key = _search_key(model, hw, p, training, recompute, seeds, req, budget)
    if key not in searched:
        searched[key] = _search(model, req, budget, deadline, progress, (p, tables, recompute, seeds))
    planned = searched[key]
    if planned is None:
        return None, None
    best = planned.best
    result = judged(best.layout, planned.costs, best.programs, p.num_microbatches, best.result)
    if not result.fits_memory:
        return None, None
    best.result = result
    step = training_step(best.layout, best.programs, result, planned.model, training, hw, planned.costs.device_names)
    return planned, step


def _search_key(
    model: ModelSpec, hw: HardwareProfile, p: Point, training: TrainingConfig, recompute: str,
    seeds: tuple[tuple[str, str, int], ...], req: Request, budget: SearchBudget,
) -> tuple:  # fmt: skip
    """What `_search` at `p` depends on: pp, M, the recompute request, the classic seeds, the request's
    seed, target, components and head split, the budget, and the cost tables in every recompute mode
    it may use (`_adaptive`)."""
    modes = RECOMPUTE_LADDER if recompute == "auto" else (recompute,)
    tables = (_table_key(CostTables(hw, training, default_mode=m).table(model)) for m in modes)
    asked = (req.seed, req.pipeline.target, req.pipeline.components, req.pipeline.head_chunks)
    return (p.pp, p.num_microbatches, recompute, seeds, *asked, budget, *tables)


def _search(
    model: ModelSpec,
    req: Request,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    job: tuple[Point, CostTables, str, tuple[tuple[str, str, int], ...]],
) -> driver.PipelinePlan | None:
    """The adaptive pipeline search of `job` = (point, its cost tables, recompute request, classic seeds);
    None when no plan fits. Module level: `_presearch` runs several in worker processes."""
    p, tables, recompute, seeds = job
    try:
        return driver.search_pipeline(
            model, tables, pp=p.pp, num_microbatches=p.num_microbatches, budget=budget, deadline=deadline,
            options=driver.PipelineOptions.of(req.pipeline, req.seed, recompute, classic=seeds),
            progress=progress,
        )  # fmt: skip
    except (InfeasibleError, InputError):
        return None


def _search_inputs(req: Request, got: _Screen, hw: HardwareProfile) -> tuple[str, TrainingConfig, CostTables]:
    """The recompute request, training config and cost tables `_plan_point` searches a screened point with."""
    p = got.considered.point
    recompute = req.pipeline.recompute
    if recompute == "auto" and p.pp * p.num_microbatches >= BIG_PIPELINE:
        recompute = got.mode
    training = p.training(req, recompute)
    return recompute, training, CostTables(hw, training, default_mode="none" if recompute == "auto" else recompute)


def _presearch(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    chosen: Sequence[_Screen],
    budget: SearchBudget,
    deadline: Deadline,
) -> dict[tuple, driver.PipelinePlan | None]:
    """The distinct adaptive searches of the points to plan, run side by side (`workers.pmap`) when there
    are several, keyed as `_adaptive` looks them up; empty for a classic request, a single search or a
    single worker."""
    if not req.pipeline.adaptive or workers() < 2:
        return {}  # one process: `_adaptive` runs each search in turn, with its progress shown
    jobs: dict[tuple, tuple[Point, CostTables, str, tuple[tuple[str, str, int], ...]]] = {}
    for got in chosen:
        p = got.considered.point
        recompute, training, tables = _search_inputs(req, got, hw)
        seeds = _seeds(model, req, got)
        key = _search_key(model, hw, p, training, recompute, seeds, req, budget)
        jobs.setdefault(key, (p, tables, recompute, seeds))
    if len(jobs) < 2:
        return {}
    found = pmap(functools.partial(_search, model, req, budget, deadline, None), list(jobs.values()))
    return dict(zip(jobs, found, strict=True))


__all__ = ["Choice"]
