"""What `profile.profile_model` will ask of this machine, before it starts: its arithmetic and memory
from the analytic model, the device's GEMM rate and free memory measured now (`estimate_profile`).

Data flow: `ModelSpec` + the profile's arguments -> `ProfileEstimate`, which the `adaptis profile`
use case turns into notes (a long profile, one that will not fit) before it measures. Imports
torch, `executor.profile` (what it times, and how) and the analytic cost model; never a plan, a
builder or the simulator.

Known limits: the memory is the analytic model's, without the interpreter's and torch's own; the
time is a lower bound, the arithmetic over one GEMM's rate: small layers, bound by memory and
dispatch, take several times longer (experiments/findings-executor.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from adaptis_plan.executor.profile import (
    _DTYPES,
    IN_FLIGHT,
    ROUNDS,
    _measuring,
    _timed_layers,
    spread_repeats,
)
from adaptis_plan.spec.model import ModelSpec


@dataclass(frozen=True)
class ProfileEstimate:
    """What `profile_model` will ask of this machine, before it starts (`estimate_profile`)."""

    distinct: int  # distinct layers and head chunks to build and time
    flops: float  # arithmetic of the whole profile, warm-up included (analytic, model FLOPs)
    rate: float  # FLOP/s of one GEMM on the device, measured just now
    need_bytes: float  # every distinct layer's weights, one layer's gradients and in-flight activations (analytic)
    free_bytes: float | None  # what the device has free now (None: unknown)

    @property
    def seconds(self) -> float:
        return self.flops / self.rate


def estimate_profile(
    model: ModelSpec,
    *,
    seq_len: int,
    micro_batch_size: int,
    device: str = "cpu",
    dtype: str = "fp32",
    repeats: int = 5,
    rounds: int = ROUNDS,
    warmup: int = 2,
    head_chunks: tuple[int, ...] = (),
) -> ProfileEstimate:
    """The work and memory of `profile_model` with the same arguments, from the analytic model: every
    distinct layer stays built for the whole profile; each runs, per timed or warm-up repeat, three
    forwards, a fused backward and an I + W (the three passes of the module docstring), holding
    `IN_FLIGHT` + 1 micro-batches' activations and its own gradients. The memory is the analytic
    model's (the interpreter's and torch's own come on top); the time is a lower bound, the
    arithmetic over one GEMM's rate on this device (small layers, bound by memory and dispatch, take
    several times longer)."""
    from adaptis_plan.cost.analytic import layer_work
    from adaptis_plan.spec.training import TrainingConfig

    training = TrainingConfig(num_microbatches=1, micro_batch_size=micro_batch_size, seq_len=seq_len, pp=1, dtype=dtype)
    items, _, _ = _timed_layers(model, head_chunks)
    per_round = spread_repeats(repeats, rounds)
    per_item = sum(per_round) + warmup * len(per_round)
    element = torch.empty((), dtype=_DTYPES[dtype]).element_size()
    flops, weights, peak = 0.0, 0.0, 0.0
    for m, index in items:
        lw = layer_work(m, m.layers[index], training)
        flops += per_item * (3 * lw.f.flops + 2 * (lw.i.flops + lw.w.flops))
        weights += lw.params_held * element
        peak = max(peak, lw.params_held * element + (IN_FLIGHT + 1) * lw.act_bytes)
    with _measuring(device) as dev:
        rate = _gemm_rate(dev, _DTYPES[dtype])
        free = _free_bytes(dev)
    return ProfileEstimate(len(items), flops, rate, weights + peak, free)


def _gemm_rate(dev: torch.device, dtype: torch.dtype) -> float:
    """FLOP/s of a square GEMM on `dev`, the best of a few (1024 on CPU, 4096 on a GPU)."""
    n = 1024 if dev.type == "cpu" else 4096
    a, b = torch.randn(n, n, device=dev).to(dtype), torch.randn(n, n, device=dev).to(dtype)
    best = math.inf
    for _ in range(4):
        t0 = time.perf_counter()
        a @ b
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / max(best, 1e-9)


def _free_bytes(dev: torch.device) -> float | None:
    """Memory free on `dev` now: the GPU's, or the host's available memory (Linux), else None."""
    if dev.type == "cuda":
        return float(torch.cuda.mem_get_info(dev)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None
