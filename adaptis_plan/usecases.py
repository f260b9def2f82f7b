"""Compatibility re-exports: the public names of the application layer (`adaptis_plan.app`) under their
former home, so that `from adaptis_plan.usecases import make_plan_for` keeps working. New code imports
from the `app` module that defines the name (`app.plan`, `app.simulate`, `app.export`, `app.run`,
`app.profile`); private helpers are not re-exported.
"""

from __future__ import annotations

from adaptis_plan.app.export import EXPORT_FORMATS, export_plan_file
from adaptis_plan.app.plan import (
    RECOMPUTE_CHOICES,
    PlanOutcome,
    PlanRequest,
    cluster_notes,
    context_notes,
    make_configuration_plan,
    make_plan_for,
    request_notes,
)
from adaptis_plan.app.profile import (
    PROFILE_NOTE_S,
    ProfileOutcome,
    ProfileRequest,
    measure_action_overhead,
    profile_for,
    profile_notes,
)
from adaptis_plan.app.run import executor_refusal, predicted_comm, run_plan_file
from adaptis_plan.app.simulate import (
    PlanInputs,
    SimOutcome,
    judge_plan,
    load_plan_and_model,
    load_plan_for_run,
    load_plan_inputs,
    plan_cost_table,
    simulate_plan_file,
)

__all__ = [
    "EXPORT_FORMATS",
    "PROFILE_NOTE_S",
    "RECOMPUTE_CHOICES",
    "PlanInputs",
    "PlanOutcome",
    "PlanRequest",
    "ProfileOutcome",
    "ProfileRequest",
    "SimOutcome",
    "cluster_notes",
    "context_notes",
    "executor_refusal",
    "export_plan_file",
    "judge_plan",
    "load_plan_and_model",
    "load_plan_for_run",
    "load_plan_inputs",
    "make_configuration_plan",
    "make_plan_for",
    "measure_action_overhead",
    "plan_cost_table",
    "predicted_comm",
    "profile_for",
    "profile_notes",
    "request_notes",
    "run_plan_file",
    "simulate_plan_file",
]
