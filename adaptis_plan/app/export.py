"""`adaptis export`: a judged plan file as a runtime's schedule and configuration (torch CSV, Megatron
layout / arguments / launch script, torchtitan config module).

Data flow: plan file -> `app.simulate.judge_plan` (refuse what deadlocks) -> `schedules.targets`
(refuse what the runtime cannot run) -> `planfile.export*` writers -> (path, text) pairs the CLI writes.
No search, no executor, no rich, no click.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from adaptis_plan.app.simulate import PlanInputs, judge_plan, load_plan_inputs
from adaptis_plan.core import Layout
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.spec.plan_file import PlanFile

if TYPE_CHECKING:
    from adaptis_plan.planfile.export import TrainingShape

EXPORT_FORMATS = ("torch-csv", "megatron-layout", "megatron-args", "megatron-launch", "torchtitan")


def export_plan_file(
    plan_path: str,
    fmt: str,
    *,
    model_arg: str | None = None,
    output: str | None = None,
    torchtitan_config: str | None = None,
    torchtitan_version: str | None = None,
) -> list[tuple[str | None, str]]:
    """The files an export writes, as (path, text) in writing order; path None = stdout.

    torchtitan: the config's field names are `torchtitan_version`'s, or the installed
    torchtitan's (`export_torchtitan.torchtitan_field_set`).

    The plan is judged first (a plan whose programs deadlock or miss actions is refused), then
    checked against what the format's runtime can run (`schedules.targets`): nothing is
    written that the runtime would reject later.
    """
    from adaptis_plan.schedules.targets import check_exportable

    version = _check_options(fmt, output, torchtitan_config, torchtitan_version)
    inputs = load_plan_inputs(plan_path, model_arg=model_arg)
    plan = inputs.plan
    judge_plan(inputs)
    layout = plan_layout(plan)
    try:
        check_exportable(fmt, layout.stage_device, layout.num_devices, plan.model.head_chunks)
    except InputError as e:
        raise InputError(f"{plan_path}: {e}") from None
    try:
        return _files(fmt, inputs, layout, output, torchtitan_config, version)
    except InputError as e:
        raise InputError(f"{plan_path}: {e}") from None


def _check_options(fmt: str, output: str | None, torchtitan_config: str | None, torchtitan_version: str | None) -> str:
    """The export's options checked before the plan is read (they cost nothing to check, the plan a
    simulation); returns the torchtitan version whose field names the config uses."""
    from adaptis_plan.planfile.export_torchtitan import torchtitan_base, torchtitan_field_set

    if fmt not in EXPORT_FORMATS:
        raise InputError(f"--format = {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    if torchtitan_version is not None and fmt != "torchtitan":
        raise InputError(f"--torchtitan-version is an option of --format torchtitan, not of --format {fmt}")
    if fmt != "torchtitan":
        return "0.3"
    if output is None:
        raise InputError("--format torchtitan writes a config module and the schedule CSV beside it; pass -o CONFIG.py")
    if torchtitan_config is None:
        raise InputError(
            "--format torchtitan needs --torchtitan-config MODULE:CONFIG: the torchtitan config of the planned"
            " model (e.g. llama3:llama3_8b), whose pipeline settings the export replaces"
        )
    if Path(output).suffix != ".py" or not Path(output).stem.isidentifier():
        raise InputError(
            f"-o {output!r}: torchtitan loads its config from a Python module (`--module NAME --config ...`);"
            " name the output like adaptis_pipeline.py"
        )
    torchtitan_base(torchtitan_config)
    return torchtitan_field_set(torchtitan_version, _installed_version("torchtitan"))


def _training_shape(plan: PlanFile) -> TrainingShape:
    """The plan's training settings as the exporters take them, with each stage's recomputation."""
    from adaptis_plan.planfile.export import TrainingShape

    t = plan.training
    return TrainingShape(
        num_microbatches=t.num_microbatches,
        micro_batch_size=t.micro_batch_size,
        seq_len=t.seq_len,
        tp=t.tp,
        dp=t.dp,
        cp=t.cp,
        ep=t.ep,
        zero=t.zero,
        dtype=t.dtype,
        stage_recompute=tuple(stage.recompute for stage in plan.stages),
        attention=t.attention,
        dp_overlap=t.dp_overlap,
        tp_comm_overlap=t.tp_comm_overlap,
        pp=t.pp,
        stage_keeps_unsharded=t.stage_keeps_unsharded,
    )


def _files(
    fmt: str, inputs: PlanInputs, layout: Layout, output: str | None, torchtitan_config: str | None, version: str
) -> list[tuple[str | None, str]]:
    """The (path, text) pairs of a judged, exportable plan in format `fmt`."""
    from adaptis_plan.planfile.export import megatron_layout, to_torch_csv
    from adaptis_plan.planfile.export_megatron import megatron_args, megatron_launch
    from adaptis_plan.planfile.export_torchtitan import torchtitan_config_module

    plan, model = inputs.plan, inputs.model
    programs = plan_programs(plan)
    kinds = [layer.kind for layer in model.layers]
    training = _training_shape(plan)
    t = plan.training
    title = f"{plan.model.name}, {plan.strategy} plan, pp {t.pp}, {t.num_microbatches} micro-batches"
    if fmt == "torch-csv":
        return [(output, to_torch_csv(programs))]
    if fmt == "megatron-layout":
        return [(output, megatron_layout(layout, kinds) + "\n")]
    experts = [layer.moe.num_experts for layer in model.layers if layer.moe is not None]
    if fmt == "megatron-args":
        return [(output, megatron_args(layout, kinds, training, num_experts=experts, title=title))]
    if fmt == "megatron-launch":
        per_node = {group.devices_per_node for group in plan.hardware.profile.groups}
        if len(per_node) != 1:
            raise InputError(
                f"megatron-launch: the hardware's node groups have {sorted(per_node)} GPUs per node, and torchrun"
                " starts the same number on every node; use megatron-args with your own launcher"
            )
        script = megatron_launch(
            layout, kinds, training, devices_per_node=per_node.pop(), num_experts=experts, title=title
        )
        return [(output, script)]
    config_path = Path(str(output))
    csv_path = config_path.with_suffix(".csv")
    module = torchtitan_config_module(
        layout, kinds, csv_name=csv_path.name, base=str(torchtitan_config), training=training, title=title,
        version=version,
    )  # fmt: skip
    return [(str(csv_path), to_torch_csv(programs)), (str(config_path), module)]


def _installed_version(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
