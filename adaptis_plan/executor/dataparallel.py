"""The data-parallel dimension around one pipeline rank: gradient sync, ZeRO 0-3, the optimizer.

Data flow: `worker.py` builds a `RankRuntime` (this rank's stages of one pipeline replica) and
a `DataParallel` over the same stages and the mesh's dp group (`torch.distributed` process
group of the ranks holding the same stages in the other replicas); the runtime calls
`acquire` before every forward or backward of a stage (ZeRO-3 gathers that stage's
parameters there), the worker calls `sync_grads` once after the rank's last backward / W of
the step and then `step`. Imports torch only.

Rank layout: `spec.ranks.RankLayout` (the groups built by `worker.mesh_groups`). The pipeline's
point-to-point traffic stays inside a "pp" group (one dp and tp index), the collectives below inside
a "dp" group (one pp and tp index: the replicas of the same tp slice, so every tensor here is that
slice's, `tensorparallel`). Every replica runs the same program in the same order, so the dp
collectives of the replicas meet in the same order and cannot interlock with the pipeline's
transfers: replay the lowered global order in all replicas at once; each action's producers and its
collective partners (the same action in the other replicas) all come earlier or at the same
position.

Loss scaling: each replica's last stage scales its micro-batch losses by 1 / num_microbatches
(the replica's mean loss); `sync_grads` sums over the dp group and divides by dp. The replicas
hold equally many sequences, so the result is the gradient of the mean loss over the global
batch (dp x micro_batch_size x num_microbatches sequences), what one process computes.

Why not `DistributedDataParallel`: DDP all-reduces a bucket when autograd hooks on its
parameters' gradient accumulators have fired for every parameter in it, during `backward()`.
Here the weight gradients of projections and embeddings are not produced by autograd at all
when the plan splits backward into I and W: `I` stashes them (`wgrad.WeightGradStore`) and
`W` computes them later under `no_grad`, accumulating into `.grad` directly, so those hooks
never fire for them; and a rank runs many forwards and backwards per step in the plan's
interleaved order, the last of which is generally a W, not a backward. DDP would reduce
incomplete gradients (or wait for hooks that never come). So the gradients are reduced here,
explicitly, after the rank's last gradient-producing action, with `torch.distributed`
collectives on the dp group. For the same reason ZeRO-3 does not use FSDP2's `fully_shard`:
its reduce-scatter runs from a post-backward autograd hook at the end of each backward (our
I), before W has accumulated the weight gradients into the unsharded parameters, which FSDP
then frees (reshard after backward); driving FSDP2 by hand (`unshard` / `reshard`, gradient
sync off) would leave exactly the reduce-scatter below to write anyway.

ZeRO stages (`training.zero`), each a documented, checkable equivalent of its namesake:
- 0: every rank all-reduces all gradients (one flat bucket per step) and steps a full optimizer.
- 1: as 0, and the optimizer state is sharded (`ShardedOptimizer`): parameters assigned whole to
  ranks, largest first to the least-loaded rank (the partition of torch's ZeroRedundancyOptimizer);
  each rank keeps state for and steps its own, and each owner broadcasts them (one flat bucket).
- 2: gradients sharded: per stage all parameters live in one flat buffer padded to a multiple
  of dp; the flat gradient is reduce-scattered (each rank keeps its 1 / dp slice, the full
  gradients are dropped), the optimizer steps the rank's slice of the flat parameters (a flat
  shard: AdamW and SGD are elementwise, so this is the per-parameter update), and the updated
  slices are all-gathered back into the full parameters.
- 3: parameters sharded too: between uses each stage's full flat buffer has no storage; before
  a forward or backward (I / B; recomputation runs inside the backward) of a stage the slices
  are all-gathered into it, and it is freed again when the rank next computes another stage
  (at most one stage's full parameters at a time). W needs no parameters (it multiplies the
  stashed input by the output gradient), so it never gathers. Autograd keeps the parameters it
  saved in F for I; they are views of the flat buffer, whose storage is refilled with the same
  values before I runs (the storage-resize technique of FSDP's flat parameters).
On gloo, `reduce_scatter_single` (formerly `reduce_scatter_tensor`) is supported and is
implemented as an all-reduce followed by taking the rank's chunk (pytorch/pytorch#118911), so
it moves the bytes of an all-reduce; NCCL runs a true reduce-scatter.

Gradients no replica produced (e.g. an expert no token of the step was routed to) stay None
under ZeRO 0 and 1 (the optimizer then skips the parameter, as one process would); under
ZeRO 2 and 3 they are zeros in the flat buffer, as in Megatron's distributed optimizer, so
AdamW still decays such a parameter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Protocol, cast

import torch
import torch.distributed as dist
from torch import nn

from adaptis_plan.executor import optim

ZERO_STAGES = (0, 1, 2, 3)
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class StageParams(Protocol):
    """What `DataParallel` reads of a stage (`runtime.Stage`, or a view of some of its parameters)."""

    def named_layer_parameters(self) -> list[tuple[str, nn.Parameter]]: ...


def make_optimizer(params: list, name: str, lr: float) -> optim.Optimizer:
    """The executor's optimizer: SGD or AdamW (weight decay 0.01, single-tensor path; `optim`), the same in
    the workers and in the single-process reference."""
    return optim.SGD(params, lr) if name == "sgd" else optim.AdamW(params, lr)


def owners(numels: list[int], world: int) -> list[int]:
    """The rank that owns each parameter under ZeRO 1 (`ShardedOptimizer`): largest first (ties: the earlier
    parameter), each to the rank with the fewest elements so far (ties: the lowest rank)."""
    held = [0] * world
    owner = [0] * len(numels)
    for i in sorted(range(len(numels)), key=lambda i: (-numels[i], i)):
        owner[i] = min(range(world), key=lambda r: (held[r], r))
        held[owner[i]] += numels[i]
    return owner


class ShardedOptimizer:
    """ZeRO-1 on a dp group: every parameter is owned by one rank, largest first to the rank with the fewest
    elements so far (ties: the lowest rank), as torch's ZeroRedundancyOptimizer partitions them; this rank's
    optimizer (`local`) keeps state for its own parameters only, and after it steps them each owner
    broadcasts its parameters to the group as one flat bucket per dtype. (torch's class would do the same, and
    building it imports `torch._dynamo` through `torch.optim.Optimizer`: seconds per rank; `optim`.)"""

    def __init__(self, params: list[nn.Parameter], name: str, lr: float, group: dist.ProcessGroup) -> None:
        self.group = group
        world, me = dist.get_world_size(group), dist.get_rank(group)
        owner = owners([p.numel() for p in params], world)
        self.owned = [[p for p, o in zip(params, owner, strict=True) if o == r] for r in range(world)]
        self.rank = me
        self.local = make_optimizer(self.owned[me], name, lr)

    @torch.no_grad()
    def step(self) -> None:
        self.local.step()
        for r, params in enumerate(self.owned):
            src = dist.get_global_rank(self.group, r)
            for dtype in sorted({p.dtype for p in params}, key=str):  # one bucket per owner and dtype
                same = [p for p in params if p.dtype == dtype]
                bucket = torch.cat([p.reshape(-1) for p in same])
                dist.broadcast(bucket, src=src, group=self.group)
                if r != self.rank:
                    offset = 0
                    for p in same:
                        p.copy_(bucket[offset : offset + p.numel()].view_as(p))
                        offset += p.numel()


class _FlatStage:
    """One stage's parameters as views of one flat buffer, padded to a multiple of dp; this rank owns
    the slice [dp_rank * n, (dp_rank + 1) * n) as `shard` (a parameter of its own, the optimizer's)."""

    def __init__(
        self, params: list[tuple[str, nn.Parameter]], group: dist.ProcessGroup | None, dp_rank: int, dp: int
    ) -> None:
        self.params = params
        self.group = group
        p0 = params[0][1]
        total = sum(p.numel() for _, p in params)
        self.n = math.ceil(total / dp)
        self.flat = torch.zeros(self.n * dp, dtype=p0.dtype, device=p0.device)
        offset = 0
        with torch.no_grad():
            for _, p in params:
                if p.dtype != p0.dtype:
                    raise RuntimeError(f"ZeRO 2/3 flattens a stage's parameters: {p.dtype} beside {p0.dtype}")
                view = self.flat[offset : offset + p.numel()].view_as(p)
                view.copy_(p)
                p.data = view  # a separate version counter: refilling the buffer is invisible to autograd
                offset += p.numel()
        lo = dp_rank * self.n
        self.shard = nn.Parameter(self.flat[lo : lo + self.n].detach().clone())
        self.nbytes = self.flat.untyped_storage().nbytes()
        self.gathered = True

    def free(self) -> None:
        if self.gathered:
            self.flat.untyped_storage().resize_(0)
            self.gathered = False

    def gather(self) -> None:
        if not self.gathered:
            self.flat.untyped_storage().resize_(self.nbytes)
            self.gathered = True
        _all_gather(self.flat, self.shard.detach(), group=self.group)

    def reduce_grads(self, dp: int) -> None:
        """Reduce-scatter the flat gradient; this rank keeps the mean of its slice in `shard.grad`."""
        flat = torch.zeros(self.flat.numel(), dtype=self.flat.dtype, device=self.flat.device)
        offset = 0
        for _, p in self.params:
            if p.grad is not None:
                flat[offset : offset + p.numel()].copy_(p.grad.reshape(-1))
            p.grad = None
            offset += p.numel()
        out = torch.empty(self.n, dtype=flat.dtype, device=flat.device)
        _reduce_scatter(out, flat, group=self.group)
        self.shard.grad = out.div_(dp)

    def full(self, shard: torch.Tensor) -> dict[str, torch.Tensor]:
        """All-gather a per-rank slice of this layout (parameters or gradients) and cut it by parameter."""
        buf = torch.empty(self.flat.numel(), dtype=shard.dtype, device=shard.device)
        _all_gather(buf, shard.detach().contiguous(), group=self.group)
        out, offset = {}, 0
        for name, p in self.params:
            out[name] = buf[offset : offset + p.numel()].view(p.shape).clone()
            offset += p.numel()
        return out


class DataParallel:
    """This rank's side of the dp dimension (module docstring); dp = 1 (group None): a plain optimizer."""

    def __init__(
        self,
        stages: Mapping[int, StageParams],
        *,
        group: dist.ProcessGroup | None,
        zero: int,
        optimizer: str,
        lr: float,
    ) -> None:
        if zero not in ZERO_STAGES:
            raise ValueError(f"zero = {zero}: use one of 0, 1, 2, 3")
        self.group = group
        self.dp = 1 if group is None else dist.get_world_size(group)
        self.zero = zero if self.dp > 1 else 0
        self.stages = stages
        named = {s: st.named_layer_parameters() for s, st in stages.items()}
        self._named = [kv for s in sorted(named) for kv in named[s]]
        self.flats: dict[int, _FlatStage] = {}
        self.optimizer: optim.Optimizer | ShardedOptimizer
        self.start_step()
        if self.zero >= 2:
            rank = dist.get_rank(group)
            self.flats = {s: _FlatStage(kv, group, rank, self.dp) for s, kv in named.items() if kv}
            params: list = [f.shard for _, f in sorted(self.flats.items())]
            self.optimizer = make_optimizer(params, optimizer, lr)
            if self.zero == 3:
                for f in self.flats.values():
                    f.free()
        else:
            params = [p for _, p in self._named]
            self.optimizer = (
                ShardedOptimizer(params, optimizer, lr, cast(dist.ProcessGroup, group))
                if self.zero == 1 and params
                else make_optimizer(params, optimizer, lr)
            )
        self._current: int | None = None

    # ------------------------------------------------------------ during the step

    def acquire(self, stage: int) -> None:
        """Before a forward or backward of `stage`: under ZeRO-3, have its full parameters (module docstring)."""
        if self.zero != 3 or stage == self._current:
            return
        t0 = time.perf_counter()
        self.release()
        if stage in self.flats:
            self.flats[stage].gather()
        self._current = stage
        self.comm_s["dp_param_gather"] += time.perf_counter() - t0

    def release(self) -> None:
        """Free the gathered stage's full parameters (ZeRO-3; a no-op otherwise)."""
        if self._current is not None and self._current in self.flats:
            self.flats[self._current].free()
        self._current = None

    def start_step(self) -> None:
        """Zero the step's timers (`comm_s`): `dp_wait` (in a dp-group barrier before the gradient sync,
        i.e. for the slowest replica to finish its pipeline), `dp_grad_sync` (the all-reduce or
        reduce-scatter itself), `dp_param_gather` (ZeRO 3's gathers during the step, ZeRO 2's after
        the optimizer step)."""
        self.comm_s = {"dp_wait": 0.0, "dp_grad_sync": 0.0, "dp_param_gather": 0.0}

    # ------------------------------------------------------------ after the rank's last backward / W

    def sync_grads(self) -> None:
        """Average every gradient over the dp group (ZeRO 0/1: all-reduce; 2/3: reduce-scatter)."""
        self.release()
        if self.dp == 1:
            return
        t0 = time.perf_counter()
        dist.barrier(group=self.group)  # so that dp_grad_sync times the collective, not the replicas' skew
        t1 = time.perf_counter()
        self.comm_s["dp_wait"] += t1 - t0
        t0 = t1
        if self.zero >= 2:
            for _, f in sorted(self.flats.items()):
                f.reduce_grads(self.dp)
        else:
            self._all_reduce([p for _, p in self._named])
        self.comm_s["dp_grad_sync"] += time.perf_counter() - t0

    def _all_reduce(self, params: list[nn.Parameter]) -> None:
        """One flat bucket: every gradient (zeros for None) and one has-a-gradient flag per parameter;
        a parameter no replica gave a gradient keeps None."""
        if not params:
            return
        p0 = params[0]
        parts = [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in params]
        flags = torch.tensor([p.grad is not None for p in params], dtype=p0.dtype, device=p0.device)
        bucket = torch.cat([*parts, flags])
        dist.all_reduce(bucket, group=self.group)
        has = bucket[-len(params) :].tolist()
        bucket = bucket[: -len(params)].div_(self.dp)
        offset = 0
        for p, h in zip(params, has, strict=True):
            p.grad = bucket[offset : offset + p.numel()].view(p.shape).clone() if h > 0 else None
            offset += p.numel()

    def step(self) -> None:
        """The optimizer step (ZeRO 1: sharded state, owners broadcast; 2: then all-gather the updated slices)."""
        self.optimizer.step()
        if self.zero == 2:
            t0 = time.perf_counter()
            for f in self.flats.values():
                f.gather()
            self.comm_s["dp_param_gather"] += time.perf_counter() - t0

    def zero_grad(self) -> None:
        for _, p in self._named:
            p.grad = None
        for f in self.flats.values():
            f.shard.grad = None

    # ------------------------------------------------------------ what this rank holds

    def held_elements(self) -> dict[str, int]:
        """Elements this rank holds now: `optimizer` (those its optimizer updates and keeps state for;
        ZeRO 1-3: about 1 / dp of the stages'), `full_params` (full parameters with storage; ZeRO 3:
        0 between steps) and `params` (all of this rank's stages' parameters)."""
        opt = self.optimizer
        local = opt.local if isinstance(opt, ShardedOptimizer) else opt
        updated = sum(p.numel() for g in local.param_groups for p in g["params"]) if self._named else 0
        full = sum(p.numel() for _, p in self._named if p.untyped_storage().nbytes() > 0)
        return {"optimizer": updated, "full_params": full, "params": sum(p.numel() for _, p in self._named)}

    # ------------------------------------------------------------ verification dumps

    def full_grads(self) -> dict[str, torch.Tensor | None]:
        """{name: the dp-averaged gradient} on every rank (ZeRO 2/3: all-gathered from the slices)."""
        if self.zero >= 2:
            out: dict[str, torch.Tensor | None] = {}
            for _, f in sorted(self.flats.items()):
                grad = f.shard.grad if f.shard.grad is not None else torch.zeros_like(f.shard)
                out.update(f.full(grad))
            return {n: (None if g is None else g.float().cpu()) for n, g in out.items()}
        return {n: (None if p.grad is None else p.grad.detach().float().cpu()) for n, p in self._named}

    def full_params(self) -> dict[str, torch.Tensor]:
        """{name: parameter} on every rank (ZeRO 3: all-gathered from the slices)."""
        if self.zero == 3:
            out: dict[str, torch.Tensor] = {}
            for _, f in sorted(self.flats.items()):
                out.update(f.full(f.shard))
            return {n: t.float().cpu() for n, t in out.items()}
        return {n: p.detach().float().cpu().clone() for n, p in self._named}
