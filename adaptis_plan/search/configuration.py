"""The whole-configuration search: N GPUs, a model and a global batch -> TP, PP, DP, CP, EP, ZeRO,
the micro-batch split, recomputation and the pipeline, with a configuration-level lower bound.

Contract: `search_configuration(model, hardware, request, budget=..., deadline=...)` returns the
best `Choice` (its `driver.PipelinePlan`, training config and whole step) and one `Considered`
row per legal configuration saying what happened to it. Same inputs and budget, same answer:
every order is a sort on numbers and labels, every search runs on a deterministic budget.

The steps, one module each, data flowing one way (each step returns new rows; none patches another's):

1. the space (`search.space`): the cluster (`inputs.hardware.cluster`) and its legal points;
2. per point, without planning (`search.screen._screen_bound`): the proven memory check and lower bound
   on the whole step of `judge.configuration_bound` (the least bound over every point that may fit is
   the configuration-level lower bound) and the closed-form estimate that orders the screen
   (`search.estimate`);
3. the screen (`search.screen._screen_points`): the points in the order of their estimates, each with a
   classic schedule simulated and priced as a whole step, pruned by their bounds, within the screening
   budget and margin; then the points to plan (`search.screen._to_plan`);
4. point planning (`search.plan_point`): the full pipeline search (`driver`) at each of them, each with
   1 / (2 x points planned) of the budget (auto recomputation runs up to three searches of it);
5. the fastest planned point wins, with every point's row and the configuration-level lower bound.

The `--json` record of the result is built by `app.plan.configuration_record` (its throughput and MFU
by `cost.flops`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from adaptis_plan.core import ProgressFn
from adaptis_plan.cost.comm import devices_per_node
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.inputs.hardware import cluster
from adaptis_plan.judge.configuration_bound import STATIC_REASON
from adaptis_plan.schedules.targets import get_target
from adaptis_plan.search import driver
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import check_components
from adaptis_plan.search.plan_point import Choice, _plan_point, _presearch
from adaptis_plan.search.screen import Considered, _Screen, _screen_bound, _screen_points, _to_plan
from adaptis_plan.search.space import Point, Request, _no_legal_point, legal_points
from adaptis_plan.search.workers import pmap
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.units import fmt_gib


def search_configuration(
    model: ModelSpec,
    hardware: HardwareProfile,
    req: Request,
    *,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None = None,
) -> Choice:
    """The best configuration of `req` (module docstring: its steps, in order). Raises InputError when no
    point is legal and InfeasibleError when none fits in memory."""
    _check_options(model, req)
    hw, points = _legal(model, hardware, req)
    rows = pmap(functools.partial(_screen_bound, model, hw, req), points)
    order = sorted(
        (r for r in rows if r.status != "out_of_memory"), key=lambda r: (r.estimate_s, r.bound_s, r.point.preference)
    )
    screened_rows, screened = _screen_points(model, hw, req, order, deadline, progress)
    rows = _updated(rows, screened_rows)
    if not screened:
        raise _nothing_fits(model, hw, req, rows)
    planned = _plan_chosen(model, hw, req, _to_plan(screened, req), budget, deadline, progress)
    lower = min(r.bound_s for r in order) if order else math.inf
    return _winner(planned, _updated(rows, [row for _, row in planned]), lower, deadline)


def _check_options(model: ModelSpec, req: Request) -> None:
    """The pipeline options of `req` that do not depend on the point, checked before any point is
    searched: a point's search that refuses its input plans nothing there (`plan_point._search`), which must not
    hide a bad option (--search, --head-chunks, --target) behind a classic fallback."""
    check_components(req.pipeline.components)
    driver.forced_head_split(model, req.pipeline.head_chunks, 1, get_target(req.pipeline.target))


def _legal(model: ModelSpec, hardware: HardwareProfile, req: Request) -> tuple[HardwareProfile, list[Point]]:
    """The cluster of `req` (`hardware` cut to its GPUs) and its legal points; InputError saying why when
    there is none."""
    hw = cluster(hardware, req.gpus)
    points = legal_points(model, hw, req)
    if not points:
        raise InputError(_no_legal_point(model, hw, req))
    return hw, points


def _updated(rows: Sequence[Considered], newer: Iterable[Considered]) -> list[Considered]:
    """`rows`, each point's replaced by its row in `newer` where it has one."""
    by_point = {r.point: r for r in newer}
    return [by_point.get(r.point, r) for r in rows]


def _nothing_fits(model: ModelSpec, hw: HardwareProfile, req: Request, rows: Sequence[Considered]) -> Exception:
    """The error when the screen found no point that fits: InputError when the requested classic strategy
    applies to none, else InfeasibleError naming the closest point and what would help."""
    oom = [r for r in rows if r.status == "out_of_memory"]
    if not oom:
        why = next((r.reason for r in rows if r.status == "inapplicable"), "")
        return InputError(f"--strategy {req.pipeline.strategy} applies to no legal configuration: {why}")
    worst = min(oom, key=lambda r: (r.overflow_bytes, r.point.preference))
    head = f"no configuration of {model.name} on {req.gpus} GPUs fits in memory; the closest, {worst.point.label},"
    if all(r.reason.startswith(STATIC_REASON) for r in oom):
        return InfeasibleError(f"{head} {worst.reason}; {_least_gpus(oom, hw)}")
    return InfeasibleError(f"{head} {worst.reason}; use more GPUs, a shorter sequence or a smaller global batch")


def _least_gpus(oom: list[Considered], hw: HardwareProfile) -> str:
    """What to do when no point holds even its weights, gradients and optimizer state: the fewest GPUs
    that could, from the least state any point's sharding leaves (each GPU of a point holds at least
    its mean, `judge.configuration_bound`), over the smallest usable memory, in whole nodes."""
    limit = min(d.hbm_bytes for d in hw.device_types.values()) * hw.memory_fraction
    total = min((r.overflow_bytes + limit) * r.point.tp * r.point.cp * r.point.pp * r.point.dp for r in oom)
    need = max(1, math.ceil(total / limit))
    dpn = devices_per_node(hw)
    nodes = -(-need // dpn)
    return (
        f"its weights, gradients and optimizer state ({total / 2**40:,.2f} TiB sharded as far as any point here"
        f" shards them) need at least {need:,} GPUs of {fmt_gib(limit)} usable; a shorter sequence or a smaller"
        f" batch cannot help: use --gpus {nodes * dpn:,} ({nodes:,} nodes of {dpn}) or more"
    )


def _plan_chosen(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    chosen: Sequence[_Screen],
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
) -> list[tuple[Choice, Considered]]:
    """Each chosen point planned (`_plan_point`), in order, with its planned row."""
    # each planned point's search: auto runs up to three searches of its budget where memory binds
    # (none's, each forced mode's, `driver`), so a point gets 1 / (2 x points planned) of the budget: one
    # planned point (every dimension fixed, or a big pipeline) gets the half that two would share
    share = budget.scaled(1.0 / (2 * len(chosen)))
    searched = _presearch(model, hw, req, chosen, share, deadline)  # `_adaptive`'s searches by their inputs
    return [_plan_point(model, hw, req, got, share, deadline, progress, searched) for got in chosen]


def _winner(
    planned: Sequence[tuple[Choice, Considered]], rows: list[Considered], lower_bound_s: float, deadline: Deadline
) -> Choice:
    """The fastest planned point (ties to `Point.preference`), with every legal point's row and the
    configuration-level lower bound."""
    win = min((c for c, _ in planned), key=lambda c: (c.step.step_time_s, c.point.preference))
    if deadline.aborted and not win.plan.info.get("aborted"):
        # another point's search was cut short (in a worker, or before this one ran): the plan says so
        win.plan.info.update(aborted=True, abort_phase=deadline.where)
    return replace(win, considered=rows, lower_bound_s=lower_bound_s)


__all__ = ["search_configuration"]
