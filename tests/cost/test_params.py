"""Parameter counting (`adaptis_plan.cost.params`): formulas on hand-sized layers and published totals.

Published totals come from the model cards / papers named beside each number; where the
exact count of the released checkpoint is known it is checked exactly.
"""

from __future__ import annotations

import pytest

from adaptis_plan.cost.params import (
    attention_params,
    layer_params,
    mamba_params,
    mlp_params,
    model_params,
    moe_params,
)
from adaptis_plan.inputs.models import load_model
from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec

pytestmark = pytest.mark.unit


def _model(layers: list[LayerSpec], *, hidden: int = 8, vocab: int = 10, tie: bool = False, norm: str = "rmsnorm"):
    return ModelSpec(
        name="t",
        hidden_size=hidden,
        vocab_size=vocab,
        tie_word_embeddings=tie,
        norm=norm,
        layers=[LayerSpec(kind="embedding"), *layers, LayerSpec(kind="head")],
    )


def test_gqa_attention_by_hand() -> None:
    a = AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=3)
    # q 8*12 + k,v 2*8*6 + o 12*8
    assert attention_params(8, a) == 96 + 96 + 96
    biased = AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=3, bias=True, qk_norm=True)
    assert attention_params(8, biased) == 288 + (4 + 2 * 2) * 3 + 2 * 3


def test_mla_attention_by_hand() -> None:
    a = AttentionSpec(
        type="mla", num_heads=2, num_kv_heads=2, head_dim=5, kv_lora_rank=4, qk_nope_head_dim=3, qk_rope_head_dim=2,
        v_head_dim=3,
    )  # fmt: skip
    h = 8
    q = h * 2 * 5
    kv_down = h * (4 + 2) + 4
    kv_up = 4 * 2 * (3 + 3)
    o = 2 * 3 * h
    assert attention_params(h, a) == q + kv_down + kv_up + o
    lora = a.model_copy(update={"q_lora_rank": 6})
    assert attention_params(h, lora) == (h * 6 + 6 + 6 * 2 * 5) + kv_down + kv_up + o


def test_mlp_and_moe_by_hand() -> None:
    assert mlp_params(8, "swiglu", 16) == 3 * 8 * 16
    assert mlp_params(8, "relu2", 16) == 2 * 8 * 16
    m = MoeSpec(num_experts=4, top_k=2, expert_intermediate_size=16, num_shared_experts=1, shared_intermediate_size=32)
    expert, shared, router = 3 * 8 * 16, 3 * 8 * 32, 8 * 4
    count = moe_params(8, m)
    assert count.total == 4 * expert + shared + router
    assert count.active == 2 * expert + shared + router


def test_mamba2_by_hand() -> None:
    m = MambaSpec(num_heads=4, head_dim=8, state_size=16, num_groups=2, conv_kernel=4)
    h, inner, gn = 16, 32, 2 * 2 * 16
    expected = h * (2 * inner + gn + 4) + (inner + gn) * 5 + 3 * 4 + inner + inner * h
    assert mamba_params(h, m) == expected


def test_mamba1_by_hand() -> None:
    # Mamba-1 (HF MambaMixer): in_proj, conv (+bias), x_proj, dt_proj (+bias), A_log, D, out_proj
    m = MambaSpec(version=1, num_heads=32, head_dim=1, state_size=4, conv_kernel=4, dt_rank=2)
    h, inner = 16, 32
    expected = h * 2 * inner + inner * 5 + inner * (2 + 8) + (2 * inner + inner) + inner * 4 + inner + inner * h
    assert mamba_params(h, m) == expected


def test_mamba_version_fields_validated() -> None:
    with pytest.raises(ValueError, match="dt_rank"):
        MambaSpec(version=1, num_heads=4, head_dim=1, state_size=4)
    with pytest.raises(ValueError, match="version 1 only"):
        MambaSpec(num_heads=4, head_dim=1, state_size=4, dt_rank=2)


def test_tied_embedding_counted_once_and_layernorm() -> None:
    block = LayerSpec(kind="mlp", mlp=MlpSpec(activation="gelu", intermediate_size=4))
    untied = _model([block])
    tied = _model([block], tie=True)
    assert model_params(untied).total - model_params(tied).total == 10 * 8
    assert layer_params(tied, tied.layers[-1]).total == 8  # final norm only
    ln = _model([block], norm="layernorm")
    assert layer_params(ln, ln.layers[1]).total == 2 * 8 * 4 + 2 * 8


def test_moe_layer_active_below_total() -> None:
    moe = MoeSpec(num_experts=8, top_k=2, expert_intermediate_size=4)
    layer = LayerSpec(kind="moe", attention=AttentionSpec(num_heads=2, num_kv_heads=2, head_dim=4), moe=moe)
    model = _model([layer])
    count = layer_params(model, model.layers[1])
    assert count.active < count.total
    assert count.total - count.active == 6 * 3 * 8 * 4


# Published totals: (zoo name, total, active or None, relative tolerance, source).
PUBLISHED = [
    ("llama-2-7b", 6.74e9, None, 0.01, "Llama 2 paper / HF checkpoint: 6,738,415,616"),
    ("gemma-7b", 8.54e9, None, 0.01, "Gemma report Table 2: 786M embedding + 7,751M non-embedding"),
    ("deepseek-v2-lite", 15.7e9, None, 0.01, "DeepSeek-V2-Lite model card: 15.7B total"),
    ("nemotron-h-8b", 8.1e9, None, 0.01, "Nemotron-H report: 8B model, ~8.1B parameters"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01, "Mistral AI Mixtral announcement: 46.7B total, 12.9B active"),
    ("llama-3.1-70b", 70.6e9, None, 0.01, "HF checkpoint: 70,553,706,496"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, "Qwen3 model card: 30.5B total, 3.3B activated (rounded)"),
    ("gemma-2-9b", 9.24e9, None, 0.01, "HF checkpoint: 9,241,705,984"),
    ("jamba-v0.1", 51.6e9, 12e9, 0.01, "AI21 Jamba model card: 52B total (51.6B), 12B active"),
]


@pytest.mark.parametrize(("name", "total", "active", "tol", "source"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_zoo_matches_published_totals(name: str, total: float, active: float | None, tol: float, source: str) -> None:
    count = model_params(load_model(name))
    assert count.total == pytest.approx(total, rel=0.01), source
    if active is not None:
        assert count.active == pytest.approx(active, rel=tol), source


@pytest.mark.parametrize(
    ("name", "exact"),
    [
        ("llama-2-7b", 6_738_415_616),  # HF meta-llama/Llama-2-7b-hf safetensors total
        ("gemma-7b", 8_537_680_896),  # HF google/gemma-7b safetensors total
        ("llama-3.1-70b", 70_553_706_496),  # HF meta-llama/Llama-3.1-70B safetensors total
        ("mixtral-8x7b", 46_702_792_704),  # HF mistralai/Mixtral-8x7B-v0.1 safetensors total
        ("qwen3-30b-a3b", 30_532_122_624),  # HF Qwen/Qwen3-30B-A3B safetensors total
        ("deepseek-v2-lite", 15_706_484_224),  # HF deepseek-ai/DeepSeek-V2-Lite safetensors total
    ],
)
def test_exact_checkpoint_counts(name: str, exact: int) -> None:
    assert model_params(load_model(name)).total == exact


def test_deepseek_active_counts() -> None:
    # DeepSeek's "activated" counts leave out the input embedding (a lookup, not a matmul):
    # V2-Lite card 2.4B (rounded; we get 2.45B), V3 card 37B.
    for name, published, tol in (("deepseek-v2-lite", 2.4e9, 0.025), ("deepseek-v3", 37e9, 0.015)):
        model = load_model(name)
        count = model_params(model)
        embedding = layer_params(model, model.layers[0]).active
        assert count.active - embedding == pytest.approx(published, rel=tol), name


def test_deepseek_v3_with_and_without_mtp() -> None:
    # DeepSeek-V3 card: 671B main model; 685B on HF = 671B + 14B MTP module. The MTP module's
    # checkpoint repeats the embedding and head (shared in training, counted once here) and has
    # eh_proj (not modelled), so with MTP we count 682.5B: within 0.5% of 685B.
    main = model_params(load_model("deepseek-v3")).total
    with_mtp = model_params(load_model("deepseek-v3", include_mtp=True)).total
    assert main == pytest.approx(671e9, rel=0.01)
    assert with_mtp == pytest.approx(685e9, rel=0.01)
    assert 11e9 < with_mtp - main < 14e9


def test_gemma3_multimodal_total() -> None:
    # HF google/gemma-3-4b-it: 4,300,079,472 parameters = language model + SigLIP tower + projector.
    model = load_model("gemma-3-4b")
    total = model_params(model).total + model.extra_parameters
    assert total == pytest.approx(4_300_079_472, rel=0.001)
    assert model.extra_parameters == pytest.approx(419.8e6, rel=0.001)


def test_split_head_keeps_parameters_and_fingerprint():
    from adaptis_plan.cost.params import model_params
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.inputs.models.transform import split_head

    model = load_model("gemma-s")
    for k in (2, 3, 8):
        split = split_head(model, k)
        assert split.num_layers == model.num_layers + k - 1
        assert split.num_head_chunks == k
        assert model_params(split) == model_params(model)
        assert split.fingerprint() == model.fingerprint()
        ranges = [layer.vocab_range for layer in split.layers[-k:]]
        assert ranges[0][0] == 0 and ranges[-1][1] == model.vocab_size
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))


def test_split_head_refuses_tied_embeddings():
    import pytest

    from adaptis_plan.errors import InputError
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.inputs.models.transform import split_head

    with pytest.raises(InputError, match="ties its embeddings"):
        split_head(load_model("gemma-7b"), 2)
