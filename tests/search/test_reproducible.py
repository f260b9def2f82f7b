"""`--time-limit` as a hard abort that is respected and reported, and the work budget it sizes.

The search counts its work (list-scheduled actions, simulated candidates, CP-SAT deterministic
time on one worker), so machine load changes wall times only: that the default plan is byte-identical
idle and under full load, in fresh processes (each with its own string-hash seed), is
tests/bench/test_repro.py's check (`bench.repro`, the same check the bench runs on 22 cases).
"""

from __future__ import annotations

import time

import pytest

from adaptis_plan.search.budget import START_UP_S, Deadline, SearchBudget


def test_time_limit_is_a_hard_abort_and_is_reported() -> None:
    """A budget far beyond the limit: the search stops at the deadline and says so."""
    from adaptis_plan.core import uniform_costs
    from adaptis_plan.search.generator import search_plan

    costs = uniform_costs(32, 8, f=1.0, i=1.0, w=1.0, latency=0.01)
    limit = 1.5
    t0, cpu0 = time.perf_counter(), time.process_time()
    out = search_plan(
        costs, 32, 64, baselines={}, budget=SearchBudget.for_time_limit(1000.0), deadline=Deadline.after(limit)
    )
    wall = time.perf_counter() - t0
    assert out.aborted and out.abort_phase
    # + one list schedule or CP-SAT step's overrun: 0.5 s of a whole core, longer in wall time when the
    # machine gives this process less (its share: CPU seconds per wall second, at least a fifth of a core)
    share = min(1.0, max(0.2, (time.process_time() - cpu0) / wall))
    assert wall <= 1.1 * limit + 0.5 / share, (wall, share)
    assert out.best.feasible


def test_budget_scales_with_the_time_limit_and_rejects_negative_work() -> None:
    five, thirty = SearchBudget.for_time_limit(5), SearchBudget.for_time_limit(30)
    assert five == SearchBudget()
    assert thirty.schedule_actions == 6 * five.schedule_actions
    # window work: linear up to 5 s, then 0.3 units per layout for each further 5 s
    assert thirty.order_window_dtime == pytest.approx(6 * five.order_window_dtime + 5 * 0.3)
    # below 5 s, the work scales with what the start-up leaves: 3.5 s -> (3.5 - START_UP_S) / (5 - START_UP_S)
    half = 5.0 - (5.0 - START_UP_S) / 2
    assert SearchBudget.for_time_limit(half).order_window_dtime == pytest.approx(five.order_window_dtime / 2)
    assert SearchBudget.for_time_limit(START_UP_S / 2) == SearchBudget.for_time_limit(0.0)  # the floor
    assert SearchBudget.for_time_limit(5.0 - 1e-9).schedule_actions in (
        five.schedule_actions - 1,
        five.schedule_actions,
    )  # continuous at 5 s
    # one more order layout past the default limit, one fewer below half its work
    assert (five.order_layouts, thirty.order_layouts) == (2, 3)
    assert SearchBudget.for_time_limit(half - 0.1).order_layouts == 1
    # the whole-step order model grows with the limit up to twice the default size, no further
    assert SearchBudget.for_time_limit(half).order_full_max_actions == five.order_full_max_actions // 2
    assert thirty.order_full_max_actions == 2 * five.order_full_max_actions
    assert five.scaled(0.5).schedule_actions == five.schedule_actions // 2
    with pytest.raises(ValueError, match="order_layouts"):
        SearchBudget(order_layouts=-1)


def test_no_hard_stop_lets_the_budget_alone_end_the_search() -> None:
    """`--no-hard-stop`: a limit far below the budget's work cuts nothing, and the plan is the budget's own,
    whatever the limit; with the hard stop the same request is cut short and says so."""
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    case = dict(model_arg="deepseek-s", hardware_arg="h200", pp=4, num_microbatches=8, seq_len=1024)
    budget = SearchBudget.for_time_limit(0.5)
    cut = make_plan_for(PlanRequest.of(**case, time_limit_s=0.01, budget=budget))
    free = make_plan_for(PlanRequest.of(**case, time_limit_s=0.01, budget=budget, hard_stop=False))
    roomy = make_plan_for(PlanRequest.of(**case, time_limit_s=1000.0, budget=budget, hard_stop=False))
    assert cut.search_info["aborted"] and cut.search_info["abort_phase"]
    assert not free.search_info["aborted"] and not roomy.search_info["aborted"]
    assert free.plan.model_dump() == roomy.plan.model_dump()
