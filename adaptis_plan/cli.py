"""`adaptis` command line: thin click commands over the library.

Every command imports its heavy modules lazily so `adaptis --help` stays instant and never
imports torch or ortools. User errors (`AdaptisError`) are turned into one line on stderr
and an exit code in one place, `main()`. `--json` prints one JSON object on stdout and
nothing else there; human output goes to stderr through one rich console.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from adaptis_plan.errors import AdaptisError, InputError

# when the command started: `plan --time-limit` counts from here (imports included)
_STARTED = time.perf_counter()

_STDERR = None


def console():
    """The one rich console (stderr), created on first use."""
    global _STDERR
    if _STDERR is None:
        from rich.console import Console

        _STDERR = Console(stderr=True, highlight=False)
    return _STDERR


def emit_json(data: object) -> None:
    click.echo(json.dumps(data, indent=1))


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="adaptis")
def cli() -> None:
    """Plan pipeline-parallel LLM training: partition, placement and schedule, co-optimized."""


def _print_catalogue(key: str, title: str, rows: list[tuple[str, str]], as_json: bool) -> None:
    """A (name, description) list: `{key: [...]}` with --json, else a table."""
    if as_json:
        emit_json({key: [{"name": n, "description": d} for n, d in rows]})
        return
    from rich.table import Table

    t = Table(title=title)
    t.add_column("name")
    t.add_column("description")
    for n, d in rows:
        t.add_row(n, d)
    console().print(t)


# ----------------------------------------------------------------------------- models
@cli.command("models")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def models_cmd(as_json: bool) -> None:
    """List the built-in model zoo."""
    from adaptis_plan.inputs.models.load import list_models

    _print_catalogue("models", "built-in models", list_models(), as_json)


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

        _check_positive(seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp)
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
    from rich.table import Table

    t = Table(title=f"{spec.name}: {spec.num_layers} layers")
    t.add_column("index", justify="right")
    t.add_column("kind")
    t.add_column("parameters", justify="right")
    timed = hardware_arg is not None
    if timed:
        for c in ("F ms", "I ms", "W ms", "act"):
            t.add_column(c, justify="right")
    for r in rows:
        cells = [str(r["index"]), r["kind"], f"{r['parameters']:,}"]
        if timed:
            cells += [
                f"{r['f_s'] * 1e3:.3f}",
                f"{r['i_s'] * 1e3:.3f}",
                f"{r['w_s'] * 1e3:.3f}",
                _fmt_bytes(r["act_bytes"]),
            ]
        t.add_row(*cells)
    console().print(t)
    line = f"total parameters: {total.total:,} ({total.total / 1e9:.2f}B), active per token: {total.active / 1e9:.2f}B"
    if spec.extra_parameters:
        line += f"; outside the pipeline (vision tower): {spec.extra_parameters / 1e9:.2f}B"
    console().print(line)


# ----------------------------------------------------------------------------- hardware
@cli.group("hardware", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
@click.pass_context
def hardware_group(ctx: click.Context, as_json: bool) -> None:
    """List built-in hardware profiles, or `show NAME`."""
    if ctx.invoked_subcommand is not None:
        return
    from adaptis_plan.inputs.hardware import list_hardware

    _print_catalogue("hardware", "built-in hardware profiles", list_hardware(), as_json)


@hardware_group.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def hardware_show(name: str, as_json: bool) -> None:
    """Show one hardware profile (built-in name or file)."""
    from adaptis_plan.inputs.hardware import load_hardware

    hw = load_hardware(name)
    data = hw.model_dump(mode="json")
    data["num_devices"] = hw.num_devices
    if as_json:
        emit_json(data)
        return
    from rich.table import Table

    t = Table(title=f"{hw.name}: {hw.description}")
    for c in ("device type", "bf16 TFLOP/s", "matmul eff.", "HBM", "HBM GB/s"):
        t.add_column(c)
    for n, d in hw.device_types.items():
        t.add_row(
            n,
            f"{d.peak_bf16_tflops:g}",
            f"{d.matmul_efficiency:g}",
            _fmt_bytes(d.hbm_bytes),
            f"{d.hbm_bandwidth_gbps:g}",
        )
    console().print(t)
    for g in hw.groups:
        console().print(f"group: {g.num_nodes} node(s) x {g.devices_per_node} {g.device_type}")
    for label, link in (("intra-node", hw.intra_node), ("inter-node", hw.inter_node)):
        console().print(f"{label} link: {link.bandwidth_gbps:g} GB/s, {link.latency_s * 1e6:g} us ({link.source})")


# ----------------------------------------------------------------------------- plan
def _check_positive(**values: int | float | None) -> None:
    for name, v in values.items():
        if v is not None and v <= 0:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} = {v}: must be a positive number; pass {flag} 1 or more")


@cli.command("plan")
@click.option("--model", "model_arg", required=True, help="built-in name, HF config.json (or folder), or spec file")
@click.option("--hardware", "hardware_arg", required=True, help="built-in profile name or profile file")
@click.option("--pp", required=True, type=int, help="pipeline ranks")
@click.option("--microbatches", required=True, type=int, help="micro-batches per step")
@click.option("--seq-len", default=4096, show_default=True, type=int)
@click.option("--micro-batch-size", default=1, show_default=True, type=int)
@click.option("--tp", default=1, show_default=True, type=int)
@click.option("--strategy", default="adaptive", show_default=True, help="adaptive, or a classic schedule name")
@click.option("--partition", type=click.Choice(["uniform", "balanced"]), default=None, help="classic strategies only")
@click.option("--stages-per-device", type=int, default=None, help="classic loop strategies: chunks per device")
@click.option(
    "--search",
    "search_arg",
    default="partition,placement,schedule",
    show_default=True,
    help="adaptive components to search (comma list; ablations)",
)
@click.option(
    "--head-chunks",
    "head_chunks",
    default="auto",
    show_default=True,
    help="split the LM head into N vocabulary chunks (auto: adaptive decides; classic: 1)",
)
@click.option("--recompute", is_flag=True, help="full activation recompute")
@click.option("--costs", "costs_arg", default=None, type=click.Path(), help="measured profile from `adaptis profile`")
@click.option(
    "--time-limit",
    default=5.0,
    show_default=True,
    type=float,
    help="seconds: sizes the adaptive search's work (same limit, same plan) and hard-stops the command",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("-o", "--output", required=True, type=click.Path(), help="plan file to write")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def plan_cmd(
    model_arg,
    hardware_arg,
    pp,
    microbatches,
    seq_len,
    micro_batch_size,
    tp,
    strategy,
    partition,
    stages_per_device,
    search_arg,
    head_chunks,
    recompute,
    costs_arg,
    time_limit,
    seed,
    output,
    as_json,
) -> None:
    """Plan partition, placement and schedule; write one JSON plan."""
    _check_positive(
        pp=pp,
        microbatches=microbatches,
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        tp=tp,
        time_limit=time_limit,
        stages_per_device=stages_per_device,
    )
    if head_chunks == "auto":
        chunks = None
    elif head_chunks.isdigit() and int(head_chunks) >= 1:
        chunks = int(head_chunks)
    else:
        raise InputError(f"--head-chunks = {head_chunks!r}: use auto or a whole number >= 1")
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    req = PlanRequest(
        model_arg=model_arg,
        hardware_arg=hardware_arg,
        pp=pp,
        num_microbatches=microbatches,
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        tp=tp,
        strategy=strategy,
        partition=partition,
        stages_per_device=stages_per_device,
        search=tuple(s.strip() for s in search_arg.split(",") if s.strip()),
        recompute=recompute,
        costs_path=costs_arg,
        head_chunks=chunks,
        time_limit_s=time_limit,
        seed=seed,
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
        return
    from adaptis_plan.render.report import print_plan_report

    print_plan_report(console(), outcome, output)


# ----------------------------------------------------------------------------- simulate
@cli.command("simulate")
@click.argument("plan_path", type=click.Path())
@click.option("--model", "model_arg", default=None, help="model (default: the plan's built-in model name)")
@click.option("--hardware", "hardware_arg", default=None, help="hardware (default: the plan's built-in profile)")
@click.option("--costs", "costs_arg", default=None, type=click.Path(), help="measured profile to simulate with")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
@click.option("--trace", "trace_path", default=None, type=click.Path(), help="write a Chrome/Perfetto trace")
@click.option("--svg", "svg_path", default=None, type=click.Path(), help="write an SVG timeline")
@click.option("--width", default=None, type=int, help="terminal timeline width (default: the terminal's)")
def simulate_cmd(plan_path, model_arg, hardware_arg, costs_arg, as_json, trace_path, svg_path, width) -> None:
    """Re-simulate PLAN (never trusting its stored numbers): summary, timeline, trace, SVG."""
    from adaptis_plan.usecases import simulate_plan_file

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
        return
    from adaptis_plan.render.report import print_simulation_report

    print_simulation_report(console(), sim, width=width, trace_path=trace_path, svg_path=svg_path)


def _write_text_atomic(path: str, text: str) -> None:
    from adaptis_plan.planfile.io import write_text_atomic

    write_text_atomic(text, path)


# ----------------------------------------------------------------------------- export
@cli.command("export")
@click.argument("plan_path", type=click.Path())
@click.option("--format", "fmt", required=True, type=click.Choice(["torch-csv", "megatron-layout", "torchtitan"]))
@click.option("--model", "model_arg", default=None, help="model (for layer kinds; default: the plan's model name)")
@click.option("-o", "--output", default=None, type=click.Path(), help="file to write (default: stdout)")
def export_cmd(plan_path, fmt, model_arg, output) -> None:
    """Export PLAN to another framework's format."""
    from adaptis_plan.usecases import export_plan_file

    text = export_plan_file(plan_path, fmt, model_arg=model_arg)
    if output:
        _write_text_atomic(output, text)
        console().print(f"wrote {output}")
    else:
        click.echo(text, nl=not text.endswith("\n"))


# ----------------------------------------------------------------------------- run
@cli.command("run", context_settings={"ignore_unknown_options": False})
@click.argument("plan_path", type=click.Path())
@click.option("--model", "model_arg", default=None, help="model (default: the plan's built-in model name)")
@click.option("--steps", default=3, show_default=True, type=int, help="measured steps after warm-up")
@click.option("--warmup", default=1, show_default=True, type=int, help="warm-up steps (not measured)")
@click.option("--verify", is_flag=True, help="compare loss and every gradient with a single-process step")
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
@click.option("--trace", "trace_path", default=None, type=click.Path(), help="write the measured timeline")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option(
    "--timeout", "timeout_s", default=120, show_default=True, type=int, help="seconds before a stuck collective fails"
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
    """Execute PLAN for real under torchrun (gloo on CPU, NCCL on GPUs)."""
    _check_positive(steps=steps, timeout=timeout_s, nnodes=nnodes)
    from adaptis_plan.usecases import load_plan_and_model

    plan, model = load_plan_and_model(plan_path, model_arg)
    from adaptis_plan.executor.launch import run_plan

    out = run_plan(
        plan_path,
        model,
        steps=steps,
        warmup=warmup,
        verify=verify,
        trace_path=trace_path,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        master_port=master_port,
        device=device,
        dtype=dtype,
        timeout_s=timeout_s,
    )
    if as_json:
        emit_json(out)
        return
    c = console()
    c.print(
        f"[bold]{plan.strategy}[/] on {plan.training.pp} ranks: measured step {out['measured_step_time_s'] * 1e3:.1f} ms"
        f" (median of {out['steps']}), predicted {out['predicted_step_time_s'] * 1e3:.1f} ms"
    )
    if verify:
        ok = "[green]verified[/]" if out["verified"] else "[red]NOT verified[/]"
        c.print(f"{ok}: loss diff {out['loss_diff']:.2e}, max |grad diff| {out['max_abs_grad_diff']:.2e}")
    if trace_path:
        c.print(f"measured trace: {trace_path}")
    if verify and not out["verified"]:
        sys.exit(1)


# ----------------------------------------------------------------------------- profile
@cli.command("profile")
@click.option("--model", "model_arg", required=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--seq-len", default=128, show_default=True, type=int)
@click.option("--micro-batch-size", default=1, show_default=True, type=int)
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True)
@click.option("--repeats", default=7, show_default=True, type=int)
@click.option(
    "--runtime/--no-runtime",
    default=None,
    help="also measure the gloo link and the runtime's time per action on 2 local ranks (default: on for cpu)",
)
@click.option("-o", "--output", required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="print JSON on stdout")
def profile_cmd(model_arg, device, seq_len, micro_batch_size, dtype, repeats, runtime, output, as_json) -> None:
    """Measure per-layer F / I / W time and activation memory on this machine."""
    _check_positive(seq_len=seq_len, micro_batch_size=micro_batch_size, repeats=repeats)
    from adaptis_plan.inputs.models.load import load_model

    spec = load_model(model_arg)
    from adaptis_plan.executor.profile import profile_model
    from adaptis_plan.planfile.io import write_json_atomic

    prof = profile_model(
        spec,
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        device=device,
        dtype=dtype,
        repeats=repeats,
        runtime=(device == "cpu") if runtime is None else runtime,
    )
    write_json_atomic(prof.model_dump(mode="json", exclude_none=True), output)
    if as_json:
        emit_json(prof.model_dump(mode="json", exclude_none=True))
        return
    from rich.table import Table

    t = Table(title=f"{spec.name} on {prof.device} (torch {prof.torch_version}, seq {seq_len})")
    for c in ("layers", "kind", "F ms", "I ms", "W ms", "B ms", "act"):
        t.add_column(c)
    for e in prof.entries:
        shown = ",".join(map(str, e.layers[:6])) + ("..." if len(e.layers) > 6 else "")
        t.add_row(
            shown,
            e.kind,
            f"{e.f_s * 1e3:.3f}",
            f"{e.i_s * 1e3:.3f}",
            f"{e.w_s * 1e3:.3f}",
            f"{e.b_s * 1e3:.3f}",
            _fmt_bytes(e.act_bytes),
        )
    console().print(t)
    console().print(f"wrote {output}")


# ----------------------------------------------------------------------------- schema
@cli.command("schema")
@click.option("--check", is_flag=True, help="fail if schemas/ differs from the pydantic models")
@click.option("--dir", "out_dir", default="schemas", show_default=True, type=click.Path())
def schema_cmd(check: bool, out_dir: str) -> None:
    """Write (or check) the JSON Schemas of every file format."""
    from adaptis_plan.spec.schemas import check_schemas, write_schemas

    if check:
        if not Path(out_dir).is_dir():
            raise InputError(f"--dir {out_dir}: no such folder; pass the schemas/ folder of the checkout with --dir")
        stale = check_schemas(Path(out_dir))
        if stale:
            raise InputError(f"{out_dir}: {', '.join(stale)} out of date; run `adaptis schema` (make schemas)")
        console().print(f"{out_dir}: schemas up to date")
        return
    for p in write_schemas(Path(out_dir)):
        console().print(f"wrote {p}")


def main() -> None:
    """Console entry point: the one place user errors become messages and exit codes."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(2 if e.exit_code == 2 else e.exit_code)
    except AdaptisError as e:
        click.echo(f"error: {e}", err=True)
        grid = getattr(e, "grid", "")
        if grid:
            click.echo(grid, err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception:  # a bug, never bad input: exit 1 with the traceback to report
        import traceback

        traceback.print_exc()
        click.echo(
            "internal error: this is a bug in adaptis, not a problem with your input; please report it with the"
            " traceback above",
            err=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
