"""Critical-path ranks and their local search (`search.priority`), and the sampled packings
they run on (`partition.sampled_packed_layouts`), on the case that needs them: nemotron-h-s 4K
on the paper's profiled costs, where the optimal packing puts eleven Mamba layers on one device."""

from __future__ import annotations

import collections

import pytest

from adaptis_plan.core import Layout
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.search.budget import SearchBudget
from adaptis_plan.search.generator import policy_portfolio, search_plan
from adaptis_plan.search.listsched import list_schedule
from adaptis_plan.search.order_instance import device_bound_s
from adaptis_plan.search.partition import _packing_classes, packed_layouts, sampled_packed_layouts
from adaptis_plan.search.priority import priority_search
from bench.paper_profile import paper_costs

M = 16


@pytest.fixture(scope="module")
def nemotron():
    costs, _ = paper_costs("nemotron-h-s", 4096, 4)
    spread = next((sd, b) for label, sd, b in packed_layouts(costs, 4) if label == "packed spread")
    return costs, Layout(spread[1], spread[0], 4)


def test_priority_search_beats_every_list_policy_on_a_many_stage_layout(nemotron):
    costs, layout = nemotron
    policies = min(list_schedule(layout, costs, M, pol)[1] for pol in policy_portfolio())
    res = priority_search(layout, costs, M, schedules=60)
    assert res.estimate_s < 0.99 * policies, (res.estimate_s, policies)
    assert simulate(layout, costs, res.programs, M).step_time_s == pytest.approx(res.estimate_s)  # no comm here
    assert res.schedules == 60 and res.total == 60


def test_priority_search_is_deterministic_and_resumes(nemotron):
    costs, layout = nemotron
    a = priority_search(layout, costs, M, schedules=20, seed=3)
    b = priority_search(layout, costs, M, schedules=20, seed=3)
    assert a.programs == b.programs and a.estimate_s == b.estimate_s
    more = priority_search(layout, costs, M, schedules=20, seed=3, start=a)
    assert more.estimate_s <= a.estimate_s and more.total == 40
    # the resumed search draws new moves: it is not the first search run again from its own result
    assert more.priority != a.priority or more.estimate_s == a.estimate_s


def test_sampled_packings_deal_exactly_the_packing_and_rank_by_the_order_bound(nemotron):
    costs, _ = nemotron
    kind, need, _ = _packing_classes(costs, 4)
    out = sampled_packed_layouts(costs, 4, M, samples=200, keep=6, seed=1)
    assert out == sampled_packed_layouts(costs, 4, M, samples=200, keep=6, seed=1)
    assert len(out) == 6 and len(set(out)) == 6
    wanted = sorted(tuple(d) for d in need)
    bounds = []
    for sd, b in out:
        layout = Layout(b, sd, 4)
        per_device = [collections.Counter() for _ in range(4)]
        for s, d in enumerate(sd):
            for layer in layout.layers(s):
                if kind[layer] >= 0:
                    per_device[d][kind[layer]] += 1
        got = sorted(tuple(per_device[d][c] for c in range(len(need[0]))) for d in range(4))
        assert got == wanted
        bounds.append(device_bound_s(layout, costs, M, True))
    assert bounds == sorted(bounds)


@pytest.mark.slow
def test_the_critical_path_phase_improves_nemotron_h_s_4k():
    costs, n = paper_costs("nemotron-h-s", 4096, 4)
    budget = SearchBudget.for_time_limit(5)  # the default budget
    out = search_plan(costs, n, M, budget=budget, time_limit_s=600)
    phase = next(p for p in out.phases if p["phase"] == "critical path")
    assert phase["layouts_ranked"] >= 2
    off = search_plan(
        costs, n, M, budget=budget.__class__(**{**budget.summary(), "priority_actions": 0}), time_limit_s=600
    )
    assert all(p["phase"] != "critical path" for p in off.phases)
    assert out.best.step_s < off.best.step_s
