"""The single-process reference step and the gradient comparison behind `adaptis run --verify`.

Data flow: model spec + training shape + seed -> `reference_step` (the whole model in one
process, the same synthetic batch, plain autograd with full backward, gradient accumulation
over the micro-batches) -> {param name: grad}; `compare` checks the pipelined run's dumped
gradients against it. Imports torch, `layers`, `data`.

Tolerance (`tolerance`): per tensor, `max|pipe - ref| <= rtol * max|ref| + atol`, and the loss
within `rtol * |loss| + atol`. On CPU in fp32 both sides run the same kernels on the same
shapes in one thread, so the forward is bit-identical; gradients differ only by the order in
which contributions are summed (micro-batches in schedule order, W's deferred GEMMs, the
tied-embedding sum). Each such addition is exact to half an ulp (6e-8 relative to the running
magnitude), so for the tens of terms of a test step the difference stays far below 1e-5 of the
tensor's scale, while a real bug (a lost micro-batch, a wrong stage input, a stale weight)
moves gradients by O(1 / num_microbatches). Hence rtol = 1e-5, atol = 1e-8 (for all-zero
tensors). On CUDA the kernels differ between processes (reductions, atomics in the embedding
backward): rtol = 1e-4 in fp32 (TF32 off), 5e-2 in bf16/fp16 where every accumulation rounds.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from adaptis_plan.executor.cpu import cpu_rank
from adaptis_plan.executor.data import synthetic_batch
from adaptis_plan.executor.layers import build_model
from adaptis_plan.spec.model import ModelSpec

_TOLERANCES = {("cpu", "fp32"): (1e-5, 1e-8), ("cuda", "fp32"): (1e-4, 1e-7)}


def tolerance(device: str, dtype: str) -> tuple[float, float]:
    """(rtol, atol) for a run on `device` ('cpu' | 'cuda') in `dtype`."""
    return _TOLERANCES.get((device, dtype), (5e-2, 1e-5))


def reference_step(
    model: ModelSpec,
    *,
    num_microbatches: int,
    micro_batch_size: int,
    seq_len: int,
    seed: int = 0,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> tuple[float, dict[str, torch.Tensor | None]]:
    """Loss (mean over micro-batches) and gradients of the first step, computed in one process.

    Gradient names are `{layer index}.{name in layer}`; with tied embeddings the head's
    `lm_weight` is the embedding parameter itself, so both names carry the summed gradient.
    A head split into vocabulary chunks (`models.transform.split_head`) runs as its chunks,
    in order, exactly as the pipeline does; only the last chunk's output is the loss.
    """
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False  # as in the workers
        torch.backends.cudnn.allow_tf32 = False
    with cpu_rank() if device == "cpu" else nullcontext():  # the same kernels and arithmetic as the workers
        layers = build_model(model, seed=seed).to(device=device, dtype=dtype)
        inputs, labels = synthetic_batch(
            model.vocab_size, num_microbatches, micro_batch_size, seq_len, seed=seed, step=0
        )
        total = 0.0
        for m in range(num_microbatches):
            x, lab = inputs[m].to(device), labels[m].to(device)
            for i in range(model.num_layers):  # every head chunk of a split head takes the labels
                x = layers[str(i)](x, lab) if model.layers[i].kind == "head" else layers[str(i)](x)
            loss = x * (1.0 / num_microbatches)
            loss.backward()
            total += float(loss.detach())
        grads = {
            f"{i}.{n}": (None if p.grad is None else p.grad.detach().float().cpu())
            for i, layer in layers.items()
            for n, p in layer.named_parameters(remove_duplicate=False)
        }
        return total, grads


@dataclass(frozen=True)
class Comparison:
    max_abs_grad_diff: float
    worst_param: str | None
    loss_diff: float
    verified: bool
    mismatched: list[str]


def compare(
    pipe_loss: float,
    pipe_grads: dict[str, torch.Tensor | None],
    ref_loss: float,
    ref_grads: dict[str, torch.Tensor | None],
    *,
    rtol: float,
    atol: float,
) -> Comparison:
    """Compare every parameter's gradient and the loss; a missing parameter is a mismatch."""
    mismatched: list[str] = []
    worst, worst_name = 0.0, None
    for name in sorted(set(pipe_grads) | set(ref_grads)):
        if name not in pipe_grads or name not in ref_grads:
            mismatched.append(name)
            continue
        a, b = pipe_grads[name], ref_grads[name]
        if a is None and b is None:
            continue
        if a is None or b is None:
            a = torch.zeros_like(b) if a is None else a
            b = torch.zeros_like(a) if b is None else b
        if a.shape != b.shape:
            mismatched.append(name)
            continue
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        scale = float(b.abs().max()) if b.numel() else 0.0
        if not diff <= rtol * scale + atol:  # also catches NaN
            mismatched.append(name)
        if diff > worst or diff != diff:
            worst, worst_name = diff, name
    loss_diff = abs(pipe_loss - ref_loss)
    loss_ok = loss_diff <= rtol * abs(ref_loss) + atol
    return Comparison(worst, worst_name, loss_diff, not mismatched and loss_ok, mismatched)
