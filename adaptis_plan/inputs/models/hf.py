"""Hugging Face `config.json` importers: one config dict -> one `ModelSpec`.

Data flow: inputs. `load.py` reads the file (or `zoo.py` hands over a built-in dict), this
module maps it to the ordered layer list the pipeline sees (embedding, one layer per
decoder block, head), and the cost model, planner and executor read the result. Imports
only the spec and the error hierarchy: no torch, no ortools, no rich/click, no transformers.

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, gemma,
gemma2, gemma3 (multimodal; the language model is `text_config`), gemma3_text, deepseek_v2,
deepseek_v3, nemotron_h, jamba, gpt2, gpt_neox, opt, bloom, falcon, mpt.

Required fields. `hidden_size`, `num_hidden_layers`, `num_attention_heads` and `vocab_size`
(and `intermediate_size` when a dense MLP exists) must be present, under each family's own
names where it has them (gpt2 `n_embd` / `n_layer` / `n_head` / `n_positions`; bloom `n_embed`
or `hidden_size`, `n_layer`, `n_head`; mpt `d_model` / `n_layers` / `n_heads`; opt `ffn_dim`
and `max_position_embeddings`): a silent 4096-wide default
for a misspelt key would plan the wrong model. Only gemma3 / gemma3_text fall back to
transformers' `Gemma3TextConfig` defaults for these, because the published Gemma-3 configs
omit them (vocab 262208, hidden 2304, intermediate 9216, 26 layers, 8 heads, 4 kv heads,
head_dim 256).

Defaults for optional fields (as transformers' config classes have them):
- `num_key_value_heads` = `num_attention_heads` (jamba: 8); `head_dim` = hidden / heads
  (gemma family: 256); `tie_word_embeddings` false, except the gemma family (true);
- `hidden_act` silu -> swiglu, gelu* -> geglu; gemma always geglu; nemotron_h
  `mlp_hidden_act` relu2;
- mixtral: 8 experts, top-2; qwen2_moe: 60 experts, top-4, expert inner 1408, one shared
  expert of 5632; qwen3_moe: 128 experts, top-8, expert inner 768; both
  `decoder_sparse_step` 1, `mlp_only_layers` none;
- deepseek_v2/v3: `q_lora_rank` 1536 (null = full q projection), `kv_lora_rank` 512,
  `qk_nope_head_dim` 128, `qk_rope_head_dim` 64, `v_head_dim` 128, `first_k_dense_replace` 0,
  `moe_layer_freq` 1, `n_shared_experts` 0, `num_nextn_predict_layers` 0;
- nemotron_h: 128 Mamba heads x 64, state 128, 8 groups, conv 4; `E` layers read
  `n_routed_experts`, `num_experts_per_tok`, `moe_intermediate_size` and (one shared expert of)
  `moe_shared_expert_intermediate_size`;
- jamba: attention every 8th layer from 4, experts every 2nd layer from 1, 16 experts top-2,
  Mamba-1 with d_state 16, d_conv 4, expand 2, dt_rank "auto" = ceil(hidden / 16);
- GPT-style families (LayerNorm, non-gated MLP, tied embeddings unless said otherwise):
  gpt2: MLP `n_inner` = 4 x hidden, `activation_function` gelu_new, learned positions
  (`n_positions` rows); gpt_neox: rotary, `hidden_act` gelu, `attention_bias` true,
  `tie_word_embeddings` false; opt: `activation_function` relu, `enable_bias` true, learned
  positions of `max_position_embeddings` + 2 rows (OPT's offset); bloom: ALiBi, MLP 4 x hidden;
  falcon: rotary (ALiBi with `alibi`), MLP `ffn_hidden_size` = 4 x hidden, `bias` false, kv heads
  `num_kv_heads` (= heads) with `new_decoder_architecture`, else 1 with `multi_query` (true),
  else heads; mpt: `attn_config.alibi` true (else learned positions of `max_seq_len` 2048 rows
  when `learned_pos_emb`), MLP `expansion_ratio` (4) x d_model, `no_bias` true,
  `attn_config.attn_type` multihead_attention (multiquery: 1 kv head, grouped: `kv_n_heads`);
- gemma2: even layers use the sliding window (4096); gemma3: every `sliding_window_pattern`-th
  (6th) layer is global, the others slide over `sliding_window` (4096); `layer_types` wins
  where a config has it.

Modelling choices:
- MLA layers carry `head_dim` = qk_nope + qk_rope (the q/k head width) and kv heads = heads.
- DeepSeek's multi-token-prediction modules (`num_nextn_predict_layers`) are left out unless
  `include_mtp=True`; then each is one more layer of the last block's kind (MoE for V3),
  placed right before the head, named `model.layers.{num_hidden_layers + k}` as in the
  checkpoint. Its `eh_proj` (2h x h) and two extra norms are not expressible and not counted
  (~1% of that layer); its embedding and head are the model's own (shared), counted once.
- Gemma-2/3 have four norms per block (pre/post attention and MLP); the spec counts two
  (2 x hidden parameters per layer missing, < 0.01%). Qwen2-MoE's shared-expert gate
  (hidden parameters per layer) is likewise not counted.
- GPT-style families: q/k/v biases are counted where the family has them; the attention output
  and MLP biases are not expressible (hidden x 6 parameters per layer for a 4 x hidden MLP:
  < 0.04% of gpt2, < 0.01% of the larger models). gpt_neox `use_parallel_residual` and falcon
  `parallel_attn` run attention and MLP side by side on the same input; the spec runs them one
  after the other, which has the same parameters, FLOPs and bytes (only the dependency between
  the two differs, inside one layer). Falcon's parallel block without the new architecture has
  one LayerNorm where the spec counts two (+2 x hidden per layer), MPT's LayerNorms have no bias
  (+hidden per norm), BLOOM's LayerNorm after the embedding is not counted (-2 x hidden); gpt_neox
  rotates `rotary_pct` (0.25) of each head where the spec rotates all of it (a few memory-bound
  bytes per token). opt-350m's `word_embed_proj_dim` projections and post-norm
  (`do_layer_norm_before` false) are refused.
- gemma3 (multimodal): the SigLIP vision tower and the multimodal projector are not
  pipelined; their parameters go to `extra_parameters` (patch embedding, position
  embedding, encoder layers with biased attention + MLP + two LayerNorms, post LayerNorm,
  optional attention-pooling head, projector matrix + its RMSNorm).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from adaptis_plan.errors import InputError
from adaptis_plan.spec.limits import MAX_DIM, MAX_HIDDEN, MAX_LAYERS, MAX_VOCAB, MAX_WINDOW, MIN_HEAD_DIM
from adaptis_plan.spec.model import (
    AttentionSpec,
    LayerSpec,
    MambaSpec,
    MlpSpec,
    ModelSpec,
    MoeSpec,
    head_dim_problem,
)

# The largest value of each size (`spec.limits`); any other size is at most MAX_DIM. The blocks
# are built one per layer before the spec is validated, so the layer count is bounded first.
_LIMITS: dict[str, int] = {
    "hidden_size": MAX_HIDDEN,
    "n_embd": MAX_HIDDEN,
    "n_embed": MAX_HIDDEN,
    "d_model": MAX_HIDDEN,
    "num_hidden_layers": MAX_LAYERS - 2,  # + embedding and head
    "n_layer": MAX_LAYERS - 2,
    "n_layers": MAX_LAYERS - 2,
    "vocab_size": MAX_VOCAB,
    "sliding_window": MAX_WINDOW,
}

_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
}

_SIGLIP_DEFAULTS: dict[str, Any] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
    "vision_use_head": True,
}


class _Cfg:
    """Read-only view of one config dict; every error names the file, the field and the fix."""

    def __init__(
        self, data: Mapping[str, Any], where: str, prefix: str = "", defaults: Mapping[str, Any] | None = None
    ):
        self.data = data
        self.where = where
        self.prefix = prefix
        self.defaults = dict(defaults or {})

    def field(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, value: Any, problem: str, fix: str) -> InputError:
        text = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        shown = text if self.data.get(key) is not None else f"{text} (the default)"
        return InputError(f"{self.where}: {self.field(key)} = {shown}: {problem}; {fix}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        if value is None:
            return self.defaults.get(key, default)
        return value

    def _missing(self, key: str, what: str) -> InputError:
        if key in self.data:  # present, but null
            return InputError(f"{self.where}: {self.field(key)} = null: required; give {what}")
        close = difflib.get_close_matches(key, [str(k) for k in self.data], n=1, cutoff=0.8)
        hint = f"found '{self.prefix}{close[0]}': fix its spelling" if close else f"add it ({what})"
        return InputError(f"{self.where}: {self.field(key)}: missing; {hint}")

    def size(self, key: str, default: int | None = None, what: str = "a positive integer") -> int:
        """A positive integer; required unless a default exists."""
        value = self.data.get(key)
        if value is None:
            value = self.defaults.get(key, default)
            if value is None:
                raise self._missing(key, what)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, value, "must be a positive integer", "fix the value")
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise self.error(key, value, "must be a positive integer", "fix the value")
        if value <= 0:
            raise self.error(key, value, "must be > 0", "use a positive size")
        if key == "vocab_size" and value < 2:
            raise self.error(key, value, "a vocabulary of one token has nothing to predict", "use 2 or more")
        limit = _LIMITS.get(key, MAX_DIM)
        if value > limit:
            raise self.error(key, value, f"out of range; allowed: 1..{limit:,}", "fix the value")
        return int(value)

    def opt_size(self, key: str, default: int | None = None) -> int | None:
        """A positive integer, or None where the field is absent / null and there is no default."""
        if key in self.data and self.data[key] is None:
            return None
        if key not in self.data and self.defaults.get(key, default) is None:
            return None
        return self.size(key, default)

    def count(self, key: str, default: int = 0) -> int:
        """A non-negative integer (layer indices, periods that may be 0), at most `MAX_LAYERS`."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(key, value, "must be an integer >= 0", "fix the value")
        if value > MAX_LAYERS:
            raise self.error(key, value, f"out of range; allowed: 0..{MAX_LAYERS:,}", "fix the value")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, value, "must be true or false", "fix the value")
        return value

    def sub(self, key: str, defaults: Mapping[str, Any]) -> _Cfg:
        value = self.data.get(key)
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise self.error(key, type(value).__name__, "must be an object", "give the nested config as a JSON object")
        return _Cfg(value, self.where, f"{self.prefix}{key}.", defaults)


@dataclass(frozen=True)
class _Built:
    """What one family importer returns: the sizes and the decoder blocks (no embedding / head)."""

    hidden: int
    vocab: int
    tie: bool
    blocks: list[LayerSpec]
    extra: int = 0
    norm: str = "rmsnorm"
    positions: str | None = None  # None: rotary
    max_positions: int | None = None


# ---------------------------------------------------------------- shared pieces


def _block(kind: str, index: int, **parts: Any) -> LayerSpec:
    return LayerSpec(kind=kind, name=f"model.layers.{index}", **parts)


def _heads(
    c: _Cfg, hidden: int, *, kv_default: int | None = None, head_dim_default: int | None = None
) -> tuple[int, int, int]:
    """(query heads, kv heads, head_dim), checked against each other."""
    heads = c.size("num_attention_heads", what="query heads")
    kv = c.size("num_key_value_heads", kv_default or heads)
    if heads % kv:
        raise c.error("num_key_value_heads", kv, f"must divide num_attention_heads ({heads})", "fix the head counts")
    if head_dim_default is None:
        if not c.has("head_dim") and hidden % heads:
            raise c.error(
                "num_attention_heads", heads, f"does not divide hidden_size ({hidden})", "set head_dim explicitly"
            )
        head_dim_default = hidden // heads
    head_dim = c.size("head_dim", head_dim_default)
    problem = head_dim_problem(head_dim)
    if problem is not None:
        if c.has("head_dim"):
            raise c.error("head_dim", head_dim, *problem)
        raise c.error(
            "num_attention_heads", heads, f"hidden_size / num_attention_heads = {head_dim} is {problem[0]}", problem[1]
        )
    return heads, kv, head_dim


def _gated_activation(c: _Cfg, key: str = "hidden_act") -> str:
    act = str(c.get(key, "silu")).lower()
    if act in ("silu", "swish"):
        return "swiglu"
    if act.startswith("gelu"):
        return "geglu"
    raise c.error(key, act, "unsupported gated activation (silu/swish or gelu*)", "use silu or gelu")


def _sliding_windows(c: _Cfg, num_layers: int, rule: Callable[[int], bool]) -> list[int | None]:
    """Per-layer window: `layer_types` if given, else `rule(i)` says which layers slide."""
    window = c.opt_size("sliding_window")
    types = c.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != num_layers:
            got = len(types) if isinstance(types, list) else types
            raise c.error("layer_types", got, f"needs one entry per layer ({num_layers})", "fix the list")
        return [window if t == "sliding_attention" else None for t in types]
    return [window if window is not None and rule(i) else None for i in range(num_layers)]


def _check_moe(c: _Cfg, experts_key: str, top_k_key: str, experts: int, top_k: int) -> None:
    if top_k > experts:
        raise c.error(top_k_key, top_k, f"exceeds {c.field(experts_key)} ({experts})", "lower it")


# ---------------------------------------------------------------- families


def _llama_like(c: _Cfg, model_type: str, include_mtp: bool) -> _Built:
    """llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe."""
    hidden = c.size("hidden_size")
    num_layers = c.size("num_hidden_layers")
    vocab = c.size("vocab_size")
    heads, kv, head_dim = _heads(c, hidden)
    qwen2 = model_type in ("qwen2", "qwen2_moe")
    qwen3 = model_type in ("qwen3", "qwen3_moe")
    bias = True if qwen2 else c.flag("attention_bias", False)
    activation = _gated_activation(c)

    if model_type == "mistral":
        windows = _sliding_windows(c, num_layers, lambda i: True)
    elif qwen2 or qwen3:
        use_swa = c.flag("use_sliding_window", False)
        first = c.count("max_window_layers", num_layers)
        windows = _sliding_windows(c, num_layers, lambda i: use_swa and i >= first)
    else:
        windows = [None] * num_layers

    moe: MoeSpec | None = None
    moe_layers: set[int] = set()
    if model_type == "mixtral":
        experts = c.size("num_local_experts", 8)
        top_k = c.size("num_experts_per_tok", 2)
        _check_moe(c, "num_local_experts", "num_experts_per_tok", experts, top_k)
        inner = c.size("intermediate_size", what="expert inner dimension")
        moe = MoeSpec(num_experts=experts, top_k=top_k, expert_intermediate_size=inner, activation=activation)
        moe_layers = set(range(num_layers))
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        qwen2_moe = model_type == "qwen2_moe"
        experts = c.size("num_experts", 60 if qwen2_moe else 128)
        top_k = c.size("num_experts_per_tok", 4 if qwen2_moe else 8)
        _check_moe(c, "num_experts", "num_experts_per_tok", experts, top_k)
        inner = c.size("moe_intermediate_size", 1408 if qwen2_moe else 768)
        shared = c.opt_size("shared_expert_intermediate_size", 5632) if qwen2_moe else None
        moe = MoeSpec(
            num_experts=experts,
            top_k=top_k,
            expert_intermediate_size=inner,
            num_shared_experts=1 if shared else 0,
            shared_intermediate_size=shared,
            activation=activation,
        )
        step = c.size("decoder_sparse_step", 1)
        dense_only = c.get("mlp_only_layers", []) or []
        if not isinstance(dense_only, list) or not all(isinstance(i, int) for i in dense_only):
            raise c.error("mlp_only_layers", dense_only, "must be a list of layer indices", "fix the list")
        dense = set(dense_only)  # a list may be long: membership per layer must not scan it
        moe_layers = {i for i in range(num_layers) if i not in dense and (i + 1) % step == 0}

    blocks = []
    mlp: MlpSpec | None = None
    for i in range(num_layers):
        attention = AttentionSpec(
            num_heads=heads, num_kv_heads=kv, head_dim=head_dim, sliding_window=windows[i], qk_norm=qwen3, bias=bias
        )
        if i in moe_layers:
            blocks.append(_block("moe", i, attention=attention, moe=moe))
        else:
            if mlp is None:
                mlp = MlpSpec(activation=activation, intermediate_size=c.size("intermediate_size"))
            blocks.append(_block("decoder", i, attention=attention, mlp=mlp))
    tie = c.flag("tie_word_embeddings", False)
    return _Built(hidden, vocab, tie, blocks)


def _gemma(c: _Cfg, model_type: str, include_mtp: bool) -> _Built:
    """gemma, gemma2, gemma3_text, and gemma3 (language model under text_config + vision tower)."""
    extra = 0
    if model_type == "gemma3":
        extra = _gemma3_vision_params(c)
        c = c.sub("text_config", _GEMMA3_TEXT_DEFAULTS)
    elif model_type == "gemma3_text":
        c = _Cfg(c.data, c.where, c.prefix, _GEMMA3_TEXT_DEFAULTS)
    hidden = c.size("hidden_size")
    num_layers = c.size("num_hidden_layers")
    vocab = c.size("vocab_size")
    heads, kv, head_dim = _heads(c, hidden, head_dim_default=256)
    if model_type == "gemma2":
        c = _Cfg(c.data, c.where, c.prefix, {"sliding_window": 4096})
        windows = _sliding_windows(c, num_layers, lambda i: i % 2 == 0)
    elif model_type in ("gemma3", "gemma3_text"):
        pattern = c.size("sliding_window_pattern", 6)
        windows = _sliding_windows(c, num_layers, lambda i: (i + 1) % pattern != 0)
    else:
        windows = [None] * num_layers
    qk_norm = model_type in ("gemma3", "gemma3_text")
    bias = c.flag("attention_bias", False)
    mlp = MlpSpec(activation="geglu", intermediate_size=c.size("intermediate_size"))
    blocks = [
        _block(
            "decoder",
            i,
            attention=AttentionSpec(
                num_heads=heads,
                num_kv_heads=kv,
                head_dim=head_dim,
                sliding_window=windows[i],
                qk_norm=qk_norm,
                bias=bias,
            ),
            mlp=mlp,
        )
        for i in range(num_layers)
    ]
    tie = c.flag("tie_word_embeddings", True)
    return _Built(hidden, vocab, tie, blocks, extra)


def _gemma3_vision_params(c: _Cfg) -> int:
    """SigLIP vision tower + Gemma-3 multimodal projector (reported, not pipelined)."""
    v = c.sub("vision_config", _SIGLIP_DEFAULTS)
    hid = v.size("hidden_size")
    inner = v.size("intermediate_size")
    layers = v.size("num_hidden_layers")
    channels = v.size("num_channels")
    image = v.size("image_size")
    patch = v.size("patch_size")
    if image % patch:
        raise v.error("image_size", image, f"is not a multiple of patch_size ({patch})", "fix the vision config")
    layer_norm = 2 * hid
    attention = 4 * (hid * hid + hid)
    mlp = hid * inner + inner + inner * hid + hid
    patch_embed = channels * patch * patch * hid + hid
    positions = (image // patch) ** 2 * hid
    total = patch_embed + positions + layers * (attention + mlp + 2 * layer_norm) + layer_norm
    if v.flag("vision_use_head", True):
        # attention-pooling head: probe, MultiheadAttention (in_proj 3h x h, out_proj), LayerNorm, MLP
        total += hid + (3 * hid * hid + 3 * hid) + (hid * hid + hid) + layer_norm + mlp
    text = c.sub("text_config", _GEMMA3_TEXT_DEFAULTS)
    projector = hid * text.size("hidden_size") + hid  # mm_input_projection_weight + mm_soft_emb_norm
    return total + projector


def _deepseek(c: _Cfg, model_type: str, include_mtp: bool) -> _Built:
    """deepseek_v2, deepseek_v3: MLA attention, first_k_dense_replace dense layers, then MoE."""
    hidden = c.size("hidden_size")
    num_layers = c.size("num_hidden_layers")
    vocab = c.size("vocab_size")
    heads = c.size("num_attention_heads")
    nope = c.size("qk_nope_head_dim", 128)
    rope = c.size("qk_rope_head_dim", 64)
    if rope % 2:
        raise c.error("qk_rope_head_dim", rope, "odd, but rotary embeddings rotate pairs", "use an even width")
    if nope + rope < MIN_HEAD_DIM:
        raise c.error(
            "qk_nope_head_dim", nope, f"q/k heads of {nope} + {rope} are narrower than {MIN_HEAD_DIM}", "widen them"
        )
    attention = AttentionSpec(
        type="mla",
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=nope + rope,
        q_lora_rank=c.opt_size("q_lora_rank", 1536),
        kv_lora_rank=c.size("kv_lora_rank", 512),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=c.size("v_head_dim", 128),
    )
    activation = _gated_activation(c)
    experts = c.opt_size("n_routed_experts")
    moe: MoeSpec | None = None
    if experts is not None:
        top_k = c.size("num_experts_per_tok", what="routed experts per token")
        _check_moe(c, "n_routed_experts", "num_experts_per_tok", experts, top_k)
        shared = c.count("n_shared_experts", 0)
        inner = c.size("moe_intermediate_size", what="inner dim of one routed expert")
        moe = MoeSpec(
            num_experts=experts,
            top_k=top_k,
            expert_intermediate_size=inner,
            num_shared_experts=shared,
            shared_intermediate_size=inner if shared else None,
            activation=activation,
        )
    first_dense = c.count("first_k_dense_replace", 0)
    if moe is not None and first_dense >= num_layers:
        raise c.error(
            "first_k_dense_replace",
            first_dense,
            f"makes every one of the {num_layers} layers dense, so the routed experts are never used",
            f"use 0..{num_layers - 1}, or remove the expert fields for a dense model",
        )
    freq = c.size("moe_layer_freq", 1)
    mlp: MlpSpec | None = None

    def make(i: int, moe_layer: bool) -> LayerSpec:
        nonlocal mlp
        if moe_layer:
            return _block("moe", i, attention=attention, moe=moe)
        if mlp is None:
            mlp = MlpSpec(activation=activation, intermediate_size=c.size("intermediate_size"))
        return _block("decoder", i, attention=attention, mlp=mlp)

    kinds = [moe is not None and i >= first_dense and i % freq == 0 for i in range(num_layers)]
    blocks = [make(i, kinds[i]) for i in range(num_layers)]
    if include_mtp:
        for k in range(c.count("num_nextn_predict_layers", 0)):
            blocks.append(make(num_layers + k, kinds[-1]))
    tie = c.flag("tie_word_embeddings", False)
    return _Built(hidden, vocab, tie, blocks)


def _nemotron_h(c: _Cfg, model_type: str, include_mtp: bool) -> _Built:
    """nemotron_h: one layer per `hybrid_override_pattern` character (M Mamba-2, * attention, - MLP, E MoE)."""
    hidden = c.size("hidden_size")
    num_layers = c.size("num_hidden_layers")
    vocab = c.size("vocab_size")
    pattern = c.get("hybrid_override_pattern")
    if pattern is None:
        raise c._missing("hybrid_override_pattern", "one of M * - E per layer")
    if not isinstance(pattern, str):
        raise c.error("hybrid_override_pattern", pattern, "must be a string of M * - E", "fix the value")
    if len(pattern) != num_layers:
        raise c.error(
            "hybrid_override_pattern",
            pattern,
            f"has {len(pattern)} characters but num_hidden_layers is {num_layers}",
            "give one character per layer or fix num_hidden_layers",
        )
    bad = sorted(set(pattern) - set("M*-E"))
    if bad:
        raise c.error("hybrid_override_pattern", pattern, f"has unknown characters {bad}", "use only M, *, - and E")

    attention = mamba = mlp = moe = None
    if "*" in pattern:
        heads, kv, head_dim_default = _heads(c, hidden, head_dim_default=c.get("attention_head_dim"))
        attention = AttentionSpec(
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=head_dim_default,
            bias=c.flag("attention_bias", False),
        )
    if "M" in pattern:
        mamba = MambaSpec(
            num_heads=c.size("mamba_num_heads", 128),
            head_dim=c.size("mamba_head_dim", 64),
            state_size=c.size("ssm_state_size", 128),
            num_groups=c.size("n_groups", 8),
            conv_kernel=c.size("conv_kernel", 4),
        )
        if mamba.num_heads % mamba.num_groups:
            raise c.error(
                "n_groups",
                mamba.num_groups,
                f"does not divide mamba_num_heads ({mamba.num_heads}): Mamba-2 shares each B / C group among"
                " an equal number of heads",
                "use a divisor of mamba_num_heads",
            )
    act_key = "mlp_hidden_act"
    act = str(c.get(act_key, "relu2")).lower()
    if act not in ("relu2", "gelu"):
        raise c.error(act_key, act, "unsupported MLP activation (relu2 or gelu)", "use relu2")
    if "-" in pattern:
        mlp = MlpSpec(activation=act, intermediate_size=c.size("intermediate_size"))
    if "E" in pattern:
        experts = c.size("n_routed_experts", what="routed experts")
        top_k = c.size("num_experts_per_tok", what="routed experts per token")
        _check_moe(c, "n_routed_experts", "num_experts_per_tok", experts, top_k)
        shared_inner = c.opt_size("moe_shared_expert_intermediate_size")
        shared = c.count("n_shared_experts", 1 if shared_inner else 0)
        moe = MoeSpec(
            num_experts=experts,
            top_k=top_k,
            expert_intermediate_size=c.size("moe_intermediate_size", what="inner dim of one routed expert"),
            num_shared_experts=shared if shared_inner else 0,
            shared_intermediate_size=shared_inner,
            activation=act,
        )
    make = {
        "M": lambda i: _block("mamba", i, mamba=mamba),
        "*": lambda i: _block("attention", i, attention=attention),
        "-": lambda i: _block("mlp", i, mlp=mlp),
        "E": lambda i: _block("moe_mlp", i, moe=moe),
    }
    blocks = [make[ch](i) for i, ch in enumerate(pattern)]
    tie = c.flag("tie_word_embeddings", False)
    return _Built(hidden, vocab, tie, blocks)


def _jamba(c: _Cfg, model_type: str, include_mtp: bool) -> _Built:
    """jamba: Mamba-1 / attention by attn_layer_period/offset, MoE / MLP by expert_layer_period/offset."""
    hidden = c.size("hidden_size")
    num_layers = c.size("num_hidden_layers")
    vocab = c.size("vocab_size")
    heads, kv, head_dim = _heads(c, hidden, kv_default=8)
    activation = _gated_activation(c)
    attn_period = c.size("attn_layer_period", 8)
    attn_offset = c.count("attn_layer_offset", 4)
    expert_period = c.size("expert_layer_period", 2)
    expert_offset = c.count("expert_layer_offset", 1)
    for key, offset, period in (
        ("attn_layer_offset", attn_offset, attn_period),
        ("expert_layer_offset", expert_offset, expert_period),
    ):
        if offset >= period:
            raise c.error(key, offset, f"must be smaller than its period ({period})", "lower it")
    experts = c.size("num_experts", 16)
    top_k = c.size("num_experts_per_tok", 2)
    _check_moe(c, "num_experts", "num_experts_per_tok", experts, top_k)
    dt_rank = c.get("mamba_dt_rank", "auto")
    if dt_rank == "auto":
        dt_rank = math.ceil(hidden / 16)
    else:
        dt_rank = c.size("mamba_dt_rank")
    inner = c.size("mamba_expand", 2) * hidden
    mamba = MambaSpec(
        version=1,
        num_heads=inner,
        head_dim=1,
        state_size=c.size("mamba_d_state", 16),
        num_groups=1,
        conv_kernel=c.size("mamba_d_conv", 4),
        dt_rank=dt_rank,
    )
    attention = AttentionSpec(num_heads=heads, num_kv_heads=kv, head_dim=head_dim)
    mlp = MlpSpec(activation=activation, intermediate_size=c.size("intermediate_size"))
    moe = MoeSpec(
        num_experts=experts, top_k=top_k, expert_intermediate_size=mlp.intermediate_size, activation=activation
    )
    blocks = []
    for i in range(num_layers):
        is_attention = i % attn_period == attn_offset
        is_expert = experts > 1 and i % expert_period == expert_offset
        if is_attention and is_expert:
            blocks.append(_block("moe", i, attention=attention, moe=moe))
        elif is_attention:
            blocks.append(_block("decoder", i, attention=attention, mlp=mlp))
        elif is_expert:
            blocks.append(_block("mamba_moe", i, mamba=mamba, moe=moe))
        else:
            blocks.append(_block("mamba_mlp", i, mamba=mamba, mlp=mlp))
    tie = c.flag("tie_word_embeddings", False)
    return _Built(hidden, vocab, tie, blocks)


def _plain_activation(c: _Cfg, key: str, default: str) -> str:
    """A non-gated MLP's activation: gelu* (gelu_new, gelu_fast, ...) -> gelu, relu -> relu."""
    act = str(c.get(key, default)).lower()
    if act.startswith("gelu"):
        return "gelu"
    if act == "relu":
        return "relu"
    raise c.error(key, act, "unsupported MLP activation (gelu* or relu)", "use gelu or relu")


def _gpt_family(c: _Cfg, model_type: str, include_mtp: bool) -> _Built:
    """gpt2, gpt_neox, opt, bloom, falcon, mpt: LayerNorm blocks with a non-gated MLP.

    One piece on purpose: one branch per family reads that family's own keys into the same few
    settings, so a family's whole mapping reads top to bottom in one place."""
    # Each family's own key names; transformers' attribute maps accept the generic name too.
    names = {
        "gpt2": ("n_embd", "n_layer", "n_head"),
        "bloom": ("n_embed", "n_layer", "n_head"),
        "mpt": ("d_model", "n_layers", "n_heads"),
    }.get(model_type, ("hidden_size", "num_hidden_layers", "num_attention_heads"))
    generic = ("hidden_size", "num_hidden_layers", "num_attention_heads")
    hidden_key, layers_key, heads_key = (
        own if c.has(own) or not c.has(alias) else alias for own, alias in zip(names, generic, strict=True)
    )
    hidden = c.size(hidden_key)
    num_layers = c.size(layers_key)
    vocab = c.size("vocab_size")
    heads = c.size(heads_key, what="query heads")
    if hidden % heads:
        raise c.error(heads_key, heads, f"does not divide {c.field(hidden_key)} ({hidden})", "fix the head count")
    head_dim = hidden // heads
    problem = head_dim_problem(head_dim)
    if problem is not None:
        raise c.error(heads_key, heads, f"{hidden_key} / {heads_key} = {head_dim} is {problem[0]}", problem[1])
    kv, bias, tie = heads, True, True
    positions: str | None = None  # rotary
    max_positions: int | None = None
    if model_type == "gpt2":
        inner = c.size("n_inner", 4 * hidden)
        activation = _plain_activation(c, "activation_function", "gelu_new")
        positions, max_positions = "learned", c.size("n_positions")
    elif model_type == "gpt_neox":
        # Rotary on `rotary_pct` of each head (0.25 for NeoX-20B): the spec rotates whole heads, whose
        # cost is a few memory-bound bytes per token; parameters and FLOPs are the same.
        inner = c.size("intermediate_size")
        activation = _plain_activation(c, "hidden_act", "gelu")
        bias = c.flag("attention_bias", True)
        tie = c.flag("tie_word_embeddings", False)
    elif model_type == "opt":
        if not c.flag("do_layer_norm_before", True):
            raise c.error(
                "do_layer_norm_before", False, "post-norm OPT (opt-350m) is not supported", "use a pre-norm OPT config"
            )
        proj = c.size("word_embed_proj_dim", hidden)
        if proj != hidden:
            raise c.error(
                "word_embed_proj_dim",
                proj,
                f"differs from hidden_size ({hidden}): the embedding projections (opt-350m) are not supported",
                "use an OPT config whose word_embed_proj_dim equals hidden_size",
            )
        inner = c.size("ffn_dim")
        activation = _plain_activation(c, "activation_function", "relu")
        bias = c.flag("enable_bias", True)
        # OPTLearnedPositionalEmbedding keeps 2 rows more than max_position_embeddings (its offset)
        positions, max_positions = "learned", c.size("max_position_embeddings") + 2
    elif model_type == "bloom":
        inner = 4 * hidden  # BloomMLP is always 4h
        activation = "gelu"
        positions = "alibi"
    elif model_type == "falcon":
        if c.flag("new_decoder_architecture", False):
            kv = c.size("num_kv_heads", heads)
        elif c.flag("multi_query", True):
            kv = 1
        if heads % kv:
            raise c.error("num_kv_heads", kv, f"must divide num_attention_heads ({heads})", "fix the head counts")
        inner = c.size("ffn_hidden_size", 4 * hidden)
        activation = _plain_activation(c, "activation", "gelu")
        bias = c.flag("bias", False)
        positions = "alibi" if c.flag("alibi", False) else None
    else:  # mpt
        attn = c.sub("attn_config", {})
        attn_type = str(attn.get("attn_type", "multihead_attention"))
        if attn_type == "multiquery_attention":
            kv = 1
        elif attn_type == "grouped_query_attention":
            kv = attn.size("kv_n_heads", heads)
        elif attn_type != "multihead_attention":
            raise attn.error(
                "attn_type",
                attn_type,
                "unknown attention type",
                "use multihead_attention, multiquery_attention or grouped_query_attention",
            )
        if heads % kv:
            raise attn.error("kv_n_heads", kv, f"must divide n_heads ({heads})", "fix the head counts")
        inner = c.size("expansion_ratio", 4) * hidden
        if inner > MAX_DIM:
            raise c.error("expansion_ratio", inner // hidden, f"gives an MLP wider than {MAX_DIM:,}", "lower it")
        activation = "gelu"
        bias = not c.flag("no_bias", True)
        if attn.flag("alibi", True):
            positions = "alibi"
        elif c.flag("learned_pos_emb", True):
            positions, max_positions = "learned", c.size("max_seq_len", 2048)
        else:
            raise c.error(
                "learned_pos_emb", False, "with attn_config.alibi false this MPT has no positions", "enable one"
            )
    attention = AttentionSpec(num_heads=heads, num_kv_heads=kv, head_dim=head_dim, bias=bias)
    mlp = MlpSpec(activation=activation, intermediate_size=inner)
    blocks = [_block("decoder", i, attention=attention, mlp=mlp) for i in range(num_layers)]
    return _Built(hidden, vocab, tie, blocks, norm="layernorm", positions=positions, max_positions=max_positions)


_FAMILIES: dict[str, Callable[[_Cfg, str, bool], _Built]] = {
    "llama": _llama_like,
    "mistral": _llama_like,
    "mixtral": _llama_like,
    "qwen2": _llama_like,
    "qwen2_moe": _llama_like,
    "qwen3": _llama_like,
    "qwen3_moe": _llama_like,
    "gemma": _gemma,
    "gemma2": _gemma,
    "gemma3": _gemma,
    "gemma3_text": _gemma,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "nemotron_h": _nemotron_h,
    "jamba": _jamba,
    "gpt2": _gpt_family,
    "gpt_neox": _gpt_family,
    "opt": _gpt_family,
    "bloom": _gpt_family,
    "falcon": _gpt_family,
    "mpt": _gpt_family,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_FAMILIES))


def from_hf_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str | None = None,
    where: str = "config.json",
    include_mtp: bool = False,
) -> ModelSpec:
    """Build the `ModelSpec` of one Hugging Face config dict.

    `where` names the file in error messages; `include_mtp` adds DeepSeek's multi-token
    prediction modules as extra layers before the head (see the module docstring).
    Raises `InputError` with one line naming `where`, the field, the value and the fix.
    """
    c = _Cfg(config, where)
    model_type = config.get("model_type")
    if model_type is None:
        raise c._missing("model_type", f"one of: {', '.join(SUPPORTED_MODEL_TYPES)}")
    family = _FAMILIES.get(str(model_type))
    if family is None:
        raise c.error(
            "model_type", model_type, "unsupported model type", f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    try:
        built = family(c, str(model_type), include_mtp)
        layers = [
            LayerSpec(kind="embedding", name="model.embed_tokens"),
            *built.blocks,
            LayerSpec(kind="head", name="lm_head"),
        ]
        return ModelSpec(
            name=name,
            hidden_size=built.hidden,
            vocab_size=built.vocab,
            tie_word_embeddings=built.tie,
            norm=built.norm,
            position_encoding=built.positions,
            max_position_embeddings=built.max_positions,
            layers=layers,
            extra_parameters=built.extra,
            source=source if source is not None else f"hf:{model_type}",
        )
    except ValidationError as exc:  # a combination the spec rejects that the checks above missed
        err = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or "config"
        message = str(err["msg"]).removeprefix("Value error, ")
        raise InputError(f"{where}: {field}: {message}; check the config values (model_type {model_type})") from None


__all__ = ["SUPPORTED_MODEL_TYPES", "from_hf_config"]
