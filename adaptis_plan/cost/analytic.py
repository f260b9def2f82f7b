"""Analytic per-layer costs: FLOPs and bytes of one layer -> F / I / W seconds and memory.

Data flow: a `LayerSpec` of a `ModelSpec` + the `TrainingConfig` -> `layer_work` (what one
tensor-parallel rank computes, moves and keeps; device independent) -> `op_seconds` on a
`DeviceTypeSpec` -> `cost.table.build_cost_table` puts the numbers of every layer and pipeline rank
into a `CostTable`; measured profiles (`adaptis profile`) replace the times there.
Imports only the specs and `params`: no torch, no ortools, no rich/click. Never prints.

Notation: b micro-batch size, s sequence length, T = b*s tokens, h hidden, v vocabulary,
t tensor-parallel degree, e bytes per element of the training dtype (bf16: 2).

Time of one op (F, I or W) on a device: a roofline per kernel, refined by how real kernels
behave (the parameters are per device type, in the hardware profile, each with its rationale in
`kernel_model_source`; with all of them unset a profile gives the plain roofline):
    sum over compute kernels of max(flops / (peak * eff(kernel) * sustained_efficiency),
                                    io_bytes / (bw * memory_efficiency))
  + bytes of memory-bound ops / (bw * memory_efficiency)
  + kernel_overhead_s * kernel launches of the op + layer_overhead_s (once per op that launches any)
  + tensor-parallel collectives (ring over the intra-node link)
Compute kernels are the GEMMs (one per weight matrix, 2*m*n*k FLOPs, reading A and B and
writing C), the attention core (flash attention: QK^T and PV) and the Mamba-2 SSD scan.
Memory-bound ops are norms, activation functions, residual adds, rotary, the MoE token
permutation, the Mamba conv1d and gated norm, the embedding gather / scatter-add, the
cross-entropy over the logits and the fp32 gradient accumulation of the parameters that no
GEMM produces (norms, conv1d, the embedding table).

Efficiency of a compute kernel, eff(kernel):
- GEMM [m, k] x [k, n] (one launch; F, I and W of a weight run the same three dimensions):
  matmul_efficiency * m*n / (m*n + gemm_half_mn) * k / (k + gemm_half_k). The first factor is
  the smooth form of wave / tile quantization: a GEMM of m*n/(128*128) output tiles on S SMs
  loses half a wave on average, tiles / (tiles + S/2), so gemm_half_mn ~ S/2 * 128^2 (fewer
  tiles than SMs leave SMs idle); the second is the K loop's pipeline fill and epilogue, ~2
  k-steps of 64 per tile (NVIDIA, Matrix Multiplication Background User's Guide, "Dimension
  Quantization Effects"). It saturates at matmul_efficiency for large GEMMs, falls for the
  skinny GEMMs of small hidden sizes at high TP and for MoE experts on T*top_k/E tokens each.
- Attention core: matmul_efficiency * d / (d + attention_half_head_dim), d the head_dim (MLA:
  (qk + v) / 2, FLOP-weighted). Flash attention's softmax (exp and rescale on the special-function
  units, ~250x slower than the tensor cores on Hopper; FlashAttention-3, Shah et al. 2024) costs
  the same per score whatever d, while the matmul FLOPs per score are 4*d: small heads spend
  relatively more time in the softmax (head_dim 32-64 reaches far less of peak than 128-256).
  Forward and backward use the same efficiency. This is a FlashAttention-2-class kernel; cuDNN's
  fused flash attention (`--attention cudnn`: TransformerEngine's FusedAttention, which it prefers on
  Hopper) runs the same work `cudnn_attention_speedup` times faster (the device profile's, with its
  measurement; 1 where none is published).
- SSD scan: scan_efficiency (mamba_ssm's chunked scan is 5 Triton kernels forward and ~14
  backward, small batched matmuls and cumsums exchanging fp32 states through HBM: memory and
  latency bound), or matmul_efficiency when the profile gives none.

Kernel launches (each costs kernel_overhead_s: the CUDA launch, the ramp-up / tail of a short
kernel and the framework's host dispatch that a chain of short kernels waits for). Counts are
what Megatron-Core with TransformerEngine, sequence parallelism and mamba_ssm launch per op,
collectives apart (their latency is in the link model); F / I / W:
- every weight GEMM: 1 / 1 / 1 (its input- and weight-gradient GEMMs; the fp32 gradient
  accumulation is the weight-gradient GEMM's epilogue); MoE routed experts: E of each (one
  GEMM per expert, as Megatron's SequentialMLP and TE's GroupedLinear launch them);
- pre-norm + residual sub-block: 2 / 3 / 0 (norm, residual add; norm backward + its weight
  reduction, gradient add);
- GQA attention: rotary on q and k + a layout copy 3 / 3 / 0 (the copy alone, 1 / 1 / 0, for
  ALiBi or learned positions), flash core 1 / 3 / 0 (backward:
  dO.O preprocess, main kernel, dQ conversion); QK-norm +2 / +4; bias +1 / +1; MLA: the
  kv_a (and q_a) norm 1 / 2 each, rotary + 3 copies (split, concat q, concat k) 5 / 5;
- MLP: the activation 1 / 1 / 0;
- MoE (`MOE_LAUNCHES`): router softmax + top-k + scaling 3, aux loss 4, routing map + counts 3,
  permute 3, expert activation 1, unpermute + weighted combine 3 = 17 in F; 12 in I; shared
  experts' activation + add 2 / 1;
- Mamba-2 (`MAMBA_MEM_LAUNCHES`, `SSD_LAUNCHES`): conv1d, gated RMSNorm, 3 layout copies,
  A = -exp(A_log) 7 / 9 / 1 (W: the conv weight gradient); SSD scan 5 / 14;
- head: final norm 1 / 2, the vocab-parallel cross-entropy 14 / 5 (`CROSS_ENTROPY_LAUNCHES`);
  embedding: mask + gather 4 in F, zero-fill + sort + scatter-add + accumulate 4 in W.

Calibration (`published.py` lists every published run we compare with; tests/cost/test_published.py
holds them): per-op times of Megatron-LM on A100 (Vocabulary Parallelism, Yeung et al. 2024: a
transformer layer's F and B, the output layer's F and B) within 15%, training MFU of MPT-7B on
A100 and H100 (MosaicML llm-foundry) within 10%, and the loss computation's memory (Cut
Cross-Entropy, Wijmans et al. 2025) within 10%. The A100's matmul_efficiency and the Hopper
profiles' sustained_efficiency are fitted to those runs (each profile's calibration_source).
Against the AdaPtis paper's profiled ratios (arXiv 2509.23722, H200; `cost/paper.py` holds them):
- Head / Mamba-2 (Nemotron-H, 8.2 / 10.8 / 14.0 at 1K / 2K / 4K) within 12%: our Mamba-2 layer
  agrees with the profiled one, measured against the head, whose cost (a GEMM and the
  cross-entropy, linear in s) the Vocabulary Parallelism run confirms.
- Attention / Mamba-2 (3.12 at 4K) is where we differ: ours is ~0.65 for the paper-shaped
  attention-only layer (32 heads of 32 at hidden 1024). The profiled attention layer takes 11x
  the time for 32x the tokens from 1K to 32K (against the head), less than linear: much of it is
  an s-independent cost, host-side framework time rather than a GPU kernel (flash attention grows
  at least linearly in s). A per-kernel model does not hold such costs; `layer_overhead_s` is
  where a measured one goes (0 in the built-in profiles: none measured), and `--costs paper`
  plans with the profiled times themselves.
- The head's backward: ours follows its GEMM FLOPs (I ~ F, W ~ the logits GEMM), as the
  Vocabulary Parallelism run does (output layer B 30.5 ms against F 26.0); the paper's head B / W
  (e.g. Gemma 1.21 / 0.58 against F 5.72) are far below its F, which real runs do not support.

FLOPs by op (per GEMM y = x W, x: m x k, W: k x n):
- F: the forward GEMMs + attention core / SSD scan forward.
- I: each GEMM's input-gradient GEMM (same FLOPs) + attention core backward (2.5x its forward:
  flash attention's backward runs 5 matmuls against the forward's 2, recomputing QK^T; Dao,
  FlashAttention-2, 2023) + SSD scan backward (2x its forward) + the memory-bound backward ops.
  Recomputation (`cost.recompute`) adds the recomputed forward work to I.
- W: each GEMM's weight-gradient GEMM (same FLOPs), one roofline with Megatron's
  gradient-accumulation fusion: the fp32 main_grad is read and written (8 bytes per weight) in
  the GEMM's epilogue, so it counts in that GEMM's io_bytes, not after it; the parameters no GEMM
  produces (norms, conv1d, the embedding table) accumulate 8 bytes each in a memory-bound pass.
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
- Head: final norm, the logits GEMM (2*b*s*h*v), then Megatron's unfused vocab-parallel
  cross-entropy over the b*s*v logits, in fp32: F upcasts (e + 4 bytes per logit), takes the
  max (4), subtracts it (8), exponentiates (8), sums (4) and normalizes to the softmax it saves
  (8): e + 36 bytes per logit; I scales that softmax in place by the loss gradient (8) and
  downcasts it for the logits GEMM (4 + e): 12 + e bytes per logit.
- Embedding: F is a gather (memory-bound), I is nothing (token ids have no gradient), W
  builds the dense table gradient (zero-fill, scatter-add) and accumulates it into the fp32
  buffer: v*h*(2e + 8) + 3*T*h*e bytes, as torch's dense embedding backward does. A learned
  position table (GPT-2, OPT) adds its rows' read and the add in F (s*h*e + 2*T*h*e) and the
  sum of the output gradient into its rows in W ((T + s)*h*e); its parameters count in the
  embedding's (weights, gradient accumulation, optimizer state).
- Recomputation (none / selective / full, per layer) is `cost.recompute`'s: it takes the work
  computed here (no recomputation: model FLOPs and every saved activation) and changes I's work
  and the activation bytes; `op_seconds` times the extra I work (`LayerWork.recompute_i`).

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
  own copy, as Megatron does); `cost.params` counts it once for the model card.
- `act_bytes`: what autograd saves from F until I/B for one micro-batch, tensor by tensor,
  with flash attention (no s^2 term), no dropout: per pre-norm sub-block the norm input and
  output; attention q, k, v, output and the fp32 log-sum-exp; MLP pre-activation(s) and the
  activation output; MoE router probabilities, permuted tokens, every top-k expert's
  intermediates and outputs; Mamba the in_proj output, SSD output and gated-norm output. For a
  GPT block (MHA, GeLU 4h) this is 32*b*s*h bytes in bf16: Korthikanti et al.'s 34*b*s*h less
  the two dropout masks. The head holds the peak of its loss computation, 12 bytes per logit:
  F ends with the bf16 logits, their fp32 copy and the fp32 log-softmax (10), I with the saved
  log-softmax and two fp32 gradients (12); PyTorch measures 12 (Cut Cross-Entropy, Table 1).
  Megatron's in-place vocab-parallel kernel (whose bytes time the head above) peaks at e + 4;
  we charge the PyTorch peak, which our executor and most training stacks run.
  Recomputation (`cost.recompute`) changes what a block keeps (full: only its input, b*s*h*e / t).
- `act_w_bytes`: the part W still needs after I: the inputs of the weight GEMMs (and the
  conv1d input for Mamba, the token ids for the embedding). The output gradients W also reads
  are produced by I and are not counted.
- `out_bytes`: what crosses a stage boundary after the layer: b*s*h*e / t (sequence-parallel
  activations, as Megatron sends them); 0 after the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from adaptis_plan.cost.comm import GRAD_REDUCE_BYTES, GroupLinks
from adaptis_plan.cost.params import layer_params, mlp_params
from adaptis_plan.spec.hardware import DeviceTypeSpec, LinkSpec
from adaptis_plan.spec.model import SSD_CHUNK, AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec
from adaptis_plan.spec.training import TrainingConfig

DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
FLASH_BACKWARD_FACTOR = 2.5  # flash attention backward FLOPs / forward FLOPs (FlashAttention-2)
SCAN_BACKWARD_FACTOR = 2.0  # Mamba-2 SSD scan backward FLOPs / forward FLOPs
GRAD_ACCUM_BYTES_PER_PARAM = 8.0  # fp32 main_grad read + write per weight-gradient GEMM
HEAD_PEAK_BYTES_PER_LOGIT = 3 * 4  # the loss backward: saved fp32 log-softmax + two fp32 gradients
# Kernel launches (F, I) or (F, I, W) of the memory-bound / small parts of a sub-block, as
# Megatron-Core + TransformerEngine + mamba_ssm launch them (module docstring, "Kernel launches").
SSD_LAUNCHES = (5, 14)  # chunk cumsum, chunk state, state passing, bmm chunk, chunk scan; backward
MAMBA_MEM_LAUNCHES = (7, 9, 1)  # conv1d, gated RMSNorm, 3 layout copies, A = -exp(A_log); backward; conv dW
MOE_LAUNCHES = (17, 12, 0)  # router softmax / top-k / scale, aux loss, routing map, permute, act, unpermute
CROSS_ENTROPY_LAUNCHES = (14, 5, 0)  # Megatron's vocab-parallel cross-entropy, F and its backward
EMBEDDING_LAUNCHES = (4, 0, 4)  # vocab-parallel mask + gather; zero-fill, sort, scatter-add, accumulate
_FP32 = 4
_INT64 = 8

Op = Literal["F", "I", "W"]
CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
KernelKind = Literal["gemm", "attention", "scan"]


@dataclass(frozen=True)
class Kernel:
    """A compute kernel timed by the roofline: max(flops / compute rate, io_bytes / bandwidth).

    `flops` and `io_bytes` are totals over `launches` equal launches (the routed experts' GEMMs);
    the compute rate depends on `kind`: a GEMM's on `shape` = (m, n, k) of one launch, the
    attention core's on `head_dim`, the SSD scan's is the device's `scan_efficiency`.
    """

    flops: float
    io_bytes: float
    what: str = ""
    kind: KernelKind = "gemm"
    launches: int = 1
    shape: tuple[float, float, float] = (0.0, 0.0, 0.0)
    head_dim: float = 0.0
    cudnn: bool = False  # an attention core run by cuDNN's fused attention (`attention_efficiency`)


@dataclass(frozen=True)
class Collective:
    """A collective over `nbytes` (the full, unsharded tensor; an all-to-all's: what one rank holds)
    on the `group` of ranks (`cost.comm.GroupLinks`). `overlap`: it runs beside the op's attention
    core (ring attention's KV exchange) and only what the core does not cover is exposed."""

    kind: CollectiveKind
    nbytes: float
    group: Literal["tp", "cp", "ep"] = "tp"
    overlap: bool = False


@dataclass(frozen=True)
class OpWork:
    """What one op (F, I or W) of one layer computes and moves on one tensor-parallel rank."""

    kernels: tuple[Kernel, ...] = ()
    mem_bytes: float = 0.0
    collectives: tuple[Collective, ...] = ()
    mem_launches: int = 0  # launches of the memory-bound kernels that move `mem_bytes`

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    @property
    def launches(self) -> int:
        """Kernel launches of the op: compute kernels + memory-bound kernels (collectives apart)."""
        return self.mem_launches + sum(k.launches for k in self.kernels)


@dataclass(frozen=True)
class LayerWork:
    """Device-independent work and memory of one layer for one training config, per TP rank.

    `f`, `i`, `w` exclude recomputation (model FLOPs); `recompute_i` is the work recomputation
    adds to I (`cost.recompute` sets it and `recompute`, and the activation bytes that go with
    it), which `op_seconds` adds to I. Bytes are per micro-batch (activations) or per rank (static).
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
    recompute: str = "none"
    tp: int = 1
    recompute_i: OpWork = OpWork()
    dense_params: float = 0.0  # parameters this rank holds outside routed experts (per TP rank)
    expert_params: float = 0.0  # routed experts' parameters this rank holds (per TP and EP rank)

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
    cp: int = 1
    ep: int = 1
    unfused: bool = False  # Megatron's pre-flash attention core (`_unfused_core`)
    cudnn: bool = False  # the flash core run by cuDNN's fused attention (`attention_efficiency`)
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
    f_launches: int = 0
    i_launches: int = 0
    w_launches: int = 0
    gemm_params: float = 0.0  # weights whose gradient a GEMM epilogue accumulates (full sizes)
    expert_params: float = 0.0  # routed experts' weights this rank holds (full TP size, after EP)

    def gemm(self, m: float, n: float, k: float, what: str, count: int = 1, shard: Literal["n", "k"] = "n") -> None:
        """A weight GEMM [m, k] x [k, n] (full sizes) split over t along n (column) or k (row).

        F runs it, I its input-gradient GEMM, W its weight-gradient GEMM: same FLOPs and operands.
        """
        n_r, k_r = (n / self.t, k) if shard == "n" else (n, k / self.t)
        flops = 2.0 * m * n_r * k_r * count
        io = (m * k_r + k_r * n_r + m * n_r) * self.e * count
        kernel = Kernel(flops, io, what, "gemm", count, (m, n_r, k_r))
        self.f_kernels.append(kernel)
        self.i_kernels.append(kernel)
        # W reads the layer input and the output gradient and accumulates dW into the fp32
        # main_grad in the GEMM's epilogue (Megatron's gradient-accumulation fusion: C += A^T B
        # with C in fp32, read and written once): one roofline, not a GEMM then a copy.
        w_io = (m * k_r + m * n_r) * self.e * count + k_r * n_r * GRAD_ACCUM_BYTES_PER_PARAM * count
        self.w_kernels.append(Kernel(flops, w_io, what + " wgrad", "gemm", count, (m, n_r, k_r)))
        self.gemm_params += n * k * count

    def core(
        self,
        flops: float,
        io_bytes: float,
        backward_factor: float,
        what: str,
        kind: KernelKind,
        launches: tuple[int, int],
        head_dim: float = 0.0,
    ) -> None:
        """A non-weight compute kernel (attention core, SSD scan), full sizes; backward in I.

        `launches`: kernels launched in F and in I.
        """
        t, (lf, li) = self.t, launches
        cudnn = self.cudnn and kind == "attention"
        self.f_kernels.append(Kernel(flops / t, io_bytes / t, what, kind, lf, head_dim=head_dim, cudnn=cudnn))
        self.i_kernels.append(
            Kernel(
                backward_factor * flops / t,
                2.0 * io_bytes / t,
                what + " backward",
                kind,
                li,
                head_dim=head_dim,
                cudnn=cudnn,
            )
        )

    def mem(self, f: float = 0.0, i: float = 0.0, w: float = 0.0, launches: tuple[int, int, int] = (0, 0, 0)) -> None:
        """Memory-bound bytes (full sizes), divided over t, moved by `launches` kernels in F, I, W."""
        self.f_bytes += f / self.t
        self.i_bytes += i / self.t
        self.w_bytes += w / self.t
        self.f_launches += launches[0]
        self.i_launches += launches[1]
        self.w_launches += launches[2]

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
    bld.mem(f=2 * tokens * h * e + 3 * tokens * h * e, i=3 * tokens * h * e + 3 * tokens * h * e, launches=(2, 3, 0))
    bld.keep(act=2 * tokens * h * e + tokens * _FP32)


def _attention(bld: _Builder, a: AttentionSpec, b: int, s: int, h: int, rotary: bool = True) -> None:
    """`s` is the whole sequence; with context parallelism a rank holds s / cp of its tokens and
    their queries attend over all earlier keys (load-balanced causal chunks: 1 / cp of the FLOPs)."""
    e, T = bld.e, float(b * s) / bld.cp
    _norm_block(bld, T, h)
    keys = b * causal_keys(s, a.sliding_window) / bld.cp
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
            bld.mem(f=2 * T * rope_dim * e, i=3 * T * rope_dim * e, launches=(2, 4, 0))
            extra_saved += T * rope_dim * e
        if a.bias:
            bld.mem(f=2 * T * qkv_saved * e, i=T * qkv_saved * e, launches=(1, 1, 0))
        copies = 1  # q / k / v to the attention kernel's layout
        attn_dim = float(d)
        kv_width = 2 * kv_dim
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
            bld.mem(f=2 * T * ql * e, i=3 * T * ql * e, launches=(1, 2, 0))
            extra_saved += 2 * T * ql * e
            gemm_inputs += ql
        else:
            bld.gemm(T, nh * qk, h, "q")
        bld.gemm(T, kvl + rope, h, "kv_a")
        bld.gemm(T, nh * (nope + vd), kvl, "kv_b")
        bld.gemm(T, h, nh * vd, "o_proj", shard="k")
        bld.mem(f=2 * T * kvl * e, i=3 * T * kvl * e, launches=(1, 2, 0))
        extra_saved += T * (kvl + rope) * e + T * kvl * e
        core_flops = 2 * keys * nh * qk + 2 * keys * nh * vd
        q_dim, v_dim, rope_dim = nh * qk, nh * vd, (nh + 1) * rope
        qkv_saved = 2 * nh * qk + nh * vd
        copies = 3  # split of the kv_a output, q = [q_nope, q_pe], k = [k_nope, k_pe expanded]
        attn_dim = (qk + vd) / 2.0  # FLOP-weighted: QK^T runs over qk dims, PV over vd
        kv_width = nh * (qk + vd)
    # rotary on q and k (one fused kernel each) + the layout copies; ALiBi and learned positions
    # rotate nothing (flash attention adds ALiBi's bias inside its kernel)
    if not rotary:
        rope_dim = 0
    rotary_launches = 2 if rotary else 0
    bld.mem(
        f=2 * T * rope_dim * e,
        i=2 * T * rope_dim * e,
        launches=(rotary_launches + copies, rotary_launches + copies, 0),
    )
    flash_io = T * (qkv_saved + v_dim) * e
    if bld.unfused:
        qk_dim = q_dim / nh
        _unfused_core(bld, b, T / b, float(s), nh, qk_dim, v_dim / nh)
        bld.keep(act=T * (qkv_saved + v_dim) * e + extra_saved, act_w=T * gemm_inputs * e)
    else:
        # flash attention: one forward kernel; backward = dO.O preprocess, the main kernel, dQ conversion
        bld.core(core_flops, flash_io, FLASH_BACKWARD_FACTOR, "attention core", "attention", (1, 3), attn_dim)
        # q, k, v after rotary + the flash output (shared with o_proj's input) + fp32 log-sum-exp
        bld.keep(act=T * (qkv_saved + v_dim) * e + T * nh * _FP32 + extra_saved, act_w=T * gemm_inputs * e)
    bld.tp_block(T * h * e)
    if bld.cp > 1:
        # ring attention (Megatron-Core's context parallelism): the K and V of every chunk pass
        # around the cp ranks (an all-gather's traffic) beside the attention core; the backward
        # passes them again and returns dK, dV (a reduce-scatter's)
        kv = float(b * s) * kv_width * e / bld.t
        bld.f_coll.append(Collective("all_gather", kv, "cp", overlap=True))
        bld.i_coll += [Collective("all_gather", kv, "cp", overlap=True), Collective("reduce_scatter", kv, "cp", True)]


#: bytes per attention score the unfused core moves (module docstring of `_unfused_core`)
UNFUSED_F_BYTES_PER_SCORE = 9.0  # softmax: read 2 + write 2; dropout: read 2, write 2 + a 1-byte mask
UNFUSED_I_BYTES_PER_SCORE = 11.0  # dropout backward: read 2 + mask 1, write 2; softmax backward: read 4, write 2
UNFUSED_SAVED_BYTES_PER_SCORE = 5.0  # softmax output 2, dropout mask 1, dropout output 2 (Korthikanti: 5as^2b)


def _unfused_core(bld: _Builder, b: int, sq: float, sk: float, nh: int, qk_dim: float, v_dim: float) -> None:
    """Megatron-LM's attention core before flash attention (the path of its 2021-2022 published runs):
    QK^T and PV as batched GEMMs over the whole s x s scores (the causal mask is applied to them,
    not skipped), the fused scale-mask-softmax kernel and attention dropout between them, every score
    through HBM. Backward: the four GEMMs of dQ, dK, dV, dP and the dropout / softmax backward.
    Saved per score: 5 bytes (Korthikanti et al. 2022, the 5as^2b term of their activation model).
    Heads split over t; `sq` queries per sequence on this rank, `sk` keys."""
    e, t = bld.e, bld.t
    count = b * nh / t
    scores = count * sq * sk
    qk = Kernel(2 * scores * qk_dim, (count * (sq + sk) * qk_dim + scores) * e, "scores", "gemm", 1,
                (sq * count, sk, qk_dim))  # fmt: skip
    pv = Kernel(2 * scores * v_dim, (scores + count * (sk + sq) * v_dim) * e, "context", "gemm", 1,
                (sq * count, v_dim, sk))  # fmt: skip
    bld.f_kernels += [replace(qk, kind="attention"), replace(pv, kind="attention")]
    bld.i_kernels += [replace(k, kind="attention", what=k.what + " backward") for k in (qk, qk, pv, pv)]
    bld.f_bytes += scores * UNFUSED_F_BYTES_PER_SCORE
    bld.i_bytes += scores * UNFUSED_I_BYTES_PER_SCORE
    bld.f_launches += 2
    bld.i_launches += 2
    bld.act += scores * UNFUSED_SAVED_BYTES_PER_SCORE


def _mlp(bld: _Builder, m: MlpSpec, b: int, s: int, h: int) -> None:
    e, T, i = bld.e, float(b * s), m.intermediate_size
    _norm_block(bld, T, h)
    gated = m.activation in ("swiglu", "geglu")
    bld.gemm(T, (2 if gated else 1) * i, h, "mlp_in")
    bld.gemm(T, h, i, "mlp_out", shard="k")
    if gated:
        bld.mem(f=3 * T * i * e, i=5 * T * i * e, launches=(1, 1, 0))
        bld.keep(act=3 * T * i * e, act_w=T * (h + i) * e)
    else:
        bld.mem(f=2 * T * i * e, i=3 * T * i * e, launches=(1, 1, 0))
        bld.keep(act=2 * T * i * e, act_w=T * (h + i) * e)
    bld.tp_block(T * h * e)


def _moe(bld: _Builder, m: MoeSpec, b: int, s: int, h: int) -> None:
    e, T = bld.e, float(b * s)
    E, k, ie = m.num_experts, m.top_k, m.expert_intermediate_size
    _norm_block(bld, T, h)
    gated = m.activation in ("swiglu", "geglu")
    g = 2 if gated else 1
    routed_tokens = T * k
    # balanced routing; with expert parallelism a rank runs E / ep experts on the tokens the ep
    # ranks route to them: the same FLOPs per rank, ep x the tokens per expert
    local = E // bld.ep
    per_expert = routed_tokens / E * bld.ep
    bld.gemm(T, E, h, "router")
    gemm_before = bld.gemm_params
    bld.gemm(per_expert, g * ie, h, "expert_in", count=local)
    bld.gemm(per_expert, h, ie, "expert_out", count=local, shard="k")
    bld.expert_params += bld.gemm_params - gemm_before
    if bld.ep > 1:
        # token dispatch and combine: two all-to-alls in F, two for the gradients in I
        a2a = [Collective("all_to_all", routed_tokens * h * e / bld.t, "ep")] * 2
        bld.f_coll += a2a
        bld.i_coll += a2a
    act_f, act_i = (3, 5) if gated else (2, 3)
    bld.mem(
        # router softmax + top-k (fp32), permute, expert activations, unpermute + weighted combine
        f=3 * T * E * _FP32 + 2 * routed_tokens * h * e + act_f * routed_tokens * ie * e + (routed_tokens + T) * h * e,
        i=3 * T * E * _FP32
        + 2 * routed_tokens * h * e
        + act_i * routed_tokens * ie * e
        + (T + 2 * routed_tokens) * h * e,
        launches=MOE_LAUNCHES,
    )
    saved = T * E * _FP32 + T * k * _INT64 + routed_tokens * h * e + (g + 1) * routed_tokens * ie * e
    saved += routed_tokens * h * e  # expert outputs, for the gradient of the routing weights
    saved_w = routed_tokens * (h + ie) * e
    if m.num_shared_experts:
        si = m.num_shared_experts * (m.shared_intermediate_size or ie)
        bld.gemm(T, g * si, h, "shared_in")
        bld.gemm(T, h, si, "shared_out", shard="k")
        bld.mem(f=act_f * T * si * e + 3 * T * h * e, i=act_i * T * si * e, launches=(2, 1, 0))
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
    bld.core(scan_flops, scan_io, SCAN_BACKWARD_FACTOR, "ssd scan", "scan", SSD_LAUNCHES)
    # conv1d + SiLU, gated RMSNorm; W: conv weight gradient reads its input and output gradient
    bld.mem(
        f=2 * T * conv_dim * e + 3 * T * di * e,
        i=3 * T * conv_dim * e + 5 * T * di * e,
        w=2 * T * conv_dim * e,
        launches=MAMBA_MEM_LAUNCHES,
    )
    saved = T * zxbcdt * e + 2 * T * di * e + T * nh * _FP32
    bld.keep(act=saved, act_w=T * (h + di + conv_dim) * e)
    bld.tp_block(T * h * e)


def _embedding(bld: _Builder, model: ModelSpec, b: int, s: int) -> None:
    e, T, h, v, t = bld.e, float(b * s), model.hidden_size, model.vocab_size, bld.t
    # vocab-parallel: every rank gathers (masked) rows for all tokens, then reduce-scatters
    bld.f_bytes += 2 * T * h * e + T * _INT64
    bld.f_launches += EMBEDDING_LAUNCHES[0]
    # dense table gradient: zero-fill + read back for accumulation (the fp32 read/write is added per param)
    bld.w_bytes += v / t * h * 2 * e + 3 * T * h * e
    bld.w_launches += EMBEDDING_LAUNCHES[2]
    bld.act += T * _INT64
    bld.act_w += T * _INT64
    if model.max_position_embeddings:
        # learned positions (replicated, not vocab-parallel: charged whole to every rank): F reads
        # s rows and adds them (read 2, write 1); W sums the output gradient over the batch into
        # the table's rows (read T, write s)
        bld.f_bytes += s * h * e + 2 * T * h * e
        bld.f_launches += 2
        bld.w_bytes += (T + s) * h * e
        bld.w_launches += 1
    if t > 1:
        bld.f_coll.append(Collective("reduce_scatter", T * h * e))


def _head(bld: _Builder, model: ModelSpec, layer: LayerSpec, b: int, s: int) -> None:
    e, T, h, t = bld.e, float(b * s), model.hidden_size, bld.t
    lo, hi = layer.vocab_range or (0, model.vocab_size)
    v = hi - lo
    first, last = lo == 0, hi == model.vocab_size
    if first:
        bld.mem(f=2 * T * h * e, i=3 * T * h * e, launches=(1, 2, 0))  # final norm
        bld.keep(act=2 * T * h * e + T * _FP32, act_w=T * h * e)
    else:  # a later vocabulary chunk: it keeps the received normed input and running statistics
        bld.keep(act=T * (h + 2) * _FP32, act_w=T * h * e)
    bld.gemm(T, v, h, "logits")
    # Megatron's unfused vocab-parallel cross-entropy, bytes per logit: F upcast (e + 4), max (4),
    # subtract (8), exp (8), sum (4), normalize to the saved softmax (8); I the in-place gradient
    # scale (8) and the downcast for the logits GEMM (4 + e). A vocabulary chunk does this over its
    # slice and merges the running log-sum-exp and target logit (a few bytes per token).
    bld.mem(f=T * v * (e + 36), i=T * v * (12 + e), launches=CROSS_ENTROPY_LAUNCHES)
    # memory: the peak of the loss computation, held from F to I (the simulator keeps one allocation
    # per F): F ends with the logits, their fp32 copy and the fp32 (log-)softmax alive (e + 8, less
    # the copy when e is fp32), I with the saved softmax and two fp32 gradients (12)
    bld.keep(act=T * v * max(e + (_FP32 if e < _FP32 else 0) + _FP32, HEAD_PEAK_BYTES_PER_LOGIT))
    if not (first and last):
        bld.mem(f=6 * T * _FP32, i=6 * T * _FP32, launches=(3, 3, 0))
    if t > 1:
        bld.f_coll += [Collective("all_gather", T * h * e)] + [Collective("all_reduce", T * _FP32)] * 3
        bld.i_coll.append(Collective("reduce_scatter", T * h * e))


def head_out_bytes(model: ModelSpec, layer: LayerSpec, b: int, s: int) -> float:
    """Bytes after a head layer: 0 after the last; a non-final vocabulary chunk sends the normed
    hidden state and two fp32 running statistics per token, in fp32."""
    lo, hi = layer.vocab_range or (0, model.vocab_size)
    return 0.0 if hi == model.vocab_size else float(b * s) * (model.hidden_size + 2) * _FP32


def bytes_per_param(training: TrainingConfig, shard: int | None = None) -> float:
    """Weights + fp32 gradient buffer + Adam state, per parameter, after ZeRO sharding over `shard`
    ranks (default dp x cp: Megatron's distributed optimizer shards over the data- and
    context-parallel ranks; routed experts shard over dp x cp / ep)."""
    weights = float(DTYPE_BYTES[training.dtype])
    grads = 4.0
    optimizer = 8.0 if training.dtype == "fp32" else 12.0
    dp = training.dp * training.cp if shard is None else shard
    zero = training.zero_in_effect  # a runtime that keeps stages unsharded over the step holds what ZeRO-1 does
    if zero >= 1:
        optimizer /= dp
    if zero >= 2:
        grads /= dp
    if zero >= 3:
        weights /= dp
    return weights + grads + optimizer


def held_params(model: ModelSpec, layer: LayerSpec) -> int:
    """Parameters the layer's device keeps (the head keeps the vocabulary matrix even if tied)."""
    if layer.kind == "head" and model.tie_word_embeddings:  # (split heads are never tied)
        return layer_params(model, layer).total + model.vocab_size * model.hidden_size
    return layer_params(model, layer).total


def layer_work(model: ModelSpec, layer: LayerSpec, training: TrainingConfig) -> LayerWork:
    """FLOPs, bytes, collectives and memory of one layer on one tensor-parallel rank, without
    recomputation (`cost.recompute.recompute_work` applies a recomputation mode to it)."""
    e, t = DTYPE_BYTES[training.dtype], training.tp
    b, h = training.micro_batch_size, model.hidden_size
    s = training.seq_len // training.cp  # the tokens of a sequence one context-parallel rank holds
    T = float(b * s)
    bld = _Builder(
        e=e, t=t, cp=training.cp, ep=training.ep,
        unfused=training.attention == "unfused", cudnn=training.attention == "cudnn",
    )  # fmt: skip
    if layer.kind == "embedding":
        _embedding(bld, model, b, s)
    elif layer.kind == "head":
        _head(bld, model, layer, b, s)
    else:
        if layer.mamba is not None:
            _mamba(bld, layer.mamba, b, s, h)
        if layer.attention is not None:
            _attention(bld, layer.attention, b, training.seq_len, h, rotary=model.position_encoding is None)
        if layer.mlp is not None:
            _mlp(bld, layer.mlp, b, s, h)
        if layer.moe is not None:
            _moe(bld, layer.moe, b, s, h)
    # routed experts beyond this rank's E / ep are held elsewhere
    params = held_params(model, layer)
    moe = layer.moe
    expert_all = moe.num_experts * mlp_params(h, moe.activation, moe.expert_intermediate_size) if moe else 0
    dense = float(params - expert_all)
    expert = bld.expert_params
    # the other parameters (norms, conv1d, the embedding table) accumulate their gradient in a
    # separate memory-bound pass; a tied head's second copy of the vocabulary matrix is a GEMM's
    bld.w_bytes += GRAD_ACCUM_BYTES_PER_PARAM * max(dense + expert - bld.gemm_params, 0.0) / t
    act, act_w = bld.act, bld.act_w
    edp = training.dp * training.cp // training.ep
    return LayerWork(
        kind=layer.kind,
        f=OpWork(tuple(bld.f_kernels), bld.f_bytes, tuple(bld.f_coll), bld.f_launches),
        i=OpWork(tuple(bld.i_kernels), bld.i_bytes, tuple(bld.i_coll), bld.i_launches),
        w=OpWork(tuple(bld.w_kernels), bld.w_bytes, (), bld.w_launches),
        act_bytes=act,
        act_w_bytes=min(act_w, act),
        static_bytes=(dense * bytes_per_param(training) + expert * bytes_per_param(training, edp)) / t,
        out_bytes=head_out_bytes(model, layer, b, s) if layer.kind == "head" else T * h * e / t,
        params_held=params,
        tp=t,
        dense_params=dense / t,
        expert_params=expert / t,
    )


def collective_seconds(c: Collective, t: int, link: LinkSpec) -> float:
    """Ring all-gather / reduce-scatter: (t-1) steps of n/t bytes; all-reduce: both."""
    if t <= 1:
        return 0.0
    one = (t - 1) * (link.latency_s + c.nbytes / t / (link.bandwidth_gbps * 1e9))
    return 2.0 * one if c.kind == "all_reduce" else one


def gemm_efficiency(device: DeviceTypeSpec, m: float, n: float, k: float) -> float:
    """Fraction of peak of one GEMM launch [m, k] x [k, n]: matmul_efficiency x wave x K-loop factors."""
    eff = device.matmul_efficiency
    if device.gemm_half_mn > 0:
        eff *= m * n / (m * n + device.gemm_half_mn)
    if device.gemm_half_k > 0:
        eff *= k / (k + device.gemm_half_k)
    return eff


def attention_efficiency(device: DeviceTypeSpec, head_dim: float, cudnn: bool = False) -> float:
    """Fraction of peak of the flash attention core at `head_dim`: matmul_efficiency x d / (d + d_half),
    times the device's cudnn_attention_speedup for cuDNN's fused attention."""
    half = device.attention_half_head_dim
    eff = device.matmul_efficiency * (head_dim / (head_dim + half) if half > 0 else 1.0)
    return eff * (device.cudnn_attention_speedup if cudnn else 1.0)


def kernel_seconds(kernel: Kernel, device: DeviceTypeSpec) -> float:
    """Roofline time of a compute kernel (all its launches), launch overhead apart."""
    if kernel.kind == "gemm" or kernel.kind == "attention" and kernel.shape[0] > 0:  # unfused: batched GEMMs
        eff = gemm_efficiency(device, *kernel.shape)
    elif kernel.kind == "attention":
        eff = attention_efficiency(device, kernel.head_dim, kernel.cudnn)
    else:
        eff = device.scan_efficiency or device.matmul_efficiency
    rate = device.peak_bf16_tflops * 1e12 * eff * device.sustained_efficiency
    bw = device.hbm_bandwidth_gbps * 1e9 * device.memory_efficiency
    return max(kernel.flops / rate, kernel.io_bytes / bw)


def work_seconds(
    work: OpWork, device: DeviceTypeSpec, t: int = 1, link: LinkSpec | None = None, place: GroupLinks | None = None
) -> float:
    """Time of one op's work on one device: kernels + memory-bound bytes + launches + collectives.

    Tensor-parallel collectives run on `place.tp` (else on `link`, the intra-node link), context-
    and expert-parallel ones on their groups in `place`; an overlapped one (ring attention's KV
    exchange) costs only what the op's attention core does not cover.
    """
    bw = device.hbm_bandwidth_gbps * 1e9 * device.memory_efficiency
    seconds = sum(kernel_seconds(k, device) for k in work.kernels) + work.mem_bytes / bw
    seconds += device.kernel_overhead_s * work.launches
    if work.launches:  # an op with no kernel (the embedding's I) has no host time either
        seconds += device.layer_overhead_s
    if not work.collectives:
        return seconds
    tp = [c for c in work.collectives if c.group == "tp"]
    if tp and t > 1:
        if place is not None:
            comm = sum(place.tp.seconds(c.kind, c.nbytes) for c in tp)
            if place.tp_overlap:  # pipelined with the GEMMs beside them: only the excess shows
                gemms = sum(kernel_seconds(k, device) for k in work.kernels if k.kind == "gemm")
                comm = max(0.0, comm - gemms)
            seconds += comm
        elif link is None:
            raise ValueError("tensor parallelism needs the intra-node link to time its collectives")
        else:
            seconds += sum(collective_seconds(c, t, link) for c in tp)
    others = [c for c in work.collectives if c.group != "tp"]
    if others:
        if place is None:
            raise ValueError("context and expert parallelism need the placement to time their collectives")
        hidden = sum(place.group(c.group).seconds(c.kind, c.nbytes) for c in others if c.overlap)
        core = sum(kernel_seconds(k, device) for k in work.kernels if k.kind == "attention")
        seconds += max(0.0, hidden - core)
        seconds += sum(place.group(c.group).seconds(c.kind, c.nbytes) for c in others if not c.overlap)
    return seconds


def op_seconds(
    work: LayerWork, device: DeviceTypeSpec, link: LinkSpec | None = None, place: GroupLinks | None = None
) -> tuple[float, float, float]:
    """(F, I, W) seconds of a layer on a device; I includes the recomputed work, if any.

    Under ZeRO-3 (`place.zero == 3`) each op waits for its parameters' all-gather over the
    data-parallel group, prefetched under the previous layer's op (FSDP), and W for its gradients'
    reduce-scatter: an op takes max(compute, its collective) (`cost.comm`); without data-parallel
    overlap (`place.dp_overlap` false) nothing is prefetched and an op takes compute + collective."""
    f = work_seconds(work.f, device, work.tp, link, place)
    i = work_seconds(work.i, device, work.tp, link, place)
    w = work_seconds(work.w, device, work.tp, link, place)
    if work.recompute_i.kernels or work.recompute_i.mem_bytes or work.recompute_i.launches:
        i += work_seconds(work.recompute_i, device, work.tp, link, place)
    if place is not None and place.zero == 3:
        gather, scatter = zero3_collectives(work, place)
        if place.dp_overlap:
            f, i, w = max(f, gather), max(i, gather), max(w, scatter)
        else:
            f, i, w = f + gather, i + gather, w + scatter
    return f, i, w


def zero3_collectives(work: LayerWork, place: GroupLinks) -> tuple[float, float]:
    """ZeRO-3's (parameter all-gather before each op, gradient reduce-scatter after W) of a layer, in
    seconds: dense parameters over the data-parallel group, experts over the expert-data-parallel one."""
    gather = place.dp.ring("all_gather", work.dense_params * place.param_bytes)
    gather += place.edp.ring("all_gather", work.expert_params * place.param_bytes)
    scatter = place.dp.ring("reduce_scatter", work.dense_params * GRAD_REDUCE_BYTES)
    scatter += place.edp.ring("reduce_scatter", work.expert_params * GRAD_REDUCE_BYTES)
    return gather, scatter


def layer_cost(
    model: ModelSpec,
    layer: LayerSpec,
    training: TrainingConfig,
    device: DeviceTypeSpec,
    link: LinkSpec | None = None,
) -> LayerCost:
    """Times and bytes of one layer on one device type (`link`: the intra-node link, for TP),
    without recomputation (`cost.recompute.recompute_work` then `op_seconds` for a mode)."""
    work = layer_work(model, layer, training)
    f, i, w = op_seconds(work, device, link)
    return LayerCost(f, i, w, work.act_bytes, work.act_w_bytes, work.static_bytes, work.out_bytes)


__all__ = [
    "DTYPE_BYTES",
    "Collective",
    "Kernel",
    "KernelKind",
    "LayerCost",
    "LayerWork",
    "OpWork",
    "bytes_per_param",
    "causal_keys",
    "collective_seconds",
    "held_params",
    "layer_cost",
    "layer_work",
    "gemm_efficiency",
    "attention_efficiency",
    "kernel_seconds",
    "op_seconds",
    "work_seconds",
]
