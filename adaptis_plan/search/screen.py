"""The configuration screen: every legal point's bound and estimate (`_screen_bound`), the screening of
the points in the order of their estimates with a classic schedule simulated (`_screen_points`,
`_screen`), and the screened points that get the full pipeline search (`_to_plan`).

Data flow: the `Point`s of `search.space` -> `_screen_bound` (`judge.configuration_bound`'s proven memory
check and bound, `search.estimate`'s closed form) -> `Considered` rows -> `_screen_points` (rows as the
screen leaves them, the screened points that fit) -> `_to_plan` -> `search.plan_point`. Each step returns
new rows (`Considered` is frozen). Imports the cost model, the judge, the classic builders and the
worker pool; no solver.

Points are screened in the order of the estimate (`search.estimate._estimate`) with that schedule
simulated (the same partition; recomputation none, selective, then full: the first that fits; 1F1B
where the interleaving overflows), priced as whole steps (a schedule whose closed-form memory already
overflows is not simulated). A point whose bound is above the best screened step is pruned (it cannot
win); screening stops when its budget is spent (`SCREEN_LIMIT`, `SCREEN_ACTIONS`) or when the estimate
passes the `PLAN_LIMIT`-th best screened step by `SCREEN_MARGIN` (the rest could not be planned: they
stay not_screened, with the reason; for an adaptive request a deeper pipeline's estimate counts without
its closed-form bubble, never below its bound: `_reachable_s`). Equal estimates, steps and bounds go to
the simpler configuration (`Point.preference`; a point whose bound only ties the best step found is
pruned). With several workers the next points the screen may reach are screened side by side, then
decided in order exactly as one by one (`_side_by_side`). The best `PLAN_LIMIT` screened points, and
for an adaptive request the best screened point of each deeper pipeline whose bound is below the best
screened step (`PLAN_MOST` in all), are then planned (`_to_plan`); a big pipeline (pp x M >=
`BIG_PIPELINE`) plans only the best point.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from adaptis_plan.core import CostTable, ProgressFn
from adaptis_plan.cost.source import CostTables
from adaptis_plan.errors import InputError
from adaptis_plan.judge.configuration_bound import configuration_bound
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.judge.training_step import TrainingStep, training_step
from adaptis_plan.schedules import get_spec
from adaptis_plan.search.budget import Deadline
from adaptis_plan.search.estimate import (
    _closed_form_overflow,
    _estimate,
    _less_bubble,
    _most_stages,
    _split,
)
from adaptis_plan.search.generator import Candidate, classic_candidate
from adaptis_plan.search.space import RECOMPUTE_LADDER, Point, Request
from adaptis_plan.search.workers import Pool
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.units import fmt_gib

#: points screened: while the screened plans' actions (stages x micro-batches x 3
#: per point) stay under SCREEN_ACTIONS, and at least SCREEN_LIMIT (a deterministic budget: small
#: pipelines screen every point, pp 64 x 512 micro-batches about ten); the best PLAN_LIMIT of them
#: are planned with the full pipeline search
SCREEN_LIMIT = 8
SCREEN_ACTIONS = 1_000_000
PLAN_LIMIT = 2
#: for an adaptive request, beside the best PLAN_LIMIT screened points, the best screened point of each
#: deeper pipeline (pp >= 2) not among them whose bound is below the best screened step, in the order of
#: their screened steps, up to PLAN_MOST points in all: the screen prices classic schedules, and what the
#: co-designed pipeline buys (the bubble it fills, the stages it balances) is largest in deep pipelines
PLAN_MOST = 4
#: once PLAN_LIMIT points are screened, a point whose estimate is this far above the PLAN_LIMIT-th
#: best screened step is not screened: it would not be planned (the estimate is 1F1B's closed form,
#: within a few percent of the simulated 1F1B step on the published runs' configurations)
SCREEN_MARGIN = 0.10
#: pp x M from which a pipeline is big (every classic baseline of it simulates for a good fraction of
#: a second): the best screened point alone is planned, under its screened recompute mode, with
#: `--recompute auto` (auto's search without recomputation and per forced mode would triple it)
BIG_PIPELINE = 4096
SCREEN_STRATEGY = "1F1B"
#: a screen whose schedule has at least this many actions runs side by side with the next ones (with
#: several workers); a smaller one takes less than handing it to a worker does
SIDE_BY_SIDE_ACTIONS = 20_000


@dataclass(frozen=True)
class Considered:
    """One legal point and what became of it. `status`: planned, screened, pruned (its bound is above
    the best step found), out_of_memory, inapplicable (the requested classic strategy cannot run
    there), not_screened (the screening budget ran out, or its estimate says it would not be planned).
    Frozen: each step of the search returns a new row (`dataclasses.replace`)."""

    point: Point
    bound_s: float
    status: str
    estimate_s: float = math.inf  # the screening order (`_estimate`); not a bound
    chunks: int = 1  # stages per device of the classic schedule the estimate chose (1: 1F1B)
    unfit: dict[str, frozenset[int]] = field(default_factory=dict)  # `_estimate`'s proven overflows
    step_time_s: float | None = None
    reason: str = ""
    recompute: str | None = None
    strategy: str | None = None
    overflow_bytes: float = 0.0
    # the fastest classic schedule's whole step here: the screen's (1F1B or Interleaved1F1B on Megatron's
    # uniform split), and at a planned point also every classic plan its pipeline search started from
    classic_step_s: float | None = None
    classic_strategy: str | None = None


@dataclass(frozen=True)
class _Screen:
    """A screened point: its row, and where it fits, the classic plan simulated there, its whole step,
    recompute mode and (strategy, stages per device)."""

    considered: Considered
    tables: CostTables | None = None
    candidate: object = None  # the simulated classic plan (shared by points with equal tables)
    step: TrainingStep | None = None
    mode: str = "none"
    schedule: tuple[str, int] = ("1F1B", 1)  # the screened classic (strategy, stages per device)


def screen_strategy(req: Request, chunks: int = 1) -> tuple[str, int]:
    """The classic schedule (strategy, stages per device) a point is screened with: the requested one
    (at its default degree when --stages-per-device is not given), or 1F1B for adaptive; Interleaved1F1B
    at `chunks` stages per device where the estimate chose an interleaving degree (`_degrees`)."""
    if chunks > 1:
        return "Interleaved1F1B", chunks
    strategy = SCREEN_STRATEGY if req.pipeline.adaptive else req.pipeline.strategy
    return strategy, req.pipeline.stages_per_device or get_spec(strategy).default_stages_per_device


def _screen_bound(model: ModelSpec, hw: HardwareProfile, req: Request, point: Point) -> Considered:
    """One point's row before screening: the proven memory check and lower bound of its configuration
    (`judge.configuration_bound`), and where it may fit, the screen's estimate (`_estimate`)."""
    verdict = configuration_bound(model, hw, point.training(req, "none"))
    if not verdict.fits:
        return Considered(
            point, verdict.bound_s, "out_of_memory", reason=verdict.reason, overflow_bytes=verdict.overflow_bytes
        )
    assert verdict.costs is not None  # a configuration that may fit has its cost table
    estimate_s, chunks, unfit = _estimate(model, hw, req, point, verdict.costs)
    return Considered(point, verdict.bound_s, "not_screened", estimate_s=estimate_s, chunks=chunks, unfit=unfit)


def _screened_step_s(screen: _Screen) -> float:
    """The whole step of a point the screen priced (one that fits: it has a step)."""
    assert screen.step is not None
    return screen.step.step_time_s


def _actions(row: Considered) -> int:
    """The actions of the classic schedule a point is screened with (what the screening budget counts)."""
    return 3 * row.point.pp * row.point.num_microbatches * row.chunks


@dataclass(frozen=True)
class _Tally:
    """Where the screening stands: the points screened (`tried`) and their schedules' actions, how many of
    them fit (`fitted`), the best whole step among those and the PLAN_LIMIT best (`steps`, sorted)."""

    tried: int = 0
    actions: int = 0
    fitted: int = 0
    best: float = math.inf
    steps: tuple[float, ...] = ()

    def counted(self, row: Considered) -> _Tally:
        """The tally once `row` is screened, before its step is known."""
        return replace(self, tried=self.tried + 1, actions=self.actions + _actions(row))

    def priced(self, step_s: float) -> _Tally:
        """The tally once a screened point fits, with a whole step of `step_s`."""
        steps = tuple(sorted([*self.steps, step_s])[:PLAN_LIMIT])
        return replace(self, fitted=self.fitted + 1, best=min(self.best, step_s), steps=steps)


def _verdict(row: Considered, tally: _Tally, req: Request, deadline: Deadline) -> str | None:
    """Why `row` is not screened in this state (None: it is). On the loop's real state every reason stays
    true as it moves on (best and steps only fall, tried and actions only grow, the clock only runs); the
    look-ahead (`_side_by_side`) counts its picks as screened, so it may pass over a row the loop then
    screens, in turn."""
    if row.bound_s >= tally.best:
        return "pruned"
    if tally.tried >= SCREEN_LIMIT and tally.actions >= SCREEN_ACTIONS:
        return "budget"  # the screening budget is spent: the rest stay not_screened
    if len(tally.steps) >= PLAN_LIMIT and _reachable_s(row, req) > tally.steps[PLAN_LIMIT - 1] * (1.0 + SCREEN_MARGIN):
        return "margin"
    if tally.fitted and deadline.expired():
        return "deadline"
    return None


def _screen_points(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    order: Sequence[Considered],
    deadline: Deadline,
    progress: ProgressFn | None = None,
) -> tuple[list[Considered], list[_Screen]]:
    """Screen the rows of `order` (the points that may fit, in the order of their estimates; module
    docstring): every row as the screen leaves it (screened, inapplicable, out_of_memory, pruned or
    not_screened, with the reason), in the same order, and the screened points that fit, sorted by their
    whole steps and `Point.preference`."""
    fixed_mode = None if req.pipeline.recompute == "auto" else req.pipeline.recompute
    modes = (fixed_mode,) if fixed_mode else RECOMPUTE_LADDER
    rows = list(order)
    screened: list[_Screen] = []
    tally = _Tally()
    classic: dict[tuple, Candidate | InputError] = {}  # the screens' classic plans (`_screen`)
    with Pool() as pool:
        start = 0
        while start < len(rows):
            ahead, stop = _side_by_side(model, hw, req, modes, rows, start, tally, pool, deadline)
            for j in range(start, stop):
                rows[j], got, tally = _screen_row(
                    model, hw, req, modes, rows[j], ahead.get(j), tally, deadline, classic
                )
                if got is None:
                    continue
                if got.step is not None:
                    screened.append(got)
                if progress is not None:
                    progress("configurations", min(1.0, tally.tried / max(1, len(rows))))
            start = stop
    # a point passed over before the best was found may be beaten by it now
    rows = [_prune(r, tally.best) if r.status == "not_screened" and r.bound_s >= tally.best else r for r in rows]
    screened.sort(key=lambda s: (_screened_step_s(s), s.considered.point.preference))
    return rows, screened


def _side_by_side(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    modes: Sequence[str],
    rows: Sequence[Considered],
    start: int,
    tally: _Tally,
    pool: Pool,
    deadline: Deadline,
) -> tuple[dict[int, _Screen | Exception], int]:
    """The screens of the rows from `start` on that the loop may screen next, as far as `tally` tells,
    run side by side in `pool` (with several workers, from a schedule of SIDE_BY_SIDE_ACTIONS on), by
    row index, and the index the loop's turn stops before: the loop then decides each row in order
    exactly as one by one (a row it passes over was not needed; one it screens that was not picked is
    screened then)."""
    stop = start + 1
    if not pool.parallel or _actions(rows[start]) < SIDE_BY_SIDE_ACTIONS:
        return {}, stop
    picked: list[int] = []
    assumed = tally  # the picks counted as screened
    for j in range(start, len(rows)):
        if len(picked) == pool.size:
            break
        if _verdict(rows[j], assumed, req, deadline) is None:
            picked.append(j)
            assumed = assumed.counted(rows[j])
    found: dict[int, _Screen | Exception] = {}
    if len(picked) > 1:
        screens = pool.map(functools.partial(_screen_alone, model, hw, req, modes), [rows[j] for j in picked])
        found = dict(zip(picked, screens, strict=True))
    return found, max(stop, picked[-1] + 1) if picked else stop


def _screen_row(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    modes: Sequence[str],
    row: Considered,
    ahead: _Screen | Exception | None,
    tally: _Tally,
    deadline: Deadline,
    classic: dict[tuple, Candidate | InputError],
) -> tuple[Considered, _Screen | None, _Tally]:
    """One turn of the screening loop: `row` as the screen leaves it, its screen (None: not screened, the
    row says why) and the tally after it. `ahead`: its screen already run side by side (`_side_by_side`),
    or the error that screen raised, raised here where the loop meets it."""
    why = _verdict(row, tally, req, deadline)
    if why == "pruned":
        return _prune(row, tally.best), None, tally
    if why == "margin":
        return replace(row, reason=_margin_reason(model, hw, req, row)), None, tally
    if why == "deadline":
        deadline.abort("configuration screening")  # --time-limit's hard stop
    if why is not None:
        return row, None, tally
    tally = tally.counted(row)
    if isinstance(ahead, Exception):
        raise ahead
    got = _screen(model, hw, req, row, modes, classic) if ahead is None else ahead
    if got.step is not None:
        tally = tally.priced(got.step.step_time_s)
    return got.considered, got, tally


def _screen(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    row: Considered,
    modes: Sequence[str],
    classic: dict[tuple, Candidate | InputError] | None = None,
) -> _Screen:
    """The classic schedule the estimate chose (`screen_strategy`; where that interleaving does not
    fit, 1F1B for adaptive, the requested strategy at its default degree otherwise) at the point, with the
    first recompute mode of `modes` that fits, as a whole step. A schedule `_estimate` proved overflowing
    in a mode (`Considered.unfit`) is not simulated, except the last one tried, whose overflow is the
    reason a point is out of memory. The screened point's row is a new one: `row` as the screen leaves it.
    `classic` keeps the simulated classic plans by cost table, micro-batches and schedule: a point
    whose table equals an earlier one's (`_adaptive`) reuses the plan and prices its own step."""
    p = row.point
    classic = {} if classic is None else classic
    worst = 0.0
    schedules = [screen_strategy(req, row.chunks)]
    fallback = screen_strategy(req)  # 1F1B for adaptive, the requested strategy at its own degree otherwise
    if row.chunks > 1 and fallback not in schedules:
        schedules.append(fallback)
    for mode in modes:
        training = p.training(req, mode)
        tables = CostTables(hw, training, default_mode=mode)
        costs = tables.table(model)
        for strategy, chunks in schedules:
            last = (strategy, chunks) == schedules[-1]
            degree = {"1F1B": 1, "Interleaved1F1B": chunks}.get(strategy)
            if degree in row.unfit.get(mode, ()) and not (last and mode == modes[-1]):
                continue  # its closed form already overflows (`_estimate`); the last one gives the reason
            split = _split(model, req, p.pp * chunks)
            key = (_table_key(costs), p.num_microbatches, strategy, chunks, split)
            if key not in classic:
                try:
                    classic[key] = classic_candidate(costs, p.num_microbatches, strategy, split, chunks)
                except InputError as e:  # the classic strategy does not apply at this point (its rules)
                    classic[key] = e
            cand = classic[key]
            if isinstance(cand, InputError):
                if not last:
                    continue
                return _Screen(replace(row, status="inapplicable", reason=str(cand)))
            result = cand.result or simulate(cand.layout, costs, cand.programs, p.num_microbatches)
            if not result.fits_memory:
                if last:
                    worst = max(result.overflow_bytes)
                continue
            step = training_step(cand.layout, cand.programs, result, model, training, hw, costs.device_names)
            screened = replace(
                row, status="screened", step_time_s=step.step_time_s, recompute=mode, strategy=strategy, chunks=chunks,
                classic_step_s=step.step_time_s, classic_strategy=_schedule_name(strategy, chunks),
            )  # fmt: skip
            return _Screen(screened, tables, cand, step, mode, (strategy, chunks))
    reason = f"{schedules[-1][0]} with {modes[-1]} recomputation is {fmt_gib(worst)} over the memory limit"
    return _Screen(replace(row, status="out_of_memory", overflow_bytes=worst, reason=reason))


def _screen_alone(
    model: ModelSpec, hw: HardwareProfile, req: Request, modes: Sequence[str], row: Considered
) -> _Screen | Exception:
    """`_screen` side by side (a worker process): what the caller keeps of it (the row, its whole step,
    mode and schedule), without the classic plan and cost tables, which `_plan_point` rebuilds if it
    needs them; an error comes back as the value, raised only if the row is decided to be screened."""
    try:
        got = _screen(model, hw, req, row, modes)
    except Exception as e:  # noqa: BLE001 - raised where the in-order loop would have met it
        return e
    return _Screen(got.considered, step=got.step, mode=got.mode, schedule=got.schedule)


def _schedule_name(strategy: str, chunks: int) -> str:
    return f"{strategy} x{chunks}" if strategy == "Interleaved1F1B" and chunks > 1 else strategy


def _table_key(table: CostTable) -> tuple:
    """Every number of a cost table, as a hashable key."""
    out: list[object] = []
    for f in dataclasses.fields(table):
        v = getattr(table, f.name)
        out.append((v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v)
    return tuple(out)


def _margin_reason(model: ModelSpec, hw: HardwareProfile, req: Request, row: Considered) -> str:
    """Why a point past the screening margin is not screened; one whose estimate found no classic schedule
    that fits says by how much it does not (`_closed_form_overflow`)."""
    if math.isfinite(row.estimate_s):
        return (
            f"estimate {row.estimate_s:.4g} s is more than {SCREEN_MARGIN:.0%} above the"
            f" {PLAN_LIMIT} best screened steps: it would not be planned"
        )
    most = _most_stages(model, req)
    if row.point.pp > most:
        return f"pp {row.point.pp}: more pipeline stages than the {most} layers its partition can give a stage each"
    mode = RECOMPUTE_LADDER[-1] if req.pipeline.recompute == "auto" else req.pipeline.recompute
    over = _closed_form_overflow(model, hw, req, row.point, mode)
    return f"does not fit: {fmt_gib(over)} over the memory limit (1F1B with {mode} recomputation, uniform partition)"


def _reachable_s(row: Considered, req: Request) -> float:
    """What the margin rule compares: the estimate, or for an adaptive request at pp >= 2, whose search may
    fill the classic schedule's bubble, the estimate without it (`_less_bubble`)."""
    if not req.pipeline.adaptive or row.point.pp == 1:
        return row.estimate_s
    return _less_bubble(row.estimate_s, row.point, row.chunks, row.bound_s)


def _prune(row: Considered, best: float) -> Considered:
    """`row` pruned: its bound says it cannot beat the best step found."""
    return replace(row, status="pruned", reason=f"lower bound {row.bound_s:.4g} s >= the best step found, {best:.4g} s")


def _to_plan(screened: Sequence[_Screen], req: Request) -> list[_Screen]:
    """The screened points (sorted by their steps) that get the full pipeline search: a big pipeline's best
    alone, else the best PLAN_LIMIT, and for an adaptive request, of each deeper pipeline (in the order of
    their best screened steps) whose points' bounds are below the best screened step, the point whose step
    without its bubble is least (`PLAN_MOST` in all)."""
    top = screened[0].considered.point
    if top.pp * top.num_microbatches >= BIG_PIPELINE:
        return [screened[0]]
    chosen = list(screened[:PLAN_LIMIT])
    if not req.pipeline.adaptive:
        return chosen
    best = _screened_step_s(screened[0])
    depths = {g.considered.point.pp for g in chosen}
    deeper = [
        g for g in screened[PLAN_LIMIT:]
        if g.considered.point.pp not in depths and g.considered.point.pp > 1 and g.considered.bound_s < best
        and g.considered.point.pp * g.considered.point.num_microbatches < BIG_PIPELINE
    ]  # fmt: skip
    # the depths in the order of their best screened steps; of each, the point whose screened step without
    # its bubble is least (`_without_bubble_s`: the points at one depth differ in how much bubble there is to fill)
    for got in deeper:
        if len(chosen) >= PLAN_MOST:
            break
        pp = got.considered.point.pp
        if pp not in depths:
            same = [g for g in deeper if g.considered.point.pp == pp]
            chosen.append(min(same, key=lambda g: (_without_bubble_s(g), g.considered.point.preference)))
            depths.add(pp)
    return chosen


def _without_bubble_s(got: _Screen) -> float:
    """A screened point's classic step less its bubble (`_less_bubble`, its screened schedule's degree)."""
    return _less_bubble(_screened_step_s(got), got.considered.point, got.schedule[1], got.considered.bound_s)


__all__ = ["BIG_PIPELINE", "PLAN_LIMIT", "PLAN_MOST", "Considered", "screen_strategy"]
