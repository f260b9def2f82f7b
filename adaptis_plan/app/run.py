"""`adaptis run`: a judged plan file handed to the bundled executor, with the cost model's prediction
beside it.

Data flow: plan file -> `app.simulate.load_plan_for_run` (the contract and the judge) ->
`executor.support.refusal` -> `executor.launch.run_plan`. torch is imported only inside the calls
that launch, never at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adaptis_plan.app.simulate import load_plan_for_run
from adaptis_plan.cost.table import device_types
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.io import plan_layout
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile

if TYPE_CHECKING:  # the executor (torch) is imported only when a plan is run or a model profiled
    from adaptis_plan.executor.launch import RunOptions


def executor_refusal(plan: PlanFile, model: ModelSpec | None = None) -> str | None:
    """Why the bundled executor cannot run `plan` (with `model`, when given) as planned, or None
    (`executor.support.refusal`: cp > 1, ep > 1, and with tp > 1 the layers it cannot split)."""
    from adaptis_plan.executor.support import refusal

    return refusal(plan, model)


def run_plan_file(
    plan_path: str, options: RunOptions, *, model_arg: str | None = None, trace_path: str | None = None
) -> tuple[PlanFile, dict]:
    """`adaptis run`: read the plan file and check it once (`load_plan_for_run`: the contract and the
    judge), then hand the objects to the launcher, which lowers and launches them (it never rereads
    `plan_path`). Returns the plan and the launcher's result (the `run` JSON keys)."""
    from adaptis_plan.executor.launch import run_plan

    plan, model, judged = load_plan_for_run(plan_path, model_arg)
    why = executor_refusal(plan, model)
    if why is not None:
        raise InputError(f"{plan_path}: {why}")
    # the prediction is the judge's, as `simulate` gives it: a hand-edited plan's stored figure may be stale
    return plan, run_plan(
        plan,
        model,
        options,
        trace_path=trace_path,
        label=plan_path,
        predicted_s=judged.step_time_s,
        expected_s=judged.expected_step_time_s,
        predicted_comm_s=predicted_comm(plan, model),
    )


def predicted_comm(plan: PlanFile, model: ModelSpec) -> dict[str, float] | None:
    """The cost model's collectives of one step by dimension, on the slowest pipeline rank: "dp" its
    gradient sync and parameter gather (`cost.comm.step_extras`), "tp" and "ep" its layers'
    tensor-parallel collectives and expert all-to-alls over every micro-batch, recomputed forwards
    included (`cost.table.layer_comm_seconds`). None with none of them."""
    from adaptis_plan.cost.recompute import plan_layer_recompute
    from adaptis_plan.cost.table import layer_comm_seconds, zero3_seconds
    from adaptis_plan.judge.training_step import device_extras

    t, hw, layout = plan.training, plan.hardware.profile, plan_layout(plan)
    modes = plan_layer_recompute(plan)
    out: dict[str, float] = {}
    held = [[layer for s in layout.stages_of(d) for layer in layout.layers(s)] for d in range(layout.num_devices)]
    if t.dp * t.cp > 1:
        extras = device_extras(layout, model, t, hw, device_types(hw, t))
        out["dp"] = max(x.grad_sync_s + x.param_gather_s for x in extras)
        if t.zero == 3:  # the per-op gathers and scatters, every micro-batch (`cost.analytic.op_seconds`)
            per_layer = zero3_seconds(model, hw, t, modes)
            out["dp"] += t.num_microbatches * max(float(per_layer[h].sum()) for h in held)
    for group, degree in (("tp", t.tp), ("ep", t.ep)):
        if degree > 1:
            per_layer = layer_comm_seconds(model, hw, t, group, modes)
            out[group] = t.num_microbatches * max(float(per_layer[h].sum()) for h in held)
    return out or None
