"""Use cases behind the CLI: plan, simulate a plan file, export a plan file, load a plan's model,
run a plan file, profile a model.

Data flow: CLI arguments -> (model spec, hardware, training, cost table) -> search or classic
builder -> simulator -> plan file / summaries. No rich, no click: renderers print, this
returns data. ortools and torch are reached only through `search` and `executor`, lazily.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from adaptis_plan.core import CostTable, Layout, Programs, ProgressFn
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.planfile.io import check_model_matches, make_plan, plan_layout, plan_programs, read_plan
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.training import TrainingConfig

if TYPE_CHECKING:  # the executor (torch) is imported only when a plan is run or a model profiled
    from adaptis_plan.executor.launch import RunOptions


@dataclass(frozen=True)
class PlanRequest:
    model_arg: str
    hardware_arg: str
    pp: int
    num_microbatches: int
    seq_len: int = 4096
    micro_batch_size: int = 1
    tp: int = 1
    strategy: str = "adaptive"
    partition: str | None = None
    stages_per_device: int | None = None
    search: tuple[str, ...] = ("partition", "placement", "schedule")
    recompute: bool = False
    costs_path: str | None = None
    head_chunks: int | None = None  # None = adaptive decides (classic: 1)
    time_limit_s: float = 5.0
    seed: int = 0


@dataclass
class PlanOutcome:
    plan: PlanFile
    result: SimResult
    layout: Layout
    programs: Programs
    model: ModelSpec
    costs: CostTable
    baselines: dict[str, SimResult]
    plan_time_s: float
    search_info: dict = field(default_factory=dict)

    def json_summary(self) -> dict:
        out = {"strategy": self.plan.strategy, **self.result.summary(), "plan_time_s": self.plan_time_s}

        def row(r: SimResult) -> dict:
            return {
                "step_time_s": r.step_time_s,
                "bubble_ratio": r.bubble_ratio,
                "peak_memory_bytes": list(r.peak_memory_bytes),
            }

        # the contract: every classic strategy that is feasible (fits memory) for this input
        out["baselines"] = {name: row(r) for name, r in self.baselines.items() if r.fits_memory}
        out["baselines_out_of_memory"] = {name: row(r) for name, r in self.baselines.items() if not r.fits_memory}
        out["stages"] = [s.model_dump() for s in self.plan.stages]
        if self.search_info:
            out["search"] = self.search_info
        return out


def load_costs_profile(path: str | None) -> CostProfile | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such cost profile; measure one with `adaptis profile --model MODEL -o {p.name}`")
    try:
        return CostProfile.model_validate(json.loads(p.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(
            f"{p}: cannot read the cost profile ({type(e).__name__}); pass the JSON file `adaptis profile -o` wrote"
        ) from None
    except json.JSONDecodeError as e:
        raise InputError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except ValidationError as e:
        from adaptis_plan.planfile.io import pydantic_error_line

        raise InputError(pydantic_error_line(p, e)) from None


def _training(req: PlanRequest) -> TrainingConfig:
    return TrainingConfig(
        num_microbatches=req.num_microbatches,
        micro_batch_size=req.micro_batch_size,
        seq_len=req.seq_len,
        pp=req.pp,
        tp=req.tp,
        recompute=req.recompute,
    )


def cost_table_for(
    model: ModelSpec, hw: HardwareProfile, training: TrainingConfig, profile: CostProfile | None
) -> CostTable:
    from adaptis_plan.cost.table import build_cost_table

    return build_cost_table(model, hw, training, profile)


def make_plan_for(req: PlanRequest, progress: ProgressFn | None = None) -> PlanOutcome:
    """Plan with the requested strategy; the simulator's verdict is the prediction."""
    from adaptis_plan.inputs.hardware import load_hardware
    from adaptis_plan.inputs.models.load import load_model

    t0 = time.perf_counter()
    classic = _classic_strategy(req.strategy)
    model = load_model(req.model_arg)
    hw = load_hardware(req.hardware_arg)
    training = _training(req)
    if req.pp > model.num_layers:
        raise InputError(
            f"--pp = {req.pp}: more devices than the {model.num_layers} layers of {model.name}; lower --pp"
        )
    profile = load_costs_profile(req.costs_path)
    costs = cost_table_for(model, hw, training, profile)
    forced = None
    if req.head_chunks is not None and req.head_chunks > 1:
        from adaptis_plan.inputs.models.transform import split_head

        forced = split_head(model, req.head_chunks)
        if req.pp > forced.num_layers:
            raise InputError(f"--pp = {req.pp}: more devices than the {forced.num_layers} layers; lower --pp")

    from adaptis_plan.search.generator import classic_baselines, classic_candidate
    from adaptis_plan.search.head_chunks import head_split_options, search_head_options

    baselines = classic_baselines(costs, model.num_layers, req.num_microbatches)
    if classic is None:
        if req.partition is not None or req.stages_per_device is not None:
            raise InputError("--partition / --stages-per-device apply to classic strategies; adaptive searches both")
        if req.time_limit_s <= 0:
            raise InputError(f"--time-limit = {req.time_limit_s}: must be > 0 seconds")
        if forced is not None:
            options = [(forced, cost_table_for(forced, hw, training, profile))]
        else:
            options = [(model, costs)]
            if req.head_chunks is None and "partition" in req.search:
                options += [(m, cost_table_for(m, hw, training, profile)) for m in head_split_options(model, costs)]
        k_best, outcome = search_head_options(
            [c for _, c in options],
            [m.num_layers for m, _ in options],
            req.num_microbatches,
            components=req.search,
            time_limit_s=req.time_limit_s,
            seed=req.seed,
            progress=progress,
            baselines=baselines,
        )
        model, costs = options[k_best]
        best = outcome.best
        strategy = "adaptive"
        search_info = {
            "source": best.source if best.source != "adaptive" else best.label,
            "components": list(req.search),
            "phases": outcome.phases,
            "solver": outcome.solver,
            "candidates_evaluated": outcome.evaluated,
            "head_chunks": model.num_head_chunks,
            "head_chunk_options": [m.num_head_chunks for m, _ in options],
            "seed": req.seed,
        }
    else:
        if forced is not None:
            model, costs = forced, cost_table_for(forced, hw, training, profile)
        best = classic_candidate(
            costs, model.num_layers, req.num_microbatches, classic, req.partition or "uniform", req.stages_per_device
        )
        strategy = classic
        search_info = {
            "source": best.label,
            "partition": req.partition or "uniform",
            "head_chunks": model.num_head_chunks,
        }
    result = (
        best.result if best.result is not None else simulate(best.layout, costs, best.programs, req.num_microbatches)
    )
    if not result.fits_memory:
        raise InfeasibleError(_memory_message(result, model, training, strategy, costs))
    plan = make_plan(
        strategy=strategy,
        model=model,
        hardware=hw,
        training=training,
        layout=best.layout,
        programs=best.programs,
        result=result,
        search=search_info,
    )
    base_results = {k: c.result for k, c in baselines.items() if c.result is not None}
    return PlanOutcome(
        plan=plan,
        result=result,
        layout=best.layout,
        programs=best.programs,
        model=model,
        costs=costs,
        baselines=base_results,
        plan_time_s=time.perf_counter() - t0,
        search_info=search_info,
    )


def _classic_strategy(strategy: str) -> str | None:
    """torch's spelling of a classic strategy name, None for adaptive; checked before any costing."""
    if strategy.lower() == "adaptive":
        return None
    from adaptis_plan.schedules import STRATEGIES, canonical_name

    try:
        return canonical_name(strategy)
    except InputError:
        raise InputError(
            f"--strategy = {strategy!r}: unknown strategy; use adaptive or one of {', '.join(STRATEGIES)} (any case)"
        ) from None


def _memory_message(
    result: SimResult, model: ModelSpec, training: TrainingConfig, strategy: str, costs: CostTable
) -> str:
    over = [o for o in result.overflow_bytes]
    d = max(range(len(over)), key=lambda i: over[i])
    need = result.peak_memory_bytes[d]
    have = float(costs.mem_limit_bytes[d])
    fixes = [f"more devices (--pp {training.pp * 2})", "fewer micro-batches in flight (a 1F1B-style strategy)"]
    if not training.recompute:
        fixes.append("--recompute")
    fixes.append(f"tensor parallelism (--tp {training.tp * 2})")
    return (
        f"no {strategy} plan for {model.name} fits memory: device {d} needs {_gib(need)} but has"
        f" {_gib(have)} ({_gib(need - have)} over); try " + ", ".join(fixes)
    )


def _gib(n: float) -> str:
    """Bytes in GiB with enough digits to tell small sizes apart (0.0466 GiB, not 0.0 GiB)."""
    v = n / 2**30
    return f"{v:.1f} GiB" if v >= 10 else f"{v:.3g} GiB"


# ----------------------------------------------------------------------------- plan files
def _load_for_plan(load, arg: str | None, stored_name: str, plan_path: str, field: str, what: str, file_kind: str):
    """Load the given `--{field}`, or the plan's own built-in name, with a clear line when it is not built in."""
    try:
        return load(arg or stored_name)
    except InputError as e:
        if arg is None:
            raise InputError(
                f"{plan_path}: {field}.name = '{stored_name}' is not a built-in {what}; pass --{field}"
                f" with the {file_kind} the plan was made for"
            ) from e
        raise


def load_plan_and_model(plan_path: str, model_arg: str | None) -> tuple[PlanFile, ModelSpec]:
    from adaptis_plan.inputs.models.load import load_model

    plan = read_plan(plan_path)
    model = _load_for_plan(load_model, model_arg, plan.model.name, plan_path, "model", "model", "model file")
    check_model_matches(plan, model, plan_path)
    if plan.model.head_chunks > 1:
        from adaptis_plan.inputs.models.transform import split_head

        model = split_head(model, plan.model.head_chunks)
    if model.num_layers != plan.model.num_layers:
        raise InputError(
            f"{plan_path}: model.num_layers = {plan.model.num_layers} but '{model.name}' has {model.num_layers}"
            f" layers (head in {plan.model.head_chunks} chunk(s)); re-plan with `adaptis plan`"
        )
    return plan, model


@dataclass
class SimOutcome:
    plan: PlanFile
    layout: Layout
    programs: Programs
    result: SimResult
    title: str
    stored_differs: bool

    def json_summary(self) -> dict:
        return {
            "strategy": self.plan.strategy,
            **self.result.summary(),
            "stored_step_time_s": self.plan.predicted.step_time_s,
            "stored_differs": self.stored_differs,
        }


def simulate_plan_file(
    plan_path: str, *, model_arg: str | None = None, hardware_arg: str | None = None, costs_path: str | None = None
) -> SimOutcome:
    from adaptis_plan.inputs.hardware import load_hardware

    plan, model = load_plan_and_model(plan_path, model_arg)
    hw = _load_for_plan(load_hardware, hardware_arg, plan.hardware.name, plan_path, "hardware", "profile", "profile")
    if hardware_arg is None and hw.fingerprint() != plan.hardware.fingerprint:
        raise InputError(
            f"{plan_path}: hardware.fingerprint: the built-in profile '{hw.name}' changed since the plan"
            " was made; re-plan or pass --hardware with the original profile file"
        )
    costs = cost_table_for(model, hw, plan.training, load_costs_profile(costs_path))
    layout, programs = plan_layout(plan), plan_programs(plan)
    result = simulate(layout, costs, programs, plan.training.num_microbatches)
    stored = plan.predicted.step_time_s
    differs = abs(stored - result.step_time_s) > 1e-6 * max(stored, result.step_time_s, 1e-12)
    title = (
        f"{plan.model.name} · {plan.strategy} · pp {plan.training.pp} · {plan.training.num_microbatches} mb"
        f" · seq {plan.training.seq_len}"
    )
    return SimOutcome(plan, layout, programs, result, title, differs)


def export_plan_file(plan_path: str, fmt: str, *, model_arg: str | None = None) -> str:
    from adaptis_plan.planfile.export import megatron_layout, to_torch_csv, torchtitan_fqns

    plan, model = load_plan_and_model(plan_path, model_arg)
    layout, programs = plan_layout(plan), plan_programs(plan)
    kinds = [layer.kind for layer in model.layers]
    if fmt != "torch-csv" and plan.model.head_chunks > 1:
        raise InputError(
            f"{plan_path}: model.head_chunks = {plan.model.head_chunks}: this plan splits the LM head into vocabulary"
            f" chunks, which {fmt} cannot express; export torch-csv, or re-plan with --head-chunks 1"
        )
    if fmt == "torch-csv":
        return to_torch_csv(programs)
    if fmt == "megatron-layout":
        return megatron_layout(layout, kinds) + "\n"
    return json.dumps({"module_fqns_per_model_part": torchtitan_fqns(layout, kinds)}, indent=1) + "\n"


# ----------------------------------------------------------------------------- run and profile (the executor)
def run_plan_file(
    plan_path: str, options: RunOptions, *, model_arg: str | None = None, trace_path: str | None = None
) -> tuple[PlanFile, dict]:
    """`adaptis run`: read and check the plan file once (`load_plan_and_model`), then hand the objects to
    the launcher, which lowers and launches them (it never rereads `plan_path`). Returns the plan and the
    launcher's result (the `run` JSON keys)."""
    from adaptis_plan.executor.launch import run_plan

    plan, model = load_plan_and_model(plan_path, model_arg)
    return plan, run_plan(plan, model, options, trace_path=trace_path, label=plan_path)


@dataclass(frozen=True)
class ProfileRequest:
    model_arg: str
    device: str = "cpu"
    seq_len: int = 128
    micro_batch_size: int = 1
    dtype: str = "fp32"
    repeats: int = 7
    runtime: bool = False  # also the gloo link and the runtime's time per action (2 local ranks)
    recompute: bool = False  # also every decoder block under selective and full recomputation


@dataclass
class ProfileOutcome:
    model: ModelSpec
    profile: CostProfile
    recompute: dict[str, list] = field(default_factory=dict)  # mode -> LayerCostEntry list

    def json_summary(self) -> dict:
        """The profile file's content, plus `recompute` ({mode: entries}) when it was measured."""
        out = self.profile.model_dump(mode="json", exclude_none=True)
        if self.recompute:
            out["recompute"] = {m: [e.model_dump(mode="json") for e in es] for m, es in self.recompute.items()}
        return out


def profile_for(req: ProfileRequest) -> ProfileOutcome:
    """`adaptis profile`: per-layer costs measured on this machine, then (with `runtime`) the gloo link and
    the executor's time per action (`measure_action_overhead`), which the planner and simulator charge."""
    from adaptis_plan.executor.profile import measure_link, profile_model, profile_recompute
    from adaptis_plan.inputs.models.load import load_model

    model = load_model(req.model_arg)
    shape = dict(seq_len=req.seq_len, micro_batch_size=req.micro_batch_size, device=req.device, dtype=req.dtype)
    profile = profile_model(model, repeats=req.repeats, **shape)
    if req.runtime:
        profile = profile.model_copy(update={"link": measure_link(), "action_overhead_s": measure_action_overhead()})
    recompute = profile_recompute(model, repeats=req.repeats, **shape) if req.recompute else {}
    return ProfileOutcome(model, profile, recompute)


def measure_action_overhead(*, num_microbatches: int = 16, steps: int = 5, timeout_s: float = 120.0) -> float:
    """Host time per action of the executor on 2 local ranks (gloo, one thread each).

    Runs a GPipe pipeline whose layers do almost no arithmetic (hidden 8, 8 tokens), so a step
    is the runtime's own work per action: Python dispatch, autograd bookkeeping, posting and
    waiting on P2P. The measured step (median after warm-up) divided by the number of actions
    on its critical path (the simulator's step for the same plan with unit-cost actions) is the
    `action_overhead_s` a measured profile carries. The probe plan is built here (a classic
    builder and the simulator); the executor only runs it.
    """
    from adaptis_plan.executor.launch import RunOptions, run_plan

    plan, model, critical_actions = _overhead_probe(num_microbatches)
    out = run_plan(plan, model, RunOptions(steps=steps, warmup=2, timeout_s=timeout_s), label="overhead probe")
    return float(out["measured_step_time_s"]) / critical_actions


def _overhead_probe(num_microbatches: int) -> tuple[PlanFile, ModelSpec, float]:
    """The probe plan of `measure_action_overhead`, its model, and its critical path in actions."""
    import dataclasses

    from adaptis_plan.core import uniform_costs
    from adaptis_plan.schedules import get_spec
    from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MlpSpec

    block = LayerSpec(kind="decoder", attention=AttentionSpec(num_heads=1, num_kv_heads=1, head_dim=8),
                      mlp=MlpSpec(intermediate_size=8))  # fmt: skip
    model = ModelSpec(name="overhead-probe", hidden_size=8, vocab_size=16,
                      layers=[LayerSpec(kind="embedding"), block, block, LayerSpec(kind="head")])  # fmt: skip
    hw = HardwareProfile.model_validate(
        {"name": "probe", "device_types": {"cpu": {"peak_bf16_tflops": 1, "matmul_efficiency": 1, "hbm_bytes": 2**34,
         "hbm_bandwidth_gbps": 1, "source": "probe"}}, "groups": [{"device_type": "cpu", "num_nodes": 1,
         "devices_per_node": 2}], "intra_node": {"bandwidth_gbps": 1, "latency_s": 0, "source": "probe"},
         "inter_node": {"bandwidth_gbps": 1, "latency_s": 0, "source": "probe"}}
    )  # fmt: skip
    training = TrainingConfig(num_microbatches=num_microbatches, micro_batch_size=1, seq_len=8, pp=2)
    spec = get_spec("GPipe")
    layout = Layout(bounds=(0, 2, 4), stage_device=spec.stage_device(2), num_devices=2)
    programs = spec.build(layout.stage_device, 2, num_microbatches)
    # every action costs one unit of "overhead" and nothing else: the step is the critical path in actions
    unit = dataclasses.replace(uniform_costs(4, 2, f=0.0, i=0.0, w=0.0), action_overhead_s=1.0)
    critical = simulate(layout, unit, programs, num_microbatches)
    plan = make_plan(strategy=spec.name, model=model, hardware=hw, training=training, layout=layout,
                     programs=programs, result=critical)  # fmt: skip
    return plan, model, critical.step_time_s
