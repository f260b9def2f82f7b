"""The tensor-parallel dimension: which slice of each layer a tp rank holds, and its gradient bookkeeping.

Data flow: `runtime.Stage` builds every layer whole (`layers.build_layer`, seeded by (seed,
layer) alone, so the full weights are exactly the single-process reference's) and hands it to
`shard_layer` (so a rank holds one whole layer at a time beyond its slices, in host memory),
which keeps this tp rank's slice of each parameter and sets the layer's
`tp_group` (the collectives themselves are `tpcomm`'s, called from the layers' forwards); the
worker builds a `TensorParallel` over the rank's stages, calls `sync_grads` after the step's
last backward / W (before the dp sync) and, with --verify, `full` to gather every parameter
and gradient over tp. Imports torch, `layers`, `tpcomm`.

Megatron-LM's layout (Shoeybi et al. 2019, Sec. 3; Narayanan et al. 2021, Sec. 2.3):
- attention (GQA): q_proj by heads (rows [r * nh / tp, (r + 1) * nh / tp) x head_dim), o_proj by
  the same columns, followed by an all-reduce. k_proj / v_proj by kv heads when tp divides
  num_kv_heads (each rank's q heads read exactly its kv heads); otherwise (MQA, or fewer kv heads
  than ranks) every rank keeps all kv heads and picks those its q heads read, and their gradients
  are partial sums (see below), Megatron's kv-head replication in its simplest form (the extra
  projection of unused kv heads is kv_heads x head_dim columns, small beside q).
  Per-head qk-norm weights are shared by all heads: replicated, gradients partial. ALiBi slopes
  are cut by heads.
- MLP: gate / up by rows (column-parallel), down by columns (row-parallel) + all-reduce.
- embedding: vocabulary rows [r * V / tp, (r + 1) * V / tp) (vocabulary-parallel: masked lookup,
  then an all-reduce); learned positions replicated.
- head: lm_weight by the same vocabulary rows; the cross-entropy is vocabulary-parallel
  (`tpcomm.vocab_parallel_lse_target`). A head chunk [lo, hi) of a split head is cut the same
  way inside [lo, hi); the packed (hidden, lse, target) hand-off between chunks stays replicated.
- norms, biases after a reduction: replicated; every rank computes the same gradient for them.
Refused with tp > 1 (`support.refusal`): MLA attention, Mamba-2 mixers and MoE blocks.

Gradients (`layout` values): 0 / 1: the parameter is this rank's slice along that dim, its
gradient is complete for the slice; None: replicated, the same gradient on every rank;
"partial": replicated, each rank's gradient covers only its heads, so `sync_grads` sums it over
the tp group (once per step, after W, in one bucket).

Rank layout: `spec.ranks.RankLayout` (the groups built by `worker.mesh_groups`). The tp ranks of one
(pp, dp) position run the same program in the same order, so their collectives (inside F, I, B and
recomputed forwards) meet in the same order, exactly as the dp replicas' do (`dataparallel` module
docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.distributed as dist
from torch import nn

from adaptis_plan.executor.layers import (
    Block,
    EmbeddingLayer,
    GqaAttention,
    HeadChunkLayer,
    HeadLayer,
    Mlp,
)
from adaptis_plan.executor.tpcomm import TP_COMM, all_reduce_

PARTIAL = "partial"


def _slice(module: nn.Module, name: str, dim: int, lo: int, hi: int) -> nn.Parameter:
    """Replace `module.<name>` by its rows / columns [lo, hi) along `dim` (a new, contiguous parameter)."""
    p = getattr(module, name)
    new = nn.Parameter(p.detach().narrow(dim, lo, hi - lo).clone(), requires_grad=p.requires_grad)
    setattr(module, name, new)
    return new


def _split(n: int, tp: int, rank: int, what: str) -> tuple[int, int]:
    if n % tp:
        raise ValueError(f"{what} = {n} is not a multiple of tp = {tp}")
    k = n // tp
    return rank * k, (rank + 1) * k


def shard_layer(layer: nn.Module, rank: int, tp: int, group: dist.ProcessGroup | None) -> dict[str, int | str | None]:
    """Keep tp rank `rank`'s slice of every parameter of the built `layer` (module docstring) and set
    its tp group; returns {parameter name in the layer: 0 | 1 (sharded along) | None | "partial"}."""
    spec: dict[int, int | str] = {}  # id(param) -> its layout entry, when not None

    def cut(module: nn.Module, name: str, dim: int, lo: int, hi: int) -> None:
        if getattr(module, name, None) is not None:
            spec[id(_slice(module, name, dim, lo, hi))] = dim

    if isinstance(layer, (EmbeddingLayer, HeadLayer, HeadChunkLayer)):
        rows = "weight" if isinstance(layer, EmbeddingLayer) else "lm_weight"
        width = getattr(layer, rows).shape[0]
        lo, hi = _split(width, tp, rank, "the vocabulary rows" if isinstance(layer, HeadChunkLayer) else "vocab_size")
        cut(layer, rows, 0, lo, hi)
        layer.vocab_lo = getattr(layer, "lo", 0) + lo
        layer.tp_group = group
    elif isinstance(layer, Block):
        for part in layer.sub_blocks():
            mixer = part["mixer"]
            if isinstance(mixer, GqaAttention):
                _shard_attention(mixer, rank, tp, group, cut, spec)
            elif isinstance(mixer, Mlp):
                inner = mixer.up_proj.weight.shape[0]
                lo, hi = _split(inner, tp, rank, "mlp.intermediate_size")
                for proj in (mixer.gate_proj, mixer.up_proj):
                    if proj is not None:
                        cut(proj, "weight", 0, lo, hi)
                        cut(proj, "bias", 0, lo, hi)
                cut(mixer.down_proj, "weight", 1, lo, hi)
                mixer.tp_group = group
            else:
                raise ValueError(f"{type(mixer).__name__} layers do not run with tensor parallelism here")
    else:
        raise ValueError(f"{type(layer).__name__} layers do not run with tensor parallelism here")
    return {name: spec.get(id(p)) for name, p in layer.named_parameters()}


def _shard_attention(
    att: GqaAttention,
    rank: int,
    tp: int,
    group: dist.ProcessGroup | None,
    cut: Callable[[nn.Module, str, int, int, int], None],
    spec: dict,
) -> None:
    nh, nkv, hd = att.nh, att.nkv, att.hd
    h0, h1 = _split(nh, tp, rank, "attention.num_heads")
    qh, per_kv = h1 - h0, nh // nkv
    cut(att.q_proj, "weight", 0, h0 * hd, h1 * hd)
    cut(att.q_proj, "bias", 0, h0 * hd, h1 * hd)
    cut(att.o_proj, "weight", 1, h0 * hd, h1 * hd)
    if nkv % tp == 0:  # each rank's q heads read exactly its kv heads
        k0, k1 = h0 // per_kv, h1 // per_kv
        for proj in (att.k_proj, att.v_proj):
            cut(proj, "weight", 0, k0 * hd, k1 * hd)
            cut(proj, "bias", 0, k0 * hd, k1 * hd)
        att.nkv = k1 - k0
        att.kv_index = torch.arange(qh) // per_kv
    else:  # every kv head on every rank; this rank reads those of its q heads
        for proj in (att.k_proj, att.v_proj):
            for p in proj.parameters():
                spec[id(p)] = PARTIAL
        att.kv_index = torch.arange(h0, h1) // per_kv
    for norm in (att.q_norm, att.k_norm):
        if norm is not None:
            for p in norm.parameters():
                spec[id(p)] = PARTIAL
    if att.alibi is not None:
        att.alibi = att.alibi[h0:h1].clone()
    att.nh = qh
    att.tp_group = group


class TensorParallel:
    """This rank's side of the tp dimension over its stages (module docstring); `layout`: {parameter
    name: layout entry} as `Stage.tp_layout` records it."""

    def __init__(
        self,
        named: list[tuple[str, nn.Parameter]],
        layout: dict[str, int | str | None],
        group: dist.ProcessGroup | None,
    ) -> None:
        self.group = group
        self.tp = dist.get_world_size(group)
        self.layout = layout
        self._partial = [p for n, p in named if layout.get(n) == PARTIAL]
        self._shapes = {n: p.shape for n, p in named}
        self._device = named[0][1].device if named else torch.device("cpu")

    def sync_grads(self) -> None:
        """Sum the partial gradients (replicated parameters only some heads use) over the tp group."""
        if not self._partial:
            return
        parts = [p.grad.reshape(-1) if p.grad is not None else p.new_zeros(p.numel()) for p in self._partial]
        bucket = all_reduce_(torch.cat(parts), self.group)
        offset = 0
        for p in self._partial:
            p.grad = bucket[offset : offset + p.numel()].view(p.shape).clone()
            offset += p.numel()

    def full(self, local: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
        """Every sharded tensor of `local` ({parameter name: this rank's slice, e.g. its gradient})
        all-gathered over tp and concatenated along its dim; replicated ones as they are (this rank's
        own copy). A collective: every tp rank calls it with the same names. Not counted in `TP_COMM`."""
        seconds, nbytes = TP_COMM.seconds, TP_COMM.bytes
        out: dict[str, torch.Tensor | None] = {}
        for name in sorted(local):
            t, dim = local[name], self.layout.get(name)
            if dim is None or dim == PARTIAL:
                out[name] = t
                continue
            # no gradient for the slice (no replica used it): zeros, as `verify.compare` reads None
            mine = t if t is not None else torch.zeros(self._shapes[name])
            mine = mine.to(self._device).contiguous()
            parts = [torch.empty_like(mine) for _ in range(self.tp)]
            dist.all_gather(parts, mine, group=self.group)
            out[name] = torch.cat(parts, dim=int(dim)).cpu()
        TP_COMM.seconds, TP_COMM.bytes = seconds, nbytes
        return out
