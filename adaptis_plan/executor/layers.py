"""Every layer kind of `spec/model.py` as a torch module, with real computations at any size.

Data flow: `ModelSpec` -> `build_layer(model, index, seed=...)` -> the runtime builds a
rank's stages from it, the single-process reference builds the whole model from it, the
profiler builds one layer per distinct spec. Imports torch, the spec and `wgrad` only.

Layers (pre-norm residual blocks; the norm kind is `model.norm`):
- embedding: token lookup (vocab x hidden), plus a learned position table (rows
  `max_position_embeddings`) added for `position_encoding` 'learned'.
- attention (gqa): q/k/v/o projections, optional q/k/v bias and per-head RMS qk-norm, RoPE
  (theta 10000), `F.scaled_dot_product_attention(is_causal=True)`; with a sliding window
  shorter than the sequence an explicit banded causal mask is used instead. With
  `position_encoding` 'alibi' no RoPE: the causal mask becomes an additive bias of
  -slope_h * (i - j) (Press et al. 2022; slopes 2^(-8 k / n) for n a power of two, the
  interleaved extension otherwise, as BLOOM computes them); 'learned': no RoPE either.
- attention (mla): DeepSeek latent attention: optional q low-rank path (q_a -> RMSNorm -> q_b),
  kv compressed to `kv_lora_rank` plus one shared rotary key (`qk_rope_head_dim`),
  RMSNorm, up-projection to per-head non-rotary keys and values; q/k = [nope, rope].
- mlp: swiglu / geglu (3 matrices) or gelu / relu / squared-relu (2 matrices).
- moe: softmax router, top-k (weights are the top-k probabilities, not renormalized, no
  auxiliary loss), each routed expert runs on the tokens gathered for it, shared experts are
  one merged MLP of `num_shared_experts * shared_intermediate_size` (same parameter count).
- mamba: Mamba-2 mixer in plain torch: in_proj -> causal depthwise conv1d + SiLU -> selective
  state-space scan (`ssd_scan`: exact chunked SSD, a loop over chunks of `SSD_CHUNK` tokens,
  the cost model's, with the quadratic form inside a chunk) + D skip -> group-wise gated
  RMSNorm -> out_proj.
- head: final norm + LM head + cross-entropy (mean over the micro-batch's tokens; the
  runtime scales it by 1 / num_microbatches for gradient accumulation).
- head chunk (a head split into k vocabulary chunks by `models.transform.split_head`, each
  layer with `vocab_range = (lo, hi)`): see `HeadChunkLayer`. Chunk c < k-1 outputs the packed
  boundary tensor [b, s, h + 2] float32 = (normed hidden, running log-sum-exp, running target
  logit); the last chunk outputs the same loss as the unsplit head. `boundary_spec` tells the
  runtime the shape and dtype of whatever a layer hands to the next one.

Every projection goes through `wgrad.linear` so its weight gradient can be deferred to W.

Tensor parallelism: `tensorparallel.shard_layer` cuts a built layer to one tp rank's slice and
sets its `tp_group`; the forwards then call `tpcomm`'s collectives (copy_to_tp where a replicated
input enters column-parallel projections, reduce_from_tp after row-parallel ones and the
vocabulary-parallel embedding; the head's and head chunks' cross-entropy / log-sum-exp over the
vocabulary slices). With `tp_group` None (the default) every layer computes exactly as without tp.

Recomputation (`set_recompute`, per stage from the plan's `stages[*].recompute`): "full" runs
a decoder block through `recomputed`: its forward runs without autograd and saves only the
block input; its backward reruns the block's forward with autograd and backpropagates through
it. "selective" runs only the attention core (`causal_attention`) that way: q, k, v are saved,
whatever the core's kernel saves beyond them (its output and log-sum-exp for a flash-style
kernel, the probabilities for the math path) is recomputed. The I / W split is unchanged: the backward
through the recomputed forward still defers every weight GEMM (with the recomputed GEMM input)
to W, and I + W does B's arithmetic plus one forward of what was recomputed, never a GEMM
twice otherwise.

Weights: layer `i` is initialized from a generator seeded by (seed, i) alone, so any rank
builds exactly its own layers and one process can build the identical whole model.

Tied embeddings (`tie_word_embeddings`): the head keeps its own copy of the embedding matrix,
initialized identically (drawn from the embedding layer's generator), so the head stage can
live on any device. The runtime sums the two copies' gradients after the step's backward
(locally when both stages share a device, else by exchanging them between the two ranks), so
both copies receive the full tied gradient and stay equal through the optimizer step; that
gradient equals the single-process model's (where the head uses the embedding parameter
itself). The copy is not counted as a parameter (`own_param_count`), matching `cost.params`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from adaptis_plan.executor.tpcomm import copy_to_tp, reduce_from_tp, vocab_parallel_lse_target
from adaptis_plan.executor.wgrad import embedding, linear
from adaptis_plan.spec.model import SSD_CHUNK, AttentionSpec, LayerSpec, MambaSpec, ModelSpec, MoeSpec

if TYPE_CHECKING:
    import torch.distributed as dist

INIT_STD = 0.02
ROPE_THETA = 10000.0


def layer_generator(seed: int, index: int) -> torch.Generator:
    """The generator that initializes layer `index` of a model built with `seed`."""
    return torch.Generator().manual_seed((seed % (2**31)) * 1_000_003 + index)


# ---------------------------------------------------------------- building blocks


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


def make_norm(kind: str, dim: int) -> nn.Module:
    return RMSNorm(dim) if kind == "rmsnorm" else nn.LayerNorm(dim, eps=1e-5)


class Linear(nn.Module):
    """y = x W^T (+ b) with a deferrable weight gradient."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on [batch, heads, seq, dim] (positions 0..seq-1, rotate-half form)."""
    seq, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    if half == 0:
        return x
    inv = 1.0 / (ROPE_THETA ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
    ang = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class _Recomputed(torch.autograd.Function):
    """y = fn(*inputs), keeping only `inputs`; the backward reruns `fn` with autograd on and
    backpropagates through that graph (torch's reentrant checkpoint, without its generality).

    `params` (those of the module `fn` runs) are passed only so that y requires a gradient
    whenever they do; the inner backward accumulates their gradients itself, exactly as the
    outer one would have: into `.grad`, or, inside `WeightGradStore.deferring` (a process-wide
    switch, so it holds for this nested backward too), into the W stash. The forward runs with
    autograd off (a custom Function's forward always does), so it builds no graph to drop.
    """

    @staticmethod
    def forward(ctx: Any, fn: Callable[..., torch.Tensor], num_inputs: int, *args: torch.Tensor) -> torch.Tensor:
        ctx.fn, ctx.num_inputs, ctx.num_params = fn, num_inputs, len(args) - num_inputs
        inputs = args[:num_inputs]
        ctx.save_for_backward(*inputs)
        return fn(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        needs = ctx.needs_input_grad[2 : 2 + ctx.num_inputs]
        inputs = [t.detach().requires_grad_(n) for t, n in zip(ctx.saved_tensors, needs, strict=True)]
        with torch.enable_grad():
            out = ctx.fn(*inputs)
        torch.autograd.backward(out, grad_out)
        return (None, None, *(t.grad if n else None for t, n in zip(inputs, needs, strict=True))) + (
            None,
        ) * ctx.num_params


def recomputed(
    fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], params: Sequence[torch.Tensor] = ()
) -> torch.Tensor:
    """`fn(*inputs)` keeping only `inputs` for the backward, which reruns `fn` first (`_Recomputed`).

    Own code rather than `torch.utils.checkpoint`, whose non-reentrant mode adds Python work per
    saved tensor (unpack hooks, dynamo-disable wrappers) that dominates small blocks (figures in
    experiments/findings-readme.md). No layer draws random numbers, so no RNG state is kept."""
    return _Recomputed.apply(fn, len(inputs), *inputs, *[p for p in params if p.requires_grad])


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes: 2^(-8 k / n), k = 1..n, for n the largest power of two <= heads;
    the remaining heads take every other slope of the 2n-head sequence (BLOOM's construction)."""
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]
    slopes += [2.0 ** (-4.0 * k / n) for k in range(1, 2 * (num_heads - n), 2)]
    return torch.tensor(slopes, dtype=torch.float32)


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int | None, alibi: torch.Tensor | None = None
) -> torch.Tensor:
    seq = q.shape[-2]
    if alibi is None and (window is None or window >= seq):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    i = torch.arange(seq, device=q.device)
    mask = i[None, :] <= i[:, None]
    if window is not None and window < seq:
        mask = mask & (i[:, None] - i[None, :] < window)
    if alibi is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    distance = (i[:, None] - i[None, :]).to(q.dtype)
    bias = -alibi.to(q.device, q.dtype)[:, None, None] * distance  # [heads, seq, seq]
    bias = bias.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


class _Attention(nn.Module):
    """What GQA and MLA share: the causal core, recomputed in the backward under selective recompute."""

    recompute_core = False  # set by `set_recompute(layer, "selective")`
    window: int | None = None
    alibi: torch.Tensor | None = None  # per-head ALiBi slopes (a buffer), None = no bias

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.recompute_core and torch.is_grad_enabled():
            return recomputed(functools.partial(causal_attention, window=self.window, alibi=self.alibi), (q, k, v))
        return causal_attention(q, k, v, self.window, self.alibi)


class GqaAttention(_Attention):
    # set by `tensorparallel.shard_layer`: q / o by heads, k / v by kv heads or replicated
    tp_group: dist.ProcessGroup | None = None
    kv_index: torch.Tensor | None = None  # under tp: the projected kv head each local q head reads

    def __init__(self, hidden: int, a: AttentionSpec, positions: str | None = None) -> None:
        super().__init__()
        self.rotary = positions is None
        if positions == "alibi":
            self.alibi = alibi_slopes(a.num_heads)  # not a parameter; moved to q's device when used
        if a.num_heads % a.num_kv_heads:
            raise ValueError(f"attention.num_heads {a.num_heads} is not a multiple of num_kv_heads {a.num_kv_heads}")
        self.nh, self.nkv, self.hd, self.window = a.num_heads, a.num_kv_heads, a.head_dim, a.sliding_window
        self.q_proj = Linear(hidden, a.num_heads * a.head_dim, bias=a.bias)
        self.k_proj = Linear(hidden, a.num_kv_heads * a.head_dim, bias=a.bias)
        self.v_proj = Linear(hidden, a.num_kv_heads * a.head_dim, bias=a.bias)
        self.o_proj = Linear(a.num_heads * a.head_dim, hidden)
        self.q_norm = RMSNorm(a.head_dim) if a.qk_norm else None
        self.k_norm = RMSNorm(a.head_dim) if a.qk_norm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        x = copy_to_tp(x, self.tp_group)
        q = self.q_proj(x).view(b, s, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.nkv, self.hd).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary:
            q, k = rope(q), rope(k)
        if self.kv_index is not None:
            kv_index = self.kv_index.to(k.device)
            k, v = k.index_select(1, kv_index), v.index_select(1, kv_index)
        elif self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        out = self._core(q, k, v)
        return reduce_from_tp(self.o_proj(out.transpose(1, 2).reshape(b, s, self.nh * self.hd)), self.tp_group)


class MlaAttention(_Attention):
    q_proj: Linear | None  # q projected whole, or through the low-rank q_a / q_b pair
    q_a_proj: Linear | None
    q_a_norm: RMSNorm | None
    q_b_proj: Linear | None

    def __init__(self, hidden: int, a: AttentionSpec) -> None:
        super().__init__()
        assert a.kv_lora_rank and a.qk_nope_head_dim and a.qk_rope_head_dim and a.v_head_dim
        self.nh, self.window = a.num_heads, a.sliding_window
        self.nope, self.rope_dim, self.vd, self.kv_rank = (
            a.qk_nope_head_dim,
            a.qk_rope_head_dim,
            a.v_head_dim,
            a.kv_lora_rank,
        )
        qk = self.nope + self.rope_dim
        if a.q_lora_rank:
            self.q_a_proj = Linear(hidden, a.q_lora_rank)
            self.q_a_norm = RMSNorm(a.q_lora_rank)
            self.q_b_proj = Linear(a.q_lora_rank, a.num_heads * qk)
            self.q_proj = None
        else:
            self.q_a_proj = self.q_a_norm = self.q_b_proj = None
            self.q_proj = Linear(hidden, a.num_heads * qk)
        self.kv_a_proj = Linear(hidden, a.kv_lora_rank + a.qk_rope_head_dim)
        self.kv_a_norm = RMSNorm(a.kv_lora_rank)
        self.kv_b_proj = Linear(a.kv_lora_rank, a.num_heads * (a.qk_nope_head_dim + a.v_head_dim))
        self.o_proj = Linear(a.num_heads * a.v_head_dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        if self.q_proj is not None:
            q = self.q_proj(x)
        else:  # the low-rank pair, set together
            q_a, q_norm, q_b = cast(Linear, self.q_a_proj), cast(RMSNorm, self.q_a_norm), cast(Linear, self.q_b_proj)
            q = q_b(q_norm(q_a(x)))
        q = q.view(b, s, self.nh, self.nope + self.rope_dim).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope_dim], dim=-1)
        c, k_pe = self.kv_a_proj(x).split([self.kv_rank, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_norm(c)).view(b, s, self.nh, self.nope + self.vd).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.vd], dim=-1)
        q_pe = rope(q_pe)
        k_pe = rope(k_pe.view(b, 1, s, self.rope_dim)).expand(b, self.nh, s, self.rope_dim)
        q = torch.cat([q_nope, q_pe], dim=-1)
        k = torch.cat([k_nope, k_pe], dim=-1)
        out = self._core(q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.nh * self.vd))


def _activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name in ("swiglu",):
        return F.silu(x)
    if name in ("geglu", "gelu"):
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    return F.relu(x).square()  # relu2


class Mlp(nn.Module):
    tp_group: dist.ProcessGroup | None = None  # set by `tensorparallel.shard_layer`: gate / up by rows, down by columns

    def __init__(self, hidden: int, activation: str, inner: int) -> None:
        super().__init__()
        self.activation = activation
        self.gated = activation in ("swiglu", "geglu")
        self.gate_proj = Linear(hidden, inner) if self.gated else None
        self.up_proj = Linear(hidden, inner)
        self.down_proj = Linear(inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = copy_to_tp(x, self.tp_group)
        if self.gate_proj is not None:  # gated
            y = self.down_proj(_activation(self.activation, self.gate_proj(x)) * self.up_proj(x))
        else:
            y = self.down_proj(_activation(self.activation, self.up_proj(x)))
        return reduce_from_tp(y, self.tp_group)


def route(router: nn.Module, t: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k softmax routing of tokens `t` [tokens, hidden]: (weights in t's dtype, expert indices),
    each [tokens, top_k]. One function for the whole MoE layer and its expert-parallel shard
    (`expertparallel`), so both route every token the same way."""
    probs = torch.softmax(router(t).float(), dim=-1)
    weights, idx = probs.topk(top_k, dim=-1)
    return weights.to(t.dtype), idx


class Moe(nn.Module):
    def __init__(self, hidden: int, m: MoeSpec) -> None:
        super().__init__()
        self.top_k = m.top_k
        self.router = Linear(hidden, m.num_experts)
        self.experts = nn.ModuleList(
            Mlp(hidden, m.activation, m.expert_intermediate_size) for _ in range(m.num_experts)
        )
        inner = m.num_shared_experts * (m.shared_intermediate_size or m.expert_intermediate_size)
        self.shared = Mlp(hidden, m.activation, inner) if m.num_shared_experts else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        weights, idx = route(self.router, t, self.top_k)
        out = torch.zeros_like(t)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = expert(t[tok]) * weights[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y)
        if self.shared is not None:
            out = out + self.shared(t)
        return out.view(shape)


def ssd_scan(
    x: torch.Tensor, dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk: int = SSD_CHUNK
) -> torch.Tensor:
    """Selective state-space scan (Mamba-2 SSD), exact.

    x [batch, seq, heads, head_dim], dt [batch, seq, heads] (after softplus), a [heads] (< 0),
    b / c [batch, seq, groups, state]. State h_t = exp(dt_t a) h_{t-1} + dt_t x_t b_t^T,
    output y_t = h_t c_t. Computed chunk by chunk: inside a chunk the quadratic (attention-like)
    form with decays exp(cum_t - cum_s), across chunks the carried state.
    """
    bsz, seq, heads, hd = x.shape
    rep = heads // b.shape[2]
    bh = b.repeat_interleave(rep, dim=2)
    ch = c.repeat_interleave(rep, dim=2)
    log_decay = dt * a  # [batch, seq, heads]
    xdt = x * dt.unsqueeze(-1)
    state = x.new_zeros(bsz, heads, hd, b.shape[-1])
    ys = []
    for c0 in range(0, seq, chunk):
        sl = slice(c0, min(c0 + chunk, seq))
        q = sl.stop - sl.start
        cum = log_decay[:, sl].cumsum(dim=1)  # [batch, q, heads]
        causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
        diff = (cum.unsqueeze(2) - cum.unsqueeze(1)).masked_fill(~causal[None, :, :, None], float("-inf"))
        scores = torch.einsum("bthn,bshn->btsh", ch[:, sl], bh[:, sl]) * diff.exp()
        y = torch.einsum("btsh,bshp->bthp", scores, xdt[:, sl])
        y = y + torch.einsum("bthn,bhpn->bthp", ch[:, sl], state) * cum.exp().unsqueeze(-1)
        ys.append(y)
        to_end = (cum[:, -1:] - cum).exp()  # [batch, q, heads]
        state = state * cum[:, -1].exp()[:, :, None, None] + torch.einsum(
            "bshn,bsh,bshp->bhpn", bh[:, sl], to_end, xdt[:, sl]
        )
    return torch.cat(ys, dim=1)


class Mamba2(nn.Module):
    def __init__(self, hidden: int, m: MambaSpec) -> None:
        super().__init__()
        if m.num_heads % m.num_groups:
            raise ValueError(f"mamba.num_heads {m.num_heads} is not a multiple of num_groups {m.num_groups}")
        self.m = m
        self.inner = m.num_heads * m.head_dim
        self.conv_dim = self.inner + 2 * m.num_groups * m.state_size
        self.in_proj = Linear(hidden, 2 * self.inner + 2 * m.num_groups * m.state_size + m.num_heads)
        self.conv_weight = nn.Parameter(torch.empty(self.conv_dim, 1, m.conv_kernel))
        self.conv_bias = nn.Parameter(torch.zeros(self.conv_dim))
        self.A_log = nn.Parameter(torch.zeros(m.num_heads))
        self.D = nn.Parameter(torch.ones(m.num_heads))
        self.dt_bias = nn.Parameter(torch.zeros(m.num_heads))
        self.norm_weight = nn.Parameter(torch.ones(self.inner))
        self.out_proj = Linear(self.inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.m
        bsz, seq, _ = x.shape
        z, xbc, dt = self.in_proj(x).split([self.inner, self.conv_dim, m.num_heads], dim=-1)
        xbc = F.conv1d(
            xbc.transpose(1, 2), self.conv_weight, self.conv_bias, padding=m.conv_kernel - 1, groups=self.conv_dim
        )
        xbc = F.silu(xbc[..., :seq].transpose(1, 2))
        gn = m.num_groups * m.state_size
        xs, bm, cm = xbc.split([self.inner, gn, gn], dim=-1)
        xs = xs.reshape(bsz, seq, m.num_heads, m.head_dim)
        dt = F.softplus(dt + self.dt_bias)
        a = -torch.exp(self.A_log.float())
        # The scan's cumulative decays run in fp32 whatever the model dtype (a no-op in fp32).
        y = ssd_scan(
            xs.float(),
            dt.float(),
            a,
            bm.reshape(bsz, seq, m.num_groups, m.state_size).float(),
            cm.reshape(bsz, seq, m.num_groups, m.state_size).float(),
        ).to(x.dtype)
        y = (y + xs * self.D.unsqueeze(-1)).reshape(bsz, seq, self.inner)
        g = (y * F.silu(z)).reshape(bsz, seq, m.num_groups, -1).float()
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.out_proj(g.reshape(bsz, seq, self.inner).to(x.dtype) * self.norm_weight)


# ---------------------------------------------------------------- layers


class EmbeddingLayer(nn.Module):
    kind = "embedding"
    tied_copy_names: tuple[str, ...] = ()
    # set by `tensorparallel.shard_layer`: `weight` holds rows [vocab_lo, vocab_hi)
    tp_group: dist.ProcessGroup | None = None
    vocab_lo = 0

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(model.vocab_size, model.hidden_size))
        rows = model.max_position_embeddings
        self.position_weight = nn.Parameter(torch.empty(rows, model.hidden_size)) if rows else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.tp_group is None:
            x = embedding(ids, self.weight)
        else:  # vocabulary-parallel: look up the rows this rank holds, zeros elsewhere, sum over tp
            inside = (ids >= self.vocab_lo) & (ids < self.vocab_lo + self.weight.shape[0])
            local = torch.where(inside, ids - self.vocab_lo, 0)
            x = reduce_from_tp(
                embedding(local, self.weight) * inside.unsqueeze(-1).to(self.weight.dtype), self.tp_group
            )
        if self.position_weight is not None:
            rows, seq = self.position_weight.shape[0], ids.shape[-1]
            if seq > rows:
                raise ValueError(f"a sequence of {seq} tokens is longer than the model's {rows} learned positions")
            x = x + self.position_weight[:seq]
        return x


class Block(nn.Module):
    """Any decoder-side layer kind: an ordered list of (norm, mixer) residual sub-blocks."""

    tied_copy_names: tuple[str, ...] = ()

    def __init__(self, model: ModelSpec, layer: LayerSpec) -> None:
        super().__init__()
        self.kind = layer.kind
        h = model.hidden_size
        self.parts = nn.ModuleList()
        if layer.mamba is not None:
            self.parts.append(nn.ModuleDict({"norm": make_norm(model.norm, h), "mixer": Mamba2(h, layer.mamba)}))
        if layer.attention is not None:
            att = (
                GqaAttention(h, layer.attention, model.position_encoding)
                if layer.attention.type == "gqa"
                else MlaAttention(h, layer.attention)
            )
            self.parts.append(nn.ModuleDict({"norm": make_norm(model.norm, h), "mixer": att}))
        if layer.mlp is not None:
            mlp = Mlp(h, layer.mlp.activation, layer.mlp.intermediate_size)
            self.parts.append(nn.ModuleDict({"norm": make_norm(model.norm, h), "mixer": mlp}))
        if layer.moe is not None:
            self.parts.append(nn.ModuleDict({"norm": make_norm(model.norm, h), "mixer": Moe(h, layer.moe)}))

    recompute_full = False  # set by `set_recompute(layer, "full")`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute_full and torch.is_grad_enabled():
            return recomputed(self._forward, (x,), list(self.parameters()))
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.sub_blocks():
            x = x + part["mixer"](part["norm"](x))
        return x

    def sub_blocks(self) -> list[nn.ModuleDict]:
        """The (norm, mixer) residual sub-blocks, in order."""
        return cast(list[nn.ModuleDict], list(self.parts))


class HeadLayer(nn.Module):
    """Final norm + LM head + mean cross-entropy. `lm_weight` is a tied copy when tying."""

    kind = "head"
    # set by `tensorparallel.shard_layer`: `lm_weight` holds rows [vocab_lo, ...)
    tp_group: dist.ProcessGroup | None = None
    vocab_lo = 0

    def __init__(self, model: ModelSpec) -> None:
        super().__init__()
        self.norm = make_norm(model.norm, model.hidden_size)
        self.lm_weight = nn.Parameter(torch.empty(model.vocab_size, model.hidden_size))
        self.tied = model.tie_word_embeddings
        self.tied_copy_names = ("lm_weight",) if self.tied else ()

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.tp_group is None:
            logits = linear(self.norm(x), self.lm_weight)
            return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        logits = linear(copy_to_tp(self.norm(x), self.tp_group), self.lm_weight).float()
        lo = self.vocab_lo
        lse, tgt = vocab_parallel_lse_target(logits, labels, lo, lo + self.lm_weight.shape[0], self.tp_group)
        return (lse - tgt).mean()


class HeadChunkLayer(nn.Module):
    """Chunk c of k of a head split into vocabulary slices; scores vocabulary [lo, hi).

    Input: chunk 0 the hidden state x [b, s, h] (normed here: y = norm(x)); chunk c > 0 the
    packed tensor of chunk c-1, unpacked into y, lse_prev, tgt_prev. Then, in fp32:
    logits = y @ W^T (`wgrad.linear`, so I/W split works), lse = logsumexp(logits),
    tgt = logits[label - lo] where lo <= label < hi, else 0, combined with the previous
    chunks' as lse = logaddexp(lse_prev, lse), tgt = tgt_prev + tgt. The last chunk returns
    mean(lse - tgt), the unsplit head's mean cross-entropy; the others return
    cat(y, lse, tgt) [b, s, h + 2] in float32 whatever the model dtype (y's cast to fp32 and
    back is exact). Autograd through the chain gives the unsplit head's gradients: the identity
    path of y carries every later chunk's input gradient back to the norm.
    Parameters: `norm.*` (chunk 0 only) and `lm_weight` [hi - lo, h], as `cost.params` counts.
    """

    kind = "head"
    tied_copy_names: tuple[str, ...] = ()
    # set by `tensorparallel.shard_layer`: `lm_weight` holds rows [vocab_lo, ...) of [lo, hi)
    tp_group: dist.ProcessGroup | None = None
    vocab_lo = 0

    def __init__(self, model: ModelSpec, chunk: int, num_chunks: int, vocab_range: tuple[int, int]) -> None:
        super().__init__()
        if model.tie_word_embeddings:
            raise ValueError("a head split into vocabulary chunks needs untied embeddings")
        self.chunk, self.num_chunks = chunk, num_chunks
        self.first, self.last = chunk == 0, chunk == num_chunks - 1
        self.lo, self.hi = vocab_range
        self.hidden = model.hidden_size
        self.norm = make_norm(model.norm, model.hidden_size) if self.first else None
        self.lm_weight = nn.Parameter(torch.empty(self.hi - self.lo, model.hidden_size))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.hidden
        if self.first:
            y = cast(nn.Module, self.norm)(x)  # chunk 0 holds the final norm
        else:
            y = x[..., :h].to(self.lm_weight.dtype)
            lse_prev, tgt_prev = x[..., h], x[..., h + 1]
        if self.tp_group is None:
            logits = linear(y, self.lm_weight).float()
            lse = torch.logsumexp(logits, dim=-1)
            inside = (labels >= self.lo) & (labels < self.hi)
            idx = (labels - self.lo).clamp(0, self.hi - self.lo - 1)
            tgt = torch.where(inside, logits.gather(-1, idx.unsqueeze(-1)).squeeze(-1), 0.0)
        else:  # this rank's rows of the chunk; lse and tgt come out for the whole chunk, on every tp rank
            logits = linear(copy_to_tp(y, self.tp_group), self.lm_weight).float()
            lo = self.vocab_lo
            lse, tgt = vocab_parallel_lse_target(logits, labels, lo, lo + self.lm_weight.shape[0], self.tp_group)
        if not self.first:
            lse = torch.logaddexp(lse_prev, lse)
            tgt = tgt_prev + tgt
        if self.last:
            return (lse - tgt).mean()
        return torch.cat([y.float(), lse.unsqueeze(-1), tgt.unsqueeze(-1)], dim=-1)


def is_head_chunk(model: ModelSpec, index: int) -> bool:
    """Whether layer `index` is one chunk of a head split into vocabulary chunks (k > 1)."""
    return model.layers[index].kind == "head" and model.num_head_chunks > 1


def boundary_spec(
    model: ModelSpec, index: int, micro_batch_size: int, seq_len: int, dtype: torch.dtype
) -> tuple[tuple[int, ...], torch.dtype]:
    """(shape, dtype) of what layer `index` (not the last layer) hands to layer `index + 1`.

    [b, s, h] in the model dtype, except after a non-final head chunk: [b, s, h + 2] float32.
    """
    h = model.hidden_size
    if is_head_chunk(model, index) and index < model.num_layers - 1:
        return (micro_batch_size, seq_len, h + 2), torch.float32
    return (micro_batch_size, seq_len, h), dtype


# ---------------------------------------------------------------- construction


def _embedding_init(model: ModelSpec, seed: int) -> torch.Tensor:
    g = layer_generator(seed, 0)
    return torch.empty(model.vocab_size, model.hidden_size).normal_(0.0, INIT_STD, generator=g)


@torch.no_grad()
def _init_params(module: nn.Module, g: torch.Generator) -> None:
    for sub in module.modules():
        if isinstance(sub, Linear):
            sub.weight.normal_(0.0, INIT_STD, generator=g)
            if sub.bias is not None:
                sub.bias.zero_()
        elif isinstance(sub, (RMSNorm, nn.LayerNorm)):
            _reset_norm(sub)
        elif isinstance(sub, Mamba2):
            k = sub.m.conv_kernel
            sub.conv_weight.uniform_(-1.0 / math.sqrt(k), 1.0 / math.sqrt(k), generator=g)
            sub.conv_bias.zero_()
            sub.A_log.copy_(torch.empty(sub.m.num_heads).uniform_(1.0, 16.0, generator=g).log())
            dt = torch.empty(sub.m.num_heads).uniform_(math.log(1e-3), math.log(1e-1), generator=g).exp()
            sub.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
            sub.D.fill_(1.0)
            sub.norm_weight.fill_(1.0)


def _reset_norm(norm: nn.Module) -> None:
    """Weight 1 and, where the norm has one, bias 0."""
    cast(torch.Tensor, norm.weight).fill_(1.0)
    bias = getattr(norm, "bias", None)
    if bias is not None:
        bias.zero_()


def build_layer(model: ModelSpec, index: int, *, seed: int = 0) -> nn.Module:
    """Layer `index` of `model`, initialized from (seed, index) alone (fp32, CPU)."""
    spec = model.layers[index]
    if spec.kind == "embedding":
        emb = EmbeddingLayer(model)
        with torch.no_grad():
            emb.weight.copy_(_embedding_init(model, seed))
            if emb.position_weight is not None:  # drawn after the token table, which a tied head copies
                g = layer_generator(seed, model.num_layers)
                emb.position_weight.normal_(0.0, INIT_STD, generator=g)
        return emb
    if spec.kind == "head" and model.num_head_chunks > 1:
        k = model.num_head_chunks
        span = cast(tuple[int, int], spec.vocab_range)  # every chunk of a split head has one
        chunk = HeadChunkLayer(model, index - (model.num_layers - k), k, span)
        with torch.no_grad():
            chunk.lm_weight.normal_(0.0, INIT_STD, generator=layer_generator(seed, index))
            if chunk.norm is not None:
                _reset_norm(chunk.norm)
        return chunk
    if spec.kind == "head":
        head = HeadLayer(model)
        with torch.no_grad():
            if model.tie_word_embeddings:
                head.lm_weight.copy_(_embedding_init(model, seed))
            else:
                g = layer_generator(seed, index)
                head.lm_weight.normal_(0.0, INIT_STD, generator=g)
            _reset_norm(head.norm)
        return head
    layer = Block(model, spec)
    _init_params(layer, layer_generator(seed, index))
    return layer


RECOMPUTE_MODES = ("none", "selective", "full")


def set_recompute(layer: nn.Module, mode: str) -> nn.Module:
    """Make a built layer recompute in its backward (see the module docstring); returns it.

    "full": a decoder block keeps only its input and reruns its whole forward before its backward;
    "selective": every attention core of the block (GQA, MLA) keeps q, k, v only and reruns the
    core; "none": everything is kept. The embedding and the head never recompute (as in
    Megatron-LM, recomputation applies to the decoder blocks), and a block without attention has
    nothing for selective recompute to drop.
    """
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"recompute mode {mode!r}: use one of {', '.join(RECOMPUTE_MODES)}")
    if not isinstance(layer, Block):
        return layer
    layer.recompute_full = mode == "full"
    for part in layer.sub_blocks():
        mixer = part["mixer"]
        if isinstance(mixer, _Attention):
            mixer.recompute_core = mode == "selective"
    return layer


def build_model(model: ModelSpec, *, seed: int = 0) -> nn.ModuleDict:
    """The whole model in one process, layers keyed by index; a tied head uses the embedding's parameter."""
    layers = nn.ModuleDict({str(i): build_layer(model, i, seed=seed) for i in range(model.num_layers)})
    if model.tie_word_embeddings:
        layers[str(model.num_layers - 1)].lm_weight = layers["0"].weight
    return layers


def own_param_count(layer: nn.Module) -> int:
    """Parameters the layer owns (a tied head's copy of the embedding excluded), as `cost.params` counts."""
    skip = set(getattr(layer, "tied_copy_names", ()))
    return sum(p.numel() for name, p in layer.named_parameters() if name not in skip)
