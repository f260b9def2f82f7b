"""The whole-configuration search: N GPUs, a model and a global batch -> TP, PP, DP, CP, EP, ZeRO,
the micro-batch split, recomputation and the pipeline, with a configuration-level lower bound.

Contract: `search_configuration(model, hardware, request, budget=..., deadline=...)` returns the
best `Choice` (its `driver.PipelinePlan`, training config and whole step) and one `Considered`
row per legal configuration saying what happened to it. Same inputs and budget, same answer:
every order is a sort on numbers and labels, every search runs on a deterministic budget.

Legal points (`legal_points`): tp divides every head count and inner size (`check_tensor_parallel`)
and, when searched, the GPUs of a node (the free search keeps a tensor-parallel group in a node); a tp
given on the command line is planned where it runs at all: across nodes when it fills whole ones (Megatron-LM
runs it so, its collectives priced on the network, `cost.comm.GroupLink`); tp x cp divides a node or
fills whole nodes; cp divides the sequence into 2 x cp load-balanced chunks of at least
`MIN_CP_TOKENS` tokens per rank, and only attention models take it (no Mamba); pp <= layers; dp = gpus / (tp x cp x pp) divides the global
batch; ep divides the experts and dp x cp (MoE models only); micro-batch size b divides
B / dp with M = B / (dp x b) micro-batches. ZeRO 1, 2 and 3 are tried where dp x cp > 1: ZeRO 0
is never better in this cost model (it holds more memory than ZeRO 1 and its all-reduce moves
fp32 gradients twice where ZeRO 1's reduce-scatter + bf16 all-gather moves 1.5 times).

Then, per point, without planning (`_screen_bound`): the proven memory check and the lower bound on
the whole step of `judge.configuration_bound` (the pipeline's bound plus the optimizer step and the
data-parallel traffic every rank ends with). The least bound over every point that may fit is the
configuration-level lower bound.

Points are screened in the order of an estimate (`_estimate`: the fastest classic schedule in closed
form, 1F1B or, for adaptive and an Interleaved1F1B of unstated degree, Interleaved1F1B at up to
`MAX_SCREEN_CHUNKS` stages per device, on the uniform partition (a classic strategy's requested one,
`Request.pipeline.partition`; for adaptive, ends-as-layers where uniform has too few decoder layers: `_split`)
under the first recompute mode where
one fits, with the data-parallel sync, gather and optimizer step around it: `_whole_step`) with that schedule simulated (the same partition; recomputation
none, selective, then full: the first that fits; 1F1B where the interleaving overflows), priced as
whole steps (a schedule whose closed-form memory already overflows is not simulated: `_estimate`);
a point whose bound is above the best screened step is pruned (it cannot win); screening stops when
its budget is spent (`SCREEN_LIMIT`, `SCREEN_ACTIONS`) or when the estimate passes the
`PLAN_LIMIT`-th best screened step by `SCREEN_MARGIN` (the rest could not be planned: they stay
not_screened, with the reason; for an adaptive request a deeper pipeline's estimate counts without
its closed-form bubble, never below its bound: `_reachable_s`). Equal estimates, steps and bounds go to the simpler configuration
(`Point.preference`; a point whose bound only ties the best step found is pruned). With several
workers the next points the screen may reach are screened side by side, then decided in order
exactly as one by one. The best
`PLAN_LIMIT` screened points, and for an adaptive request the best screened point of each deeper
pipeline whose bound is below the best screened step (`PLAN_MOST` in all: `_to_plan`), are then
planned with the full pipeline search (`driver`), each with
1 / (2 x points planned) of the budget (auto recomputation runs up to three searches of it); a big
pipeline (pp x M >= `BIG_PIPELINE`) plans only the best point, under its screened recompute
mode. Each point's search runs under the request's target, components (--search) and head split,
and counts the screen's classic schedule at its degree and split among its classic plans (`_seeds`).
A point whose search finds no plan that fits, or none faster, keeps its screened classic plan (for
an adaptive request its `search.fallback` says so, with the search's own whole step); an ablation
(--search) keeps its own plan.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptis_plan.core import ALL_COMPONENTS, CostTable, ProgressFn
from adaptis_plan.cost.comm import devices_per_node
from adaptis_plan.cost.source import CostTables
from adaptis_plan.cost.table import check_tensor_parallel, layer_param_shares
from adaptis_plan.errors import InfeasibleError, InputError
from adaptis_plan.inputs.hardware import cluster
from adaptis_plan.judge.configuration_bound import STATIC_REASON, configuration_bound
from adaptis_plan.judge.simulate import MEM_SLACK, judged, simulate
from adaptis_plan.judge.training_step import (
    TrainingStep,
    held_extras,
    training_step,
)
from adaptis_plan.schedules import get_spec
from adaptis_plan.schedules._common import microbatch_groups
from adaptis_plan.schedules.placement import placement
from adaptis_plan.schedules.targets import get_target
from adaptis_plan.search import driver
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import Candidate, check_components, classic_candidate
from adaptis_plan.search.partition import classic_bounds
from adaptis_plan.search.workers import Pool, pmap, workers
from adaptis_plan.spec.config import Parallelism, PipelineSettings, RuntimeSettings, field_names
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.limits import (
    MAX_CP,
    MAX_DEVICE_MICROBATCHES,
    MAX_MICRO_BATCH_SIZE,
    MAX_MICROBATCHES,
    MAX_PP,
)
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

DIMENSIONS = field_names(Parallelism)
#: micro-batch sizes tried when not given: powers of two up to this (larger ones only raise the
#: activation memory; the GEMMs are near their asymptote at b x s = 16K tokens and above)
MAX_SEARCHED_MICRO_BATCH = 8
#: points screened: while the screened plans' actions (stages x micro-batches x 3
#: per point) stay under SCREEN_ACTIONS, and at least SCREEN_LIMIT (a deterministic budget: small
#: pipelines screen every point, pp 64 x 512 micro-batches about ten); the best PLAN_LIMIT of them
#: are planned with the full pipeline search
SCREEN_LIMIT = 8
SCREEN_ACTIONS = 1_000_000
PLAN_LIMIT = 2
#: for an adaptive request, beside the best PLAN_LIMIT screened points, the best screened point of each
#: deeper pipeline (pp >= 2) not among them whose bound is below the best screened step, in the order of
#: their screened steps, up to PLAN_MOST points in all: the screen prices classic schedules, and what the
#: co-designed pipeline buys (the bubble it fills, the stages it balances) is largest in deep pipelines
PLAN_MOST = 4
#: once PLAN_LIMIT points are screened, a point whose estimate is this far above the PLAN_LIMIT-th
#: best screened step is not screened: it would not be planned (the estimate is 1F1B's closed form,
#: within a few percent of the simulated 1F1B step on the published runs' configurations)
SCREEN_MARGIN = 0.10
#: pp x M from which a pipeline is big (every classic baseline of it simulates for a good fraction of
#: a second): the best screened point alone is planned, under its screened recompute mode, with
#: `--recompute auto` (auto's search without recomputation and per forced mode would triple it)
BIG_PIPELINE = 4096
SCREEN_STRATEGY = "1F1B"
#: the most stages per device the screen's estimate tries for Interleaved1F1B beside 1F1B (adaptive,
#: or Interleaved1F1B without --stages-per-device): the bubble falls as 1 / degree. The closed form
#: has no transfer term, so among the degrees that fit it favours the deepest; the screen's simulation
#: and the pipeline search price the transfers. Past 8 the estimate's bubble is within (pp - 1) / (8 M)
#: of the step. Each degree costs one closed form per point, no simulation.
MAX_SCREEN_CHUNKS = 8
#: a screen whose schedule has at least this many actions runs side by side with the next ones (with
#: several workers); a smaller one takes less than handing it to a worker does
SIDE_BY_SIDE_ACTIONS = 20_000
#: tokens of a sequence a context-parallel rank holds at least when cp is searched (Megatron-Core
#: runs cp 2 at 8K and cp 16 at 128K in its published recipes: 4K-8K per rank)
MIN_CP_TOKENS = 1024
RECOMPUTE_LADDER = ("none", "selective", "full")


@dataclass(frozen=True)
class Request:
    """What the user gave: the cluster, the batch and any dimension fixed (None = searched), with the
    request's pipeline and runtime sections and search seed (`spec.config`). `pipeline.partition` is a
    classic strategy's (`search.partition.CLASSIC_PARTITIONS`), `pipeline.target` lower case."""

    gpus: int
    global_batch_size: int
    seq_len: int
    fixed: dict[str, int | None] = field(default_factory=dict)
    pipeline: PipelineSettings = PipelineSettings(recompute="auto", partition="uniform")
    runtime: RuntimeSettings = RuntimeSettings()
    seed: int = 0


@dataclass(frozen=True, order=True)
class Point(Parallelism):
    """One configuration (every dimension given), ordered by its fields."""

    def training(self, req: Request, recompute: str = "none") -> TrainingConfig:
        """The training config of this point under `req`'s sequence length and runtime settings."""
        return TrainingConfig.of(self, req.seq_len, recompute, req.runtime)

    @property
    def label(self) -> str:
        return (
            f"tp{self.tp} pp{self.pp} dp{self.dp} cp{self.cp} ep{self.ep} zero{self.zero}"
            f" mbs{self.micro_batch_size} x{self.num_microbatches}"
        )

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in DIMENSIONS}

    def tokens(self, seq_len: int) -> int:
        """Tokens one step trains (the global batch's, the same at every point of a request)."""
        return self.dp * self.micro_batch_size * self.num_microbatches * seq_len

    @property
    def preference(self) -> tuple:
        """The order among points the cost model prices equal: the simpler configuration first (fewer
        GPUs per model replica, then no context, tensor or pipeline split, less expert parallelism, a
        lower ZeRO stage), then the fields. Context parallelism at a sequence the model already fits
        prices the same as data parallelism (its KV exchange hides under attention), but it runs more
        kernels and code than a runtime's plain data parallelism; an engineer takes dp there."""
        return (self.tp * self.cp * self.pp, self.cp, self.tp, self.pp, self.ep, self.zero, self)


def screen_strategy(req: Request, chunks: int = 1) -> tuple[str, int]:
    """The classic schedule (strategy, stages per device) a point is screened with: the requested one
    (at its default degree when --stages-per-device is not given), or 1F1B for adaptive; Interleaved1F1B
    at `chunks` stages per device where the estimate chose an interleaving degree (`_degrees`)."""
    if chunks > 1:
        return "Interleaved1F1B", chunks
    strategy = SCREEN_STRATEGY if req.pipeline.adaptive else req.pipeline.strategy
    return strategy, req.pipeline.stages_per_device or get_spec(strategy).default_stages_per_device


def _degrees(req: Request) -> bool:
    """Whether the screen chooses an interleaving degree: adaptive, or Interleaved1F1B, without
    --stages-per-device."""
    return req.pipeline.stages_per_device is None and req.pipeline.strategy.lower() in ("adaptive", "interleaved1f1b")


@dataclass
class Considered:
    """One legal point and what became of it. `status`: planned, screened, pruned (its bound is above
    the best step found), out_of_memory, inapplicable (the requested classic strategy cannot run
    there), not_screened (the screening budget ran out, or its estimate says it would not be planned)."""

    point: Point
    bound_s: float
    status: str
    estimate_s: float = math.inf  # the screening order (`_estimate`); not a bound
    chunks: int = 1  # stages per device of the classic schedule the estimate chose (1: 1F1B)
    unfit: dict[str, frozenset[int]] = field(default_factory=dict)  # `_estimate`'s proven overflows
    step_time_s: float | None = None
    reason: str = ""
    recompute: str | None = None
    strategy: str | None = None
    overflow_bytes: float = 0.0
    # the fastest classic schedule's whole step here: the screen's (1F1B or Interleaved1F1B on Megatron's
    # uniform split), and at a planned point also every classic plan its pipeline search started from
    classic_step_s: float | None = None
    classic_strategy: str | None = None


@dataclass
class Choice:
    point: Point
    training: TrainingConfig
    hardware: HardwareProfile
    plan: driver.PipelinePlan
    step: TrainingStep
    considered: list[Considered]
    lower_bound_s: float


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _tp_ok(model: ModelSpec, tp: int) -> bool:
    try:
        check_tensor_parallel(model, tp)
    except InputError:
        return False
    return True


def _choices(name: str, fixed: dict[str, int | None], options: Sequence[int]) -> list[int]:
    value = fixed.get(name)
    return [value] if value is not None else list(options)


def legal_points(model: ModelSpec, hardware: HardwareProfile, req: Request) -> list[Point]:
    """Every legal configuration of `req` on `hardware` (module docstring), sorted."""
    n, B, S, fixed = req.gpus, req.global_batch_size, req.seq_len, req.fixed
    dpn = devices_per_node(hardware)
    experts = {layer.moe.num_experts for layer in model.layers if layer.moe is not None}
    has_mamba = any(layer.mamba is not None for layer in model.layers)
    tps = [t for t in _choices("tp", fixed, _divisors(dpn)) if _tp_ok(model, t)]
    points: list[Point] = []
    for tp in tps:
        if n % tp:
            continue
        # a context-parallel rank keeps at least MIN_CP_TOKENS of each sequence (shorter chunks
        # leave the attention core too small to hide the KV exchange)
        cps = [1] if has_mamba else [
            c for c in _divisors(n // tp) if c == 1 or (S % (2 * c) == 0 and S // c >= MIN_CP_TOKENS)
        ]  # fmt: skip
        for cp in _choices("cp", fixed, cps):
            if n % (tp * cp) or (cp > 1 and S % cp) or dpn % (tp * cp) and (tp * cp) % dpn:
                continue
            for pp in _choices("pp", fixed, _divisors(n // (tp * cp))):
                if n % (tp * cp * pp) or pp > model.num_layers:
                    continue
                dp = n // (tp * cp * pp)
                if fixed.get("dp") not in (None, dp) or B % dp:
                    continue
                eps = [1]  # a dense model has no experts to shard (a fixed --ep > 1 finds no point)
                if experts:
                    eps = [e for e in _divisors(dp * cp) if all(x % e == 0 for x in experts)]
                mbs_all = [b for b in _divisors(B // dp) if b <= MAX_SEARCHED_MICRO_BATCH]
                zeros = [1, 2, 3] if dp * cp > 1 else [1]
                for ep in _choices("ep", fixed, eps):
                    if (dp * cp) % ep or ep not in eps:
                        continue
                    for zero in _choices("zero", fixed, zeros):
                        for b in _choices("micro_batch_size", fixed, mbs_all):
                            if (B // dp) % b:
                                continue
                            m = B // (dp * b)
                            if fixed.get("num_microbatches") not in (None, m):
                                continue
                            if m > MAX_MICROBATCHES or pp * m > MAX_DEVICE_MICROBATCHES:
                                continue
                            if max(cp, ep) > MAX_CP or pp > MAX_PP or b > MAX_MICRO_BATCH_SIZE:
                                continue
                            points.append(Point(tp, pp, dp, cp, ep, zero, b, m))
    return sorted(points)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


@dataclass
class _Screen:
    considered: Considered
    tables: CostTables | None = None
    candidate: object = None  # the simulated classic plan (shared by points with equal tables)
    step: TrainingStep | None = None
    mode: str = "none"
    schedule: tuple[str, int] = ("1F1B", 1)  # the screened classic (strategy, stages per device)


def _screened_step_s(screen: _Screen) -> float:
    """The whole step of a point the screen priced (one that fits: it has a step)."""
    assert screen.step is not None
    return screen.step.step_time_s


def _screen_bound(model: ModelSpec, hw: HardwareProfile, req: Request, point: Point) -> Considered:
    """One point's row before screening: the proven memory check and lower bound of its configuration
    (`judge.configuration_bound`), and where it may fit, the screen's estimate (`_estimate`)."""
    verdict = configuration_bound(model, hw, point.training(req, "none"))
    if not verdict.fits:
        return Considered(
            point, verdict.bound_s, "out_of_memory", reason=verdict.reason, overflow_bytes=verdict.overflow_bytes
        )
    assert verdict.costs is not None  # a configuration that may fit has its cost table
    estimate_s, chunks, unfit = _estimate(model, hw, req, point, verdict.costs)
    return Considered(point, verdict.bound_s, "not_screened", estimate_s=estimate_s, chunks=chunks, unfit=unfit)


def _estimate(
    model: ModelSpec, hw: HardwareProfile, req: Request, point: Point, plain: CostTable
) -> tuple[float, int, dict[str, frozenset[int]]]:
    """The screening order (not a bound), the stages per device it chose, and per recompute mode it
    looked at, the degrees (1: 1F1B) whose held activations alone overflow some device. Under the
    first recompute mode (none, selective, full, or the requested one) in which some classic schedule
    fits, the fastest of them in closed form on the requested partition (`Request.partition`: uniform
    unless a classic strategy asks for another), as a whole step (`_whole_step`); infinite when none fits.

    - 1F1B: sum over stages of (F + B) + (M - 1) x the slowest stage's (F + B); stage s holds static
      bytes + min(pp - s, M) micro-batches of activations.
    - Interleaved1F1B at k stages per device (`_degrees`, up to `MAX_SCREEN_CHUNKS`): M x the busiest
      device's (F + B) + (pp - 1) x the slowest stage's (the bubble of one stage per device shrinks to
      one of its k chunks); device d holds its static bytes + the activations of its first
      min((k - 1) g + 2 (pp - 1 - d) + 1, k M) forwards (`schedules.interleaved_1f1b`'s warm-up and
      the first forward after it, g the first micro-batch group), each of its own chunk
      (`_warmup_chunks`): a last stage's big logits count once per micro-batch it holds, not
      spread over the device's chunks.

    Both hold what the simulated schedule holds when its first backward starts, so no more than its
    peak: a degree that overflows here overflows when simulated (`_screen` skips it). The balanced
    partition is estimated on the ends-as-layers cuts and marks no degree unfit."""
    m, pp = point.num_microbatches, point.pp
    unfit: dict[str, frozenset[int]] = {}
    most = _most_stages(model, req)
    if pp > most:
        return math.inf, 1, unfit
    degrees = [1]
    if pp > 1 and _degrees(req):
        deeper = [k for k in range(2, MAX_SCREEN_CHUNKS + 1) if pp * k <= most]
        # an Interleaved1F1B request interleaves: 1F1B is adaptive's own alternative only
        degrees = deeper if not req.pipeline.adaptive and deeper else degrees + deeper
    modes = RECOMPUTE_LADDER if req.pipeline.recompute == "auto" else (req.pipeline.recompute,)
    limit = float(plain.mem_limit_bytes.min())
    limits = plain.mem_limit_bytes[:pp] + MEM_SLACK  # what the simulator lets each device hold
    group = -(-m // max(1, m // pp))  # the first micro-batch group's size (`microbatch_groups`)
    dev = np.arange(pp)
    sizes = np.array([len(g) for g in microbatch_groups(m, pp)])
    # the balanced partition's min-max search costs ~10x the rest of a point's estimate: its ordering takes
    # the ends-as-layers cuts (as many stages allowed), and it proves no overflow (the cuts differ)
    exact = req.pipeline.partition != "balanced"
    training = point.training(req)
    shares = layer_param_shares(model, training)  # the same under every recompute mode and degree
    for mode in modes:
        costs = plain if mode == "none" else CostTables(hw, point.training(req, mode), default_mode=mode).table(model)
        work = (costs.f_s + costs.i_s + costs.w_s).min(axis=0)
        forward = costs.f_s.min(axis=0)
        best, chunks = math.inf, 1
        over: set[int] = set()
        for k in degrees:
            split = _split(model, req, pp * k) if exact else "ends-as-layers"
            cuts = classic_bounds(costs, placement("sequential" if k == 1 else "loop", pp, k), split)[:-1]
            stage = np.add.reduceat(work, cuts)
            static = np.add.reduceat(costs.static_bytes, cuts).reshape(k, pp).sum(axis=0)
            act = np.add.reduceat(costs.act_bytes, cuts).reshape(k, pp)  # [chunk, device]
            if k == 1:
                held = act[0] * np.minimum(pp - dev, m)
                step = float(stage.sum() + (m - 1) * stage.max())
            else:
                forwards = np.minimum((k - 1) * group + 2 * (pp - 1 - dev) + 1, k * m)
                held = (act.T * _warmup_chunks(forwards, k, sizes)).sum(axis=1)
                step = float(m * stage.reshape(k, pp).sum(axis=0).max() + (pp - 1) * stage.max())
            if exact and np.any(static + held > limits):
                over.add(k)
            if np.all(static + held <= limit):
                step = _whole_step(
                    model, hw, training, costs, step, cuts, np.add.reduceat(forward, cuts), stage, shares
                )
                if step < best:
                    best, chunks = step, k
        unfit[mode] = frozenset(over)
        if best < math.inf:
            return best, chunks, unfit
    return math.inf, 1, unfit


def _whole_step(
    model: ModelSpec,
    hw: HardwareProfile,
    training: TrainingConfig,
    costs: CostTable,
    pipeline_s: float,
    cuts: Sequence[int],
    forward: np.ndarray,
    work: np.ndarray,
    shares: tuple[np.ndarray, np.ndarray],
) -> float:
    """The screen's estimate (not a bound) of the whole step around a closed-form pipeline of
    `pipeline_s` whose stages (device s % pp, start layers `cuts`) take `forward` / `work` (F + B)
    seconds per micro-batch: `judge.training_step`'s rule on the times a 1F1B-like schedule gives.
    Device d's first backward starts when micro-batch 0 has gone forward through every stage and back
    through the stages after d's last, its last backward one stage backward before d finishes, and d
    finishes when the backward of the last micro-batch still has the stages before d to go."""
    pp, m = training.pp, training.num_microbatches
    backward = work - forward
    bounds = [int(c) for c in cuts] + [model.num_layers]
    held = [[n for s in range(d, len(cuts), pp) for n in range(bounds[s], bounds[s + 1])] for d in range(pp)]
    extras = held_extras(held, model, training, hw, tuple(costs.device_names[:pp]), shares)
    first_f = forward.reshape(-1, pp).sum(axis=0)
    if not training.dp_overlap:
        ends = [pipeline_s + x.grad_sync_s + x.optimizer_s for x in extras]
        return max(ends) + max(x.param_gather_s for x in extras)
    shift = max(max(0.0, x.param_gather_s - f) for x, f in zip(extras, first_f, strict=True))
    ends = []
    for d, x in enumerate(extras):
        finish = pipeline_s - float(backward[:d].sum())
        last = finish - float(backward[d])
        first = float(forward.sum() + backward[len(cuts) - pp + d + 1 :].sum())
        free = x.param_gather_s - shift
        if x.num_syncs > 1:  # one per micro-batch, from the first backward on, the last from the last
            link = max(max(free, first) + x.grad_sync_s, last + x.grad_sync_s / m)
        else:
            link = max(free, last) + x.grad_sync_s
        ends.append(max(finish, link) + x.optimizer_s)
    return max(ends) + shift


def _most_stages(model: ModelSpec, req: Request) -> int:
    """The most pipeline stages the screen's partitions give a layer each (`_split`; a classic request's
    uniform split: the decoder layers)."""
    return model.num_layers - 2 if _split(model, req, model.num_layers) == "uniform" else model.num_layers


def _split(model: ModelSpec, req: Request, stages: int) -> str:
    """The partition of a point's classic schedule over `stages` stages: a classic request's own
    (`Request.pipeline.partition`); for adaptive, which searches its own, Megatron's uniform split while it has
    a decoder layer per stage, else ends-as-layers (the embedding and the head count as layers)."""
    if req.pipeline.adaptive and stages > model.num_layers - 2:
        return "ends-as-layers"
    return req.pipeline.partition or "uniform"  # a Request always names one (`usecases`)


def _warmup_chunks(forwards: np.ndarray, k: int, sizes: np.ndarray) -> np.ndarray:
    """[device, chunk]: how many of device d's first `forwards[d]` forwards run its local chunk c, in
    the interleaved order (`schedules._common.interleaved_orders`: group by group, each group's
    micro-batches through chunk 0, then chunk 1, ...; `sizes` the groups' sizes)."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    first = starts[:, None] * k + np.arange(k)[None, :] * sizes[:, None]  # [group, chunk]: its first forward
    done = forwards[:, None, None] - first[None]
    return np.clip(done, 0, sizes[None, :, None]).sum(axis=1)


def _screen(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    row: Considered,
    modes: Sequence[str],
    classic: dict[tuple, Candidate | InputError] | None = None,
) -> _Screen:
    """The classic schedule the estimate chose (`screen_strategy`; where that interleaving does not
    fit, 1F1B for adaptive, the requested strategy at its default degree otherwise) at the point, with the
    first recompute mode of `modes` that fits, as a whole step. A schedule `_estimate` proved overflowing
    in a mode (`Considered.unfit`) is not simulated, except the last one tried, whose overflow is the
    reason a point is out of memory.
    `classic` keeps the simulated classic plans by cost table, micro-batches and schedule: a point
    whose table equals an earlier one's (`_adaptive`) reuses the plan and prices its own step."""
    p = row.point
    classic = {} if classic is None else classic
    worst = 0.0
    schedules = [screen_strategy(req, row.chunks)]
    fallback = screen_strategy(req)  # 1F1B for adaptive, the requested strategy at its own degree otherwise
    if row.chunks > 1 and fallback not in schedules:
        schedules.append(fallback)
    for mode in modes:
        training = p.training(req, mode)
        tables = CostTables(hw, training, default_mode=mode)
        costs = tables.table(model)
        for strategy, chunks in schedules:
            last = (strategy, chunks) == schedules[-1]
            degree = {"1F1B": 1, "Interleaved1F1B": chunks}.get(strategy)
            if degree in row.unfit.get(mode, ()) and not (last and mode == modes[-1]):
                continue  # its closed form already overflows (`_estimate`); the last one gives the reason
            split = _split(model, req, p.pp * chunks)
            key = (_table_key(costs), p.num_microbatches, strategy, chunks, split)
            if key not in classic:
                try:
                    classic[key] = classic_candidate(costs, p.num_microbatches, strategy, split, chunks)
                except InputError as e:  # the classic strategy does not apply at this point (its rules)
                    classic[key] = e
            cand = classic[key]
            if isinstance(cand, InputError):
                if not last:
                    continue
                row.status, row.reason = "inapplicable", str(cand)
                return _Screen(row)
            result = cand.result or simulate(cand.layout, costs, cand.programs, p.num_microbatches)
            if not result.fits_memory:
                if last:
                    worst = max(result.overflow_bytes)
                continue
            step = training_step(cand.layout, cand.programs, result, model, training, hw, costs.device_names)
            row.status, row.step_time_s, row.recompute, row.strategy = "screened", step.step_time_s, mode, strategy
            row.chunks = chunks
            row.classic_step_s, row.classic_strategy = step.step_time_s, _schedule_name(strategy, chunks)
            return _Screen(row, tables, cand, step, mode, (strategy, chunks))
    strategy = schedules[-1][0]
    row.status, row.overflow_bytes = "out_of_memory", worst
    row.reason = f"{strategy} with {modes[-1]} recomputation is {_gib(worst)} over the memory limit"
    return _Screen(row)


def _screen_alone(
    model: ModelSpec, hw: HardwareProfile, req: Request, modes: Sequence[str], row: Considered
) -> _Screen | Exception:
    """`_screen` side by side (a worker process): what the caller keeps of it (the row, its whole step,
    mode and schedule), without the classic plan and cost tables, which `_plan_point` rebuilds if it
    needs them; an error comes back as the value, raised only if the row is decided to be screened."""
    try:
        got = _screen(model, hw, req, row, modes)
    except Exception as e:  # noqa: BLE001 - raised where the in-order loop would have met it
        return e
    return _Screen(got.considered, step=got.step, mode=got.mode, schedule=got.schedule)


def search_configuration(
    model: ModelSpec,
    hardware: HardwareProfile,
    req: Request,
    *,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None = None,
) -> Choice:
    """The best configuration of `req` (module docstring). Raises InputError when no point is legal
    and InfeasibleError when none fits in memory."""
    _check_options(model, req)
    hw = cluster(hardware, req.gpus)
    points = legal_points(model, hw, req)
    if not points:
        raise InputError(_no_legal_point(model, hw, req))
    rows = pmap(functools.partial(_screen_bound, model, hw, req), points)
    order = sorted(
        (r for r in rows if r.status != "out_of_memory"), key=lambda r: (r.estimate_s, r.bound_s, r.point.preference)
    )
    fixed_mode = None if req.pipeline.recompute == "auto" else req.pipeline.recompute
    modes = (fixed_mode,) if fixed_mode else RECOMPUTE_LADDER
    screened: list[_Screen] = []
    best = math.inf
    tried = actions = 0
    steps: list[float] = []  # the PLAN_LIMIT best screened steps
    classic: dict[tuple, Candidate | InputError] = {}  # the screens' classic plans (`_screen`)

    def verdict(row: Considered, best: float, tried: int, actions: int, steps: list[float]) -> str | None:
        """Why `row` is not screened in this state (None: it is). On the loop's real state every reason
        stays true as it moves on (best and steps only fall, tried and actions only grow, the clock only
        runs); the look-ahead below counts its picks as screened, so it may pass over a row the loop
        then screens, in turn."""
        if row.bound_s >= best:
            return "pruned"
        if tried >= SCREEN_LIMIT and actions >= SCREEN_ACTIONS:
            return "budget"  # the screening budget is spent: the rest stay not_screened
        if len(steps) >= PLAN_LIMIT and _reachable_s(row, req) > steps[PLAN_LIMIT - 1] * (1.0 + SCREEN_MARGIN):
            return "margin"
        if screened and deadline.expired():
            return "deadline"
        return None

    def cost(row: Considered) -> int:
        return 3 * row.point.pp * row.point.num_microbatches * row.chunks

    with Pool() as pool:
        start = 0
        while start < len(order):
            # the next rows the loop below may screen, as far as the state before them tells: with several
            # workers they are screened side by side, then decided one by one exactly as in turn (a row the
            # loop passes over was not needed; one it screens that was not picked is screened then)
            ahead: dict[int, _Screen | Exception] = {}
            stop = start + 1
            if pool.parallel and cost(order[start]) >= SIDE_BY_SIDE_ACTIONS:
                picked: list[int] = []
                t, a = tried, actions
                for j in range(start, len(order)):
                    if len(picked) == pool.size:
                        break
                    if verdict(order[j], best, t, a, steps) is None:
                        picked.append(j)
                        t, a = t + 1, a + cost(order[j])
                if len(picked) > 1:
                    found = pool.map(
                        functools.partial(_screen_alone, model, hw, req, modes), [order[j] for j in picked]
                    )
                    ahead = dict(zip(picked, found, strict=True))
                stop = max(stop, picked[-1] + 1) if picked else stop
            for j in range(start, stop):
                row = order[j]
                why = verdict(row, best, tried, actions, steps)
                if why == "pruned":
                    _prune(row, best)
                    continue
                if why == "margin":
                    row.reason = _margin_reason(model, hw, req, row)
                if why == "deadline":
                    deadline.abort("configuration screening")  # --time-limit's hard stop
                if why is not None:
                    continue
                tried += 1
                actions += cost(row)
                got = ahead.get(j)
                if isinstance(got, Exception):
                    raise got
                if got is None:
                    got = _screen(model, hw, req, row, modes, classic)
                else:  # screened side by side, on a copy of the row
                    vars(row).update(vars(got.considered))
                    got.considered = row
                if got.step is not None:
                    screened.append(got)
                    best = min(best, got.step.step_time_s)
                    steps = sorted([*steps, got.step.step_time_s])[:PLAN_LIMIT]
                if progress is not None:
                    progress("configurations", min(1.0, tried / max(1, len(order))))
            start = stop
    for row in order:  # a point passed over before the best was found may be beaten by it now
        if row.status == "not_screened" and row.bound_s >= best:
            _prune(row, best)
    if not screened:
        oom = [r for r in rows if r.status == "out_of_memory"]
        if not oom:
            why = next((r.reason for r in rows if r.status == "inapplicable"), "")
            raise InputError(f"--strategy {req.pipeline.strategy} applies to no legal configuration: {why}")
        worst = min(oom, key=lambda r: (r.overflow_bytes, r.point.preference))
        head = f"no configuration of {model.name} on {req.gpus} GPUs fits in memory; the closest, {worst.point.label},"
        if all(r.reason.startswith(STATIC_REASON) for r in oom):
            raise InfeasibleError(f"{head} {worst.reason}; {_least_gpus(oom, hw)}")
        raise InfeasibleError(f"{head} {worst.reason}; use more GPUs, a shorter sequence or a smaller global batch")
    screened.sort(key=lambda s: (_screened_step_s(s), s.considered.point.preference))
    chosen = _to_plan(screened, req)
    # each planned point's search: auto runs up to three searches of its budget where memory binds
    # (none's, each forced mode's, `driver`), so a point gets 1 / (2 x points planned) of the budget: one
    # planned point (every dimension fixed, or a big pipeline) gets the half that two would share
    share = budget.scaled(1.0 / (2 * len(chosen)))
    results = []
    searched = _presearch(model, hw, req, chosen, share, deadline)  # `_adaptive`'s searches by their inputs
    for got in chosen:
        results.append(_plan_point(model, hw, req, got, share, deadline, progress, searched))
    results.sort(key=lambda c: (c.step.step_time_s, c.point.preference))
    lower = min(r.bound_s for r in order) if order else math.inf
    win = results[0]
    if deadline.aborted and not win.plan.info.get("aborted"):
        # another point's search was cut short (in a worker, or before this one ran): the plan says so
        win.plan.info.update(aborted=True, abort_phase=deadline.where)
    win.considered = rows
    win.lower_bound_s = lower
    return win


#: the command-line flag of each dimension
_FLAGS = {"num_microbatches": "--microbatches"}


def _flag(dim: str) -> str:
    return _FLAGS.get(dim, "--" + dim.replace("_", "-"))


def _least_gpus(oom: list[Considered], hw: HardwareProfile) -> str:
    """What to do when no point holds even its weights, gradients and optimizer state: the fewest GPUs
    that could, from the least state any point's sharding leaves (each GPU of a point holds at least
    its mean, `judge.configuration_bound`), over the smallest usable memory, in whole nodes."""
    limit = min(d.hbm_bytes for d in hw.device_types.values()) * hw.memory_fraction
    total = min((r.overflow_bytes + limit) * r.point.tp * r.point.cp * r.point.pp * r.point.dp for r in oom)
    need = max(1, math.ceil(total / limit))
    dpn = devices_per_node(hw)
    nodes = -(-need // dpn)
    return (
        f"its weights, gradients and optimizer state ({total / 2**40:,.2f} TiB sharded as far as any point here"
        f" shards them) need at least {need:,} GPUs of {_gib(limit)} usable; a shorter sequence or a smaller"
        f" batch cannot help: use --gpus {nodes * dpn:,} ({nodes:,} nodes of {dpn}) or more"
    )


def _margin_reason(model: ModelSpec, hw: HardwareProfile, req: Request, row: Considered) -> str:
    """Why a point past the screening margin is not screened; one whose estimate found no classic schedule
    that fits says by how much it does not (`_closed_form_overflow`)."""
    if math.isfinite(row.estimate_s):
        return (
            f"estimate {row.estimate_s:.4g} s is more than {SCREEN_MARGIN:.0%} above the"
            f" {PLAN_LIMIT} best screened steps: it would not be planned"
        )
    most = _most_stages(model, req)
    if row.point.pp > most:
        return f"pp {row.point.pp}: more pipeline stages than the {most} layers its partition can give a stage each"
    mode = RECOMPUTE_LADDER[-1] if req.pipeline.recompute == "auto" else req.pipeline.recompute
    over = _closed_form_overflow(model, hw, req, row.point, mode)
    return f"does not fit: {_gib(over)} over the memory limit (1F1B with {mode} recomputation, uniform partition)"


def _closed_form_overflow(model: ModelSpec, hw: HardwareProfile, req: Request, point: Point, mode: str) -> float:
    """The most any device holds over its limit under 1F1B on the uniform partition, when its first backward
    starts (static bytes + min(pp - s, M) micro-batches of activations): a lower bound on its overflow."""
    costs = CostTables(hw, point.training(req, mode), default_mode=mode).table(model)
    pp, dev = point.pp, np.arange(point.pp)
    cuts = classic_bounds(costs, placement("sequential", pp, 1), _split(model, req, pp))[:-1]
    static = np.add.reduceat(costs.static_bytes, cuts)
    held = np.add.reduceat(costs.act_bytes, cuts) * np.minimum(pp - dev, point.num_microbatches)
    return float(max(0.0, (static + held - costs.mem_limit_bytes[:pp]).max()))


def _no_legal_point(model: ModelSpec, hw: HardwareProfile, req: Request) -> str:
    """Why `legal_points` found nothing: the request and the first rule its fixed sizes break."""
    n, B, S, f = req.gpus, req.global_batch_size, req.seq_len, req.fixed
    given = ", ".join(f"{_flag(k)} {v}" for k, v in f.items() if v is not None)
    head = f"--gpus {n} --global-batch-size {B} --seq-len {S}" + (f" with {given}" if given else "")
    head += f": no legal configuration of {model.name}"
    dpn = devices_per_node(hw)
    tp, cp, pp = f.get("tp"), f.get("cp"), f.get("pp")
    if tp is not None:
        try:
            check_tensor_parallel(model, tp)
        except InputError as e:
            return f"{head}: {e}"
        if n % tp:
            return f"{head}: --tp {tp} does not divide --gpus {n} (tp x cp x pp x dp = GPUs); use a --tp that does"
    width = (tp or 1) * (cp or 1)
    if tp is not None and dpn % width and width % dpn:
        fits = [d for d in _divisors(dpn) if d % (cp or 1) == 0]
        return (
            f"{head}: tp x cp = {width} neither divides a node's {dpn} GPUs nor fills whole nodes (a tensor-parallel"
            f" group runs on part of one node or on whole ones); use a tp x cp of {', '.join(map(str, fits))} or a"
            f" multiple of {dpn}"
        )
    if cp is not None and cp > 1 and S % (2 * cp):
        return f"{head}: --cp {cp} splits --seq-len {S} into 2 x cp chunks, which must divide it; use a --cp that does"
    if pp is not None and pp > model.num_layers:
        return f"{head}: --pp {pp} is more than the {model.num_layers} layers of {model.name}; lower --pp"
    fixed_width = (tp or 1) * (cp or 1) * (pp or 1)
    if n % fixed_width:
        return f"{head}: tp x cp x pp = {fixed_width} does not divide --gpus {n}; change the fixed sizes"
    dps = [n // (fixed_width * k) for k in _divisors(n // fixed_width)]
    if f.get("dp") is not None and f["dp"] not in dps:
        return f"{head}: --dp {f['dp']} is not --gpus / (tp x cp x pp) for any tp, cp and pp here; change --dp"
    dp = f.get("dp")
    if not any(B % d == 0 for d in ([dp] if dp else dps)):
        return f"{head}: dp must divide the global batch and no dp here does; use a --global-batch-size divisible by dp"
    if f.get("micro_batch_size") is not None or f.get("num_microbatches") is not None:
        return (
            f"{head}: dp x micro-batch size x micro-batches must equal --global-batch-size {B}, for a dp that divides"
            f" --gpus {n}; change --micro-batch-size / --microbatches or drop them (they are searched)"
        )
    return (
        f"{head} (tp must divide the heads and fit in a node or fill whole ones, cp the sequence, ep the experts of"
        " a MoE model and dp x cp; dp x micro-batch size x micro-batches must equal the global batch); change the"
        " fixed sizes"
    )


def _check_options(model: ModelSpec, req: Request) -> None:
    """The pipeline options of `req` that do not depend on the point, checked before any point is
    searched: a point's search that refuses its input plans nothing there (`_search`), which must not
    hide a bad option (--search, --head-chunks, --target) behind a classic fallback."""
    check_components(req.pipeline.components)
    driver.forced_head_split(model, req.pipeline.head_chunks, 1, get_target(req.pipeline.target))


def _table_key(table: CostTable) -> tuple:
    """Every number of a cost table, as a hashable key."""
    out: list[object] = []
    for f in dataclasses.fields(table):
        v = getattr(table, f.name)
        out.append((v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v)
    return tuple(out)


def _reachable_s(row: Considered, req: Request) -> float:
    """What the margin rule compares: the estimate, or for an adaptive request at pp >= 2, whose search may
    fill the classic schedule's bubble, the estimate without it (`_less_bubble`)."""
    if not req.pipeline.adaptive or row.point.pp == 1:
        return row.estimate_s
    return _less_bubble(row.estimate_s, row.point, row.chunks, row.bound_s)


def _to_plan(screened: Sequence[_Screen], req: Request) -> list[_Screen]:
    """The screened points (sorted by their steps) that get the full pipeline search: a big pipeline's best
    alone, else the best PLAN_LIMIT, and for an adaptive request, of each deeper pipeline (in the order of
    their best screened steps) whose points' bounds are below the best screened step, the point whose step
    without its bubble is least (`PLAN_MOST` in all)."""
    top = screened[0].considered.point
    if top.pp * top.num_microbatches >= BIG_PIPELINE:
        return [screened[0]]
    chosen = list(screened[:PLAN_LIMIT])
    if not req.pipeline.adaptive:
        return chosen
    best = _screened_step_s(screened[0])
    depths = {g.considered.point.pp for g in chosen}
    deeper = [
        g for g in screened[PLAN_LIMIT:]
        if g.considered.point.pp not in depths and g.considered.point.pp > 1 and g.considered.bound_s < best
        and g.considered.point.pp * g.considered.point.num_microbatches < BIG_PIPELINE
    ]  # fmt: skip
    # the depths in the order of their best screened steps; of each, the point whose screened step without
    # its bubble is least (`_without_bubble_s`: the points at one depth differ in how much bubble there is to fill)
    for got in deeper:
        if len(chosen) >= PLAN_MOST:
            break
        pp = got.considered.point.pp
        if pp not in depths:
            same = [g for g in deeper if g.considered.point.pp == pp]
            chosen.append(min(same, key=lambda g: (_without_bubble_s(g), g.considered.point.preference)))
            depths.add(pp)
    return chosen


def _without_bubble_s(got: _Screen) -> float:
    """A screened point's classic step less its bubble (`_less_bubble`, its screened schedule's degree)."""
    return _less_bubble(_screened_step_s(got), got.considered.point, got.schedule[1], got.considered.bound_s)


def _less_bubble(seconds: float, p: Point, chunks: int, bound_s: float) -> float:
    """`seconds` of a classic schedule at `p` with `chunks` stages per device less its bubble (the closed
    form's (pp - 1) of M k + pp - 1 slowest-stage slots), never below the point's proven bound `bound_s`:
    what a schedule that fills the bubble would reach."""
    slots = p.num_microbatches * chunks
    return max(bound_s, seconds * slots / (slots + p.pp - 1))


def _prune(row: Considered, best: float) -> None:
    """Mark `row` pruned: its bound says it cannot beat the best step found."""
    row.status = "pruned"
    row.reason = f"lower bound {row.bound_s:.4g} s >= the best step found, {best:.4g} s"


def _plan_point(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    got: _Screen,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    searched: dict[tuple, driver.PipelinePlan | None],
) -> Choice:
    """The full pipeline search at a screened point; its screened classic plan when the search finds
    none better. `searched` holds the searches already run (`_adaptive`)."""
    p, row = got.considered.point, got.considered
    recompute, training, tables = _search_inputs(req, got, hw)
    planned: driver.PipelinePlan | None = None
    step: TrainingStep | None = None
    if req.pipeline.adaptive:
        # auto searches without recomputation and, where memory binds, each forced mode and per-stage
        # choices (`driver`): never worse than the uniform mode the screen needed
        planned, step = _adaptive(
            model, hw, p, training, tables, recompute, _seeds(model, req, got), req, budget, deadline, progress,
            searched,
        )  # fmt: skip
    ablation = set(req.pipeline.components) != set(ALL_COMPONENTS)  # --search: classic plans are no candidates
    if step is None or (step.step_time_s > _screened_step_s(got) and not ablation):
        # the screened classic plan (it fits): a classic request's own, or adaptive's fallback
        searched_step = None if step is None else step.step_time_s
        strategy, chunks = got.schedule
        training = p.training(req, got.mode)
        tables = got.tables or CostTables(hw, training, default_mode=got.mode)
        planned = driver.classic_pipeline(
            model, tables, strategy, pp=p.pp, num_microbatches=p.num_microbatches,
            partition=_split(model, req, p.pp * chunks), stages_per_device=chunks, head_chunks=req.pipeline.head_chunks,
            target=req.pipeline.target,
        )  # fmt: skip
        best = planned.best
        best.result = judged(best.layout, planned.costs, best.programs, p.num_microbatches, best.result)
        if req.pipeline.adaptive:  # the report says why the search's own plan was not kept
            planned.info["fallback"] = {"requested": "adaptive", "adaptive_step_time_s": searched_step}
        step = got.step
        row.strategy, row.recompute = strategy, got.mode
    else:
        assert planned is not None  # _adaptive returns a step with its plan
        row.strategy = planned.strategy
        row.recompute = recompute
    assert step is not None  # the screened point fits: it has a step
    row.status, row.step_time_s = "planned", step.step_time_s
    for name, classic_s in _classic_steps(hw, p, training, planned):
        if row.classic_step_s is None or classic_s < row.classic_step_s:
            row.classic_step_s, row.classic_strategy = classic_s, name
    return Choice(p, training, hw, planned, step, [], math.inf)


def _schedule_name(strategy: str, chunks: int) -> str:
    return f"{strategy} x{chunks}" if strategy == "Interleaved1F1B" and chunks > 1 else strategy


def _classic_steps(
    hw: HardwareProfile, p: Point, training: TrainingConfig, planned: driver.PipelinePlan
) -> list[tuple[str, float]]:
    """(name, whole step) of each classic plan the pipeline search at `p` started from that fits
    (`driver.PipelinePlan.baselines`: every classic strategy on the uniform and the balanced split)."""
    out = []
    for name, cand in planned.baselines.items():
        if cand.result is None or not cand.result.fits_memory:
            continue
        step = training_step(
            cand.layout, cand.programs, cand.result, planned.model, training, hw, planned.costs.device_names
        )
        out.append((name, step.step_time_s))
    return out


def _seeds(model: ModelSpec, req: Request, got: _Screen) -> tuple[tuple[str, str, int], ...]:
    """The classic plans a point's adaptive search also starts from (`driver.PipelineOptions.classic`):
    Interleaved1F1B (1F1B at one stage per device) and InterleavedZeroBubble at the degree and on the
    split the screen found (`_Screen.schedule`, `_split`), where these are not already baselines (the
    search's own placements go to 4 stages per device, its classic baselines are uniform at the default
    degree): Llama 3 405B on 8,192 H100s at pp 16 screens Interleaved1F1B x8 on ends-as-layers."""
    _, chunks = got.schedule
    split = _split(model, req, got.considered.point.pp * chunks)
    return () if split == "uniform" and chunks <= 2 else driver.interleaved_classic(split, chunks)


def _adaptive(
    model: ModelSpec,
    hw: HardwareProfile,
    p: Point,
    training: TrainingConfig,
    tables: CostTables,
    recompute: str,
    seeds: tuple[tuple[str, str, int], ...],
    req: Request,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    searched: dict[tuple, driver.PipelinePlan | None],
) -> tuple[driver.PipelinePlan | None, TrainingStep | None]:
    """The pipeline search at `p` and its whole step, or (None, None) when no plan fits.

    The search reads only the cost tables, pp, M and its options: a point whose tables equal, in every
    recompute mode it may use, those of a point already searched (dp x cp and the micro-batch size
    trading places at the same tokens and ZeRO group per rank) reuses that search, from `searched`,
    and prices its own step around it."""
    key = _search_key(model, hw, p, training, recompute, seeds, req, budget)
    if key not in searched:
        searched[key] = _search(model, req, budget, deadline, progress, (p, tables, recompute, seeds))
    planned = searched[key]
    if planned is None:
        return None, None
    best = planned.best
    result = judged(best.layout, planned.costs, best.programs, p.num_microbatches, best.result)
    if not result.fits_memory:
        return None, None
    best.result = result
    step = training_step(best.layout, best.programs, result, planned.model, training, hw, planned.costs.device_names)
    return planned, step


def _search_key(
    model: ModelSpec, hw: HardwareProfile, p: Point, training: TrainingConfig, recompute: str,
    seeds: tuple[tuple[str, str, int], ...], req: Request, budget: SearchBudget,
) -> tuple:  # fmt: skip
    """What `_search` at `p` depends on: pp, M, the recompute request, the classic seeds, the request's
    seed, target, components and head split, the budget, and the cost tables in every recompute mode
    it may use (`_adaptive`)."""
    modes = RECOMPUTE_LADDER if recompute == "auto" else (recompute,)
    tables = (_table_key(CostTables(hw, training, default_mode=m).table(model)) for m in modes)
    asked = (req.seed, req.pipeline.target, req.pipeline.components, req.pipeline.head_chunks)
    return (p.pp, p.num_microbatches, recompute, seeds, *asked, budget, *tables)


def _search(
    model: ModelSpec,
    req: Request,
    budget: SearchBudget,
    deadline: Deadline,
    progress: ProgressFn | None,
    job: tuple[Point, CostTables, str, tuple[tuple[str, str, int], ...]],
) -> driver.PipelinePlan | None:
    """The adaptive pipeline search of `job` = (point, its cost tables, recompute request, classic seeds);
    None when no plan fits. Module level: `_presearch` runs several in worker processes."""
    p, tables, recompute, seeds = job
    try:
        return driver.search_pipeline(
            model, tables, pp=p.pp, num_microbatches=p.num_microbatches, budget=budget, deadline=deadline,
            options=driver.PipelineOptions.of(req.pipeline, req.seed, recompute, classic=seeds),
            progress=progress,
        )  # fmt: skip
    except (InfeasibleError, InputError):
        return None


def _search_inputs(req: Request, got: _Screen, hw: HardwareProfile) -> tuple[str, TrainingConfig, CostTables]:
    """The recompute request, training config and cost tables `_plan_point` searches a screened point with."""
    p = got.considered.point
    recompute = req.pipeline.recompute
    if recompute == "auto" and p.pp * p.num_microbatches >= BIG_PIPELINE:
        recompute = got.mode
    training = p.training(req, recompute)
    return recompute, training, CostTables(hw, training, default_mode="none" if recompute == "auto" else recompute)


def _presearch(
    model: ModelSpec,
    hw: HardwareProfile,
    req: Request,
    chosen: Sequence[_Screen],
    budget: SearchBudget,
    deadline: Deadline,
) -> dict[tuple, driver.PipelinePlan | None]:
    """The distinct adaptive searches of the points to plan, run side by side (`workers.pmap`) when there
    are several, keyed as `_adaptive` looks them up; empty for a classic request, a single search or a
    single worker."""
    if not req.pipeline.adaptive or workers() < 2:
        return {}  # one process: `_adaptive` runs each search in turn, with its progress shown
    jobs: dict[tuple, tuple[Point, CostTables, str, tuple[tuple[str, str, int], ...]]] = {}
    for got in chosen:
        p = got.considered.point
        recompute, training, tables = _search_inputs(req, got, hw)
        seeds = _seeds(model, req, got)
        key = _search_key(model, hw, p, training, recompute, seeds, req, budget)
        jobs.setdefault(key, (p, tables, recompute, seeds))
    if len(jobs) < 2:
        return {}
    found = pmap(functools.partial(_search, model, req, budget, deadline, None), list(jobs.values()))
    return dict(zip(jobs, found, strict=True))


__all__ = [
    "Choice",
    "Considered",
    "Point",
    "Request",
    "legal_points",
    "search_configuration",
]
