"""Analytic per-layer costs: FLOPs and bytes of one layer -> F / I / W seconds and memory.

Data flow: a `LayerSpec` of a `ModelSpec` + the `TrainingConfig` -> `layer_work` (what one
tensor-parallel rank computes, moves and keeps; device independent) -> `op_seconds` on a
`DeviceTypeSpec` -> `costs.build_cost_table` puts the numbers of every layer and pipeline rank
into a `CostTable`; measured profiles (`adaptis profile`) replace the times there.
Imports only the specs and `params`: no torch, no ortools, no rich/click. Never prints.

Notation: b micro-batch size, s sequence length, T = b*s tokens, h hidden, v vocabulary,
t tensor-parallel degree, e bytes per element of the training dtype (bf16: 2).

Time of one op (F, I or W) on a device, the roofline of the DESIGN's performance model:
    sum over compute kernels of max(flops / (peak * matmul_efficiency), io_bytes / (bw * memory_efficiency))
  + bytes of memory-bound ops / (bw * memory_efficiency)
  + tensor-parallel collectives (ring over the intra-node link)
Compute kernels are the GEMMs (one per weight matrix, 2*m*n*k FLOPs, reading A and B and
writing C), the attention core (flash attention: QK^T and PV) and the Mamba-2 SSD scan.
Memory-bound ops are norms, activation functions, residual adds, rotary, the MoE token
permutation, the Mamba conv1d and gated norm, the embedding gather / scatter-add, the
cross-entropy over the logits and the fp32 gradient accumulation after each weight GEMM.

FLOPs by op (per GEMM y = x W, x: m x k, W: k x n):
- F: the forward GEMMs + attention core / SSD scan forward.
- I: each GEMM's input-gradient GEMM (same FLOPs) + attention core backward (2.5x its forward:
  flash attention's backward runs 5 matmuls against the forward's 2, recomputing QK^T; Dao,
  FlashAttention-2, 2023) + SSD scan backward (2x its forward) + the memory-bound backward ops.
  With `recompute`, I also runs the whole F again.
- W: each GEMM's weight-gradient GEMM (same FLOPs) + 8 bytes per parameter of fp32
  gradient accumulation (Megatron's gradient-accumulation fusion reads and writes main_grad).
- Attention core, causal: query i attends to min(i + 1, window) keys, so F does
  4 * b * heads * head_dim * sum_i min(i + 1, window) FLOPs (about half of 4*b*s^2*heads*head_dim
  for global attention). MLA uses (qk_nope + qk_rope) dims for QK^T and v_head_dim for PV.
  The training-FLOPs reference this gives: 6*N + 6*L*h*s per token, i.e. the usual
  12*L*h*s term (PaLM App. B; Narayanan et al. 2021) is for full, non-causal attention and
  halves with a causal mask; ours is slightly above it because of the 2.5x flash backward.
- MoE: the router GEMM (h x experts) on every token, each routed expert's GEMMs on
  T*top_k/experts tokens (balanced routing) for all experts (so FLOPs count the top-k active
  experts and the GEMMs' weight reads count all experts), the shared experts on every token.
- Mamba-2 (Dao & Gu 2024, SSD with chunk length Q = min(256, s), the mamba_ssm default):
  in_proj and out_proj are GEMMs; the chunked scan does, per token,
  2*Q*groups*N (C B^T inside a chunk) + 2*Q*d_inner (that matrix times x) + 2*N*d_inner
  (chunk states) + 2*N*d_inner (state -> output) FLOPs: linear in s.
- Head: final norm, the logits GEMM (2*b*s*h*v), then an unfused cross-entropy over the
  b*s*v logits: upcast to fp32 and log-softmax in F (e + 20 bytes per logit), the softmax
  gradient and downcast in I (20 + e bytes per logit).
- Embedding: F is a gather (memory-bound), I is nothing (token ids have no gradient), W
  builds the dense table gradient (zero-fill, scatter-add) and accumulates it into the fp32
  buffer: v*h*(2e + 8) + 3*T*h*e bytes, as torch's dense embedding backward does.
- Recompute (`training.recompute`, full recompute of each block as Megatron does it) applies to
  the decoder blocks, not to the embedding or the head, whose activations stay.

Tensor parallelism (Megatron-LM with sequence parallelism): FLOPs, memory-bound bytes,
activations and parameters divide by t; each attention / MLP / MoE / Mamba sub-block does an
all-gather before and a reduce-scatter after it in F and again in I (= one all-reduce of
T*h*e bytes each way); the vocabulary-parallel embedding reduce-scatters its output, the head
all-gathers its input (plus 3 tiny all-reduces for the cross-entropy) and reduce-scatters the
input gradient. Ring collectives over the intra-node link: an all-gather or reduce-scatter of
n bytes takes (t-1) * (latency + n / (t * bandwidth)), an all-reduce twice that. Not
overlapped with compute. MoE experts are split by t like the dense MLP (no expert parallelism).

Memory, per tensor-parallel rank:
- `static_bytes`: held parameters / t * (e weights + 4 fp32 gradient buffer + 12 Adam m, v and
  fp32 master) = 18 B/param in bf16 at dp 1; the 12 B divide by dp at ZeRO >= 1, the gradient
  buffer at ZeRO >= 2, the weights at ZeRO 3; fp32 training needs no master copy (16 B/param).
  The head holds the vocabulary matrix even when embeddings are tied (the last stage keeps its
  own copy, as Megatron does); `params.py` counts it once for the model card.
- `act_bytes`: what autograd saves from F until I/B for one micro-batch, tensor by tensor,
  with flash attention (no s^2 term), no dropout: per pre-norm sub-block the norm input and
  output; attention q, k, v, output and the fp32 log-sum-exp; MLP pre-activation(s) and the
  activation output; MoE router probabilities, permuted tokens, every top-k expert's
  intermediates and outputs; Mamba the in_proj output, SSD output and gated-norm output. For a
  GPT block (MHA, GeLU 4h) this is 32*b*s*h bytes in bf16: Korthikanti et al.'s 34*b*s*h less
  the two dropout masks. The head keeps the fp32 logits (b*s*v*4) and their bf16 copy.
  With `recompute` a block keeps only its input (b*s*h*e / t).
- `act_w_bytes`: the part W still needs after I: the inputs of the weight GEMMs (and the
  conv1d input for Mamba, the token ids for the embedding). The output gradients W also reads
  are produced by I and are not counted. With recompute, the layer input (= act_bytes).
- `out_bytes`: what crosses a stage boundary after the layer: b*s*h*e / t (sequence-parallel
  activations, as Megatron sends them); 0 after the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .params import layer_params
from .spec.hardware import DeviceTypeSpec, LinkSpec
from .spec.model import AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec
from .spec.training import TrainingConfig

DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
FLASH_BACKWARD_FACTOR = 2.5  # flash attention backward FLOPs / forward FLOPs (FlashAttention-2)
SCAN_BACKWARD_FACTOR = 2.0  # Mamba-2 SSD scan backward FLOPs / forward FLOPs
SSD_CHUNK = 256  # mamba_ssm's default chunk_size for the chunked SSD scan
GRAD_ACCUM_BYTES_PER_PARAM = 8.0  # fp32 main_grad read + write per weight-gradient GEMM
_FP32 = 4
_INT64 = 8

Op = Literal["F", "I", "W"]
CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter"]


@dataclass(frozen=True)
class Kernel:
    """A compute kernel timed by the roofline: max(flops / compute rate, io_bytes / bandwidth)."""

    flops: float
    io_bytes: float
    what: str = ""


@dataclass(frozen=True)
class Collective:
    """A tensor-parallel collective over `nbytes` (the full, unsharded tensor)."""

    kind: CollectiveKind
    nbytes: float


@dataclass(frozen=True)
class OpWork:
    """What one op (F, I or W) of one layer computes and moves on one tensor-parallel rank."""

    kernels: tuple[Kernel, ...] = ()
    mem_bytes: float = 0.0
    collectives: tuple[Collective, ...] = ()

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)


@dataclass(frozen=True)
class LayerWork:
    """Device-independent work and memory of one layer for one training config, per TP rank.

    `f`, `i`, `w` exclude recomputation (model FLOPs); `op_seconds` adds F to I when
    `recompute` is set. Bytes are per micro-batch (activations) or per rank (static).
    """

    kind: str
    f: OpWork
    i: OpWork
    w: OpWork
    act_bytes: float
    act_w_bytes: float
    static_bytes: float
    out_bytes: float
    params_held: int
    recompute: bool = False
    tp: int = 1

    def op(self, op: Op) -> OpWork:
        return {"F": self.f, "I": self.i, "W": self.w}[op]


@dataclass(frozen=True)
class LayerCost:
    """Seconds per op on one device type, and bytes, of one layer (see the module docstring)."""

    f_s: float
    i_s: float
    w_s: float
    act_bytes: float
    act_w_bytes: float
    static_bytes: float
    out_bytes: float


@dataclass
class _Builder:
    """Accumulates one layer's per-rank work; sub-block helpers append to it."""

    e: int
    t: int
    f_kernels: list[Kernel] = field(default_factory=list)
    i_kernels: list[Kernel] = field(default_factory=list)
    w_kernels: list[Kernel] = field(default_factory=list)
    f_bytes: float = 0.0
    i_bytes: float = 0.0
    w_bytes: float = 0.0
    f_coll: list[Collective] = field(default_factory=list)
    i_coll: list[Collective] = field(default_factory=list)
    act: float = 0.0
    act_w: float = 0.0

    def gemm(self, m: float, n: float, k: float, what: str, count: int = 1, shard: Literal["n", "k"] = "n") -> None:
        """A weight GEMM [m, k] x [k, n] (full sizes) split over t along n (column) or k (row).

        F runs it, I its input-gradient GEMM, W its weight-gradient GEMM: same FLOPs and operands.
        """
        n_r, k_r = (n / self.t, k) if shard == "n" else (n, k / self.t)
        flops = 2.0 * m * n_r * k_r * count
        io = (m * k_r + k_r * n_r + m * n_r) * self.e * count
        kernel = Kernel(flops, io, what)
        self.f_kernels.append(kernel)
        self.i_kernels.append(kernel)
        self.w_kernels.append(kernel)

    def core(self, flops: float, io_bytes: float, backward_factor: float, what: str) -> None:
        """A non-weight compute kernel (attention core, SSD scan), full sizes; backward in I."""
        t = self.t
        self.f_kernels.append(Kernel(flops / t, io_bytes / t, what))
        self.i_kernels.append(Kernel(backward_factor * flops / t, 2.0 * io_bytes / t, what + " backward"))

    def mem(self, f: float = 0.0, i: float = 0.0, w: float = 0.0) -> None:
        """Memory-bound bytes (full sizes), divided over t."""
        self.f_bytes += f / self.t
        self.i_bytes += i / self.t
        self.w_bytes += w / self.t

    def keep(self, act: float, act_w: float = 0.0) -> None:
        """Saved activation bytes (full sizes), divided over t; `act_w` of them live until W."""
        self.act += act / self.t
        self.act_w += act_w / self.t

    def tp_block(self, nbytes: float) -> None:
        """Sequence-parallel sub-block: all-gather in, reduce-scatter out, in F and in I."""
        if self.t > 1:
            pair = [Collective("all_gather", nbytes), Collective("reduce_scatter", nbytes)]
            self.f_coll += pair
            self.i_coll += pair


def causal_keys(s: int, window: int | None = None) -> float:
    """sum over queries i < s of the keys it attends to: min(i + 1, window)."""
    w = min(window or s, s)
    return w * (w + 1) / 2.0 + (s - w) * float(w)


def _norm_block(bld: _Builder, tokens: float, h: int) -> None:
    """Pre-norm of a residual sub-block: norm F/I, residual add F and gradient add I, saved input + output."""
    e = bld.e
    bld.mem(f=2 * tokens * h * e + 3 * tokens * h * e, i=3 * tokens * h * e + 3 * tokens * h * e)
    bld.keep(act=2 * tokens * h * e + tokens * _FP32)


def _attention(bld: _Builder, a: AttentionSpec, b: int, s: int, h: int) -> None:
    e, T = bld.e, float(b * s)
    _norm_block(bld, T, h)
    keys = b * causal_keys(s, a.sliding_window)
    nh = a.num_heads
    if a.type == "gqa":
        d, nkv = a.head_dim, a.num_kv_heads
        q_dim, kv_dim, v_dim, rope_dim = nh * d, nkv * d, nh * d, (nh + nkv) * d
        bld.gemm(T, q_dim + 2 * kv_dim, h, "qkv")
        bld.gemm(T, h, nh * d, "o_proj", shard="k")
        core_flops = 2 * keys * nh * d + 2 * keys * nh * d
        qkv_saved = q_dim + 2 * kv_dim
        gemm_inputs = h + nh * d
        extra_saved = 0.0
        if a.qk_norm:
            bld.mem(f=2 * T * rope_dim * e, i=3 * T * rope_dim * e)
            extra_saved += T * rope_dim * e
        if a.bias:
            bld.mem(f=2 * T * qkv_saved * e, i=T * qkv_saved * e)
    else:
        assert a.kv_lora_rank and a.qk_nope_head_dim and a.qk_rope_head_dim and a.v_head_dim
        nope, rope, vd, kvl = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank
        qk = nope + rope
        gemm_inputs = h + kvl + nh * vd
        extra_saved = 0.0
        if a.q_lora_rank:
            ql = a.q_lora_rank
            bld.gemm(T, ql, h, "q_a")
            bld.gemm(T, nh * qk, ql, "q_b")
            bld.mem(f=2 * T * ql * e, i=3 * T * ql * e)
            extra_saved += 2 * T * ql * e
            gemm_inputs += ql
        else:
            bld.gemm(T, nh * qk, h, "q")
        bld.gemm(T, kvl + rope, h, "kv_a")
        bld.gemm(T, nh * (nope + vd), kvl, "kv_b")
        bld.gemm(T, h, nh * vd, "o_proj", shard="k")
        bld.mem(f=2 * T * kvl * e, i=3 * T * kvl * e)
        extra_saved += T * (kvl + rope) * e + T * kvl * e
        core_flops = 2 * keys * nh * qk + 2 * keys * nh * vd
        q_dim, v_dim, rope_dim = nh * qk, nh * vd, (nh + 1) * rope
        qkv_saved = 2 * nh * qk + nh * vd
    bld.mem(f=2 * T * rope_dim * e, i=2 * T * rope_dim * e)
    flash_io = T * (qkv_saved + v_dim) * e
    bld.core(core_flops, flash_io, FLASH_BACKWARD_FACTOR, "attention core")
    # q, k, v after rotary + the flash output (shared with o_proj's input) + fp32 log-sum-exp
    bld.keep(act=T * (qkv_saved + v_dim) * e + T * nh * _FP32 + extra_saved, act_w=T * gemm_inputs * e)
    bld.tp_block(T * h * e)


def _mlp(bld: _Builder, m: MlpSpec, b: int, s: int, h: int) -> None:
    e, T, i = bld.e, float(b * s), m.intermediate_size
    _norm_block(bld, T, h)
    gated = m.activation in ("swiglu", "geglu")
    bld.gemm(T, (2 if gated else 1) * i, h, "mlp_in")
    bld.gemm(T, h, i, "mlp_out", shard="k")
    if gated:
        bld.mem(f=3 * T * i * e, i=5 * T * i * e)
        bld.keep(act=3 * T * i * e, act_w=T * (h + i) * e)
    else:
        bld.mem(f=2 * T * i * e, i=3 * T * i * e)
        bld.keep(act=2 * T * i * e, act_w=T * (h + i) * e)
    bld.tp_block(T * h * e)


def _moe(bld: _Builder, m: MoeSpec, b: int, s: int, h: int) -> None:
    e, T = bld.e, float(b * s)
    E, k, ie = m.num_experts, m.top_k, m.expert_intermediate_size
    _norm_block(bld, T, h)
    gated = m.activation in ("swiglu", "geglu")
    g = 2 if gated else 1
    routed_tokens = T * k
    per_expert = routed_tokens / E  # balanced routing
    bld.gemm(T, E, h, "router")
    bld.gemm(per_expert, g * ie, h, "expert_in", count=E)
    bld.gemm(per_expert, h, ie, "expert_out", count=E, shard="k")
    act_f, act_i = (3, 5) if gated else (2, 3)
    bld.mem(
        # router softmax + top-k (fp32), permute, expert activations, unpermute + weighted combine
        f=3 * T * E * _FP32 + 2 * routed_tokens * h * e + act_f * routed_tokens * ie * e + (routed_tokens + T) * h * e,
        i=3 * T * E * _FP32
        + 2 * routed_tokens * h * e
        + act_i * routed_tokens * ie * e
        + (T + 2 * routed_tokens) * h * e,
    )
    saved = T * E * _FP32 + T * k * _INT64 + routed_tokens * h * e + (g + 1) * routed_tokens * ie * e
    saved += routed_tokens * h * e  # expert outputs, for the gradient of the routing weights
    saved_w = routed_tokens * (h + ie) * e
    if m.num_shared_experts:
        si = m.num_shared_experts * (m.shared_intermediate_size or ie)
        bld.gemm(T, g * si, h, "shared_in")
        bld.gemm(T, h, si, "shared_out", shard="k")
        bld.mem(f=act_f * T * si * e + 3 * T * h * e, i=act_i * T * si * e)
        saved += (g + 1) * T * si * e
        saved_w += T * si * e
    bld.keep(act=saved, act_w=T * h * e + saved_w)  # + the router / shared experts' input (norm output)
    bld.tp_block(T * h * e)


def _mamba(bld: _Builder, m: MambaSpec, b: int, s: int, h: int) -> None:
    e, T = bld.e, float(b * s)
    _norm_block(bld, T, h)
    nh, p, N, g = m.num_heads, m.head_dim, m.state_size, m.num_groups
    di = nh * p
    conv_dim = di + 2 * g * N
    zxbcdt = 2 * di + 2 * g * N + nh
    bld.gemm(T, zxbcdt, h, "in_proj")
    bld.gemm(T, h, di, "out_proj", shard="k")
    q = min(SSD_CHUNK, s)
    scan_flops = T * (2.0 * q * g * N + 2.0 * q * di + 4.0 * N * di)
    scan_io = T * (conv_dim + nh + di) * e
    bld.core(scan_flops, scan_io, SCAN_BACKWARD_FACTOR, "ssd scan")
    # conv1d + SiLU, gated RMSNorm; W: conv weight gradient reads its input and output gradient
    bld.mem(f=2 * T * conv_dim * e + 3 * T * di * e, i=3 * T * conv_dim * e + 5 * T * di * e, w=2 * T * conv_dim * e)
    saved = T * zxbcdt * e + 2 * T * di * e + T * nh * _FP32
    bld.keep(act=saved, act_w=T * (h + di + conv_dim) * e)
    bld.tp_block(T * h * e)


def _embedding(bld: _Builder, model: ModelSpec, b: int, s: int) -> None:
    e, T, h, v, t = bld.e, float(b * s), model.hidden_size, model.vocab_size, bld.t
    # vocab-parallel: every rank gathers (masked) rows for all tokens, then reduce-scatters
    bld.f_bytes += 2 * T * h * e + T * _INT64
    # dense table gradient: zero-fill + read back for accumulation (the fp32 read/write is added per param)
    bld.w_bytes += v / t * h * 2 * e + 3 * T * h * e
    bld.act += T * _INT64
    bld.act_w += T * _INT64
    if t > 1:
        bld.f_coll.append(Collective("reduce_scatter", T * h * e))


def _head(bld: _Builder, model: ModelSpec, b: int, s: int) -> None:
    e, T, h, v, t = bld.e, float(b * s), model.hidden_size, model.vocab_size, bld.t
    bld.mem(f=2 * T * h * e, i=3 * T * h * e)
    bld.keep(act=2 * T * h * e + T * _FP32, act_w=T * h * e)
    bld.gemm(T, v, h, "logits")
    # unfused cross-entropy over the vocab-parallel logits
    bld.mem(f=T * v * (e + 20), i=T * v * (20 + e))
    bld.keep(act=T * v * (_FP32 + e))
    if t > 1:
        bld.f_coll += [Collective("all_gather", T * h * e)] + [Collective("all_reduce", T * _FP32)] * 3
        bld.i_coll.append(Collective("reduce_scatter", T * h * e))


def bytes_per_param(training: TrainingConfig) -> float:
    """Weights + fp32 gradient buffer + Adam state, per parameter, after ZeRO sharding over dp."""
    weights = float(DTYPE_BYTES[training.dtype])
    grads = 4.0
    optimizer = 8.0 if training.dtype == "fp32" else 12.0
    dp = training.dp
    if training.zero >= 1:
        optimizer /= dp
    if training.zero >= 2:
        grads /= dp
    if training.zero >= 3:
        weights /= dp
    return weights + grads + optimizer


def held_params(model: ModelSpec, layer: LayerSpec) -> int:
    """Parameters the layer's device keeps (the head keeps the vocabulary matrix even if tied)."""
    if layer.kind == "head" and model.tie_word_embeddings:
        return layer_params(model, layer).total + model.vocab_size * model.hidden_size
    return layer_params(model, layer).total


def layer_work(model: ModelSpec, layer: LayerSpec, training: TrainingConfig) -> LayerWork:
    """FLOPs, bytes, collectives and memory of one layer on one tensor-parallel rank."""
    e, t = DTYPE_BYTES[training.dtype], training.tp
    b, s, h = training.micro_batch_size, training.seq_len, model.hidden_size
    T = float(b * s)
    bld = _Builder(e=e, t=t)
    if layer.kind == "embedding":
        _embedding(bld, model, b, s)
    elif layer.kind == "head":
        _head(bld, model, b, s)
    else:
        if layer.mamba is not None:
            _mamba(bld, layer.mamba, b, s, h)
        if layer.attention is not None:
            _attention(bld, layer.attention, b, s, h)
        if layer.mlp is not None:
            _mlp(bld, layer.mlp, b, s, h)
        if layer.moe is not None:
            _moe(bld, layer.moe, b, s, h)
    params = held_params(model, layer)
    bld.w_bytes += GRAD_ACCUM_BYTES_PER_PARAM * params / t
    act, act_w = bld.act, bld.act_w
    recompute = training.recompute and layer.kind not in ("embedding", "head")
    if recompute:
        act = act_w = T * h * e / t
    return LayerWork(
        kind=layer.kind,
        f=OpWork(tuple(bld.f_kernels), bld.f_bytes, tuple(bld.f_coll)),
        i=OpWork(tuple(bld.i_kernels), bld.i_bytes, tuple(bld.i_coll)),
        w=OpWork(tuple(bld.w_kernels), bld.w_bytes, ()),
        act_bytes=act,
        act_w_bytes=min(act_w, act),
        static_bytes=params / t * bytes_per_param(training),
        out_bytes=0.0 if layer.kind == "head" else T * h * e / t,
        params_held=params,
        recompute=recompute,
        tp=t,
    )


def collective_seconds(c: Collective, t: int, link: LinkSpec) -> float:
    """Ring all-gather / reduce-scatter: (t-1) steps of n/t bytes; all-reduce: both."""
    if t <= 1:
        return 0.0
    one = (t - 1) * (link.latency_s + c.nbytes / t / (link.bandwidth_gbps * 1e9))
    return 2.0 * one if c.kind == "all_reduce" else one


def work_seconds(work: OpWork, device: DeviceTypeSpec, t: int = 1, link: LinkSpec | None = None) -> float:
    """Roofline time of one op's work on one device (+ its TP collectives over `link`)."""
    rate = device.peak_bf16_tflops * 1e12 * device.matmul_efficiency
    bw = device.hbm_bandwidth_gbps * 1e9 * device.memory_efficiency
    seconds = sum(max(k.flops / rate, k.io_bytes / bw) for k in work.kernels) + work.mem_bytes / bw
    if work.collectives and t > 1:
        if link is None:
            raise ValueError("tensor parallelism needs the intra-node link to time its collectives")
        seconds += sum(collective_seconds(c, t, link) for c in work.collectives)
    return seconds


def op_seconds(work: LayerWork, device: DeviceTypeSpec, link: LinkSpec | None = None) -> tuple[float, float, float]:
    """(F, I, W) seconds of a layer on a device; recompute adds one F to I."""
    f = work_seconds(work.f, device, work.tp, link)
    i = work_seconds(work.i, device, work.tp, link)
    w = work_seconds(work.w, device, work.tp, link)
    if work.recompute:
        i += f
    return f, i, w


def layer_cost(
    model: ModelSpec,
    layer: LayerSpec,
    training: TrainingConfig,
    device: DeviceTypeSpec,
    link: LinkSpec | None = None,
) -> LayerCost:
    """Times and bytes of one layer on one device type (`link`: the intra-node link, for TP)."""
    work = layer_work(model, layer, training)
    f, i, w = op_seconds(work, device, link)
    return LayerCost(f, i, w, work.act_bytes, work.act_w_bytes, work.static_bytes, work.out_bytes)


__all__ = [
    "DTYPE_BYTES",
    "Collective",
    "Kernel",
    "LayerCost",
    "LayerWork",
    "OpWork",
    "bytes_per_param",
    "causal_keys",
    "collective_seconds",
    "held_params",
    "layer_cost",
    "layer_work",
    "op_seconds",
    "work_seconds",
]
