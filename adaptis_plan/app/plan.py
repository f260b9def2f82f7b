"""`adaptis plan`: the request, the search (`search.driver`, or `search.configuration` with --gpus), the
judge's verdict on the plan it keeps, and the notes the user should read beside it.

Data flow: `PlanRequest` (from the CLI or a library caller) -> model spec, hardware, training and
`cost.source.CostTables` -> `search` -> `app.simulate.judge_result` -> `PlanOutcome` (the plan file and
what the renderers show). No rich, no click; ortools comes in only through `search`, lazily.

With --gpus, the `--json` record of the whole configuration (`configuration_record`: the chosen
configuration, its throughput and MFU (`cost.flops`), every legal point's fate, what the co-designed
pipeline buys) is built here beside `PlanOutcome.json_summary`, from the search's `Choice`: library
callers read it as `PlanOutcome.cluster`, and this layer may not import the renderers, which show it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adaptis_plan.app.simulate import judge_result
from adaptis_plan.core import CostTable, Layout, LazyMapping, Programs, ProgressFn
from adaptis_plan.cost.flops import throughput
from adaptis_plan.cost.recompute import stage_recompute
from adaptis_plan.cost.source import CostTables, costs_notes, load_costs_profile
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.judge.simulate import SimResult
from adaptis_plan.judge.training_step import TrainingStep, training_step
from adaptis_plan.planfile.io import make_plan, plan_file_search_info
from adaptis_plan.schedules.targets import get_target
from adaptis_plan.spec.config import (
    SECTIONS,
    Parallelism,
    PipelineSettings,
    RuntimeSettings,
    SearchEffort,
    field_names,
)
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile, usable_memory_bytes
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.units import fmt_bytes

if TYPE_CHECKING:
    from adaptis_plan.inputs.hardware import HardwareOverrides
    from adaptis_plan.search.budget import Deadline, SearchBudget
    from adaptis_plan.search.driver import PipelinePlan
    from adaptis_plan.search.generator import Candidate
    from adaptis_plan.search.plan_point import Choice
    from adaptis_plan.search.screen import Considered
    from adaptis_plan.search.space import Request


#: Seconds per planned action kept back from `--time-limit` for assembling and writing the plan file,
#: and the share of the limit at which the search aborts (the rest absorbs the last step's overrun).
_FINALIZE_S_PER_ACTION = 2e-5
_ABORT_SHARE = 0.95


@dataclass(frozen=True)
class PlanRequest:
    """What `adaptis plan` asks: the model, hardware and costs, the sequence length, and the sections of
    `spec.config` (each setting declared there once, with its command-line option). `PlanRequest.of`
    takes the settings by name."""

    model_arg: str
    hardware_arg: str
    parallelism: Parallelism = Parallelism()
    seq_len: int = 4096
    pipeline: PipelineSettings = PipelineSettings()
    runtime: RuntimeSettings = RuntimeSettings()
    effort: SearchEffort = SearchEffort()
    budget: SearchBudget | None = None  # the search's work; None = SearchBudget.for_time_limit(effort.time_limit_s)
    costs_path: str | None = None
    # the whole configuration (`search.configuration`): with `gpus`, every dimension of `fixed` left None
    # is searched (`spec.config.Parallelism`'s fields)
    gpus: int | None = None
    global_batch_size: int | None = None
    fixed: dict | None = None
    # what differs from the profile's cluster (GPUs per node, NIC bandwidth, usable memory): `inputs.hardware`
    hardware_overrides: HardwareOverrides | None = None

    @classmethod
    def of(cls, model_arg: str, hardware_arg: str, pp: int, num_microbatches: int, **settings: object) -> PlanRequest:
        """A request with its settings by name (`PlanRequest.of("llama-2-7b", "h100", 4, 16, tp=2, seed=1)`):
        each goes to the `spec.config` section that declares it, any other to this class's own field of
        that name (a name neither knows: TypeError)."""
        parts: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
        own: dict[str, object] = {}
        for key, value in {"pp": pp, "num_microbatches": num_microbatches, **settings}.items():
            home = next((name for name, section in SECTIONS.items() if key in field_names(section)), None)
            (own if home is None else parts[home])[key] = value
        sections = {name: SECTIONS[name](**values) for name, values in parts.items()}
        return cls(model_arg, hardware_arg, **sections, **own)  # type: ignore[arg-type]


@dataclass
class PlanOutcome:
    plan: PlanFile
    result: SimResult
    layout: Layout
    programs: Programs
    model: ModelSpec
    costs: CostTable
    baselines: Mapping[str, SimResult]  # computed on first read (`BaselineResults`)
    plan_time_s: float
    search_info: dict = field(default_factory=dict)
    # with a --target other than adaptis: the best plan without the target's restriction
    unrestricted: SimResult | None = None
    notes: list[str] = field(default_factory=list)  # for stderr: what the user may not have meant (`costs_notes`)
    step: TrainingStep | None = None  # the whole step around the pipeline (`judge.training_step`)
    cluster: dict | None = None  # with --gpus: `configuration_record`

    def json_summary(self) -> dict:
        out = {"strategy": self.plan.strategy, **self.result.summary(), "plan_time_s": self.plan_time_s}
        if self.step is not None:
            out["training_step"] = self.step.summary()
        if self.cluster is not None:
            out.update(self.cluster)
        out["target"] = self.plan.target
        out["usable_memory_bytes"] = usable_memory_bytes(self.plan.hardware.profile)
        if self.unrestricted is not None:
            u = self.unrestricted
            out["unrestricted"] = {
                "step_time_s": u.step_time_s,
                "bubble_ratio": u.bubble_ratio,
                "restriction_cost": self.result.step_time_s / u.step_time_s - 1 if u.step_time_s > 0 else 0.0,
            }

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


def _training(req: PlanRequest, recompute: str) -> TrainingConfig:
    keeps = get_target(req.pipeline.target).keeps_unsharded
    return TrainingConfig.of(req.parallelism, req.seq_len, recompute, req.runtime, keeps)


RECOMPUTE_CHOICES = ("none", "selective", "op", "full", "auto")


def _recompute_request(req: PlanRequest, classic: str | None) -> str:
    """The recompute mode planned: the request, with auto = none for classic strategies."""
    if req.pipeline.recompute not in RECOMPUTE_CHOICES:
        raise InputError(f"--recompute = {req.pipeline.recompute!r}: use one of {', '.join(RECOMPUTE_CHOICES)}")
    return "none" if classic is not None and req.pipeline.recompute == "auto" else req.pipeline.recompute


def _classic_layout_options(req: PlanRequest, classic: str | None) -> None:
    """--partition and --stages-per-device shape a classic schedule's layout; adaptive searches both (with
    or without --gpus, where a value would otherwise be dropped or screened with the wrong schedule)."""
    if classic is None and (req.pipeline.partition is not None or req.pipeline.stages_per_device is not None):
        raise InputError("--partition / --stages-per-device apply to classic strategies; adaptive searches both")


def make_plan_for(
    req: PlanRequest, progress: ProgressFn | None = None, *, started_at: float | None = None
) -> PlanOutcome:
    """Plan with the requested strategy (`search.driver`); the simulator's verdict is the prediction.

    `started_at` (a `time.perf_counter()` value, default now) is when the command started:
    `--time-limit` counts from there."""
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.search import driver
    from adaptis_plan.search.workers import workers

    t0 = time.perf_counter() if started_at is None else started_at
    workers()  # a bad ADAPTIS_WORKERS is refused before any work, whether or not a pool is needed
    if req.gpus is not None:
        return make_configuration_plan(req, progress, started_at=t0)
    classic = _classic_strategy(req.pipeline.strategy)
    recompute = _recompute_request(req, classic)
    _classic_layout_options(req, classic)
    if classic is None and req.effort.time_limit_s <= 0:
        raise InputError(f"--time-limit = {req.effort.time_limit_s}: must be > 0 seconds")
    model = load_model(req.model_arg)
    hw = _hardware(req)
    try:
        training = _training(req, recompute)
    except ValueError as e:
        raise InputError(f"--dp / --cp / --ep: {_first_error(e)}") from None
    if req.parallelism.pp > model.num_layers:
        raise InputError(
            f"--pp = {req.parallelism.pp}: more devices than the {model.num_layers} layers of {model.name}; lower --pp"
        )
    profile = load_costs_profile(req.costs_path)
    # auto starts from no recomputation; the driver then tries per-stage choices
    tables = CostTables(hw, training, profile, req.costs_path, "none" if recompute == "auto" else recompute)
    shape: dict[str, Any] = {"pp": req.parallelism.pp, "num_microbatches": req.parallelism.num_microbatches}
    if classic is not None:
        kw: dict[str, Any] = {"partition": req.pipeline.partition, "stages_per_device": req.pipeline.stages_per_device}
        got = driver.classic_pipeline(
            model, tables, classic, **shape, **kw, head_chunks=req.pipeline.head_chunks, target=req.pipeline.target
        )
    else:
        opts = driver.PipelineOptions.of(req.pipeline, req.effort.seed, recompute)
        budget = req.budget or _budget_for(req.effort.time_limit_s)
        deadline = _deadline(req, model, t0)
        got = driver.search_pipeline(
            model, tables, **shape, budget=budget, deadline=deadline, options=opts, progress=progress
        )
    best, m = got.best, req.parallelism.num_microbatches
    result = judge_result(best.result, best.layout, got.costs, best.programs, m)
    if not result.fits_memory:
        raise InfeasibleError(_memory_message(result, got.model, training, got.strategy, got.costs, got.recompute_info))
    outcome = _outcome(req, hw, training, profile, got, result, t0)
    notes = _hardware_notes(req) + context_notes(req.model_arg, model, req.seq_len)
    outcome.notes[:0] = notes + cluster_notes(hw, training)
    return outcome


def _first_error(e: ValueError) -> str:
    """The message of a pydantic validation error (its first), or the error's text."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        return str(first.get("ctx", {}).get("error", first.get("msg", e)))
    return str(e)


def make_configuration_plan(
    req: PlanRequest, progress: ProgressFn | None = None, *, started_at: float | None = None
) -> PlanOutcome:
    """`adaptis plan --gpus N --global-batch-size B`: the whole configuration (`search.configuration`)."""
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.search.configuration import search_configuration
    from adaptis_plan.search.space import Request

    t0 = time.perf_counter() if started_at is None else started_at
    if req.costs_path is not None:
        raise InputError(
            f"--costs {req.costs_path} with --gpus: a cost profile holds one step shape (tp, micro-batch size);"
            " the configuration search varies them: drop --costs, or fix the configuration without --gpus"
        )
    if req.global_batch_size is None:
        raise InputError("--gpus needs --global-batch-size B (sequences per optimizer step)")
    assert req.gpus is not None  # make_plan_for sends only --gpus requests here
    _recompute_request(req, None)
    classic = _classic_strategy(req.pipeline.strategy)
    _classic_layout_options(req, classic)
    model = load_model(req.model_arg)
    hw = _hardware(req)
    # the configuration search's pipeline: the classic strategy's canonical name, Megatron's uniform
    # split unless another is asked, the target in lower case
    pipeline = dataclasses.replace(
        req.pipeline,
        strategy=classic or "adaptive",
        partition=req.pipeline.partition or "uniform",
        target=req.pipeline.target.lower(),
        components=tuple(req.pipeline.components),
    )
    request = Request(
        req.gpus, req.global_batch_size, req.seq_len, dict(req.fixed or {}), pipeline, req.runtime, req.effort.seed
    )
    budget = req.budget or _budget_for(req.effort.time_limit_s)
    deadline = _deadline(req, model, t0)
    choice = search_configuration(model, hw, request, budget=budget, deadline=deadline, progress=progress)
    got, training = choice.plan, choice.training
    shape = {"pp": choice.point.pp, "num_microbatches": choice.point.num_microbatches}
    req = dataclasses.replace(req, parallelism=dataclasses.replace(req.parallelism, **shape))
    assert got.best.result is not None  # the configuration search judged its chosen plan
    outcome = _outcome(req, choice.hardware, training, None, got, got.best.result, t0)
    outcome.step = choice.step
    outcome.cluster = configuration_record(choice, model, request)
    notes = _hardware_notes(req) + context_notes(req.model_arg, model, req.seq_len) + request_notes(hw, req)
    outcome.notes[:0] = notes + cluster_notes(choice.hardware, training)
    return outcome


def configuration_record(choice: Choice, model: ModelSpec, req: Request) -> dict:
    """The `--json` keys of a whole-configuration plan (docs/design.md, "The `--json` contract")."""
    p = choice.point
    tps, mfu = throughput(model, choice.hardware, p, req.seq_len, choice.step.step_time_s)
    plan = choice.plan
    rows = sorted(
        choice.considered,
        key=lambda r: (r.step_time_s is None, r.step_time_s or math.inf, r.bound_s, r.point.preference),
    )
    return {
        "gpus": req.gpus,
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps / req.gpus,
        "mfu": mfu,
        "configuration": {
            **p.as_dict(),
            "recompute": choice.training.recompute,
            "strategy": plan.strategy,
            "stages_per_device": plan.best.layout.num_stages // p.pp,
        },
        "training_step": choice.step.summary(),
        "configuration_lower_bound_s": choice.lower_bound_s,
        "configuration_gap": choice.step.step_time_s / choice.lower_bound_s - 1 if choice.lower_bound_s > 0 else None,
        "configurations": [considered_record(r) for r in rows],
        "co_design": co_design_record(choice, req),
    }


def co_design_record(choice: Choice, req: Request) -> dict | None:
    """What the co-designed pipeline buys (the `--json` key `co_design`): at the chosen configuration, its
    step against the fastest classic schedule's there (`Considered.classic_step_s`), and the configuration
    a search of classic schedules alone would choose among those priced (the least classic step), with its
    throughput. None for a classic request (no co-designed pipeline), or when no classic schedule was priced."""
    if not req.pipeline.adaptive:
        return None
    priced = [r for r in choice.considered if r.classic_step_s is not None]
    here = next((r for r in priced if r.point == choice.point), None)
    if here is None or here.classic_step_s is None:
        return None
    alone = min(priced, key=lambda r: (r.classic_step_s, r.point.preference))
    assert alone.classic_step_s is not None
    step = choice.step.step_time_s

    def gain(classic_s: float) -> float:
        g = classic_s / step - 1
        return 0.0 if abs(g) < 1e-9 else g  # the same step, summed in another order

    return {
        "classic_step_time_s": here.classic_step_s,
        "classic_strategy": here.classic_strategy,
        "gain_over_classic": gain(here.classic_step_s),
        "classic_only": {
            "configuration": {
                **alone.point.as_dict(),
                "recompute": alone.recompute,
                "strategy": alone.classic_strategy,
            },
            "step_time_s": alone.classic_step_s,
            "tokens_per_s_per_gpu": alone.point.tokens(req.seq_len) / alone.classic_step_s / req.gpus,
        },
        "gain_over_classic_only": gain(alone.classic_step_s),
        "decides_configuration": alone.point != choice.point,
    }


def considered_record(row: Considered) -> dict:
    """One legal point's entry of the record's `configurations`: its configuration, bound and status, and
    what the search found there (step, schedule, recomputation, why it was rejected, the classic step)."""
    out: dict = {"configuration": row.point.as_dict(), "lower_bound_s": row.bound_s, "status": row.status}
    if row.step_time_s is not None:
        out["step_time_s"] = row.step_time_s
    if row.recompute is not None:
        out["recompute"] = row.recompute
    if row.strategy is not None:
        out["strategy"] = row.strategy
        if row.strategy == "Interleaved1F1B" and row.chunks > 1:
            out["stages_per_device"] = row.chunks
    if row.reason:
        out["reason"] = row.reason
    if row.overflow_bytes:
        out["overflow_bytes"] = row.overflow_bytes
    if row.classic_step_s is not None:
        out["classic_step_time_s"] = row.classic_step_s
        out["classic_strategy"] = row.classic_strategy
    return out


def _hardware(req: PlanRequest) -> HardwareProfile:
    """The profile `--hardware` names, with the command line's overrides (`inputs.hardware.apply_overrides`)."""
    from adaptis_plan.inputs.hardware import apply_overrides, load_hardware

    hw = load_hardware(req.hardware_arg)
    return hw if req.hardware_overrides is None else apply_overrides(hw, req.hardware_overrides)


def _hardware_notes(req: PlanRequest) -> list[str]:
    from adaptis_plan.inputs.hardware import hardware_notes

    return hardware_notes(req.hardware_arg)


def request_notes(hw: HardwareProfile, req: PlanRequest) -> list[str]:
    """What `plan --gpus` does that the user may not expect: a cluster larger than the profile's, and a
    global batch that leaves data parallelism no degree but 1."""
    out = []
    n, batch = req.gpus or 0, req.global_batch_size or 0
    if len(hw.groups) == 1 and n > hw.num_devices:
        g = hw.groups[0]
        out.append(
            f"--gpus {n}: hardware '{hw.name}' holds {hw.num_devices:,} GPUs ({g.num_nodes:,} node"
            f"{'' if g.num_nodes == 1 else 's'} of"
            f" {g.devices_per_node}); planned on {n // g.devices_per_node:,} such nodes (its GPUs and links, more"
            " of them)"
        )
    if n > 1 and batch > 0 and math.gcd(batch, n) == 1 and (req.fixed or {}).get("dp") is None:
        small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
        divisors = sorted({*small, *(n // k for k in small)} - {1})
        # the largest dp the GPUs allow at or below the batch (at least their smallest factor): its nearest multiple
        d = max((k for k in divisors if k <= batch), default=divisors[0])
        lower, upper = batch // d * d, -(-batch // d) * d
        near = upper if lower == 0 or upper - batch <= batch - lower else lower
        out.append(
            f"--global-batch-size {batch} shares no factor with --gpus {n}: dp divides both, so every configuration"
            f" searched is dp 1 (the {n} GPUs split one model replica); --global-batch-size {near} opens dp up to"
            f" {math.gcd(near, n)}"
        )
    return out


def context_notes(model_arg: str, model: ModelSpec, seq_len: int) -> list[str]:
    """A warning when --seq-len passes the context a rotary model's config.json says it was trained for
    (`max_position_embeddings`): it plans (the cost is the same), but the run extrapolates positions. The
    spec keeps no such field for rotary models, so only a config file given by path is checked; a learned
    table is refused elsewhere (`cost.table.check_sequence_length`), ALiBi extrapolates by design."""
    if model.position_encoding is not None:
        return []
    from adaptis_plan.inputs.models import zoo
    from adaptis_plan.spec.read import path_kind, read_data

    path = Path(model_arg).expanduser()
    if model_arg in zoo.names() or path_kind(path) is None:
        return []
    if path_kind(path) == "a folder":
        path = path / "config.json"
    try:
        data = read_data(path, "model file")
    except InputError:
        return []
    configs = [data, data.get("text_config")] if isinstance(data, dict) else []
    trained = next((c["max_position_embeddings"] for c in configs if isinstance(c, dict)
                    and isinstance(c.get("max_position_embeddings"), int)), None)  # fmt: skip
    if trained is None or seq_len <= trained:
        return []
    return [
        f"--seq-len {seq_len} is beyond {model.name}'s max_position_embeddings {trained} ({path}): its rotary"
        f" positions past {trained} were never trained and the run extrapolates them; planned as asked, but use"
        f" --seq-len {trained} or less unless the model's context was extended (rope_scaling)"
    ]


def cluster_notes(hw: HardwareProfile, training: TrainingConfig) -> list[str]:
    """What the user should know about where the plan's groups sit: a tensor-parallel group across nodes."""
    from adaptis_plan.cost.comm import devices_per_node, placement

    dpn = devices_per_node(hw)
    if training.tp <= dpn:
        return []
    link = placement(hw, training).tp
    nvlink = hw.intra_node.bandwidth_gbps
    slow = link.bus_bps / 1e9 < nvlink
    return [
        f"tp {training.tp} spans {training.tp // dpn} nodes of {dpn} GPUs: its collectives run on the network at"
        f" {link.bus_bps / 1e9:g} GB/s bus bandwidth ({link.per_node} GPUs of a node x {hw.inter_node.bandwidth_gbps:g} GB/s"
        " network each)"
        f" with {hw.inter_node.latency_s * 1e6:g} us latency"
        + (f", against NVLink's {nvlink:g} GB/s inside a node: expect them to be slow" if slow else "")
    ]


def _outcome(
    req: PlanRequest,
    hw: HardwareProfile,
    training: TrainingConfig,
    profile: CostProfile | str | None,
    got: PipelinePlan,
    result: SimResult,
    t0: float,
) -> PlanOutcome:
    """The plan file and the outcome of a finished pipeline search (`got`, a `driver.PipelinePlan`)."""
    best = got.best
    plan = make_plan(
        strategy=got.strategy,
        model=got.model,
        hardware=hw,
        training=training,
        layout=best.layout,
        programs=best.programs,
        result=result,
        costs=got.costs,
        profile=None if isinstance(profile, str) else profile,
        cost_source="paper" if isinstance(profile, str) else None,
        stage_recompute=stage_recompute(best.layout.bounds, got.modes, [layer.kind for layer in got.model.layers]),
        search=_search_record(got.info),
        target=req.pipeline.target.lower(),
    )
    return PlanOutcome(
        plan=plan,
        result=result,
        layout=best.layout,
        programs=best.programs,
        model=got.model,
        costs=got.costs,
        baselines=BaselineResults(got.baselines),
        plan_time_s=time.perf_counter() - t0,
        search_info=got.info,
        unrestricted=got.unrestricted,
        notes=costs_notes(profile, hw, req.costs_path or "--costs"),
        step=training_step(best.layout, best.programs, result, got.model, training, hw, got.costs.device_names),
    )


class BaselineResults(LazyMapping[str, SimResult]):
    """The simulated classic baselines of a pipeline search (`PipelinePlan.baselines`, candidates by name), read
    on first use: the report and `--json` show them, the plan file does not hold them, and a classic plan's
    search computes them only then (15 simulations, seconds on a deep pipeline) for a caller that reads them."""

    def __init__(self, candidates: Mapping[str, Candidate]) -> None:
        self._candidates = candidates

    def _compute(self) -> dict[str, SimResult]:
        return {k: c.result for k, c in self._candidates.items() if c.result is not None}


def _search_record(info: dict) -> dict:
    """The search's record as the plan file stores it (`planfile.io.plan_file_search_info`)."""
    record = plan_file_search_info(info)
    assert isinstance(record, dict)  # a dict's record is a dict
    return record


def _budget_for(time_limit_s: float) -> SearchBudget:
    from adaptis_plan.search.budget import SearchBudget

    return SearchBudget.for_time_limit(time_limit_s)


def _deadline(req: PlanRequest, model: ModelSpec, t0: float) -> Deadline:
    """The hard abort on the whole command (`hard_stop_s`, else `--time-limit`); keep back what writing the
    plan takes."""
    from adaptis_plan.search.budget import Deadline

    if not req.effort.hard_stop:
        return Deadline(math.inf)
    effort = req.effort
    limit_s = effort.time_limit_s if effort.hard_stop_s is None else effort.hard_stop_s
    planned_actions = req.parallelism.num_microbatches * 3 * min(2 * req.parallelism.pp, model.num_layers)
    return Deadline(t0 + _ABORT_SHARE * limit_s - planned_actions * _FINALIZE_S_PER_ACTION)


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
    result: SimResult,
    model: ModelSpec,
    training: TrainingConfig,
    strategy: str,
    costs: CostTable,
    rc_info: dict | None = None,
) -> str:
    over = [o for o in result.overflow_bytes]
    d = max(range(len(over)), key=lambda i: over[i])
    need = result.peak_memory_bytes[d]
    have = float(costs.mem_limit_bytes[d])
    fixes = [f"more devices (--pp {training.pp * 2})", "fewer micro-batches in flight (a 1F1B-style strategy)"]
    tried_full = any(c["label"] == "full everywhere" for c in (rc_info or {}).get("candidates", []))
    if training.recompute != "full" and not tried_full:
        fixes.append("--recompute full")
    fixes.append(f"tensor parallelism (--tp {training.tp * 2})")
    tail = " (recomputing every block, as --recompute full does, was tried and does not fit either)"
    return (
        f"no {strategy} plan for {model.name} fits memory: device {d} needs {_gib(need)} but has"
        f" {_gib(have)} ({_gib(need - have)} over); try " + ", ".join(fixes) + (tail if tried_full else "")
    )


def _gib(n: float) -> str:
    """Bytes in GiB with enough digits to tell small sizes apart (0.0466 GiB, not 0.0 GiB)."""
    return fmt_bytes(n, "GiB")
