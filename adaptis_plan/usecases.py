"""Use cases behind the CLI: plan, simulate a plan file, export a plan file, load a plan's model,
run a plan file, profile a model.

Data flow: CLI arguments -> (model spec, hardware, training, cost table) -> search or classic
builder -> simulator -> plan file / summaries. No rich, no click: renderers print, this
returns data. ortools and torch are reached only through `search` and `executor`, lazily.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from adaptis_plan.core import CostTable, Layout, Programs, ProgressFn
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.judge.simulate import SimResult, simulate, with_expected
from adaptis_plan.planfile.io import check_model_matches, make_plan, plan_layout, plan_programs, read_plan
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.read import path_kind, read_boundary_file
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.text import cut
from adaptis_plan.units import fmt_bytes, fmt_duration

if TYPE_CHECKING:  # the executor (torch) is imported only when a plan is run or a model profiled
    from collections.abc import Callable

    from adaptis_plan.executor.launch import RunOptions
    from adaptis_plan.executor.profile_estimate import ProfileEstimate

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
    recompute: str = "none"  # none | selective | full | auto (the planner chooses per stage)
    costs_path: str | None = None
    head_chunks: int | None = None  # None = adaptive decides (classic: 1)
    time_limit_s: float = 5.0
    hard_stop: bool = True  # False: no wall-clock abort; the budget alone ends the search (same plan under any load)
    seed: int = 0
    target: str = "adaptis"  # the runtime the plan must run on (`schedules.targets`)
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
    # with a --target other than adaptis: the best plan without the target's restriction
    unrestricted: SimResult | None = None
    notes: list[str] = field(default_factory=list)  # for stderr: what the user may not have meant (`costs_notes`)

    def json_summary(self) -> dict:
        out = {"strategy": self.plan.strategy, **self.result.summary(), "plan_time_s": self.plan_time_s}
        out["target"] = self.plan.target
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


def load_costs_profile(path: str | None) -> CostProfile | str | None:
    """The measured profile at `path`; the built-in name `paper` (the paper's profiled costs) as is."""
    if path is None:
        return None
    from adaptis_plan.cost.paper import PAPER_COSTS

    if path == PAPER_COSTS:
        return PAPER_COSTS
    p = Path(path)
    if path_kind(p) is None:
        raise InputError(f"{p}: no such cost profile; measure one with `adaptis profile --model MODEL -o {p.name}`")
    return read_boundary_file(p, CostProfile, "cost profile", fix="pass the JSON file `adaptis profile -o` wrote")


def _training(req: PlanRequest, recompute: str) -> TrainingConfig:
    return TrainingConfig(
        num_microbatches=req.num_microbatches,
        micro_batch_size=req.micro_batch_size,
        seq_len=req.seq_len,
        pp=req.pp,
        tp=req.tp,
        recompute=recompute,
    )


def cost_table_for(
    model: ModelSpec,
    hw: HardwareProfile,
    training: TrainingConfig,
    profile: CostProfile | str | None,
    profile_source: str | None = None,
    recompute: list[str] | None = None,
) -> CostTable:
    """The cost table: `profile` is a measured profile, `paper` (the paper's profiled costs) or None
    (the analytic model); `profile_source` (the `--costs` file) names the profile in error messages;
    `recompute` is one mode per layer (None: `training.recompute` everywhere)."""
    from adaptis_plan.cost.paper import PAPER_COSTS

    if profile == PAPER_COSTS:
        from adaptis_plan.cost.paper import paper_cost_table

        return paper_cost_table(model, hw, training, recompute)
    from adaptis_plan.cost.table import build_cost_table

    return build_cost_table(
        model,
        hw,
        training,
        profile,  # type: ignore[arg-type]
        profile_source=profile_source or "the cost profile",
        recompute=recompute,
    )


def cost_source(costs_path: str | None) -> str:
    """What the costs of a plan came from, as plans and reports name it."""
    if costs_path is None:
        return "analytic"
    from adaptis_plan.cost.paper import PAPER_COSTS

    return "paper" if costs_path == PAPER_COSTS else f"measured profile {Path(costs_path).name}"


def costs_notes(profile: CostProfile | str | None, hw: HardwareProfile, source: str) -> list[str]:
    """Notes (stderr, no error) on a measured profile used with hardware it was plainly not measured on
    (`cost.table.profile_device_mismatch`): a legitimate stand-in at times, a mix-up more often."""
    if not isinstance(profile, CostProfile):
        return []
    from adaptis_plan.cost.table import profile_device_mismatch

    names = profile_device_mismatch(profile, hw)
    if not names:
        return []

    measured = "layer times and links" if profile.link is not None else "layer times"
    given = "memory limits" if profile.link is not None else "memory limits and links"
    return [
        f"{source}: device = '{cut(profile.device)}', but hardware '{cut(hw.name)}' has {cut(', '.join(names))}:"
        f" the plan's {measured} come from this profile, its {given} from the hardware; profile on that"
        " hardware (adaptis profile), or plan with the --hardware the profile was measured on"
    ]


RECOMPUTE_CHOICES = ("none", "selective", "full", "auto")


def _recompute_request(req: PlanRequest, classic: str | None) -> str:
    """The recompute mode planned: the request, with auto = none for classic strategies."""
    if req.recompute not in RECOMPUTE_CHOICES:
        raise InputError(f"--recompute = {req.recompute!r}: use one of {', '.join(RECOMPUTE_CHOICES)}")
    return "none" if classic is not None and req.recompute == "auto" else req.recompute


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
    recompute = _recompute_request(req, classic)
    if classic is None and req.time_limit_s <= 0:
        raise InputError(f"--time-limit = {req.time_limit_s}: must be > 0 seconds")
    model = load_model(req.model_arg)
    hw = load_hardware(req.hardware_arg)
    training = _training(req, recompute)
    if req.pp > model.num_layers:
        raise InputError(
            f"--pp = {req.pp}: more devices than the {model.num_layers} layers of {model.name}; lower --pp"
        )
    profile = load_costs_profile(req.costs_path)
    # auto starts from no recomputation; search.recompute then tries per-stage choices
    uniform = "none" if recompute == "auto" else recompute

    def table(m: ModelSpec, modes: list[str] | None = None) -> CostTable:
        return cost_table_for(m, hw, training, profile, req.costs_path, modes or [uniform] * m.num_layers)

    costs = table(model)
    forced = None
    if req.head_chunks is not None and req.head_chunks > 1:
        from adaptis_plan.inputs.models.transform import split_head

        forced = split_head(model, req.head_chunks)
        if req.pp > forced.num_layers:
            raise InputError(f"--pp = {req.pp}: more devices than the {forced.num_layers} layers; lower --pp")

    from adaptis_plan.schedules.targets import get_target
    from adaptis_plan.search.budget import Deadline, SearchBudget
    from adaptis_plan.search.generator import classic_baselines, classic_candidate

    target = get_target(req.target)
    if forced is not None and target.head_problem(forced.num_head_chunks):
        raise InputError(
            f"--head-chunks = {req.head_chunks} with --target {target.name}: {target.head_problem(forced.num_head_chunks)};"
            " use --head-chunks 1 or --target adaptis"
        )
    # --time-limit is a hard abort on the whole command; keep back what writing the plan takes
    planned_actions = req.num_microbatches * 3 * min(2 * req.pp, model.num_layers)
    if req.hard_stop:
        deadline = Deadline(t0 + _ABORT_SHARE * req.time_limit_s - planned_actions * _FINALIZE_S_PER_ACTION)
    else:
        deadline = Deadline(math.inf)
    baselines = classic_baselines(costs, model.num_layers, req.num_microbatches)
    unrestricted, unrestricted_info = None, {}
    if classic is None:
        if req.partition is not None or req.stages_per_device is not None:
            raise InputError("--partition / --stages-per-device apply to classic strategies; adaptive searches both")
        if forced is not None:
            options = [(forced, table(forced))]
        else:
            options = [(model, costs)]
            if req.head_chunks is None and "partition" in req.search:
                from adaptis_plan.search.head_chunks import head_split_options

                options += [(m, table(m)) for m in head_split_options(model, costs)]
        budget = req.budget or SearchBudget.for_time_limit(req.time_limit_s)
        # classic plans are candidates only on the cost table they were built on (the unsplit head)
        searched = baselines if forced is None else {}
        # --recompute auto where memory may bind: the search without recomputation and the recompute
        # candidates share the budget; with a target, the unrestricted search and the restricted one
        rc_share = 0.75 if recompute == "auto" and _memory_may_bind(baselines) else 0.0
        plain = budget.scaled(1.0 - rc_share)
        share = plain.scaled(0.5) if target.name != "adaptis" else plain
        k_best, outcome = _search_options(req, options, searched, progress, None, share, deadline)
        if target.name != "adaptis":
            # what the restriction costs: the same search without it, beside the restricted one
            unrestricted = outcome.best.result or simulate(
                outcome.best.layout, options[k_best][1], outcome.best.programs, req.num_microbatches
            )
            unrestricted_info = {
                "stage_device": list(outcome.best.layout.stage_device),
                "head_chunks": options[k_best][0].num_head_chunks,
            }
            fits = target.problem(outcome.best.layout.stage_device, req.pp, options[k_best][0].num_head_chunks)
            if fits is not None:  # the best plan needs what the target cannot run: search within its rules
                runnable = [k for k, (m, _) in enumerate(options) if target.head_problem(m.num_head_chunks) is None]
                k_run, outcome = _search_options(
                    req,
                    [options[k] for k in runnable],
                    searched,
                    progress,
                    target.placement_filter(req.pp),
                    share,
                    deadline,
                )
                k_best = runnable[k_run]
        model, costs = options[k_best]
        modes, rc_info = [uniform] * model.num_layers, {}
        if recompute == "auto":
            restrict = target.placement_filter(req.pp) if target.name != "adaptis" else None
            modes, costs, outcome, rc_info = _auto_recompute(
                req, model, costs, outcome, baselines, table, progress, restrict, budget.scaled(rc_share), deadline
            )
        best = outcome.best
        if target.runtime_schedule(best.layout.num_stages // req.pp) is not None:
            # the classic baselines were costed without recomputation: they compete only when none is chosen
            same_costs = baselines if all(m == uniform for m in modes) else {}
            best = _with_runtime_order(target, best, costs, same_costs, req.num_microbatches)
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
            "costs": cost_source(req.costs_path),
            "budget": budget.summary(),
            "aborted": deadline.aborted,
            "abort_phase": deadline.where,
        }
    else:
        modes, rc_info = [uniform] * (forced or model).num_layers, {}
        if forced is not None:
            model, costs = forced, table(forced)
        best = classic_candidate(
            costs, model.num_layers, req.num_microbatches, classic, req.partition or "uniform", req.stages_per_device
        )
        why = target.placement_problem(best.layout.stage_device, req.pp)
        if why is not None:
            raise InputError(
                f"--strategy {classic} with --target {target.name}: {why}; choose a strategy {target.runtime} can"
                " run, or --strategy adaptive"
            )
        strategy = classic
        search_info = {
            "source": best.label,
            "partition": req.partition or "uniform",
            "head_chunks": model.num_head_chunks,
            "costs": cost_source(req.costs_path),
        }
    if target.name != "adaptis":
        search_info["target"] = target.name
        if unrestricted is not None:
            search_info["unrestricted"] = {"step_time_s": unrestricted.step_time_s, **unrestricted_info}
    result = with_expected(
        best.layout,
        costs,
        best.programs,
        req.num_microbatches,
        best.result or simulate(best.layout, costs, best.programs, req.num_microbatches),
    )
    if not result.fits_memory:
        raise InfeasibleError(_memory_message(result, model, training, strategy, costs, rc_info))
    search_info["recompute"] = _recompute_info(recompute, modes, rc_info, model, costs, table, best.layout, req)
    plan = make_plan(
        strategy=strategy,
        model=model,
        hardware=hw,
        training=training,
        layout=best.layout,
        programs=best.programs,
        result=result,
        costs=costs,
        profile=None if isinstance(profile, str) else profile,
        cost_source="paper" if isinstance(profile, str) else None,
        stage_recompute=_stage_recompute(best.layout, modes, model),
        search=plan_file_search_info(search_info),
        target=target.name,
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
        unrestricted=unrestricted,
        notes=costs_notes(profile, hw, req.costs_path or "--costs"),
    )


def _with_runtime_order(target, best, costs: CostTable, baselines: dict, num_microbatches: int):  # noqa: ANN001, ANN202
    """For a runtime that runs its own schedule (Megatron): the searched layout with that schedule's
    order, or that schedule's classic plans (uniform / balanced partition) when one of them is
    better; the prediction is then what the runtime runs."""
    import dataclasses

    from adaptis_plan.schedules import get_spec
    from adaptis_plan.search.generator import better

    pp = best.layout.num_devices
    name = target.runtime_schedule(best.layout.num_stages // pp)
    programs = get_spec(name).build(best.layout.stage_device, pp, num_microbatches)
    result = simulate(best.layout, costs, programs, num_microbatches)
    chosen = dataclasses.replace(
        best,
        programs=programs,
        estimate_s=result.step_time_s,
        result=result,
        policy=f"{target.runtime}'s {name} order",
        hint=None,
        list_policy=None,
        origin=f"{target.runtime}'s {name} order",
    )
    for key, cand in baselines.items():
        ok = target.placement_problem(cand.layout.stage_device, pp) is None
        same = target.runtime_schedule(cand.layout.num_stages // pp) == key.split("/")[0]
        if ok and same and cand.result is not None and better(cand, chosen):
            chosen = cand
    return chosen


def _search_options(req: PlanRequest, options, baselines, progress, placement_ok, budget, deadline):  # noqa: ANN001, ANN202
    """The generator over the head-chunk options (each a (model, cost table)) on `budget`'s work
    under the command's `deadline`; (best index, outcome)."""
    from adaptis_plan.search.head_chunks import search_head_options

    return search_head_options(
        [c for _, c in options],
        [m.num_layers for m, _ in options],
        req.num_microbatches,
        components=req.search,
        time_limit_s=req.time_limit_s,
        seed=req.seed,
        progress=progress,
        baselines=baselines,
        budget=budget,
        deadline=deadline,
        placement_ok=placement_ok,
    )


def _memory_may_bind(baselines: dict) -> bool:
    from adaptis_plan.search.recompute import memory_may_bind

    return memory_may_bind(baselines)


def _auto_recompute(  # noqa: ANN202
    req: PlanRequest,
    model: ModelSpec,
    costs: CostTable,
    outcome,
    baselines,
    table,
    progress,
    placement_ok,
    budget,
    deadline,  # noqa: ANN001
):
    """`--recompute auto` after the search without recomputation: when memory can bind, the recompute
    candidates (`search.recompute`) share `budget` (three quarters of the command's work, see
    `make_plan_for`), under the command's deadline; when it cannot, nothing more is searched (the
    plan is `--recompute none`'s)."""
    from adaptis_plan.search.recompute import memory_may_bind, search_recompute

    if not memory_may_bind(baselines):
        reason = "every classic plan fits memory (GPipe included): memory does not bind"
        return ["none"] * model.num_layers, costs, outcome, {"reason": reason}
    rc = search_recompute(
        lambda modes: table(model, list(modes)),
        costs,
        outcome,
        [layer.kind for layer in model.layers],
        req.num_microbatches,
        components=req.search,
        time_limit_s=req.time_limit_s,
        seed=req.seed,
        budget=budget,
        deadline=deadline,
        progress=progress,
        placement_ok=placement_ok,
    )
    return rc.modes, rc.costs, rc.outcome, rc.info


def _recompute_info(
    requested: str, modes: list[str], rc_info: dict, model: ModelSpec, costs: CostTable, table, layout, req
) -> dict:
    """`search.recompute` of the plan: what was asked, which stages recompute, the compute it adds,
    and (auto) what was tried against the best plan without recomputation."""
    info: dict = {"requested": requested, **rc_info}
    if any(m != "none" for m in modes):
        from adaptis_plan.search.recompute import recompute_report

        plain = table(model, ["none"] * model.num_layers)
        kinds = [layer.kind for layer in model.layers]
        info.update(recompute_report(modes, costs, plain, layout, kinds, req.num_microbatches))
    return info


def _stage_recompute(layout: Layout, modes: list[str], model: ModelSpec) -> list[str]:
    """Each stage's recompute mode (what `simulate` rebuilds the plan's costs from)."""
    from adaptis_plan.cost.recompute import stage_recompute

    return stage_recompute(layout.bounds, modes, [layer.kind for layer in model.layers])


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
        frac = self.hardware.memory_fraction
        return f"{what}, {self.hardware.name}, tp {tr.tp}, memory limit {frac:.0%} of HBM"


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
        return with_expected(layout, costs, programs, m, simulate(layout, costs, programs, m))
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

    def json_summary(self) -> dict:
        return {
            "strategy": self.plan.strategy,
            **self.result.summary(),
            "stored_step_time_s": self.plan.predicted.step_time_s,
            "stored_differs": self.stored_differs,
            "cost_source": self.cost_source,
        }


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
    return SimOutcome(plan, layout, programs, result, title, differs, inputs.cost_source, notes)


EXPORT_FORMATS = ("torch-csv", "megatron-layout", "torchtitan")


def export_plan_file(
    plan_path: str,
    fmt: str,
    *,
    model_arg: str | None = None,
    output: str | None = None,
    torchtitan_config: str | None = None,
) -> list[tuple[str | None, str]]:
    """The files an export writes, as (path, text) in writing order; path None = stdout.

    The plan is judged first (a plan whose programs deadlock or miss actions is refused), then
    checked against what the format's runtime can run (`schedules.targets`): nothing is
    written that the runtime would reject later.
    """
    from adaptis_plan.planfile.export import megatron_layout, to_torch_csv, torchtitan_base, torchtitan_config_module
    from adaptis_plan.schedules.targets import check_exportable

    if fmt not in EXPORT_FORMATS:
        raise InputError(f"--format = {fmt!r}: use one of {', '.join(EXPORT_FORMATS)}")
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
    inputs = load_plan_inputs(plan_path, model_arg=model_arg)
    plan, model = inputs.plan, inputs.model
    judge_plan(inputs)
    layout, programs = plan_layout(plan), plan_programs(plan)
    try:
        check_exportable(fmt, layout.stage_device, layout.num_devices, plan.model.head_chunks)
    except InputError as e:
        raise InputError(f"{plan_path}: {e}") from None
    kinds = [layer.kind for layer in model.layers]
    if fmt == "torch-csv":
        return [(output, to_torch_csv(programs))]
    if fmt == "megatron-layout":
        return [(output, megatron_layout(layout, kinds) + "\n")]
    config_path = Path(str(output))
    csv_path = config_path.with_suffix(".csv")
    module = torchtitan_config_module(
        layout,
        kinds,
        csv_name=csv_path.name,
        base=str(torchtitan_config),
        num_microbatches=plan.training.num_microbatches,
        micro_batch_size=plan.training.micro_batch_size,
        seq_len=plan.training.seq_len,
        title=f"{plan.model.name}, {plan.strategy} plan, pp {plan.training.pp},"
        f" {plan.training.num_microbatches} micro-batches",
    )
    return [(str(csv_path), to_torch_csv(programs)), (str(config_path), module)]


# ----------------------------------------------------------------------------- run and profile (the executor)
def executor_refusal(plan: PlanFile) -> str | None:
    """Why the bundled executor cannot run `plan` as planned, or None. It runs the pipeline dimension
    only (one process per pipeline device): a plan with tensor or data parallelism would run as a
    different configuration, so it is refused rather than run."""
    t = plan.training
    for dim, value, fix in (("tp", t.tp, "plan with --tp 1"), ("dp", t.dp, "set training.dp to 1")):
        if value > 1:
            return (
                f"training.{dim} = {value}: `adaptis run` executes the pipeline dimension only (tp = dp = 1);"
                f" run this plan under Megatron-LM or torchtitan (`adaptis export`), or {fix} to run it here"
            )
    return None


def run_plan_file(
    plan_path: str, options: RunOptions, *, model_arg: str | None = None, trace_path: str | None = None
) -> tuple[PlanFile, dict]:
    """`adaptis run`: read the plan file and check it once (`load_plan_for_run`: the contract and the
    judge), then hand the objects to the launcher, which lowers and launches them (it never rereads
    `plan_path`). Returns the plan and the launcher's result (the `run` JSON keys)."""
    from adaptis_plan.executor.launch import run_plan

    plan, model, judged = load_plan_for_run(plan_path, model_arg)
    why = executor_refusal(plan)
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
    )


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
    shape = dict(seq_len=req.seq_len, micro_batch_size=req.micro_batch_size, device=req.device, dtype=req.dtype)
    timing = dict(repeats=req.repeats, **({} if req.rounds is None else {"rounds": req.rounds}))
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
    model charges transfers. Over `rounds` (run, profile) pairs, the quickest step against the
    quickest profile, at least 0: another process only ever adds time, and a burst of it during one
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
    step, layers = math.inf, math.inf
    for _ in range(max(1, rounds)):
        out = run_plan(plan, model, RunOptions(steps=steps, warmup=2, timeout_s=timeout_s), label="overhead probe")
        prof = profile_model(model, seq_len=8, micro_batch_size=1, repeats=steps, rounds=1)
        step = min(step, *map(float, out["step_times_s"]))
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
