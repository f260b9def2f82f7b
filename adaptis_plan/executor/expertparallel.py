"""The expert-parallel dimension: MoE experts sharded over ep of the dp ranks, tokens exchanged all-to-all.

Data flow: `worker.py` builds the rank's stages (`RankRuntime`, every layer whole) and the expert
groups (`worker.mesh_groups`), then `ExpertParallel.shard` replaces every `layers.Moe` of the rank's
stages by an `ExpertParallelMoe` holding only this rank's experts, and `data_parallel` gives the
worker one object with `DataParallel`'s interface (`ExpertDataParallel`) that syncs the dense
parameters over the dp group and the expert parameters over the expert-data-parallel group.
Imports torch, `layers` and `dataparallel` only.

Semantics (Megatron-Core's, what the cost model prices; tp = cp = 1 here): rank layout
`spec.ranks.RankLayout` (an ep group is ep consecutive dp ranks); ep rank j holds experts
[j * E / ep, (j + 1) * E / ep). The router and the shared experts are replicated, data-parallel
like every dense parameter. Each rank routes its own tokens (top-k of the router's softmax),
sends each (token, slot) row to the rank owning its expert (`_AllToAll`: dispatch), runs its
local experts on the rows it received from all ep peers, sends the outputs back (combine) and
weights / sums them per token as `layers.Moe` does. Both exchanges are autograd Functions whose
backward runs the transposed exchange (the gradient of an all-to-all is the all-to-all with the
splits swapped). Expert projections stay `wgrad.linear`, so under the I / W split their weight
gradients are stashed in I with the dispatched input rows and the output-gradient rows that I
computed, and W multiplies them later, with no further communication. Full recomputation reruns
the block's forward, exchanges included, inside its backward; every rank of the ep group runs
the same program in the same order (as the dp collectives, `dataparallel`), so the exchanges of
the ep peers meet in the same order.

Gradients: a rank's expert gradient sums the contributions of all tokens routed to it from its
ep group (each replica's loss already scaled by 1 / num_microbatches). The mean-loss gradient
over the global batch is the sum over all dp replicas divided by dp; the dp / ep ranks holding
the same experts (the expert-data-parallel group, "edp") together cover every replica once, so
expert gradients are scaled by 1 / ep and then averaged over the edp group
(sum over edp / dp), the scaling Megatron-Core's DDP applies to expert parameters
(`expert_gradient_scaling_factor = edp_size / dp_size` beside averaging, megatron/core/
distributed/distributed_data_parallel.py). Dense parameters keep the dp average. ZeRO shards
expert optimizer state / gradients / parameters over the edp group (with dp = ep, edp = 1: no
sharding and no sync; under ZeRO 2 / 3 a gradient-less expert still steps with zeros, as the
flat shards of the dense parameters do).

Communication: gloo implements `all_to_all_single` with uneven splits natively (its alltoallv,
enabled for torch.distributed in pytorch/pytorch#43256), so each exchange is one true
all-to-all: a rank sends exactly the rows its peers need (rows x hidden x element size, plus one
int64 count per (peer, local expert) before the dispatch) and no all-gather substitute is
needed. Per MoE layer and micro-batch: forward 3 all-to-alls (counts, dispatch, combine),
backward 2 (combine and dispatch transposed), plus the forward's 3 again under full recompute.
`comm_s["ep"]` is the wall time spent inside these calls during the step, including the wait for
the slowest ep peer to reach the same exchange (an all-to-all cannot finish before it). The row
counts must be on the host to size the exchange (`tolist`), so on CUDA each MoE layer's forward
synchronizes the host with the device once (the dropless, unpadded dispatch; a capacity-padded
one would not need it, at the cost of padding rows).

Weights: each rank builds the whole MoE layer (every expert initialized from the layer's
generator, exactly as one process does) and then drops the other ranks' experts, so the kept
experts are bit-identical to the single-process model's; parameter names keep the global expert
index (`{layer}.parts.{i}.mixer.experts.{e}.…`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from adaptis_plan.executor.dataparallel import DataParallel
from adaptis_plan.executor.layers import Block, Moe, route

if TYPE_CHECKING:
    from adaptis_plan.executor.runtime import Stage


class _Timer:
    """Seconds spent inside the ep exchanges since the last `reset`."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def reset(self) -> None:
        self.seconds = 0.0


def _exchange(
    x: torch.Tensor, send_splits: list[int], recv_splits: list[int], group: dist.ProcessGroup | None, timer: _Timer
) -> torch.Tensor:
    out = x.new_empty((sum(recv_splits), *x.shape[1:]))
    t0 = time.perf_counter()
    dist.all_to_all_single(
        out, x.contiguous(), output_split_sizes=recv_splits, input_split_sizes=send_splits, group=group
    )
    timer.seconds += time.perf_counter() - t0
    return out


class _AllToAll(torch.autograd.Function):
    """Rows of `x` split by `send_splits` go to the ep ranks in order; the result holds the rows received,
    `recv_splits` from each. Backward: the same exchange of the gradient rows with the splits swapped.

    `anchor` (any tensor of the graph, or None) only ties this node into the graph: the combine passes
    the dispatched rows, so that a rank whose local experts received no row (an expert output that
    needs no gradient) still runs the backward exchange its peers wait for. Its gradient is None."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        anchor: torch.Tensor | None,
        send_splits: list[int],
        recv_splits: list[int],
        group: dist.ProcessGroup | None,
        timer: _Timer,
    ) -> torch.Tensor:
        ctx.send_splits, ctx.recv_splits, ctx.group, ctx.timer = send_splits, recv_splits, group, timer
        ctx.x_requires_grad = x.requires_grad
        return _exchange(x, send_splits, recv_splits, group, timer)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None, None, None]:
        g = _exchange(grad, ctx.recv_splits, ctx.send_splits, ctx.group, ctx.timer)
        return (g if ctx.x_requires_grad else None), None, None, None, None, None


class ExpertParallelMoe(nn.Module):
    """`layers.Moe` with only experts [lo, hi) here (`ep_rank` of `ep`), tokens exchanged over `group`.

    Same parameter names as the `Moe` it is made from (`router`, `experts.{e}` with the global index e,
    `shared`); the same forward arithmetic per token, with each routed expert's rows gathered from the
    whole ep group (module docstring)."""

    def __init__(self, moe: Moe, *, ep_rank: int, ep: int, group: dist.ProcessGroup | None, timer: _Timer) -> None:
        super().__init__()
        num_experts = len(moe.experts)
        if num_experts % ep:
            raise ValueError(f"ep = {ep} does not divide the MoE layer's {num_experts} experts")
        self.top_k, self.num_experts, self.ep, self.ep_rank = moe.top_k, num_experts, ep, ep_rank
        self.num_local = num_experts // ep
        self.lo = ep_rank * self.num_local
        self.router = moe.router
        self.experts = nn.ModuleDict({str(e): moe.experts[e] for e in range(self.lo, self.lo + self.num_local)})
        self.shared = moe.shared
        self.group, self.timer = group, timer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        weights, idx = route(self.router, t, self.top_k)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)  # (token, slot) rows grouped by expert, hence by owner
        tok, slot = order // self.top_k, order % self.top_k
        per_expert = torch.bincount(flat, minlength=self.num_experts)  # rows this rank sends to each expert
        # how many rows each peer sends to each of this rank's experts: [ep, num_local]
        got = _exchange(
            per_expert, [self.num_local] * self.ep, [self.num_local] * self.ep, self.group, self.timer
        ).view(self.ep, self.num_local)
        send_splits = per_expert.view(self.ep, self.num_local).sum(1).tolist()
        recv_splits = got.sum(1).tolist()
        rows = _AllToAll.apply(t[tok], None, send_splits, recv_splits, self.group, self.timer)
        # received rows: peer by peer, each peer's rows grouped by local expert
        local = torch.arange(self.num_local, device=x.device).repeat(self.ep).repeat_interleave(got.reshape(-1))
        y = torch.zeros_like(rows)
        for i, expert in enumerate(self.experts.values()):
            (sel,) = (local == i).nonzero(as_tuple=True)
            if sel.numel():
                y = y.index_add(0, sel, expert(rows[sel]))
        back = _AllToAll.apply(y, rows, recv_splits, send_splits, self.group, self.timer)
        out = torch.zeros_like(t).index_add(0, tok, back * weights[tok, slot].unsqueeze(-1))
        if self.shared is not None:
            out = out + self.shared(t)
        return out.view(shape)


def is_expert_param(name: str) -> bool:
    """Whether a parameter name (`{layer}.{name in layer}`) is a routed expert's."""
    return ".mixer.experts." in name


class _Params:
    """A stage seen through a filter on its parameter names (what `DataParallel` reads of a stage)."""

    def __init__(self, named: list[tuple[str, nn.Parameter]]) -> None:
        self.named = named

    def named_layer_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return self.named


class ExpertDataParallel:
    """`DataParallel`'s interface over two of them: dense parameters on the dp group, expert parameters
    on the edp group with the 1 / ep scaling (module docstring). `comm_s` adds "ep", the step's seconds
    inside the expert exchanges; the expert sync's seconds are added to the dense sync's keys."""

    def __init__(self, ep: ExpertParallel, stages: Mapping[int, Stage], *, zero: int, optimizer: str, lr: float):
        self.epx = ep
        self.zero = zero
        named = {s: st.named_layer_parameters() for s, st in stages.items()}
        dense = {s: _Params([kv for kv in kv_s if not is_expert_param(kv[0])]) for s, kv_s in named.items()}
        expert = {s: _Params([kv for kv in kv_s if is_expert_param(kv[0])]) for s, kv_s in named.items()}
        self.expert_params = [p for s in sorted(expert) for _, p in expert[s].named]
        self.dense = DataParallel(dense, group=ep.dp_group, zero=zero, optimizer=optimizer, lr=lr)
        self.expert = DataParallel(expert, group=ep.edp_group, zero=zero, optimizer=optimizer, lr=lr)

    @property
    def comm_s(self) -> dict[str, float]:
        out = dict(self.dense.comm_s)
        for k, v in self.expert.comm_s.items():
            out[k] = out.get(k, 0.0) + v
        out["ep"] = self.epx.timer.seconds
        return out

    def acquire(self, stage: int) -> None:
        self.dense.acquire(stage)
        self.expert.acquire(stage)

    def release(self) -> None:
        self.dense.release()
        self.expert.release()

    def start_step(self) -> None:
        self.dense.start_step()
        self.expert.start_step()
        self.epx.timer.reset()

    def sync_grads(self) -> None:
        for p in self.expert_params:
            if p.grad is not None:
                p.grad.div_(self.epx.ep)
        self.dense.sync_grads()
        self.expert.sync_grads()

    def step(self) -> None:
        if self.zero >= 2 and self.expert.zero < 2:  # edp = 1: step gradient-less experts as flat shards do
            for p in self.expert_params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
        self.dense.step()
        self.expert.step()

    def zero_grad(self) -> None:
        self.dense.zero_grad()
        self.expert.zero_grad()

    def held_elements(self) -> dict[str, int]:
        a, b = self.dense.held_elements(), self.expert.held_elements()
        return {k: a[k] + b[k] for k in a}

    def full_grads(self) -> dict[str, torch.Tensor | None]:
        """Every parameter's averaged gradient on every rank: the experts' gathered from their owners."""
        return {**self.dense.full_grads(), **self.epx.gather(self.expert.full_grads())}

    def full_params(self) -> dict[str, torch.Tensor | None]:
        return {**self.dense.full_params(), **self.epx.gather(self.expert.full_params())}


class ExpertParallel:
    """This rank's expert groups and its sharded MoE layers (module docstring)."""

    def __init__(
        self,
        *,
        ep: int,
        ep_rank: int,
        group: dist.ProcessGroup | None,
        edp_group: dist.ProcessGroup | None,
        dp_group: dist.ProcessGroup | None,
    ) -> None:
        """This rank's expert groups, created by `worker.mesh_groups` from `spec.ranks.RankLayout`: `group`
        its ep group (ep rank `ep_rank`), `edp_group` its expert-data-parallel group (None: one rank),
        `dp_group` the dense parameters' gradient group (None: one rank)."""
        self.ep, self.ep_rank = ep, ep_rank
        self.group, self.edp_group, self.dp_group = group, edp_group, dp_group
        self.timer = _Timer()

    def shard(self, stages: Mapping[int, Stage]) -> int:
        """Replace every MoE of `stages` by this rank's `ExpertParallelMoe`; returns how many were replaced."""
        n = 0
        for stage in stages.values():
            for layer in stage.layers.values():
                if not isinstance(layer, Block):
                    continue
                for part in layer.sub_blocks():
                    mixer = part["mixer"]
                    if isinstance(mixer, Moe):
                        part["mixer"] = ExpertParallelMoe(
                            mixer, ep_rank=self.ep_rank, ep=self.ep, group=self.group, timer=self.timer
                        )
                        n += 1
        return n

    def data_parallel(self, stages: Mapping[int, Stage], *, zero: int, optimizer: str, lr: float) -> ExpertDataParallel:
        return ExpertDataParallel(self, stages, zero=zero, optimizer=optimizer, lr=lr)

    def gather(self, tensors: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
        """The union of the ep group's {name: tensor} (each rank's own experts), for verification dumps."""
        parts: list = [None] * self.ep
        dist.all_gather_object(parts, tensors, group=self.group)
        out: dict[str, torch.Tensor | None] = {}
        for part in parts:
            out.update(part)
        return out
