"""`adaptis simulate` and the plan-file loading every command shares: a plan file and what it was made
from (`PlanInputs`), the judge's verdict on it, and the one helper that turns a stored simulation (or
none) into the verdict a command reports (`judge_result`).

Data flow: plan file (+ --model / --hardware / --costs) -> `PlanInputs` -> cost table ->
`judge.simulate.judged` -> `SimOutcome`. No search, no executor, no rich, no click.
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptis_plan.core import CostTable, Layout, Programs
from adaptis_plan.cost.source import cost_table_for, costs_notes, load_costs_profile
from adaptis_plan.cost.table import device_types
from adaptis_plan.errors import InputError
from adaptis_plan.judge.simulate import SimResult, judged
from adaptis_plan.judge.training_step import TrainingStep, training_step
from adaptis_plan.planfile.io import (
    check_model_matches,
    plan_layout,
    plan_programs,
    read_plan,
)
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile, usable_memory_text
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile


def judge_result(
    stored: SimResult | None, layout: Layout, costs: CostTable, programs: Programs, num_microbatches: int
) -> SimResult:
    """The verdict a command reports on `programs` on `costs`: `stored` (a search's own simulation of these
    programs on these costs) when there is one, else a fresh simulation, with its expected step time
    (`judge.simulate.judged`). Every prediction the commands report comes from here."""
    return judged(layout, costs, programs, num_microbatches, stored)


@dataclass(frozen=True)
class PlanInputs:
    """A plan file and everything it was made from: embedded in it, or given on the command line instead.

    `model` is the model as planned (the head in the plan's vocabulary chunks); `overrides` names
    what came from the command line (`model`, `hardware`, `costs`).
    """

    path: str
    plan: PlanFile
    model: ModelSpec
    hardware: HardwareProfile
    profile: CostProfile | str | None  # a measured profile, `paper` (the paper's costs) or None (analytic)
    overrides: tuple[str, ...] = ()
    profile_source: str | None = None  # the `--costs` file, named in error messages (None: the plan's own)

    def cost_table(self) -> CostTable:
        return plan_cost_table(self.plan, self.model, self.hardware, self.profile, self.profile_source)

    @property
    def cost_source(self) -> str:
        """The setting the figures are computed in: cost source, hardware, TP, memory limit."""
        tr = self.plan.training
        what = {None: "analytic cost model", "paper": "the paper's profiled costs"}.get(
            self.profile if isinstance(self.profile, str) or self.profile is None else "", "measured profile"
        )
        runtime = "".join(f", {s}" for s in tr.runtime_settings())
        usable = usable_memory_text(self.hardware)
        return f"{what}, {self.hardware.name}, tp {tr.tp}, memory limit {usable}{runtime}"


def plan_cost_table(
    plan: PlanFile,
    model: ModelSpec,
    hardware: HardwareProfile,
    profile: CostProfile | str | None,
    profile_source: str | None = None,
) -> CostTable:
    """The cost table of a plan file's inputs: the one place a plan's costs are rebuilt.

    The plan's training settings and its stages' recomputation (one mode per layer,
    `cost.recompute.plan_layer_recompute`) are what the costs depend on beside the model,
    hardware and profile.
    """
    from adaptis_plan.cost.recompute import plan_layer_recompute

    return cost_table_for(model, hardware, plan.training, profile, profile_source, recompute=plan_layer_recompute(plan))


def load_plan_inputs(
    plan_path: str, *, model_arg: str | None = None, hardware_arg: str | None = None, costs_path: str | None = None
) -> PlanInputs:
    """Read a plan file; its embedded model, hardware and measured profile, unless `--model`,
    `--hardware` or `--costs` override them (a model must have the plan's fingerprint)."""
    from adaptis_plan.cost.paper import PAPER_COSTS

    plan = read_plan(plan_path)
    model = plan.model.spec
    hardware = plan.hardware.profile
    profile: CostProfile | str | None = PAPER_COSTS if plan.costs.source == "paper" else plan.costs.profile
    overrides = []
    if model_arg is not None:
        from adaptis_plan.inputs.models.load import load_model

        given = load_model(model_arg)
        check_model_matches(plan, given, plan_path)
        if plan.model.head_chunks > 1 and given.num_head_chunks == 1:
            from adaptis_plan.inputs.models.transform import split_head

            given = split_head(given, plan.model.head_chunks)
        if given.num_layers != plan.model.num_layers:
            raise InputError(
                f"{plan_path}: model.num_layers = {plan.model.num_layers} but '{given.name}' has {given.num_layers}"
                f" layers (head in {given.num_head_chunks} chunk(s)); re-plan with `adaptis plan`"
            )
        model = given
        overrides.append("model")
    if hardware_arg is not None:
        from adaptis_plan.inputs.hardware import load_hardware

        hardware = load_hardware(hardware_arg)
        overrides.append("hardware")
    if costs_path is not None:
        profile = load_costs_profile(costs_path)
        overrides.append("costs")
    return PlanInputs(plan_path, plan, model, hardware, profile, tuple(overrides), costs_path)


def load_plan_and_model(plan_path: str, model_arg: str | None = None) -> tuple[PlanFile, ModelSpec]:
    """The plan and the model it was made for (as planned: the head in the plan's vocabulary chunks)."""
    inputs = load_plan_inputs(plan_path, model_arg=model_arg)
    return inputs.plan, inputs.model


def judge_plan(inputs: PlanInputs) -> SimResult:
    """The simulator's verdict on a plan file's programs on its costs; a plan whose programs can
    never finish is refused (DeadlockError naming the file, with the device x step grid)."""
    plan = inputs.plan
    try:
        layout, costs, programs, m = (
            plan_layout(plan),
            inputs.cost_table(),
            plan_programs(plan),
            plan.training.num_microbatches,
        )
        return judge_result(None, layout, costs, programs, m)
    except InputError as e:
        from adaptis_plan.errors import located

        if inputs.profile_source and str(e).startswith(f"{inputs.profile_source}: "):
            raise  # about the --costs file, which it names

        raise located(e, inputs.path) from None


def load_plan_for_run(plan_path: str, model_arg: str | None = None) -> tuple[PlanFile, ModelSpec, SimResult]:
    """`adaptis run`'s loading: the plan, its model, and the judge's check that its programs finish
    (its simulation of the plan on the plan's own costs)."""
    inputs = load_plan_inputs(plan_path, model_arg=model_arg)
    return inputs.plan, inputs.model, judge_plan(inputs)


@dataclass
class SimOutcome:
    plan: PlanFile
    layout: Layout
    programs: Programs
    result: SimResult
    title: str
    stored_differs: bool
    cost_source: str = ""
    notes: tuple[str, ...] = ()  # for stderr (`costs_notes`)
    step: TrainingStep | None = None  # the whole step around the pipeline (`judge.training_step`)

    def json_summary(self) -> dict:
        out = {
            "strategy": self.plan.strategy,
            **self.result.summary(),
            "stored_step_time_s": self.plan.predicted.step_time_s,
            "stored_differs": self.stored_differs,
            "cost_source": self.cost_source,
        }
        if self.step is not None:
            out["training_step"] = self.step.summary()
        return out


def simulate_plan_file(
    plan_path: str, *, model_arg: str | None = None, hardware_arg: str | None = None, costs_path: str | None = None
) -> SimOutcome:
    inputs = load_plan_inputs(plan_path, model_arg=model_arg, hardware_arg=hardware_arg, costs_path=costs_path)
    plan = inputs.plan
    layout, programs = plan_layout(plan), plan_programs(plan)
    result = judge_plan(inputs)
    stored = plan.predicted.step_time_s
    differs = abs(stored - result.step_time_s) > 1e-6 * max(stored, result.step_time_s, 1e-12)
    title = (
        f"{plan.model.name} · {plan.strategy} · pp {plan.training.pp} · {plan.training.num_microbatches} mb"
        f" · seq {plan.training.seq_len}"
    )
    source = inputs.profile_source or f"{plan_path}: costs.profile"
    notes = tuple(costs_notes(inputs.profile, inputs.hardware, source))
    names = device_types(inputs.hardware, plan.training)  # the cost table's rows, without rebuilding it
    step = training_step(layout, programs, result, inputs.model, plan.training, inputs.hardware, names)
    return SimOutcome(plan, layout, programs, result, title, differs, inputs.cost_source, notes, step)
