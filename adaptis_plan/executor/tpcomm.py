"""The tensor-parallel collectives inside a layer's forward and backward (Megatron-LM's f and g).

Data flow: `layers.py` calls `copy_to_tp` where a replicated activation enters a column-parallel
projection (or a vocabulary-parallel head) and `reduce_from_tp` where the partial sums of a
row-parallel projection (or of a vocabulary-parallel embedding) leave it; `tensorparallel.py`
sets each layer's `tp_group`. With `group` None (tp = 1) both are the identity and add no node to
the autograd graph. Imports torch only.

- `copy_to_tp` (f): identity forward; backward all-reduces (sums) the input gradient over the
  tp group, because every rank's shard of the projection contributed a part of it.
- `reduce_from_tp` (g): forward all-reduces the partial outputs; identity backward: the output is
  replicated and every rank's downstream computes the same gradient for it (Shoeybi et al. 2019,
  "Megatron-LM", Sec. 3, Fig. 3: f and g conjugate).

Why autograd Functions of our own rather than `torch.distributed.tensor.parallel`
(ColwiseParallel / RowwiseParallel, torch 2.13): those styles accept only `nn.Linear` /
`nn.Embedding` modules (NotImplementedError on `layers.Linear`); on an `nn.Linear` subclass whose
forward is `wgrad.linear`, a two-rank gloo probe did run the I / W split (I stashed DTensor
inputs, output gradients and weights; W produced DTensor weight gradients). But then every
parameter and gradient of a tp layer is a DTensor, while `dataparallel` works on plain tensors:
its bucketed all-reduce concatenates gradients, ZeRO 2/3 copy parameters into one plain flat
buffer, rebind their `.data` to its views and free / refill its storage; the embedding's deferred
W scatters into a plain buffer of the vocabulary rows; the vocabulary-parallel loss of a split
head hands a running log-sum-exp from chunk to chunk, which `loss_parallel` (plain cross-entropy
only) does not cover; and RowwiseParallel's all-reduce returns an async functional-collective
tensor, waited on at its first use, so its time could not be attributed to `comm_s["tp"]`.
The two Functions below are all the collectives a Megatron-style layer needs, and they leave the
I / W split and ZeRO untouched: a shard's weight gradient needs only local, plain tensors
(column-parallel: the replicated input and the local output gradient; row-parallel: the local
input and the replicated output gradient).

Sequence parallelism (reduce-scatter / all-gather instead of all-reduce around the norms) is
not implemented: on gloo a reduce-scatter is an all-reduce anyway (pytorch/pytorch#118911), and
the all-reduce form moves the same bytes per layer as the pair does (sequence parallelism saves
activation memory, not traffic).

`TP_COMM` counts the seconds this process spends in tp collectives and the bytes of the tensors
it all-reduces (a ring all-reduce sends 2 (tp - 1) / tp times that per rank); the worker resets it
every step and reports it as `comm_s["tp"]` / `"tp_bytes"`. On CPU / gloo the collectives are
synchronous, so the seconds include waiting for the slowest tp peer to reach the collective.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class TpCommCounter:
    """Seconds and bytes of this process's tp collectives since the last `reset`."""

    seconds: float = 0.0
    bytes: int = 0

    def reset(self) -> None:
        self.seconds = 0.0
        self.bytes = 0


TP_COMM = TpCommCounter()


def all_reduce_(t: torch.Tensor, group: dist.ProcessGroup | None, op: object = None) -> torch.Tensor:
    """In-place all-reduce of `t` over `group` (sum unless `op`), counted in `TP_COMM`."""
    t0 = time.perf_counter()
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op is None else op, group=group)
    if t.is_cuda:
        torch.cuda.current_stream(t.device).synchronize()  # so that the seconds are the transfer's
    TP_COMM.seconds += time.perf_counter() - t0
    TP_COMM.bytes += t.numel() * t.element_size()
    return t


class _CopyToTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return all_reduce_(grad.contiguous().clone(), ctx.group), None


class _ReduceFromTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        return all_reduce_(x.contiguous().clone(), group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def copy_to_tp(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """f: identity forward, all-reduced input gradient (module docstring); identity when `group` is None."""
    return x if group is None else _CopyToTp.apply(x, group)


def reduce_from_tp(x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """g: all-reduced forward, identity backward (module docstring); identity when `group` is None."""
    return x if group is None else _ReduceFromTp.apply(x, group)


def vocab_parallel_lse_target(
    logits: torch.Tensor, labels: torch.Tensor, lo: int, hi: int, group: dist.ProcessGroup | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-sum-exp over the whole vocabulary, the label's logit; 0 where the label is outside every
    rank's slice) per token, replicated on every tp rank, from this rank's fp32 `logits` [..., hi - lo]
    for vocabulary [lo, hi) (Megatron's vocab-parallel cross-entropy: a max all-reduce, then sum-exp
    and target all-reduces).

    The max only shifts the exponentials (no gradient flows through it: lse's value does not depend
    on it); the sums go through `reduce_from_tp`, so every rank's logits get d lse / d logits =
    softmax (its slice) and d tgt / d logits = the one-hot of a label inside its slice."""
    m = logits.detach().amax(dim=-1)
    all_reduce_(m, group, dist.ReduceOp.MAX)
    sumexp = reduce_from_tp((logits - m.unsqueeze(-1)).exp().sum(dim=-1), group)
    lse = m + sumexp.log()
    inside = (labels >= lo) & (labels < hi)
    idx = (labels - lo).clamp(0, hi - lo - 1)
    tgt = torch.where(inside, logits.gather(-1, idx.unsqueeze(-1)).squeeze(-1), 0.0)
    return lse, reduce_from_tp(tgt, group)
