"""Use cases behind the CLI: plan, simulate a plan file, export a plan file, load a plan's model.

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

if TYPE_CHECKING:
    from adaptis_plan.search.budget import SearchBudget

#: Seconds per planned action kept back from `--time-limit` for assembling and writing the plan file,
#: and the share of the limit at which the search aborts (the rest absorbs the last step's overrun).
_FINALIZE_S_PER_ACTION = 2e-5
_ABORT_SHARE = 0.95


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
    budget: SearchBudget | None = None  # the search's work; None = SearchBudget.for_time_limit(time_limit_s)


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


def make_plan_for(
    req: PlanRequest, progress: ProgressFn | None = None, *, started_at: float | None = None
) -> PlanOutcome:
    """Plan with the requested strategy; the simulator's verdict is the prediction.

    `started_at` (a `time.perf_counter()` value, default now) is when the command started:
    `--time-limit` counts from there."""
    from adaptis_plan.inputs.hardware import load_hardware
    from adaptis_plan.inputs.models.load import load_model

    t0 = time.perf_counter() if started_at is None else started_at
    classic = _classic_strategy(req.strategy)
    if classic is None and req.time_limit_s <= 0:
        raise InputError(f"--time-limit = {req.time_limit_s}: must be > 0 seconds")
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

    from adaptis_plan.search.budget import Deadline, SearchBudget
    from adaptis_plan.search.generator import classic_baselines, classic_candidate
    from adaptis_plan.search.head_chunks import head_split_options, search_head_options

    # --time-limit is a hard abort on the whole command; keep back what writing the plan takes
    planned_actions = req.num_microbatches * 3 * min(2 * req.pp, model.num_layers)
    deadline = Deadline(t0 + _ABORT_SHARE * req.time_limit_s - planned_actions * _FINALIZE_S_PER_ACTION)
    baselines = classic_baselines(costs, model.num_layers, req.num_microbatches)
    if classic is None:
        if req.partition is not None or req.stages_per_device is not None:
            raise InputError("--partition / --stages-per-device apply to classic strategies; adaptive searches both")
        if forced is not None:
            options = [(forced, cost_table_for(forced, hw, training, profile))]
        else:
            options = [(model, costs)]
            if req.head_chunks is None and "partition" in req.search:
                options += [(m, cost_table_for(m, hw, training, profile)) for m in head_split_options(model, costs)]
        budget = req.budget or SearchBudget.for_time_limit(req.time_limit_s)
        k_best, outcome = search_head_options(
            [c for _, c in options],
            [m.num_layers for m, _ in options],
            req.num_microbatches,
            components=req.search,
            time_limit_s=req.time_limit_s,
            seed=req.seed,
            progress=progress,
            # classic plans are candidates only on the cost table they were built on (the unsplit head)
            baselines=baselines if forced is None else {},
            budget=budget,
            deadline=deadline,
        )
        model, costs = options[k_best]
        best = outcome.best
        strategy = "adaptive"
        search_info = {
            "source": best.label,
            "plan": best.describe(),
            "components": list(req.search),
            "phases": outcome.phases,
            "solver": outcome.solver,
            "candidates_evaluated": outcome.evaluated,
            "head_chunks": model.num_head_chunks,
            "head_chunk_options": [m.num_head_chunks for m, _ in options],
            "seed": req.seed,
            "budget": budget.summary(),
            "aborted": deadline.aborted,
            "abort_phase": deadline.where,
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
        search=plan_file_search_info(search_info),
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


def plan_file_search_info(info: object) -> object:
    """The search record without its wall times: what the plan file stores, so that the same
    inputs give a byte-identical file under any machine load (`--json` keeps the wall times)."""
    if isinstance(info, dict):
        return {k: plan_file_search_info(v) for k, v in info.items() if k != "wall_s"}
    if isinstance(info, list):
        return [plan_file_search_info(v) for v in info]
    return info


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
