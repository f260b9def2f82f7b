"""bench.actions: a plan's dependency graph replayed with a run's own action spans."""

from __future__ import annotations

import copy

import pytest

from adaptis_plan.usecases import simulate_plan_file
from bench import actions


def _ranks(zbv_plan_path: str, rounds: int) -> list[dict]:
    """What a launch would record if every action took exactly its simulated time, every round."""
    sim = simulate_plan_file(zbv_plan_path)
    step = sim.result.step_time_s
    return [
        {
            "step_times_s": {"ours": [step] * rounds},
            "action_spans_s": {
                "ours": [[(str(a), s, e) for a, (s, e) in zip(prog, row, strict=True)] for _ in range(rounds)]
            },
        }
        for prog, row in zip(sim.programs, sim.result.times, strict=True)
    ]


def test_the_simulated_spans_replay_to_the_simulated_step(zbv_plan_path: str) -> None:
    step = simulate_plan_file(zbv_plan_path).result.step_time_s
    b = actions.breakdown(_ranks(zbv_plan_path, 3), "ours", zbv_plan_path)
    assert b.replayed_s == pytest.approx(step) and b.median_spans_s == pytest.approx(step)
    assert b.predicted_s == pytest.approx(step)
    assert sum(n for n, _ in b.outliers.values()) == 0


def test_a_slow_action_in_one_round_costs_that_round_only(zbv_plan_path: str) -> None:
    ranks = _ranks(zbv_plan_path, 3)
    step = simulate_plan_file(zbv_plan_path).result.step_time_s
    slowed = copy.deepcopy(ranks)
    spans = slowed[0]["action_spans_s"]["ours"]
    for k in (0, 1):  # two of three rounds: the median round is a slow one
        name, s, e = spans[k][0]
        spans[k][0] = (name, s, e + 5e-3)  # the first action of device 0, which everything after it waits for
    b = actions.breakdown(slowed, "ours", zbv_plan_path)
    assert b.replayed_s == pytest.approx(step + 5e-3)
    assert b.median_spans_s == pytest.approx(step + 5e-3)  # the median action is slow too
    spans[1][0] = ranks[0]["action_spans_s"]["ours"][1][0]  # now only one round is slow
    b = actions.breakdown(slowed, "ours", zbv_plan_path)
    assert b.median_spans_s == pytest.approx(step) and b.replayed_s == pytest.approx(step)
    sim = simulate_plan_file(zbv_plan_path)
    first = sim.programs[0][0]
    kind = actions._kind(sim.layout, 0, first.stage, first.op)
    assert kind == "F sends"  # ZBV's stage 1 is on the other device
    assert b.outliers[kind][0] == 1  # the one slow round's action, over its own median by 5 ms
    assert sum(n for n, _ in b.outliers.values()) == 1


def test_spans_of_other_actions_are_refused(zbv_plan_path: str) -> None:
    ranks = _ranks(zbv_plan_path, 2)
    spans = ranks[1]["action_spans_s"]["ours"][1]
    spans[0], spans[1] = spans[1], spans[0]
    with pytest.raises(ValueError, match="device 1's recorded actions in round 1 are not the plan's program"):
        actions.breakdown(ranks, "ours", zbv_plan_path)
