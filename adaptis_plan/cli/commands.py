"""The `adaptis` commands: thin click commands over the library (`app`), and `main`.

Every command imports its heavy modules lazily so `adaptis --help` stays instant and never
imports torch or ortools. User errors (`AdaptisError`) are turned into one line on stderr
and an exit code in one place, `main()`. `--json` prints one JSON object on stdout and
nothing else there; human output goes to stderr through one rich console (`streams`).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import click

from adaptis_plan.cli.checks import (
    _check_at_most,
    _check_configuration_options,
    _check_output,
    _check_positive,
    _check_training_options,
    _head_chunks_option,
)
from adaptis_plan.cli.options import field_option, section_values
from adaptis_plan.cli.streams import (
    _interrupted,
    _quiet_exit_reader_gone,
    _ReaderGone,
    _say_error,
    console,
    emit_json,
    note,
    say,
    write_stdout,
)
from adaptis_plan.cli.tables import print_catalogue, print_hardware, print_model, print_profile
from adaptis_plan.errors import AdaptisError, InputError
from adaptis_plan.spec.config import Parallelism, PipelineSettings, RuntimeSettings, SearchEffort
from adaptis_plan.spec.limits import DEFAULT_HARD_STOP_S
from adaptis_plan.text import printable, shown
from adaptis_plan.units import fmt_time

# when the command started: `plan --time-limit` counts from here, the imports of a fresh process
# included; `main()` restarts the clock when this module was imported long before (a library or a
# test calling `main()` several times in one process)
_STARTED = time.perf_counter()
_IMPORT_GRACE_S = 2.0


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="adaptis")
def cli() -> None:
    """Plan the whole LLM training configuration and the pipeline co-designed with it."""


def _given(param: str) -> bool:
    """Whether the user gave this option (command line or environment), rather than click's default."""
    source = click.get_current_context().get_parameter_source(param)
    return source is not None and source is not click.core.ParameterSource.DEFAULT


# ----------------------------------------------------------------------------- models
@cli.command("models")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def models_cmd(as_json: bool) -> None:
    """List the built-in model zoo."""
    from adaptis_plan.inputs.models.load import list_models

    print_catalogue("models", "built-in models", list_models(), as_json)


@cli.group("model")
def model_group() -> None:
    """Inspect a model: built-in name, HF config.json (or folder), or native spec file."""


@model_group.command("show")
@click.argument("model")
@click.option("--hardware", "hardware_arg", default=None, help="add per-layer F/I/W seconds on this hardware")
@click.option("--seq-len", default=4096, show_default=True, type=int)
@click.option("--micro-batch-size", default=1, show_default=True, type=int)
@click.option("--tp", default=1, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def model_show(
    model: str, hardware_arg: str | None, seq_len: int, micro_batch_size: int, tp: int, as_json: bool
) -> None:
    """Layers, kinds and parameter counts of MODEL."""
    from adaptis_plan.cost.params import layer_params, model_params
    from adaptis_plan.inputs.models.load import load_model

    spec = load_model(model)
    total = model_params(spec)
    rows = [
        {"index": i, "kind": layer.kind, "parameters": layer_params(spec, layer).total}
        for i, layer in enumerate(spec.layers)
    ]
    if hardware_arg:
        from adaptis_plan.cost.table import layer_cost_rows
        from adaptis_plan.inputs.hardware import load_hardware
        from adaptis_plan.spec.training import TrainingConfig

        _check_training_options(1, 1, seq_len, micro_batch_size, tp)
        hw = load_hardware(hardware_arg)
        training = TrainingConfig(num_microbatches=1, micro_batch_size=micro_batch_size, seq_len=seq_len, pp=1, tp=tp)
        for row, extra in zip(rows, layer_cost_rows(spec, hw, training), strict=True):
            row.update({k: v for k, v in extra.items() if k not in row})
    out = {
        "name": spec.name,
        "parameters": total.total,
        "active_parameters": total.active,
        "extra_parameters": spec.extra_parameters,
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "vocab_size": spec.vocab_size,
        "layers": rows,
    }
    if as_json:
        emit_json(out)
        return
    print_model(spec, rows, total, timed=hardware_arg is not None)


# ----------------------------------------------------------------------------- hardware
@cli.group("hardware", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
@click.pass_context
def hardware_group(ctx: click.Context, as_json: bool) -> None:
    """List built-in hardware profiles, or `show NAME`."""
    if ctx.invoked_subcommand is not None:
        return
    from adaptis_plan.inputs.hardware import list_hardware

    print_catalogue("hardware", "built-in hardware profiles", list_hardware(), as_json)


@hardware_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def hardware_show(name: str, as_json: bool) -> None:
    """Show one hardware profile (built-in name or file)."""
    from adaptis_plan.inputs.hardware import hardware_notes, load_hardware
    from adaptis_plan.spec.hardware import HardwareProfileFile

    hw = load_hardware(name)
    data = HardwareProfileFile.shown(hw)  # loads back as --hardware FILE (the derived keys recomputed)
    if as_json:
        emit_json(data)
    else:
        print_hardware(hw)
    for line in hardware_notes(name):
        note(line)


# ----------------------------------------------------------------------------- plan
@cli.command("plan")
@click.option("--model", "model_arg", required=True, help="built-in name, HF config.json (or folder), or spec file")
@click.option("--hardware", "hardware_arg", required=True, help="built-in profile name or profile file")
@field_option(Parallelism, "pp")
@field_option(Parallelism, "num_microbatches")
@click.option("--seq-len", default=4096, show_default=True, type=int)
@field_option(Parallelism, "micro_batch_size")
@field_option(Parallelism, "tp")
@click.option(
    "--gpus", type=int, default=None, help="plan the whole configuration for this many GPUs of the profile's type"
)
@click.option("--global-batch-size", type=int, default=None, help="sequences per optimizer step (with --gpus)")
@click.option(
    "--gpus-per-node", type=int, default=None, help="GPUs per node, overriding the profile's (docs/clusters.md)"
)
@click.option(
    "--nic-gbit-per-node",
    default=None,
    help="network bandwidth of one node, Gb/s per direction as NICs are sold: 3200 or 8x400 (NICs x Gb/s each);"
    " each GPU gets its share (overrides the profile's inter_node.bandwidth_gbps, GB/s per GPU)",
)
@click.option(
    "--nic-gbit-per-gpu",
    type=float,
    default=None,
    help="network bandwidth of one GPU, Gb/s per direction (400: one NDR NIC per GPU)",
)
@click.option(
    "--memory-fraction",
    type=float,
    default=None,
    help="share of each GPU's memory the plan may fill, in (0, 1] [default: the profile's, 0.9 for the built-ins]",
)
@click.option("--usable-memory-gib", type=float, default=None, help="GiB of each GPU's memory the plan may fill")
@field_option(Parallelism, "dp")
@field_option(Parallelism, "cp")
@field_option(Parallelism, "ep")
@field_option(Parallelism, "zero")
@field_option(RuntimeSettings, "attention")
@field_option(RuntimeSettings, "tp_comm_overlap")
@field_option(RuntimeSettings, "dp_overlap")
@field_option(PipelineSettings, "strategy")
@field_option(PipelineSettings, "partition")
@field_option(PipelineSettings, "stages_per_device")
@field_option(PipelineSettings, "components")
@field_option(PipelineSettings, "head_chunks")
@field_option(PipelineSettings, "recompute")
@click.option(
    "--costs",
    "costs_arg",
    default=None,
    type=click.Path(),
    help="measured profile from `adaptis profile`, or `paper`: the AdaPtis paper's own profiled layer costs"
    " (gemma-s|m|l, deepseek-s|m|l, nemotron-h-s|m|l), for comparability with the paper, not accuracy"
    " (real runs disagree with its head backward); default: the analytic model",
)
@field_option(PipelineSettings, "target")
@field_option(SearchEffort, "time_limit_s")
@field_option(SearchEffort, "hard_stop")
@field_option(SearchEffort, "seed")
@click.option("-o", "--output", required=True, type=click.Path(), help="plan file to write")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def plan_cmd(
    model_arg,
    hardware_arg,
    seq_len,
    gpus,
    global_batch_size,
    gpus_per_node,
    nic_gbit_per_node,
    nic_gbit_per_gpu,
    memory_fraction,
    usable_memory_gib,
    costs_arg,
    output,
    as_json,
    **settings,
) -> None:
    """Plan partition, placement and schedule; write one JSON plan."""
    from adaptis_plan.spec.limits import MAX_STAGES_PER_DEVICE, MAX_TIME_LIMIT_S

    fixed = section_values(Parallelism, settings)  # None = not given (--gpus: searched)
    pipeline, effort = section_values(PipelineSettings, settings), section_values(SearchEffort, settings)
    runtime = RuntimeSettings(**section_values(RuntimeSettings, settings))
    pp, microbatches, micro_batch_size, tp = (fixed[k] for k in ("pp", "num_microbatches", "micro_batch_size", "tp"))
    _check_configuration_options(gpus, global_batch_size, fixed)
    if gpus is None:
        _check_training_options(pp, microbatches, seq_len, micro_batch_size or 1, tp or 1)
    time_limit = effort["time_limit_s"]
    if not math.isfinite(time_limit) or not 0 < time_limit <= MAX_TIME_LIMIT_S:
        raise InputError(
            f"--time-limit = {time_limit}: must be a finite number of seconds in (0, {MAX_TIME_LIMIT_S:,g}];"
            " pass e.g. --time-limit 5"
        )
    stages_per_device = pipeline["stages_per_device"]
    _check_positive(stages_per_device=stages_per_device)
    _check_at_most(stages_per_device=(stages_per_device, MAX_STAGES_PER_DEVICE))
    pipeline["head_chunks"] = _head_chunks_option(pipeline["head_chunks"])
    pipeline["components"] = tuple(s.strip() for s in pipeline["components"].split(",") if s.strip())
    pipeline["target"] = pipeline["target"].lower()
    # an explicit --time-limit is the hard stop; the default's work is sized for 5 s, its stop is a safety net
    effort["hard_stop_s"] = None if _given("time_limit_s") else DEFAULT_HARD_STOP_S
    from adaptis_plan.inputs.hardware import HardwareOverrides, check_overrides

    overrides = HardwareOverrides(
        gpus_per_node, nic_gbit_per_node, nic_gbit_per_gpu, memory_fraction, usable_memory_gib
    )
    check_overrides(overrides)
    _check_output(output, "-o", model_arg, hardware_arg, costs_arg)
    from adaptis_plan.app.plan import PlanRequest, make_plan_for

    req = PlanRequest(
        model_arg=model_arg,
        hardware_arg=hardware_arg,
        parallelism=Parallelism.complete(fixed),
        seq_len=seq_len,
        pipeline=PipelineSettings(**pipeline),
        runtime=runtime,
        effort=SearchEffort(**effort),
        costs_path=costs_arg,
        gpus=gpus,
        global_batch_size=global_batch_size,
        fixed=fixed,
        hardware_overrides=overrides if overrides.given else None,
    )
    if not as_json and console().is_terminal:
        from adaptis_plan.render.progress import progress_bar

        with progress_bar(console()) as tick:
            outcome = make_plan_for(req, progress=tick, started_at=_STARTED)
    else:
        outcome = make_plan_for(req, started_at=_STARTED)
    from adaptis_plan.planfile.io import write_plan

    write_plan(outcome.plan, output)
    if as_json:
        emit_json(outcome.json_summary())
    for line in outcome.notes:  # after the outputs: a closed stderr must not cost the JSON or the plan file
        note(line)
    if as_json:
        if outcome.search_info.get("aborted"):
            console().print(
                f"note: --time-limit cut the search short ({outcome.search_info.get('abort_phase')}): the plan can"
                " differ from run to run; --no-hard-stop lets the same search finish (the same plan under any load)",
                soft_wrap=True,
            )
        return
    from adaptis_plan.render.report import print_plan_report

    print_plan_report(console(), outcome, output)


# ----------------------------------------------------------------------------- simulate
@cli.command("simulate")
@click.argument("plan_path", type=click.Path())
@click.option("--model", "model_arg", default=None, help="model (default: the one embedded in the plan)")
@click.option("--hardware", "hardware_arg", default=None, help="hardware (default: the profile embedded in the plan)")
@click.option(
    "--costs",
    "costs_arg",
    default=None,
    type=click.Path(),
    help="measured profile to simulate with, or `paper` (the paper's profiled costs); default: the costs the"
    " plan was made with (embedded in it)",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
@click.option("--trace", "trace_path", default=None, type=click.Path(), help="write a Chrome/Perfetto trace")
@click.option("--svg", "svg_path", default=None, type=click.Path(), help="write an SVG timeline")
@click.option("--width", default=None, type=int, help="terminal timeline width (default: the terminal's)")
def simulate_cmd(plan_path, model_arg, hardware_arg, costs_arg, as_json, trace_path, svg_path, width) -> None:
    """Re-simulate PLAN (never trusting its stored numbers): summary, timeline, trace, SVG."""
    for flag, path in (("--trace", trace_path), ("--svg", svg_path)):
        if path is not None:
            _check_output(path, flag, plan_path, model_arg, hardware_arg, costs_arg)
    _check_positive(width=width)
    _check_at_most(width=(width, 10_000))
    from adaptis_plan.app.simulate import simulate_plan_file

    sim = simulate_plan_file(plan_path, model_arg=model_arg, hardware_arg=hardware_arg, costs_path=costs_arg)
    if trace_path:
        from adaptis_plan.planfile.io import write_json_atomic
        from adaptis_plan.render.trace import chrome_trace

        write_json_atomic(chrome_trace(sim.result, sim.programs, sim.layout, sim.plan.model.name), trace_path)
    if svg_path:
        from adaptis_plan.render.svg import timeline_svg

        _write_text_atomic(svg_path, timeline_svg(sim.result, sim.programs, sim.layout, sim.title))
    if as_json:
        emit_json(sim.json_summary())
    for line in sim.notes:  # after the outputs: a closed stderr must not cost the JSON or the files
        note(line)
    if as_json:
        return
    from adaptis_plan.render.report import print_simulation_report

    print_simulation_report(console(), sim, width=width, trace_path=trace_path, svg_path=svg_path)


def _write_text_atomic(path: str, text: str) -> None:
    from adaptis_plan.planfile.io import write_text_atomic

    write_text_atomic(text, path)


# ----------------------------------------------------------------------------- export
@cli.command("export")
@click.argument("plan_path", type=click.Path())
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(["torch-csv", "megatron-layout", "megatron-args", "megatron-launch", "torchtitan"]),
)
@click.option("--model", "model_arg", default=None, help="model (default: the one embedded in the plan)")
@click.option(
    "-o", "--output", default=None, type=click.Path(), help="file to write (default: stdout; torchtitan: CONFIG.py)"
)
@click.option(
    "--torchtitan-config",
    default=None,
    help="torchtitan: the planned model's torchtitan config, MODULE:CONFIG (e.g. llama3:llama3_8b)",
)
@click.option(
    "--torchtitan-version",
    default=None,
    help="torchtitan: the config fields of this torchtitan, 0.3 or main (default: the installed torchtitan's)",
)
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout: {format, output, text, files}")
def export_cmd(plan_path, fmt, model_arg, output, torchtitan_config, torchtitan_version, as_json) -> None:
    """Export PLAN to another framework's format (checked by the simulator and the runtime's rules first)."""
    from adaptis_plan.app.export import export_plan_file

    if output is not None:
        _check_output(output, "-o", plan_path, model_arg)
    files = export_plan_file(
        plan_path,
        fmt,
        model_arg=model_arg,
        output=output,
        torchtitan_config=torchtitan_config,
        torchtitan_version=torchtitan_version,
    )
    for path, _ in files:  # every file is checked before any is written
        if path:
            _check_output(path, "-o", plan_path, model_arg)
    for path, text in files:
        if path:
            _write_text_atomic(path, text)
    if as_json:
        emit_json(
            {
                "format": fmt,
                "output": output,
                "text": files[0][1],
                "files": [{"output": path, "text": text} for path, text in files],
            }
        )
        return
    for path, text in files:
        if path:
            console().print(f"wrote {shown(path, 4096)}")
        else:
            write_stdout(text if text.endswith("\n") else text + "\n")


# ----------------------------------------------------------------------------- run
@cli.command("run", context_settings={"ignore_unknown_options": False})
@click.argument("plan_path", type=click.Path())
@click.option("--model", "model_arg", default=None, help="model (default: the one embedded in the plan)")
@click.option("--steps", default=3, show_default=True, type=int, help="measured steps after warm-up")
@click.option("--warmup", default=1, show_default=True, type=int, help="warm-up steps (not measured)")
@click.option("--verify", is_flag=True, help="compare loss and every gradient with a single-process step")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
@click.option("--trace", "trace_path", default=None, type=click.Path(), help="write the measured timeline")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option(
    "--timeout",
    "timeout_s",
    default=120,
    show_default=True,
    type=int,
    help="seconds before a stuck peer, a stopped rank or an incomplete rendezvous ends the run",
)
@click.option("--nnodes", default=1, show_default=True, type=int, help="torchrun: number of nodes")
@click.option("--node-rank", default=0, show_default=True, type=int, help="torchrun: this node's rank")
@click.option("--rdzv-endpoint", default=None, help="torchrun: host:port of the rendezvous")
@click.option("--master-port", default=None, type=int, help="torchrun: port (single node)")
def run_cmd(
    plan_path,
    model_arg,
    steps,
    warmup,
    verify,
    as_json,
    trace_path,
    device,
    dtype,
    timeout_s,
    nnodes,
    node_rank,
    rdzv_endpoint,
    master_port,
) -> None:
    """Execute PLAN for real under torchrun (gloo on CPU, NCCL on GPUs).

    On CPU each rank runs one intra-op thread and, when this node's ranks fit one per core, is
    pinned to a core of its own (`cpu_cores` in --json); set ADAPTIS_CPU_PIN=0 to leave placement
    to the OS, for example when several runs share one machine.
    """
    from adaptis_plan.spec.limits import MAX_NODES

    _check_positive(steps=steps, timeout=timeout_s, nnodes=nnodes, master_port=master_port)
    _check_at_most(steps=(steps, 1_000_000), warmup=(warmup, 1_000_000), nnodes=(nnodes, MAX_NODES))
    _check_at_most(master_port=(master_port, 65535))
    if warmup < 0:
        raise InputError(f"--warmup = {warmup}: must be 0 or more; pass --warmup 0 to measure from the first step")
    if not 0 <= node_rank < nnodes:
        raise InputError(f"--node-rank = {node_rank}: must be in 0..{nnodes - 1} (--nnodes {nnodes})")
    if trace_path is not None:
        _check_output(trace_path, "--trace", plan_path, model_arg)
    from adaptis_plan.app.run import run_plan_file
    from adaptis_plan.executor.launch import RunOptions

    options = RunOptions(
        steps=steps,
        warmup=warmup,
        verify=verify,
        device=device,
        dtype=dtype,
        timeout_s=timeout_s,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        master_port=master_port,
    )
    plan, out = run_plan_file(plan_path, options, model_arg=model_arg, trace_path=trace_path)
    if as_json:
        emit_json(out)
        return
    c = console()
    c.print(
        f"[bold]{shown(plan.strategy)}[/] on {plan.training.pp} pipeline ranks: measured step {fmt_time(out['measured_step_time_s'], 'ms')}"
        f" (median of {out['steps']}), predicted {fmt_time(out['predicted_step_time_s'], 'ms')}"
        + (
            ""
            if out.get("expected_step_time_s") is None
            else f" (expected {fmt_time(out['expected_step_time_s'], 'ms')} with the profile's measured variation)"
        )
    )
    recomputed = [f"{st.stage}: {st.recompute}" for st in plan.stages if st.recompute != "none"]
    if recomputed:
        c.print(f"recomputation (stage: mode): {', '.join(recomputed)}")
    t = plan.training
    lines = {
        "dp": (t.dp, f"data parallel: {t.dp} replicas ({out['world_size']} processes), ZeRO {t.zero}; dp collectives",
               "slowest rank, median"),
        "tp": (t.tp, f"tensor parallel: {t.tp} ranks per stage ({out['world_size']} processes); tp collectives",
               "slowest rank, median, waits included"),
        "ep": (t.ep, f"expert parallel: experts over {t.ep} of the dp ranks; expert all-to-alls",
               "slowest rank, median, with the wait for ep peers"),
    }  # fmt: skip
    for dim, (degree, what, how) in lines.items():
        if degree > 1:
            predicted = (out.get("predicted_comm_s") or {}).get(dim)
            c.print(
                f"{what} {fmt_time(out['comm_s'][dim], 'ms')} per step ({how})"
                + ("" if predicted is None else f", predicted {fmt_time(predicted, 'ms')}")
            )
    if verify:
        ok = "[green]verified[/]" if out["verified"] else "[red]NOT verified[/]"
        c.print(
            f"{ok}: loss diff {out['loss_diff']:.2e}, max |grad diff| {out['max_abs_grad_diff']:.2e},"
            f" max |param diff| after the step {out['max_abs_param_diff']:.2e}"
        )
    if trace_path:
        c.print(f"measured trace: {shown(trace_path, 4096)}")
    if verify and not out["verified"]:
        sys.exit(1)


# ----------------------------------------------------------------------------- profile
@cli.command("profile")
@click.option("--model", "model_arg", required=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--seq-len", default=128, show_default=True, type=int)
@click.option("--micro-batch-size", default=1, show_default=True, type=int)
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--repeats", default=7, show_default=True, type=int, help="timed repeats per op, over all rounds")
@click.option(
    "--rounds",
    default=None,
    type=int,
    help="rounds to spread the repeats over, each timing every layer a few repeats, so that a slowdown of the"
    " machine for a second or two moves a few repeats of every layer, not one layer's whole sample; medians over"
    " all rounds' repeats (default: 3, or --repeats if fewer)",
)
@click.option(
    "--runtime/--no-runtime",
    default=None,
    help="also measure the gloo link (2 local ranks; on cpu with what each message end costs a computing rank,"
    " which plans charge to the actions that send or receive) and the runtime's time per action beyond its layers' own"
    " (one rank) (default: on for cpu)",
)
@click.option(
    "--head-chunks",
    "head_chunks_arg",
    default="2,3,4",
    show_default=True,
    help="also measure the head split into these many vocabulary chunks (comma list, or none), so plans that"
    " split the head are costed with the chunks' own times",
)
@click.option(
    "--recompute",
    "recompute",
    is_flag=True,
    help="also measure every decoder block under selective and full recomputation (shown, and in --json; not"
    " written to the profile)",
)
@click.option(
    "--reverse",
    is_flag=True,
    help="measure the layers last to first (the file keeps model order): a second copy profiling at the same"
    " time as a first then never times the same layer at the same moment, as no two pipeline ranks run one",
)
@click.option("-o", "--output", required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def profile_cmd(
    model_arg, device, seq_len, micro_batch_size, dtype, repeats, rounds, runtime, head_chunks_arg, recompute,
    reverse, output, as_json,
) -> None:  # fmt: skip
    """Measure per-layer F / I / W time and activation memory on this machine."""

    _check_training_options(1, 1, seq_len, micro_batch_size, 1)
    _check_positive(repeats=repeats, rounds=rounds)
    _check_at_most(repeats=(repeats, 1_000_000))
    if rounds is not None and rounds > repeats:
        raise InputError(
            f"--rounds = {rounds}: more than --repeats ({repeats}), and each round times every op at least once;"
            f" pass --rounds 1..{repeats} or more --repeats"
        )
    _check_output(output, "-o", model_arg)
    chunk_counts: tuple[int, ...] = ()
    if head_chunks_arg.strip().lower() != "none":
        parts = [x.strip() for x in head_chunks_arg.split(",") if x.strip()]
        if not parts or not all(x.isdigit() and 2 <= int(x) <= 64 for x in parts):
            raise InputError(f"--head-chunks = {head_chunks_arg!r}: use a comma list of whole numbers 2..64, or none")
        chunk_counts = tuple(int(x) for x in parts)
    from adaptis_plan.app.profile import ProfileRequest, profile_for
    from adaptis_plan.planfile.io import write_json_atomic

    outcome = profile_for(
        ProfileRequest(
            model_arg=model_arg,
            device=device,
            seq_len=seq_len,
            micro_batch_size=micro_batch_size,
            dtype=dtype,
            repeats=repeats,
            rounds=rounds,
            runtime=(device == "cpu") if runtime is None else runtime,
            recompute=recompute,
            head_chunks=chunk_counts,
            reverse=reverse,
        ),
        note=say,  # its lines say `note:` themselves
    )
    spec, prof = outcome.model, outcome.profile
    write_json_atomic(prof.model_dump(mode="json", exclude_none=True), output)
    if as_json:
        emit_json(outcome.json_summary())
        return
    print_profile(spec, prof, seq_len, outcome.recompute)
    console().print(f"wrote {shown(output, 4096)}")


# ----------------------------------------------------------------------------- schema
@cli.command("schema")
@click.option("--check", is_flag=True, help="fail if schemas/ differs from the pydantic models")
@click.option("--dir", "out_dir", default="schemas", show_default=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout: {folder, schemas, up_to_date}")
def schema_cmd(check: bool, out_dir: str, as_json: bool) -> None:
    """Write (or check) the JSON Schemas of every file format."""
    from adaptis_plan.spec.read import path_kind
    from adaptis_plan.spec.schemas import check_schemas, render_schemas

    names = sorted(render_schemas())
    if check:
        if path_kind(out_dir) != "a folder":
            raise InputError(f"--dir {out_dir}: no such folder; pass the schemas/ folder of the checkout with --dir")
        stale = check_schemas(Path(out_dir))
        if stale:
            raise InputError(f"{out_dir}: {', '.join(stale)} out of date; run `adaptis schema` (make schemas)")
        if as_json:
            emit_json({"folder": out_dir, "schemas": names, "up_to_date": True})
        else:
            console().print(f"{shown(out_dir, 4096)}: schemas up to date")
        return
    from adaptis_plan.planfile.io import check_output_path, write_text_atomic

    if not out_dir.strip() or path_kind(out_dir) not in (None, "a folder"):
        raise InputError(f"--dir {out_dir!r}: not a folder; pass the folder to write the schemas into")
    for name in names:
        check_output_path(Path(out_dir) / name, "--dir")
    written = []
    for name, text in sorted(render_schemas().items()):
        write_text_atomic(text, Path(out_dir) / name)
        written.append(Path(out_dir) / name)
    if as_json:
        emit_json({"folder": out_dir, "schemas": [p.name for p in written], "up_to_date": True})
        return
    for p in written:
        console().print(f"wrote {shown(p, 4096)}")


def _from_interrupt(e: BaseException) -> bool:
    """Whether `e` stands for a Ctrl-C: a KeyboardInterrupt in its chain of causes. A C extension whose
    initialisation a Ctrl-C interrupts (importing ortools' solver mid-search) raises `ImportError:
    initialization failed` from the KeyboardInterrupt; that is the user's Ctrl-C, not a bug."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def main() -> None:
    """Console entry point: the one place user errors become messages and exit codes."""
    global _STARTED
    now = time.perf_counter()
    if now - _STARTED > _IMPORT_GRACE_S:
        _STARTED = now
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # click's form of a Ctrl-C (KeyboardInterrupt) inside a command
        _interrupted()
    except click.ClickException as e:  # a usage error: one line, as every other bad input
        if "\n" in e.format_message():  # `adaptis` or a group without a command: its help, as asked
            e.show()
            sys.exit(2)
        ctx = getattr(e, "ctx", None)
        hint = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        _say_error(f"error: {printable(e.format_message()).rstrip('.')}{hint}")
        sys.exit(2 if e.exit_code == 2 else e.exit_code)
    except AdaptisError as e:
        grid = getattr(e, "grid", "")
        _say_error(f"error: {printable(str(e))}", *(printable(line) for line in grid.splitlines()))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except _ReaderGone:
        _quiet_exit_reader_gone()
    except Exception as e:  # a bug, never bad input: exit 1 with the traceback to report
        if _from_interrupt(e):
            _interrupted()
        import traceback

        traceback.print_exc()
        click.echo(
            "internal error: this is a bug in adaptis, not a problem with your input; please report it with the"
            " traceback above",
            err=True,
        )
        sys.exit(1)
