"""The space of the whole-configuration search: what the user asked (`Request`), one configuration
(`Point`) and every legal one (`legal_points`), or why there is none (`_no_legal_point`).

Data flow: `app.plan` (the command line's --gpus, --global-batch-size and the dimensions given) ->
`Request` -> `legal_points` -> the bound and screen of each point (`search.screen`) -> the pipeline
search at the best (`search.plan_point`), all run by `search.configuration.search_configuration`.
Imports the specs and the cost table's tensor-parallel rule; no builder, no solver.

Legal points (`legal_points`): tp divides every head count and inner size (`check_tensor_parallel`)
and, when searched, the GPUs of a node (the free search keeps a tensor-parallel group in a node); a tp
given on the command line is planned where it runs at all: across nodes when it fills whole ones
(Megatron-LM runs it so, its collectives priced on the network, `cost.comm.GroupLink`); tp x cp divides
a node or fills whole nodes; cp divides the sequence into 2 x cp load-balanced chunks of at least
`MIN_CP_TOKENS` tokens per rank, and only attention models take it (no Mamba); pp <= layers;
dp = gpus / (tp x cp x pp) divides the global batch; ep divides the experts and dp x cp (MoE models
only); micro-batch size b divides B / dp with M = B / (dp x b) micro-batches. ZeRO 1, 2 and 3 are tried
where dp x cp > 1: ZeRO 0 is never better in this cost model (it holds more memory than ZeRO 1 and its
all-reduce moves fp32 gradients twice where ZeRO 1's reduce-scatter + bf16 all-gather moves 1.5 times).
Each point is tried under the recompute modes of `RECOMPUTE_LADDER`, the first that fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from adaptis_plan.cost.comm import devices_per_node
from adaptis_plan.cost.table import check_tensor_parallel
from adaptis_plan.errors import InputError
from adaptis_plan.schedules.targets import get_target
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
#: tokens of a sequence a context-parallel rank holds at least when cp is searched (Megatron-Core
#: runs cp 2 at 8K and cp 16 at 128K in its published recipes: 4K-8K per rank)
MIN_CP_TOKENS = 1024
#: the recompute modes a point is tried under with `--recompute auto`, the first that fits
RECOMPUTE_LADDER = ("none", "selective", "full")
#: the command-line flag of each dimension
_FLAGS = {"num_microbatches": "--microbatches"}


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
        keeps = get_target(req.pipeline.target).keeps_unsharded
        return TrainingConfig.of(self, req.seq_len, recompute, req.runtime, keeps)

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


def _flag(dim: str) -> str:
    return _FLAGS.get(dim, "--" + dim.replace("_", "-"))


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


__all__ = ["DIMENSIONS", "RECOMPUTE_LADDER", "Point", "Request", "legal_points"]
