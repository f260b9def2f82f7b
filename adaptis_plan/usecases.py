"""Use cases behind the CLI: plan, simulate a plan file, export a plan file, load a plan's model,
run a plan file, profile a model.

Data flow: CLI arguments -> (model spec, hardware, training, `cost.source.CostTables`) ->
`search.driver` (adaptive search or classic builder) -> simulator -> plan file / summaries. No
rich, no click: renderers print, this returns data. ortools and torch are reached only through
`search` and `executor`, lazily.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adaptis_plan.core import CostTable, Layout, Programs, ProgressFn
from adaptis_plan.cost.recompute import stage_recompute
from adaptis_plan.cost.source import CostTables, cost_table_for, costs_notes, load_costs_profile
from adaptis_plan.cost.table import device_types
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.judge.simulate import SimResult, judged, simulate
from adaptis_plan.judge.training_step import TrainingStep, training_step
from adaptis_plan.planfile.io import (
    check_model_matches,
    make_plan,
    plan_file_search_info,
    plan_layout,
    plan_programs,
    read_plan,
)
from adaptis_plan.spec.config import (
    SECTIONS,
    Parallelism,
    PipelineSettings,
    RuntimeSettings,
    SearchEffort,
    field_names,
)
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile, usable_memory_bytes, usable_memory_text
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.units import fmt_bytes, fmt_duration

if TYPE_CHECKING:  # the executor (torch) is imported only when a plan is run or a model profiled
    from collections.abc import Callable

    from adaptis_plan.executor.launch import RunOptions
    from adaptis_plan.executor.profile_estimate import ProfileEstimate

if TYPE_CHECKING:
    from adaptis_plan.inputs.hardware import HardwareOverrides
    from adaptis_plan.search.budget import Deadline, SearchBudget
    from adaptis_plan.search.driver import PipelinePlan

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
    baselines: dict[str, SimResult]
    plan_time_s: float
    search_info: dict = field(default_factory=dict)
    # with a --target other than adaptis: the best plan without the target's restriction
    unrestricted: SimResult | None = None
    notes: list[str] = field(default_factory=list)  # for stderr: what the user may not have meant (`costs_notes`)
    step: TrainingStep | None = None  # the whole step around the pipeline (`judge.training_step`)
    cluster: dict | None = None  # with --gpus: `search.configuration.configuration_record`

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
    return TrainingConfig.of(req.parallelism, req.seq_len, recompute, req.runtime)


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
    result = judged(best.layout, got.costs, best.programs, m, best.result)
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
    from adaptis_plan.search import configuration as config

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
    request = config.Request(
        req.gpus, req.global_batch_size, req.seq_len, dict(req.fixed or {}), pipeline, req.runtime, req.effort.seed
    )
    budget = req.budget or _budget_for(req.effort.time_limit_s)
    deadline = _deadline(req, model, t0)
    choice = config.search_configuration(model, hw, request, budget=budget, deadline=deadline, progress=progress)
    got, training = choice.plan, choice.training
    shape = {"pp": choice.point.pp, "num_microbatches": choice.point.num_microbatches}
    req = dataclasses.replace(req, parallelism=dataclasses.replace(req.parallelism, **shape))
    assert got.best.result is not None  # the configuration search judged its chosen plan
    outcome = _outcome(req, choice.hardware, training, None, got, got.best.result, t0)
    outcome.step = choice.step
    outcome.cluster = config.configuration_record(choice, model, request)
    notes = _hardware_notes(req) + context_notes(req.model_arg, model, req.seq_len) + request_notes(hw, req)
    outcome.notes[:0] = notes + cluster_notes(choice.hardware, training)
    return outcome


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
        baselines={k: c.result for k, c in got.baselines.items() if c.result is not None},
        plan_time_s=time.perf_counter() - t0,
        search_info=got.info,
        unrestricted=got.unrestricted,
        notes=costs_notes(profile, hw, req.costs_path or "--costs"),
        step=training_step(best.layout, best.programs, result, got.model, training, hw, got.costs.device_names),
    )


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


# ----------------------------------------------------------------------------- plan files
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
        return judged(layout, costs, programs, m)
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
    from adaptis_plan.planfile.export import TrainingShape, megatron_layout, to_torch_csv
    from adaptis_plan.planfile.export_megatron import megatron_args, megatron_launch
    from adaptis_plan.planfile.export_torchtitan import (
        torchtitan_base,
        torchtitan_config_module,
        torchtitan_field_set,
    )
    from adaptis_plan.schedules.targets import check_exportable

    if fmt not in EXPORT_FORMATS:
        raise InputError(f"--format = {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
    if torchtitan_version is not None and fmt != "torchtitan":
        raise InputError(f"--torchtitan-version is an option of --format torchtitan, not of --format {fmt}")
    version = "0.3"
    if fmt == "torchtitan":  # its options first: they cost nothing to check, the plan a simulation
        if output is None:
            raise InputError(
                "--format torchtitan writes a config module and the schedule CSV beside it; pass -o CONFIG.py"
            )
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
        version = torchtitan_field_set(torchtitan_version, _installed_version("torchtitan"))
    inputs = load_plan_inputs(plan_path, model_arg=model_arg)
    plan, model = inputs.plan, inputs.model
    judge_plan(inputs)
    layout, programs = plan_layout(plan), plan_programs(plan)
    try:
        check_exportable(fmt, layout.stage_device, layout.num_devices, plan.model.head_chunks)
    except InputError as e:
        raise InputError(f"{plan_path}: {e}") from None
    kinds = [layer.kind for layer in model.layers]
    config_path = Path(str(output))
    csv_path = config_path.with_suffix(".csv")
    t = plan.training
    training = TrainingShape(
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
    )
    title = f"{plan.model.name}, {plan.strategy} plan, pp {t.pp}, {t.num_microbatches} micro-batches"
    try:
        if fmt == "torch-csv":
            return [(output, to_torch_csv(programs))]
        if fmt == "megatron-layout":
            return [(output, megatron_layout(layout, kinds) + "\n")]
        if fmt == "megatron-args":
            experts = [layer.moe.num_experts for layer in model.layers if layer.moe is not None]
            return [(output, megatron_args(layout, kinds, training, num_experts=experts, title=title))]
        if fmt == "megatron-launch":
            experts = [layer.moe.num_experts for layer in model.layers if layer.moe is not None]
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
        module = torchtitan_config_module(
            layout,
            kinds,
            csv_name=csv_path.name,
            base=str(torchtitan_config),
            training=training,
            title=title,
            version=version,
        )
    except InputError as e:
        raise InputError(f"{plan_path}: {e}") from None
    return [(str(csv_path), to_torch_csv(programs)), (str(config_path), module)]


def _installed_version(package: str) -> str | None:
    """The installed distribution's version, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


# ----------------------------------------------------------------------------- run and profile (the executor)
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


@dataclass(frozen=True)
class ProfileRequest:
    model_arg: str
    device: str = "cpu"
    seq_len: int = 128
    micro_batch_size: int = 1
    dtype: str = "fp32"
    repeats: int = 7  # timed repeats per op, over all rounds
    rounds: int | None = None  # rounds the repeats are spread over (None: `profile.ROUNDS`, at most `repeats`)
    runtime: bool = False  # also the gloo link and the runtime's time per action (2 local ranks)
    recompute: bool = False  # also every decoder block under selective and full recomputation
    head_chunks: tuple[int, ...] = ()  # also the head split into these many vocabulary chunks
    reverse: bool = False  # the distinct layers last to first (`profile_model`)


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


#: `profile_for` says how long a profile will take when its arithmetic alone takes longer than this
PROFILE_NOTE_S = 60.0


def profile_for(req: ProfileRequest, note: Callable[[str], None] | None = None) -> ProfileOutcome:
    """`adaptis profile`: per-layer costs measured on this machine, then (with `runtime`) the gloo link and
    the executor's time per action (`measure_action_overhead`), which the planner and simulator charge.

    Before it starts, `note` hears what the profile asks of the machine when that is a lot
    (`estimate_profile`): its arithmetic alone over `PROFILE_NOTE_S`, or more memory than is free
    (a 70B model's layers at seq 4K on a CPU: hours, and more memory than a laptop has)."""
    from adaptis_plan.executor.link import measure_link
    from adaptis_plan.executor.profile import profile_model, profile_recompute
    from adaptis_plan.executor.profile_estimate import estimate_profile
    from adaptis_plan.inputs.models.load import load_model

    model = load_model(req.model_arg)
    shape: dict[str, Any] = dict(
        seq_len=req.seq_len, micro_batch_size=req.micro_batch_size, device=req.device, dtype=req.dtype
    )
    timing: dict[str, Any] = dict(repeats=req.repeats, **({} if req.rounds is None else {"rounds": req.rounds}))
    if note is not None:
        for line in profile_notes(model, req, estimate_profile(model, head_chunks=req.head_chunks, **shape, **timing)):
            note(line)
    profile = profile_model(model, head_chunks=req.head_chunks, reverse=req.reverse, **timing, **shape)
    if req.runtime:
        link = measure_link(host_costs=req.device == "cpu")
        profile = profile.model_copy(update={"link": link, "action_overhead_s": measure_action_overhead()})
    recompute = profile_recompute(model, **timing, **shape) if req.recompute else {}
    return ProfileOutcome(model, profile, recompute)


def profile_notes(model: ModelSpec, req: ProfileRequest, est: ProfileEstimate) -> list[str]:
    """The lines `profile_for` tells before a long or oversized profile."""
    what = f"profiling {model.name} at seq {req.seq_len} on {req.device}"
    out = []
    if est.seconds > PROFILE_NOTE_S:
        out.append(
            f"note: {what}: {est.distinct} distinct layers, {est.flops / 1e12:,.1f} TFLOP of arithmetic in all, at"
            f" least {fmt_duration(est.seconds)} at this device's {est.rate / 1e9:,.0f} GFLOP/s (small layers take"
            f" longer than their arithmetic); a shorter --seq-len{', --head-chunks none' if req.head_chunks else ''}"
            " or fewer --repeats shortens it"
        )
    if est.free_bytes is not None and est.need_bytes > est.free_bytes:
        out.append(
            f"note: {what} needs about {est.need_bytes / 2**30:,.1f} GiB (every distinct layer's weights, one"
            f" layer's gradients and activations), and {est.free_bytes / 2**30:,.1f} GiB is free: it will likely run"
            " out of memory; a shorter --seq-len needs less"
        )
    return out


def measure_action_overhead(
    *, num_microbatches: int = 16, steps: int = 5, rounds: int = 3, timeout_s: float = 120.0
) -> float:
    """Host time per action that the executor adds to its layers' own work (one rank, one thread).

    Runs a one-stage GPipe plan of a model whose layers do almost no arithmetic (hidden 8, 8
    tokens) through the executor on one rank, and profiles the same layers (`profile_model`);
    the step's excess over M x the layers' profiled F + B, over the number of actions, is what
    the runtime adds per action (Python dispatch, autograd set-up, its own bookkeeping), which
    the planner and simulator charge on top of the profiled layers. P2P is not in it: the link
    model charges transfers. One launch of `rounds` x `steps` steps (each launch costs seconds of
    start-up, its steps milliseconds) and `rounds` profiles: the quickest step against the quickest
    profile, at least 0: another process only ever adds time, and a burst of it during one
    run or one profile (a parallel test suite's torchrun next door) made a median of per-round
    differences read 1.1 ms where a quiet machine reads 0-0.05 ms.

    (A two-rank probe, its step over its critical path in actions, counts the layers' own
    dispatch a second time and every hand-off's wake-up: measured 1.2-2.4 ms per action on a
    2-core VM, where this measures 0-0.1 ms; with it, plans of the tiny models were predicted 7-20 %
    slow on F / B schedules.)
    """
    from adaptis_plan.executor.launch import RunOptions, run_plan
    from adaptis_plan.executor.profile import profile_model

    plan, model, num_actions = _overhead_probe(num_microbatches)
    rounds = max(1, rounds)
    out = run_plan(plan, model, RunOptions(steps=steps * rounds, warmup=2, timeout_s=timeout_s), label="overhead probe")
    step = min(map(float, out["step_times_s"]))
    layers = math.inf
    for _ in range(rounds):
        prof = profile_model(model, seq_len=8, micro_batch_size=1, repeats=steps, rounds=1)
        layers = min(layers, sum(len(e.layers) * (e.f_s + e.b_s) for e in prof.entries) * num_microbatches)
    return max(0.0, (step - layers) / num_actions)


def _overhead_probe(num_microbatches: int) -> tuple[PlanFile, ModelSpec, float]:
    """The probe plan of `measure_action_overhead` (one stage of the whole model on one rank), its model,
    and its critical path in actions (all of them: the rank runs them one after another)."""
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
         "devices_per_node": 1}], "intra_node": {"bandwidth_gbps": 1, "latency_s": 0, "source": "probe"},
         "inter_node": {"bandwidth_gbps": 1, "latency_s": 0, "source": "probe"}}
    )  # fmt: skip
    training = TrainingConfig(num_microbatches=num_microbatches, micro_batch_size=1, seq_len=8, pp=1)
    spec = get_spec("GPipe")
    layout = Layout(bounds=(0, 4), stage_device=spec.stage_device(1), num_devices=1)
    programs = spec.build(layout.stage_device, 1, num_microbatches)
    # every action costs one unit of "overhead" and nothing else: the step is the critical path in actions
    unit = dataclasses.replace(uniform_costs(4, 1, f=0.0, i=0.0, w=0.0, mem_limit=2.0**34), action_overhead_s=1.0)
    critical = simulate(layout, unit, programs, num_microbatches)
    plan = make_plan(strategy=spec.name, model=model, hardware=hw, training=training, layout=layout,
                     programs=programs, result=critical, costs=unit)  # fmt: skip
    return plan, model, critical.step_time_s
