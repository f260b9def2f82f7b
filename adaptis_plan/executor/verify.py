"""The single-process reference step and the gradient comparison behind `adaptis run --verify`.

Data flow: model spec + training shape + seed -> `reference_step` (the whole model in one
process, the same synthetic global batch of dp x micro_batch_size x num_microbatches
sequences, plain autograd with full backward, gradient accumulation over every replica's
micro-batches) -> {param name: grad}, and with an optimizer the parameters after one step
(`reference_update`); `compare` checks the pipelined run's dumped gradients (and
`compare_tensors` its parameters after the step) against them. Imports torch, `layers`, `data`,
`dataparallel` (the optimizer both sides use).

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

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import cast

import torch

from adaptis_plan.executor.cpu import cpu_rank
from adaptis_plan.executor.data import synthetic_batch
from adaptis_plan.executor.dataparallel import make_optimizer
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
    dp: int = 1,
) -> tuple[float, dict[str, torch.Tensor | None]]:
    """Loss (mean over the global batch) and gradients of the first step, computed in one process.

    The global batch holds dp x num_microbatches micro-batches of `micro_batch_size` sequences:
    replica r's micro-batch m is sequences [r * micro_batch_size, (r + 1) * micro_batch_size) of
    the synthetic batch's micro-batch m (as the workers slice it); each is run alone, with the
    same shapes and kernels as a worker, its loss scaled by 1 / (dp x num_microbatches).
    Gradient names are `{layer index}.{name in layer}`; with tied embeddings the head's
    `lm_weight` is the embedding parameter itself, so both names carry the summed gradient.
    A head split into vocabulary chunks (`models.transform.split_head`) runs as its chunks,
    in order, exactly as the pipeline does; only the last chunk's output is the loss.
    """
    loss, grads, _ = _reference(
        model,
        num_microbatches=num_microbatches,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        seed=seed,
        device=device,
        dtype=dtype,
        dp=dp,
    )
    return loss, grads


def reference_update(
    model: ModelSpec,
    *,
    num_microbatches: int,
    micro_batch_size: int,
    seq_len: int,
    optimizer: str,
    lr: float,
    seed: int = 0,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    dp: int = 1,
    none_grads_as_zero: bool = False,
) -> tuple[float, dict[str, torch.Tensor | None], dict[str, torch.Tensor]]:
    """`reference_step`, then one step of the workers' optimizer (`dataparallel.make_optimizer`):
    (loss, gradients, {param name: parameter after the step}). `none_grads_as_zero`: a parameter
    without a gradient steps with a zero one (what ZeRO 2 / 3's flat shards do) instead of being
    skipped."""
    return _reference(
        model,
        num_microbatches=num_microbatches,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        seed=seed,
        device=device,
        dtype=dtype,
        dp=dp,
        optimizer=(optimizer, lr, none_grads_as_zero),
    )


def step_with_grads(
    model: ModelSpec,
    grads: dict[str, torch.Tensor | None],
    *,
    optimizer: str,
    lr: float,
    seed: int = 0,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    none_grads_as_zero: bool = False,
) -> dict[str, torch.Tensor]:
    """The parameters after one step of the workers' optimizer from the initial weights, in one process,
    with the given gradients ({param name: grad}, e.g. a pipelined run's dp-averaged ones).

    What the workers' optimizer machinery (full, ZeRO-1's sharded state, ZeRO-2/3's flat shards and
    gathers) must reproduce to float rounding, whatever the gradients' own rounding: AdamW's first
    step moves an element by lr * g / (|g| + eps), so near g = 0 it turns a gradient difference
    far inside the gradient tolerance into one of up to lr * |dg| / eps in the parameter; a check of
    the whole step against `reference_update` alone would either miss bugs or flag rounding."""
    with cpu_rank() if device == "cpu" else nullcontext():
        fresh: dict[int, torch.nn.Parameter] = {}  # a tied parameter stays one parameter under each name
        named = []
        for name, p in _initial(model, seed, device, dtype):
            if id(p) not in fresh:
                fresh[id(p)] = torch.nn.Parameter(p.detach().clone())
            named.append((name, fresh[id(p)]))
        seen: set[int] = set()
        for name, p in named:  # a tied parameter takes the gradient under its first name
            g = grads.get(name)
            if id(p) not in seen and g is not None:
                p.grad = g.to(device=device, dtype=p.dtype).clone()
            seen.add(id(p))
        return _step(named, optimizer, lr, none_grads_as_zero)


#: the models `_initial` built last, by (model, seed, device, dtype): at most `_INITIAL_KEPT`
_INITIAL: dict[tuple[str, int, str, torch.dtype], list[tuple[str, torch.nn.Parameter]]] = {}
_INITIAL_KEPT = 2


def _initial(model: ModelSpec, seed: int, device: str, dtype: torch.dtype) -> list[tuple[str, torch.nn.Parameter]]:
    """The built model's initial parameters by name (`_named`), never modified: `step_with_grads` steps copies,
    so the replicas and plans of a launch that share a model build it once (its random initialisation is most
    of a small model's check)."""
    key = (model.model_dump_json(), seed, device, dtype)
    if key not in _INITIAL:
        while len(_INITIAL) >= _INITIAL_KEPT:
            del _INITIAL[next(iter(_INITIAL))]
        _INITIAL[key] = _named(build_model(model, seed=seed).to(device=device, dtype=dtype))
    return _INITIAL[key]


def _named(layers: torch.nn.ModuleDict) -> list[tuple[str, torch.nn.Parameter]]:
    """Every parameter as `{layer index}.{name in layer}` (a tied one under each of its names)."""
    return [(f"{i}.{n}", p) for i, layer in layers.items() for n, p in layer.named_parameters(remove_duplicate=False)]


def _step(
    named: list[tuple[str, torch.nn.Parameter]], optimizer: str, lr: float, none_grads_as_zero: bool
) -> dict[str, torch.Tensor]:
    """One step of the workers' optimizer over the distinct parameters of `named` (a parameter without a
    gradient steps with a zero one when `none_grads_as_zero`, else is skipped): {name: parameter after}."""
    unique = list({id(p): p for _, p in named}.values())
    if none_grads_as_zero:
        for p in unique:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
    make_optimizer(unique, optimizer, lr).step()
    return {n: p.detach().float().cpu().clone() for n, p in named}


def _reference(
    model: ModelSpec,
    *,
    num_microbatches: int,
    micro_batch_size: int,
    seq_len: int,
    seed: int,
    device: str,
    dtype: torch.dtype,
    dp: int,
    optimizer: tuple[str, float, bool] | None = None,
) -> tuple[float, dict[str, torch.Tensor | None], dict[str, torch.Tensor]]:
    if device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False  # as in the workers
        torch.backends.cudnn.allow_tf32 = False
    with cpu_rank() if device == "cpu" else nullcontext():  # the same kernels and arithmetic as the workers
        layers = build_model(model, seed=seed).to(device=device, dtype=dtype)
        inputs, labels = synthetic_batch(
            model.vocab_size, num_microbatches, dp * micro_batch_size, seq_len, seed=seed, step=0
        )
        total = 0.0
        b = micro_batch_size
        for r in range(dp):
            for m in range(num_microbatches):
                x = inputs[m, r * b : (r + 1) * b].contiguous().to(device)
                lab = labels[m, r * b : (r + 1) * b].contiguous().to(device)
                for i in range(model.num_layers):  # every head chunk of a split head takes the labels
                    x = layers[str(i)](x, lab) if model.layers[i].kind == "head" else layers[str(i)](x)
                loss = x * (1.0 / (num_microbatches * dp))
                loss.backward()
                total += float(loss.detach())
        named = _named(layers)
        grads = {name: (None if p.grad is None else p.grad.detach().float().cpu()) for name, p in named}
        params = _step(named, *optimizer) if optimizer is not None else {}
        return total, grads, params


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
    worst, worst_name, mismatched = compare_tensors(pipe_grads, ref_grads, rtol=rtol, atol=atol)
    loss_diff = abs(pipe_loss - ref_loss)
    loss_ok = loss_diff <= rtol * abs(ref_loss) + atol
    return Comparison(worst, worst_name, loss_diff, not mismatched and loss_ok, mismatched)


def compare_tensors(
    pipe: Mapping[str, torch.Tensor | None], ref: Mapping[str, torch.Tensor | None], *, rtol: float, atol: float
) -> tuple[float, str | None, list[str]]:
    """(max |pipe - ref| over all tensors, the tensor where it is, the names out of tolerance or missing);
    None counts as zeros beside a tensor."""
    mismatched: list[str] = []
    worst, worst_name = 0.0, None
    for name in sorted(set(pipe) | set(ref)):
        if name not in pipe or name not in ref:
            mismatched.append(name)
            continue
        a, b = pipe[name], ref[name]
        if a is None and b is None:
            continue
        if a is None or b is None:
            present = cast(torch.Tensor, a if b is None else b)
            a = torch.zeros_like(present) if a is None else a
            b = torch.zeros_like(present) if b is None else b
        if a.shape != b.shape:
            mismatched.append(name)
            continue
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        scale = float(b.abs().max()) if b.numel() else 0.0
        if not diff <= rtol * scale + atol:  # also catches NaN
            mismatched.append(name)
        if diff > worst or diff != diff:
            worst, worst_name = diff, name
    return worst, worst_name, mismatched
