"""The built-in model zoo: names -> Hugging Face-style config dicts -> `ModelSpec`.

Data flow: inputs. `load.load_model` resolves a built-in name here; every entry goes through
the same importer as a user's `config.json` (`hf.from_hf_config`), so a zoo model and its
config file give the same layers and the same fingerprint. The config values are embedded in
code because the installed package has no access to the repository's `tests/data/configs/`.
Imports only `hf`: no torch, no ortools, no rich/click.

Families:
- Real models: the config values of the published `config.json` files (fields the importer
  reads; the four paper models match `tests/data/configs/*.json`).
- The paper's scaled families (the AdaPtis paper (arXiv 2509.23722) §5.1, small / medium / large):
  - `gemma-s|m|l`: hidden 1536, 32 heads, with Gemma's proportions: head_dim 256 (MHA, as
    gemma-7b) and a GeGLU inner of 8 x hidden = 12288 (gemma-7b: 24576 / 3072); 32 / 64 / 128 layers, vocab 256000 / 512000 / 1024000. Embeddings untied (Gemma ties
    them): under pipeline parallelism the head's stage holds its own copy of the matrix with
    gradients and optimizer state (as Megatron does), which is what the paper's memory model
    counts (v*h for the embedding and again for the head); untied specs make each of the two
    layers carry that weight.
  - `deepseek-s|m|l`: hidden 2048, DeepSeek-V2-Lite MLA (16 heads, kv_lora 512, no q_lora) and
    experts (64 routed top-6 + 2 shared, inner 1408; dense inner 10944), 16 / 32 / 64 layers
    of which the first 3 / 3 / 7 (= L/PP - 1) are dense, vocab 131072 / 262144 / 524288.
  - `nemotron-h-s|m|l`: hidden 1024, pattern `MM*` repeated (every third layer attention, the
    rest Mamba-2), 28 / 56 / 112 layers, vocab 131072 / 262144 / 262144; attention 32 heads,
    8 kv heads, head_dim 32; Mamba 32 heads x 64 (expand 2), state 128, 8 groups.
  - `llama-2-s|m|l`: the homogeneous control; our choice (the notes give no size): LLaMA-2
    shape at hidden 2048 (16 heads of 128, MHA, SwiGLU inner 5504 = 7B's 11008 / 2), with the
    Gemma layer progression 32 / 64 / 128 (PP 4 / 8 / 16 -> 8 layers per device), vocab 32000.
- CPU-sized models for real runs: `tiny-llama`; `tiny-gemma` (vocab 96000 at hidden 64, so
  the head's FLOPs are ~30x one block's; untied, so stages share no weights); `tiny-deepseek`
  (MLA, 2 dense then 6 MoE layers of 8 experts top-2 + 1 shared); `tiny-nemotron-h` (Mamba-2,
  attention and MLP layers).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from adaptis_plan.inputs.models.hf import from_hf_config
from adaptis_plan.spec.model import ModelSpec


@dataclass(frozen=True)
class ZooEntry:
    """One built-in model: its name, a one-line description and a Hugging Face-style config."""

    name: str
    description: str
    config: dict[str, Any] = field(repr=False)


# ---------------------------------------------------------------- real models

_LLAMA_2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

_GEMMA_7B = {
    "model_type": "gemma",
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 256,
    "vocab_size": 256000,
    "hidden_act": "gelu",
    "tie_word_embeddings": True,
}

_DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 102400,
    "tie_word_embeddings": False,
}

_NEMOTRON_H_8B = {
    "model_type": "nemotron_h",
    "hidden_size": 4096,
    "intermediate_size": 21504,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "vocab_size": 131072,
    "mlp_hidden_act": "relu2",
    "tie_word_embeddings": False,
}

_MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "sliding_window": None,
    "vocab_size": 32000,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

_LLAMA_31_70B = {
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": False,
}

_DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

_QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "use_sliding_window": False,
    "sliding_window": None,
    "vocab_size": 151936,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

_GEMMA_2_9B = {
    "model_type": "gemma2",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "sliding_window": 4096,
    "vocab_size": 256000,
    "hidden_activation": "gelu_pytorch_tanh",
}

_GEMMA_3_4B = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "num_hidden_layers": 34,
        "sliding_window": 1024,
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "image_size": 896,
        "patch_size": 14,
        "vision_use_head": False,
    },
}

_JAMBA_V01 = {
    "model_type": "jamba",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "expert_layer_period": 2,
    "expert_layer_offset": 1,
    "num_experts": 16,
    "num_experts_per_tok": 2,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_dt_rank": 256,
    "vocab_size": 65536,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

# ---------------------------------------------------------------- the paper's scaled families (§5.1)

_SCALES = ("s", "m", "l")


def _gemma_scaled(num_layers: int, vocab: int) -> dict[str, Any]:
    return {
        "model_type": "gemma",
        "hidden_size": 1536,
        "intermediate_size": 12288,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 256,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
    }


def _deepseek_scaled(num_layers: int, first_dense: int, vocab: int) -> dict[str, Any]:
    config = dict(_DEEPSEEK_V2_LITE)
    config.update(num_hidden_layers=num_layers, first_k_dense_replace=first_dense, vocab_size=vocab)
    return config


def _nemotron_scaled(num_layers: int, vocab: int) -> dict[str, Any]:
    return {
        "model_type": "nemotron_h",
        "hidden_size": 1024,
        "num_hidden_layers": num_layers,
        "hybrid_override_pattern": ("MM*" * num_layers)[:num_layers],
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 32,
        "mamba_num_heads": 32,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
    }


def _llama_scaled(num_layers: int) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 5504,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 32000,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }


# ---------------------------------------------------------------- CPU-sized models

_TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 8192,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}

_TINY_GEMMA = {
    "model_type": "gemma",
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 96000,
    "tie_word_embeddings": False,
}

_TINY_DEEPSEEK = {
    "model_type": "deepseek_v2",
    "hidden_size": 128,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 2,
    "moe_layer_freq": 1,
    "kv_lora_rank": 64,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "vocab_size": 8192,
    "tie_word_embeddings": False,
}

_TINY_NEMOTRON_H = {
    "model_type": "nemotron_h",
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 10,
    "hybrid_override_pattern": "M-M*M-M*M-",
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "mamba_num_heads": 8,
    "mamba_head_dim": 32,
    "ssm_state_size": 16,
    "n_groups": 2,
    "conv_kernel": 4,
    "vocab_size": 8192,
    "mlp_hidden_act": "relu2",
    "tie_word_embeddings": False,
}


def _entries() -> list[ZooEntry]:
    """Every built-in model, in the order `adaptis models` lists them: a table, kept in one piece so
    that the list reads as the zoo."""
    entries = [
        ZooEntry("llama-2-7b", "LLaMA-2 7B: 32 dense decoder layers, hidden 4096, vocab 32K", _LLAMA_2_7B),
        ZooEntry("gemma-7b", "Gemma 7B: 28 GeGLU decoder layers, head_dim 256, vocab 256K (tied)", _GEMMA_7B),
        ZooEntry(
            "deepseek-v2-lite",
            "DeepSeek-V2-Lite 15.7B (2.4B active): MLA, 1 dense + 26 MoE layers (64 experts top-6 + 2 shared)",
            _DEEPSEEK_V2_LITE,
        ),
        ZooEntry(
            "nemotron-h-8b",
            "Nemotron-H 8B: 52 layers = 24 Mamba-2 + 4 attention + 24 MLP, vocab 131K",
            _NEMOTRON_H_8B,
        ),
    ]
    gemma = [(32, 256000), (64, 512000), (128, 1024000)]
    deepseek = [(16, 3, 131072), (32, 3, 262144), (64, 7, 524288)]
    nemotron = [(28, 131072), (56, 262144), (112, 262144)]
    llama = [32, 64, 128]
    for i, scale in enumerate(_SCALES):
        layers, vocab = gemma[i]
        entries.append(
            ZooEntry(
                f"gemma-{scale}",
                f"paper's Gemma-{scale.upper()}: {layers} GeGLU layers at hidden 1536, vocab {vocab // 1000}K",
                _gemma_scaled(layers, vocab),
            )
        )
    for i, scale in enumerate(_SCALES):
        layers, dense, vocab = deepseek[i]
        entries.append(
            ZooEntry(
                f"deepseek-{scale}",
                f"paper's DeepSeek-{scale.upper()}: {dense} dense + {layers - dense} MoE MLA layers at hidden 2048, "
                f"vocab {vocab // 1024}K",
                _deepseek_scaled(layers, dense, vocab),
            )
        )
    for i, scale in enumerate(_SCALES):
        layers, vocab = nemotron[i]
        entries.append(
            ZooEntry(
                f"nemotron-h-{scale}",
                f"paper's Nemotron-H-{scale.upper()}: {layers} layers, pattern MM* (every 3rd attention, rest Mamba-2), "
                f"hidden 1024, vocab {vocab // 1024}K",
                _nemotron_scaled(layers, vocab),
            )
        )
    for i, scale in enumerate(_SCALES):
        layers = llama[i]
        entries.append(
            ZooEntry(
                f"llama-2-{scale}",
                f"homogeneous control LLaMA-2-{scale.upper()}: {layers} dense layers at hidden 2048, vocab 32K",
                _llama_scaled(layers),
            )
        )
    entries += [
        ZooEntry("tiny-llama", "CPU-sized LLaMA: 8 dense layers, hidden 128, vocab 8K (~3.7M params)", _TINY_LLAMA),
        ZooEntry(
            "tiny-gemma",
            "CPU-sized Gemma: 8 layers at hidden 64 with a 96K vocab, so the head dominates (~12.9M params)",
            _TINY_GEMMA,
        ),
        ZooEntry(
            "tiny-deepseek",
            "CPU-sized DeepSeek: MLA, 2 dense + 6 MoE layers (8 experts top-2 + 1 shared), hidden 128",
            _TINY_DEEPSEEK,
        ),
        ZooEntry(
            "tiny-nemotron-h",
            "CPU-sized Nemotron-H: 10 layers M-M*M-M*M- (Mamba-2, attention, MLP), hidden 128",
            _TINY_NEMOTRON_H,
        ),
        ZooEntry(
            "mixtral-8x7b", "Mixtral 8x7B 46.7B (12.9B active): 32 MoE layers, 8 experts top-2, GQA 8", _MIXTRAL_8X7B
        ),
        ZooEntry("llama-3.1-70b", "LLaMA-3.1 70B: 80 dense layers, GQA 8, vocab 128K", _LLAMA_31_70B),
        ZooEntry(
            "deepseek-v3",
            "DeepSeek-V3 671B (37B active): MLA, 3 dense + 58 MoE layers (256 experts top-8 + 1 shared); MTP off",
            _DEEPSEEK_V3,
        ),
        ZooEntry(
            "qwen3-30b-a3b",
            "Qwen3-30B-A3B (3.3B active): 48 MoE layers, 128 experts top-8, QK-norm, GQA 4",
            _QWEN3_30B_A3B,
        ),
        ZooEntry("gemma-2-9b", "Gemma-2 9B: 42 layers alternating sliding-window / global, vocab 256K", _GEMMA_2_9B),
        ZooEntry(
            "gemma-3-4b",
            "Gemma-3 4B (multimodal): 34 text layers 5:1 local/global, vocab 262K; SigLIP tower reported as extra",
            _GEMMA_3_4B,
        ),
        ZooEntry(
            "jamba-v0.1",
            "Jamba v0.1 52B (12B active): 32 layers, Mamba-1 : attention 7:1, MoE every 2nd layer (16 top-2)",
            _JAMBA_V01,
        ),
    ]
    return entries


_ZOO: dict[str, ZooEntry] = {entry.name: entry for entry in _entries()}


def names() -> list[str]:
    """Built-in model names, in listing order."""
    return list(_ZOO)


def entry(name: str) -> ZooEntry:
    """The zoo entry of `name` (KeyError if unknown; `load.load_model` gives the user-facing error)."""
    return _ZOO[name]


def build(name: str, *, include_mtp: bool = False) -> ModelSpec:
    """The `ModelSpec` of a built-in model (KeyError if unknown)."""
    item = _ZOO[name]
    config = copy.deepcopy(item.config)
    return from_hf_config(
        config,
        name=name,
        source=f"zoo:{config['model_type']}",
        where=f"built-in model '{name}'",
        include_mtp=include_mtp,
    )


__all__ = ["ZooEntry", "build", "entry", "names"]
