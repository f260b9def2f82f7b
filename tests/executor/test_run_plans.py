"""`adaptis run --verify` on the planner's own plans: for each tiny model family, every classic
strategy and the adaptive plan, executed for real under torchrun with gloo on 2 CPU processes
(the session's shared two-process launch, the plans one after another), each checked against a
single-process step. Any gradient that differs fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_executor import ZOO_TINY, Ran

from adaptis_plan.executor.launch import RunOptions
from adaptis_plan.planfile.io import write_plan
from adaptis_plan.schedules import STRATEGIES
from adaptis_plan.usecases import PlanRequest, make_plan_for


@pytest.mark.slow
def test_every_strategy_and_adaptive_verify(two_ranks: dict[str, Ran]) -> None:
    """The planner's plans of the zoo's tiny models, every classic strategy and adaptive (jobs of the session's
    shared two-process launch, `helpers_executor.strategy_jobs`), against one process."""
    results = {k.removeprefix("strategies:"): ran.result for k, ran in two_ranks.items() if k.startswith("strategies:")}
    failed = [(label, r["max_abs_grad_diff"], r["loss_diff"]) for label, r in results.items() if not r["verified"]]
    assert not failed, failed
    assert len(results) == len(ZOO_TINY) * (len(STRATEGIES) + 1)
    assert all(r["measured_step_time_s"] > 0 for r in results.values())


def test_run_reports_the_judges_prediction_not_a_stale_stored_one(
    tiny_plan: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-edited plan (a stage's recompute, which the fingerprints do not cover) keeps its old stored
    step time; `run` reports what `simulate` gives for it. The launch itself is replaced by the prediction its job carries."""
    import json

    import adaptis_plan.executor.launch as launch
    from adaptis_plan.usecases import run_plan_file, simulate_plan_file

    plan = json.loads(tiny_plan.read_text())
    plan["stages"][0]["recompute"] = "full"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(plan))
    monkeypatch.setattr(
        launch, "run_plans", lambda jobs, options: [{"predicted_step_time_s": j.predicted_step_time_s} for j in jobs]
    )
    _, out = run_plan_file(str(edited), RunOptions(steps=1))
    sim = simulate_plan_file(str(edited))
    assert sim.stored_differs  # the edit changed the simulated step
    assert out["predicted_step_time_s"] == pytest.approx(sim.result.step_time_s)


def test_run_reports_the_expected_step_of_a_plan_made_with_measured_variation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a profile that measured how op times vary, `run` reports the judge's expected step beside its step."""
    import json

    from helpers_cli import tiny_cost_profile

    import adaptis_plan.executor.launch as launch
    from adaptis_plan.usecases import run_plan_file, simulate_plan_file

    costs, plan = tmp_path / "costs.json", tmp_path / "plan.json"
    costs.write_text(json.dumps(tiny_cost_profile() | {"time_spread": 0.1}))
    req = PlanRequest.of(
        "tiny-llama", "cpu", pp=2, num_microbatches=4, seq_len=128, strategy="1F1B", costs_path=str(costs)
    )
    write_plan(make_plan_for(req).plan, plan)
    monkeypatch.setattr(
        launch,
        "run_plans",
        lambda jobs, options: [
            {"predicted_step_time_s": j.predicted_step_time_s, "expected_step_time_s": j.expected_step_time_s}
            for j in jobs
        ],
    )
    _, out = run_plan_file(str(plan), RunOptions(steps=1))
    sim = simulate_plan_file(str(plan)).result
    assert sim.expected_step_time_s is not None and sim.expected_step_time_s > sim.step_time_s
    assert out == {"predicted_step_time_s": sim.step_time_s, "expected_step_time_s": sim.expected_step_time_s}
