"""The I / W split without redoing work: deferred weight-gradient GEMMs.

Data flow: `layers.py` builds every projection and the embedding lookup from `linear` /
`embedding` below; `runtime.py` and `profile.py` decide, per backward pass, whether the
weight gradients are computed on the spot (`B`) or stashed (`I`) and run later (`W`).
Imports torch only.

How: `linear` is a custom autograd function whose backward always computes the input
gradient (`grad_out @ W`) and the bias gradient (a cheap sum), but computes the weight
gradient (`grad_out^T @ x`, the GEMM that zero-bubble schedules move into bubbles) only when
no deferral is active. Inside `WeightGradStore.deferring(key)` it instead appends
(param, x, grad_out) to the store under `key` (the runtime uses (stage, mb)); `run(key)` later
performs exactly those GEMMs and accumulates into `param.grad`. Nothing of the forward or of
the input backward is recomputed, so `I + W` does the same arithmetic as `B` (the counters in
`FLOPS` make that checkable). Every other parameter (norms, conv1d, SSM scalars, biases) gets
its gradient from autograd during `I` as usual: they are small.

The active store is a plain module global, not thread-local, because on CUDA the autograd
engine runs backward functions on its own device thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

_ACTIVE: list | None = None


@dataclass
class FlopCounter:
    """Multiply-add FLOPs of the projections' GEMMs (2 * m * n * k each): forward, input-gradient and
    weight-gradient, for the I + W == B check and for counting what a recomputation reruns."""

    forward: int = 0
    input_grad: int = 0
    weight_grad: int = 0

    def reset(self) -> None:
        self.forward = 0
        self.input_grad = 0
        self.weight_grad = 0


FLOPS = FlopCounter()


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    if param.grad is None:
        param.grad = grad
    else:
        param.grad.add_(grad)


def _linear_wgrad(x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    go = grad_out.reshape(-1, grad_out.shape[-1])
    xx = x.reshape(-1, x.shape[-1])
    FLOPS.weight_grad += 2 * go.shape[0] * go.shape[1] * xx.shape[1]
    return go.t().mm(xx)


def _embedding_wgrad(ids: torch.Tensor, grad_out: torch.Tensor, num_rows: int) -> torch.Tensor:
    go = grad_out.reshape(-1, grad_out.shape[-1])
    out = torch.zeros(num_rows, go.shape[1], dtype=go.dtype, device=go.device)
    return out.index_add_(0, ids.reshape(-1), go)


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.param = weight
        ctx.has_bias = bias is not None
        FLOPS.forward += 2 * x.numel() * weight.shape[0]
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_out.matmul(weight)
            FLOPS.input_grad += 2 * grad_out.numel() * weight.shape[1]
        if ctx.needs_input_grad[1]:
            if _ACTIVE is not None:
                _ACTIVE.append(("linear", ctx.param, x, grad_out))
            else:
                grad_w = _linear_wgrad(x, grad_out)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad_out.reshape(-1, grad_out.shape[-1]).sum(0)
        return grad_x, grad_w, grad_b


class _EmbeddingFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.param = weight
        return F.embedding(ids, weight)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[None, torch.Tensor | None]:
        (ids,) = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return None, None
        if _ACTIVE is not None:
            _ACTIVE.append(("embedding", ctx.param, ids, grad_out))
            return None, None
        return None, _embedding_wgrad(ids, grad_out, ctx.param.shape[0])


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` whose weight gradient can be deferred to W."""
    return _LinearFn.apply(x, weight, bias)


def embedding(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`F.embedding` whose weight gradient can be deferred to W."""
    return _EmbeddingFn.apply(ids, weight)


class WeightGradStore:
    """Pending weight-gradient work per key (the runtime uses (stage, mb))."""

    def __init__(self) -> None:
        self._pending: dict[object, list] = {}

    @contextmanager
    def deferring(self, key: object) -> Iterator[None]:
        """Inside: weight GEMMs of `linear` / `embedding` backward are stashed under `key`."""
        global _ACTIVE
        prev = _ACTIVE
        _ACTIVE = self._pending.setdefault(key, [])
        try:
            yield
        finally:
            _ACTIVE = prev

    def run(self, key: object) -> None:
        """W: run the stashed GEMMs of `key` and accumulate into `.grad`; frees the stash."""
        for kind, param, x, grad_out in self._pending.pop(key, []):
            with torch.no_grad():
                if kind == "linear":
                    g = _linear_wgrad(x, grad_out)
                else:
                    g = _embedding_wgrad(x, grad_out, param.shape[0])
                _accumulate(param, g.to(param.dtype))

    def discard(self, key: object) -> None:
        """Drop the stash of `key` without running it (a fault-injection hook for tests)."""
        self._pending.pop(key, None)

    def pending_bytes(self, key: object) -> int:
        """Bytes the stash of `key` keeps alive (distinct storages)."""
        seen: dict[int, int] = {}
        for _, _, x, grad_out in self._pending.get(key, []):
            for t in (x, grad_out):
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def keys(self) -> list[object]:
        return list(self._pending)

    def clear(self) -> None:
        self._pending.clear()
