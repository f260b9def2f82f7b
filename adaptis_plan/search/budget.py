"""The search's budget: how much work each phase may do, in units that do not depend on the machine.

Data flow: `app.plan.PlanRequest` (or a caller of `search.driver` or `search.generator.search_plan`)
-> one `SearchBudget` -> every phase of the generator reads its share from it. Plain frozen dataclass;
imports nothing from the package.

Why work units: a phase that stops on the wall clock finds a different plan on a busy machine
than on an idle one. Every phase here stops after a fixed amount of work instead: list-scheduled
actions (the unit every heuristic phase spends), simulated candidates, CP-SAT deterministic time
(the solver's own count of work, reproducible with one worker). The same inputs, seed and budget
then give the same plan on any machine under any load, as long as that work ends before the
wall-clock abort on top (`Deadline`); when it fires, the plan says so. An explicit `--time-limit` is
that abort; at the default limit the abort is a safety net far beyond the default work
(`spec.limits.DEFAULT_HARD_STOP_S`, `PlanRequest.hard_stop_s`), so the default plan never depends on the
load. `--no-hard-stop` (`PlanRequest.hard_stop`) removes the abort (`Deadline(math.inf)`).

`SearchBudget.for_time_limit(T)` is the budget `adaptis plan --time-limit T` uses: sized so that
its work ends within T on an idle core for mid-size pipelines, leaving the abort for slow or
loaded machines and for pipelines so big that one candidate is a large part of the limit; a
longer limit buys proportionally more list scheduling (big pipelines evaluate more candidates)
and more CP-SAT work. Known limit: the sizing rests on per-action and per-unit costs of one
machine (`experiments/findings-search.md`); a machine much slower than that reaches the abort.

The outer search (`search.driver`) splits one budget between its searches with `target_share`
before any phase reads it. Recompute "auto" runs `--recompute none`'s search on the whole budget
and, where memory binds, each forced mode's search its lower bound does not rule out on the whole
budget too, then its per-stage recompute lists on `recompute_share` of it: up to 3 +
`recompute_share` times a forced mode's work, so the same budget never plans slower than a forced
mode, and the wall clock can cut those extra searches short on big pipelines (the plan says so).

A search piece run in a forked worker (`search.workers`) aborts its own copy of a `Deadline`: the
worker records the aborts of the deadlines it inherited (`record_aborts`, `recorded_aborts`) and
sends them back with its result, and the parent replays them on its live deadlines
(`replay_aborts`), so a plan cut short in any process says so.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import weakref
from dataclasses import dataclass

#: CP-SAT window work per layout added for each 5 s of `--time-limit` beyond the first 5 s: a longer
#: limit buys order search in proportion (at 180 s, 10.6 units per layout).
_WINDOW_DTIME_PER_EXTRA_5S = 0.3

#: Seconds of `--time-limit` a command spends before and around the search whatever its budget (an
#: allowance: interpreter, imports, classic baselines, the first solve's set-up); a limit under 5 s
#: sizes the search's work from what is left (`for_time_limit`).
START_UP_S = 2.0


@dataclass(frozen=True)
class SearchBudget:
    """Work per phase of the search (module docstring). Every field is a count, never seconds."""

    #: list-scheduled actions over all heuristic phases; big pipelines get fewer candidates
    schedule_actions: int = 120_000
    #: shares of `schedule_actions` per phase: placements x partitions, policies, refinement, irregular
    layout_share: float = 0.30
    policy_share: float = 0.40
    refine_share: float = 0.20
    irregular_share: float = 0.10
    #: placements tried in phase 1: the presets, then per-round forward / reverse mixtures, with up
    #: to `max_chunks` stages per device; at least `min_placements` whatever the work budget
    max_chunks: int = 4
    min_placements: int = 3
    #: phase 1 candidates simulated: the best by the list scheduler's estimate
    judged_layouts: int = 6
    #: CP-SAT partition solves (on the best distinct placements) and the work each may do
    partition_solves: int = 3
    partition_dtime: float = 0.05
    #: layouts on which every list policy is tried (phase 2)
    policy_layouts: int = 3
    #: partition refinement rounds (each moves boundary layers of the busiest device)
    refine_rounds: int = 6
    #: irregular placement rounds and the moves tried per round
    irregular_rounds: int = 3
    irregular_moves: int = 8
    #: CP-SAT order: layouts refined (the best distinct ones), full-model work per layout (a proof
    #: of the order's bound on small and medium programs), rolling-horizon work per layout
    order_layouts: int = 2
    order_full_dtime: float = 0.04
    order_full_max_actions: int = 2000
    order_window_dtime: float = 0.06
    order_window_actions: int = 60
    order_window_step_dtime: float = 0.1
    #: critical-path ranks (`search.priority`): random deals of the optimal packing whose order
    #: bound is computed, the best of them by that bound list-scheduled with the plain ranks,
    #: and the list-scheduled actions of the whole phase (ranking, successive halving, then the
    #: local search over the ranks on the last `priority_layouts`); about 40 schedules of a PP 4
    #: pipeline with 16 micro-batches and 26 stages at the default
    packed_samples: int = 100
    packed_ranked: int = 4
    priority_actions: int = 50_000
    priority_layouts: int = 2
    #: layouts the successive halving starts from (the best by the plain ranks' estimate)
    priority_halving: int = 16
    #: a pipeline with more actions per candidate on one stage per device (3 x pp x M) ranks phases
    #: 1-4's candidates on a shortened run of micro-batches (`generator.ranking_microbatches`), then
    #: schedules the best at its full length; a longer `--time-limit` ranks on longer runs
    ranking_actions: int = 24_000
    #: work recompute "auto" gives its per-stage recompute lists where memory binds, as a share of this
    #: budget (on top of its searches of the forced modes, each of which gets the whole budget)
    recompute_share: float = 0.75
    #: with a target other than adaptis, share of the plain search's work for each of its two searches
    target_share: float = 0.5

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value < 0:
                raise ValueError(f"SearchBudget.{f.name} = {value}: must be >= 0")

    @classmethod
    def for_time_limit(cls, time_limit_s: float) -> SearchBudget:
        """The default budget scaled by the time limit (5 s = the defaults above).

        CP-SAT work grows linearly with the limit (the window search faster beyond 5 s:
        `_WINDOW_DTIME_PER_EXTRA_5S`); list scheduling grows too, so that the big
        pipelines (hundreds of thousands of actions per candidate) evaluate enough candidates.
        The whole-step order model is built only up to `order_full_max_actions` x limit / 5 s
        actions, at most twice that (2,000 at 5 s, 4,000 from 10 s): its presolve and loading take
        wall time per action outside its deterministic budget, so bigger programs are left to the
        windows.

        Below 5 s the work shrinks with the time left after `START_UP_S`, not with the whole limit:
        the command's start-up takes about the same time whatever the budget.
        """
        t = max(float(time_limit_s), 0.0)
        k = t / 5.0 if t >= 5.0 else max(t - START_UP_S, 0.1) / (5.0 - START_UP_S)
        base = cls()
        return dataclasses.replace(
            base,
            schedule_actions=int(base.schedule_actions * k),
            order_full_dtime=base.order_full_dtime * k,
            order_full_max_actions=int(base.order_full_max_actions * min(k, 2.0)),
            order_window_dtime=base.order_window_dtime * k + _WINDOW_DTIME_PER_EXTRA_5S * max(0.0, k - 1.0),
            # past the default limit, one more layout (the list scheduler's ranking of layouts can
            # miss the best one for CP-SAT); below half the default work, one layout fewer (each
            # CP-SAT order solve spends wall time presolving and loading whatever its budget)
            order_layouts=base.order_layouts + (1 if k > 1.0 else 0) - (1 if k < 0.5 else 0),
            partition_dtime=base.partition_dtime * min(k, 4.0),
            packed_samples=int(base.packed_samples * k),
            packed_ranked=max(1, int(base.packed_ranked * k)),
            priority_actions=int(base.priority_actions * k),
            ranking_actions=int(base.ranking_actions * k),
        )

    def scaled(self, factor: float) -> SearchBudget:
        """The same budget with every amount of work multiplied by `factor` (counts stay >= 1), the length
        of the ranking runs (`ranking_actions`) too: on a big pipeline, the phases' fixed minimum of
        candidates, not `schedule_actions`, is what the work comes to."""
        return dataclasses.replace(
            self,
            schedule_actions=max(1, int(self.schedule_actions * factor)),
            partition_dtime=self.partition_dtime * factor,
            order_full_dtime=self.order_full_dtime * factor,
            order_window_dtime=self.order_window_dtime * factor,
            packed_samples=int(self.packed_samples * factor),
            packed_ranked=max(1, int(self.packed_ranked * factor)),
            priority_actions=int(self.priority_actions * factor),
            ranking_actions=max(1, int(self.ranking_actions * factor)),
        )

    def summary(self) -> dict[str, float]:
        """The per-phase work, as plans record it (the outer shares are applied before, by `search.driver`)."""
        out = dataclasses.asdict(self)
        del out["recompute_share"], out["target_share"]
        return out


class Deadline:
    """The hard wall-clock abort: `expired()` once `at` (a `time.perf_counter()` value) has passed.

    `aborted` records that some phase stopped because of it (the plan then says the search was
    cut short). `can_afford(seconds)` asks whether a step predicted to take that long still fits.
    """

    def __init__(self, at: float) -> None:
        self.at = at
        self.aborted = False
        self.where: str | None = None
        self.token = next(_TOKENS)  # names it to a forked worker's parent (`replay_aborts`)
        _LIVE[self.token] = self

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.perf_counter() + seconds)

    def left(self) -> float:
        return self.at - time.perf_counter()

    def expired(self) -> bool:
        return self.left() <= 0

    def can_afford(self, seconds: float) -> bool:
        return self.left() > seconds

    def abort(self, where: str) -> None:
        if not self.aborted:
            self.aborted, self.where = True, where
            if _RECORDED is not None and self.token in _INHERITED:
                _RECORDED.append((self.token, where))


#: every deadline of this process by its token (never reused), while it lives
_TOKENS = itertools.count()
_LIVE: weakref.WeakValueDictionary[int, Deadline] = weakref.WeakValueDictionary()
#: in a forked worker (`record_aborts`): the tokens it inherited, and their aborts since it started
_INHERITED: frozenset[int] = frozenset()
_RECORDED: list[tuple[int, str]] | None = None


def record_aborts() -> None:
    """In a forked worker, before its work: keep each abort of a deadline its parent also holds."""
    global _INHERITED, _RECORDED
    _INHERITED, _RECORDED = frozenset(_LIVE.keys()), []


def recorded_aborts() -> list[tuple[int, str]]:
    """The (token, where) of the inherited deadlines this worker aborted (`record_aborts`)."""
    return list(_RECORDED or ())


def replay_aborts(aborts: list[tuple[int, str]]) -> None:
    """In the parent: abort each of its deadlines that a worker's copy aborted (its own parent gets
    them in turn, when this process is a worker too)."""
    for token, where in aborts:
        deadline = _LIVE.get(token)
        if deadline is not None:
            deadline.abort(where)
