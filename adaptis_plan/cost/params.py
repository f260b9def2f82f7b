"""Parameter counts per layer (total and active per token), from a `ModelSpec`.

Data flow: model spec -> here -> `model show`, the cost model (weights, FLOPs) and tests
against published totals. Pure arithmetic; imports only the spec.

Counting rules (matching how model cards count):
- norms are counted (RMSNorm: `hidden`; LayerNorm: `2 * hidden`);
- the embedding is `vocab * hidden`, plus `max_position_embeddings * hidden` for a learned
  position table (GPT-2, OPT); the head is the final norm plus `vocab * hidden`
  unless the embeddings are tied (then the matrix is counted once, in the embedding);
- MoE: `total` counts every expert and the router, `active` the top-k + shared experts;
  the embedding counts as active (Mixtral's and Qwen's convention; DeepSeek's published
  "activated" figures leave it out);
- Mamba-2 as in HF Mamba2Mixer; Mamba-1 (`MambaSpec.version == 1`, Jamba) as in MambaMixer.

Tied embeddings: the matrix is counted once, in the embedding layer. A consumer that needs
the weights a pipeline stage holds must add `vocab * hidden` to the head's stage when the
two layers sit on different devices (each stage keeps its own copy, as Megatron does).
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int

    def __add__(self, other: ParamCount) -> ParamCount:
        return ParamCount(self.total + other.total, self.active + other.active)


def _norm(model: ModelSpec, dim: int) -> int:
    return dim if model.norm == "rmsnorm" else 2 * dim


def attention_params(h: int, a: AttentionSpec) -> int:
    if a.type == "gqa":
        q = h * a.num_heads * a.head_dim
        kv = 2 * h * a.num_kv_heads * a.head_dim
        o = a.num_heads * a.head_dim * h
        bias = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim if a.bias else 0
        qk_norm = 2 * a.head_dim if a.qk_norm else 0
        return q + kv + o + bias + qk_norm
    # MLA (DeepSeek-V2/V3); AttentionSpec's validator guarantees these are set.
    if not (a.kv_lora_rank and a.qk_nope_head_dim and a.qk_rope_head_dim and a.v_head_dim):
        raise ValueError("attention.type 'mla' needs kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim")
    qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank:
        q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * a.num_heads * qk_head
    else:
        q = h * a.num_heads * qk_head
    kv_down = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
    kv_up = a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
    o = a.num_heads * a.v_head_dim * h
    return q + kv_down + kv_up + o


def mlp_params(h: int, activation: str, inner: int) -> int:
    gated = activation in ("swiglu", "geglu")
    return (3 if gated else 2) * h * inner


def moe_params(h: int, m: MoeSpec) -> ParamCount:
    expert = mlp_params(h, m.activation, m.expert_intermediate_size)
    shared = m.num_shared_experts * mlp_params(
        h, m.activation, m.shared_intermediate_size or m.expert_intermediate_size
    )
    router = h * m.num_experts
    return ParamCount(m.num_experts * expert + shared + router, m.top_k * expert + shared + router)


def mamba_params(h: int, m: MambaSpec) -> int:
    if m.version == 1:
        return _mamba1_params(h, m)
    inner = m.num_heads * m.head_dim
    conv_dim = inner + 2 * m.num_groups * m.state_size
    in_proj = h * (2 * inner + 2 * m.num_groups * m.state_size + m.num_heads)
    conv = conv_dim * m.conv_kernel + conv_dim
    per_head = 3 * m.num_heads  # A_log, D, dt_bias
    gated_norm = inner
    out_proj = inner * h
    return in_proj + conv + per_head + gated_norm + out_proj


def _mamba1_params(h: int, m: MambaSpec) -> int:
    # Mamba-1 as in HF MambaMixer / JambaMambaMixer (no in/out bias, conv bias on).
    # Jamba's optional inner RMSNorms on dt, B, C (dt_rank + 2N weights) are not counted.
    inner = m.num_heads * m.head_dim
    rank = m.dt_rank or 1
    in_proj = h * 2 * inner
    conv = inner * m.conv_kernel + inner
    x_proj = inner * (rank + 2 * m.state_size)
    dt_proj = rank * inner + inner
    a_log_and_d = inner * m.state_size + inner
    out_proj = inner * h
    return in_proj + conv + x_proj + dt_proj + a_log_and_d + out_proj


def layer_params(model: ModelSpec, layer: LayerSpec) -> ParamCount:
    """Parameters of one layer; embedding/head follow the tying rule in the module docstring."""
    h = model.hidden_size
    if layer.kind == "embedding":
        n = (model.vocab_size + (model.max_position_embeddings or 0)) * h
        return ParamCount(n, n)
    if layer.kind == "head":
        lo, hi = layer.vocab_range or (0, model.vocab_size)
        norm = _norm(model, h) if lo == 0 else 0  # the first vocabulary chunk holds the final norm
        n = norm + (0 if model.tie_word_embeddings else (hi - lo) * h)
        return ParamCount(n, n)
    count = ParamCount(0, 0)
    if layer.attention is not None:
        n = attention_params(h, layer.attention) + _norm(model, h)
        count += ParamCount(n, n)
    if layer.mamba is not None:
        n = mamba_params(h, layer.mamba) + _norm(model, h)
        count += ParamCount(n, n)
    if layer.mlp is not None:
        n = mlp_params(h, layer.mlp.activation, layer.mlp.intermediate_size) + _norm(model, h)
        count += ParamCount(n, n)
    if layer.moe is not None:
        count += moe_params(h, layer.moe) + ParamCount(_norm(model, h), _norm(model, h))
    return count


def model_params(model: ModelSpec) -> ParamCount:
    """Whole pipelined model (excludes `extra_parameters`)."""
    total = ParamCount(0, 0)
    for layer in model.layers:
        total += layer_params(model, layer)
    return total


__all__ = [
    "MlpSpec",
    "ParamCount",
    "attention_params",
    "layer_params",
    "mamba_params",
    "mlp_params",
    "model_params",
    "moe_params",
]
