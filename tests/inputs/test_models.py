"""Model inputs (`adaptis_plan.inputs.models`): zoo, HF config importers, native specs, one-line input errors.

Published numbers used here (and where they come from) are noted beside each case; the exact
formulas are tested in test_params.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from adaptis_plan.cost.params import layer_params, model_params
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.models import SUPPORTED_MODEL_TYPES, from_hf_config, list_models, load_model

pytestmark = pytest.mark.unit

CONFIGS = Path(__file__).parents[1] / "data" / "configs"

CONTRACT_NAMES = [
    "llama-2-7b",
    "gemma-7b",
    "deepseek-v2-lite",
    "nemotron-h-8b",
    *(f"{family}-{scale}" for family in ("gemma", "deepseek", "nemotron-h", "llama-2") for scale in "sml"),
    "tiny-llama",
    "tiny-gemma",
    "tiny-deepseek",
    "tiny-nemotron-h",
]


def _kinds(name: str) -> list[str]:
    return [layer.kind for layer in load_model(name).layers]


# ---------------------------------------------------------------- the zoo


def test_zoo_lists_contract_names_with_one_line_descriptions() -> None:
    listed = dict(list_models())
    for name in CONTRACT_NAMES:
        assert name in listed
    for name, description in listed.items():
        assert description and "\n" not in description, name


@pytest.mark.parametrize("name", [name for name, _ in list_models()])
def test_every_zoo_model_builds(name: str) -> None:
    model = load_model(name)
    assert model.name == name
    assert model.layers[0].kind == "embedding" and model.layers[-1].kind == "head"
    assert model_params(model).total > 0


def test_paper_families_shapes() -> None:
    # the AdaPtis paper (arXiv 2509.23722) §5.1: layer counts and vocabularies of the scaled families
    for scale, layers, vocab in (("s", 32, 256000), ("m", 64, 512000), ("l", 128, 1024000)):
        model = load_model(f"gemma-{scale}")
        assert (model.num_layers - 2, model.vocab_size, model.hidden_size) == (layers, vocab, 1536)
    for scale, layers, dense, vocab in (("s", 16, 3, 131072), ("m", 32, 3, 262144), ("l", 64, 7, 524288)):
        kinds = _kinds(f"deepseek-{scale}")[1:-1]
        assert kinds == ["decoder"] * dense + ["moe"] * (layers - dense)
        assert load_model(f"deepseek-{scale}").vocab_size == vocab
    for scale, layers, vocab in (("s", 28, 131072), ("m", 56, 262144), ("l", 112, 262144)):
        kinds = _kinds(f"nemotron-h-{scale}")[1:-1]
        assert len(kinds) == layers
        # 1-based layers 3, 6, 9, ... are attention, the rest Mamba-2
        assert [i + 1 for i, k in enumerate(kinds) if k == "attention"] == list(range(3, layers + 1, 3))
        assert set(kinds) == {"mamba", "attention"}
        assert load_model(f"nemotron-h-{scale}").vocab_size == vocab
    for scale, layers in (("s", 32), ("m", 64), ("l", 128)):
        assert _kinds(f"llama-2-{scale}")[1:-1] == ["decoder"] * layers


def test_tiny_models_are_cpu_sized_and_heterogeneous() -> None:
    for name in ("tiny-llama", "tiny-gemma", "tiny-deepseek", "tiny-nemotron-h"):
        assert 1e6 < model_params(load_model(name)).total < 20e6, name
    gemma = load_model("tiny-gemma")
    # head matmul (vocab x hidden) vs one block's weights: FLOPs per token scale the same way
    block = layer_params(gemma, gemma.layers[1]).total
    assert gemma.vocab_size * gemma.hidden_size > 20 * block
    assert set(_kinds("tiny-deepseek")[1:3]) == {"decoder"} and set(_kinds("tiny-deepseek")[3:-1]) == {"moe"}
    deepseek = load_model("tiny-deepseek")
    assert deepseek.layers[3].attention.type == "mla" and deepseek.layers[3].moe.num_shared_experts == 1
    assert set(_kinds("tiny-nemotron-h")[1:-1]) == {"mamba", "attention", "mlp"}


# ---------------------------------------------------------------- the published config.json files

SHARED = [
    # (folder, published total, source)
    ("llama-2-7b", 6.74e9, "Llama 2 paper / HF card"),
    ("gemma-7b", 8.54e9, "Gemma technical report, Table 2"),
    ("deepseek-v2-lite", 15.7e9, "DeepSeek-V2-Lite model card (2.4B active)"),
    ("nemotron-h-8b", 8.1e9, "Nemotron-H report (~8.1B)"),
]


@pytest.mark.parametrize(("folder", "total", "source"), SHARED, ids=[s[0] for s in SHARED])
def test_published_configs_match_published_and_zoo(folder: str, total: float, source: str, tmp_path: Path) -> None:
    """tests/data/configs/NAME.json is the model's published config.json, loaded as a file and as a folder."""
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "config.json").write_bytes((CONFIGS / f"{folder}.json").read_bytes())
    from_folder = load_model(str(tmp_path / folder))
    from_file = load_model(str(tmp_path / folder / "config.json"))
    zoo = load_model(folder)
    assert from_folder.name == folder
    assert model_params(from_file).total == pytest.approx(total, rel=0.01), source
    assert from_folder.fingerprint() == from_file.fingerprint() == zoo.fingerprint()
    assert from_folder.layers == zoo.layers
    assert from_folder.source != zoo.source


def test_nemotron_h_8b_pattern_layers() -> None:
    kinds = _kinds("nemotron-h-8b")[1:-1]
    assert Counter(kinds) == {"mamba": 24, "mlp": 24, "attention": 4}
    assert kinds[:9] == ["mamba", "mlp"] * 3 + ["mamba", "attention", "mlp"]  # "M-M-M-M*-"


def test_deepseek_v2_lite_layers() -> None:
    model = load_model("deepseek-v2-lite")
    kinds = [layer.kind for layer in model.layers]
    assert kinds == ["embedding", "decoder"] + ["moe"] * 26 + ["head"]
    attention = model.layers[2].attention
    assert (attention.type, attention.q_lora_rank, attention.kv_lora_rank) == ("mla", None, 512)


# ---------------------------------------------------------------- tests/data/configs (real config.json copies)

DATA = [
    # (file stem, zoo name, published total (pipelined + extra), source)
    ("mixtral-8x7b", "mixtral-8x7b", 46.7e9, "Mistral AI: 46.7B total, 12.9B active"),
    ("llama-3.1-70b", "llama-3.1-70b", 70.6e9, "HF checkpoint: 70,553,706,496"),
    ("deepseek-v3", "deepseek-v3", 671e9, "DeepSeek-V3 card: 671B main model (+14B MTP = 685B)"),
    ("qwen3-30b-a3b", "qwen3-30b-a3b", 30.5e9, "Qwen3 card: 30.5B total, 3.3B activated"),
    ("gemma-2-9b", "gemma-2-9b", 9.24e9, "HF checkpoint: 9,241,705,984"),
    ("jamba-v0.1", "jamba-v0.1", 51.6e9, "AI21 card: 52B total (51.6B), 12B active"),
    ("gemma-3-4b-it", "gemma-3-4b", 4.30e9, "HF checkpoint: 4,300,079,472 incl. SigLIP tower"),
]


@pytest.mark.parametrize(("stem", "zoo_name", "total", "source"), DATA, ids=[d[0] for d in DATA])
def test_real_configs_match_published_and_zoo(stem: str, zoo_name: str, total: float, source: str) -> None:
    model = load_model(str(CONFIGS / f"{stem}.json"))
    assert model.name == stem
    assert model_params(model).total + model.extra_parameters == pytest.approx(total, rel=0.01), source
    assert model.fingerprint() == load_model(zoo_name).fingerprint()


def test_deepseek_v3_mtp_layer() -> None:
    # DeepSeek-V3 README: 671B main + 14B MTP module = 685B on Hugging Face
    path = str(CONFIGS / "deepseek-v3.json")
    plain, with_mtp = load_model(path), load_model(path, include_mtp=True)
    assert with_mtp.num_layers == plain.num_layers + 1 == 64
    mtp = with_mtp.layers[-2]
    assert (mtp.kind, mtp.name) == ("moe", "model.layers.61")
    assert model_params(with_mtp).total == pytest.approx(685e9, rel=0.01)
    kinds = [layer.kind for layer in plain.layers[1:-1]]
    assert kinds == ["decoder"] * 3 + ["moe"] * 58


def test_jamba_layer_periods() -> None:
    kinds = [layer.kind for layer in load_model(str(CONFIGS / "jamba-v0.1.json")).layers[1:-1]]
    # attention every 8th layer from 4, experts every 2nd from 1 (Jamba paper, Fig. 1)
    assert [i for i, k in enumerate(kinds) if k in ("decoder", "moe")] == [4, 12, 20, 28]
    assert [i for i, k in enumerate(kinds) if k in ("moe", "mamba_moe")] == list(range(1, 32, 2))
    assert Counter(kinds) == {"mamba_mlp": 12, "mamba_moe": 16, "decoder": 4}
    mamba = load_model("jamba-v0.1").layers[1].mamba
    assert (mamba.version, mamba.num_heads * mamba.head_dim, mamba.dt_rank) == (1, 8192, 256)


def test_gemma_sliding_windows_and_head_dim() -> None:
    gemma2 = load_model(str(CONFIGS / "gemma-2-9b.json"))
    windows = [layer.attention.sliding_window for layer in gemma2.layers[1:-1]]
    assert windows[:4] == [4096, None, 4096, None]
    assert gemma2.tie_word_embeddings and gemma2.layers[1].attention.head_dim == 256
    gemma3 = load_model(str(CONFIGS / "gemma-3-4b-it.json"))
    windows = [layer.attention.sliding_window for layer in gemma3.layers[1:-1]]
    assert [i for i, w in enumerate(windows) if w is None] == [5, 11, 17, 23, 29]
    assert set(windows) == {None, 1024}
    attention = gemma3.layers[1].attention
    # Gemma3TextConfig defaults: 8 heads, 4 kv heads, head_dim 256, vocab 262208, qk-norm
    assert (attention.num_heads, attention.num_kv_heads, attention.head_dim, attention.qk_norm) == (8, 4, 256, True)
    assert gemma3.vocab_size == 262208
    gemma7b = load_model("gemma-7b")
    assert gemma7b.layers[1].attention.head_dim * 16 != gemma7b.hidden_size


def test_gemma3_text_alone_equals_the_multimodal_language_model() -> None:
    full = json.loads((CONFIGS / "gemma-3-4b-it.json").read_text())
    text = from_hf_config(full["text_config"], name="x")
    multimodal = from_hf_config(full, name="x")
    assert text.layers == multimodal.layers
    assert text.extra_parameters == 0 < multimodal.extra_parameters


def test_qwen3_moe_and_other_importers() -> None:
    qwen3 = load_model(str(CONFIGS / "qwen3-30b-a3b.json"))
    layer = qwen3.layers[1]
    assert layer.kind == "moe" and layer.attention.qk_norm and layer.moe.num_experts == 128
    assert model_params(qwen3).active == pytest.approx(3.3e9, rel=0.02)  # Qwen3 card: 3.3B activated
    base = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100}
    qwen2 = from_hf_config({**base, "model_type": "qwen2", "intermediate_size": 128}, name="q2")
    assert qwen2.layers[1].attention.bias and qwen2.layers[1].kind == "decoder"
    qwen2_moe = from_hf_config(
        {
            **base,
            "model_type": "qwen2_moe",
            "intermediate_size": 128,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
            "mlp_only_layers": [0],
            "decoder_sparse_step": 1,
        },
        name="q2moe",
    )
    assert [layer.kind for layer in qwen2_moe.layers[1:-1]] == ["decoder", "moe", "moe", "moe"]
    assert qwen2_moe.layers[2].moe.shared_intermediate_size == 64
    mistral = from_hf_config(
        {**base, "model_type": "mistral", "intermediate_size": 128, "sliding_window": 32}, name="m"
    )
    assert mistral.layers[1].attention.sliding_window == 32
    nemotron_moe = from_hf_config(
        {
            **base,
            "model_type": "nemotron_h",
            "hybrid_override_pattern": "ME*E",
            "mamba_num_heads": 4,
            "mamba_head_dim": 32,
            "n_groups": 1,
            "ssm_state_size": 16,
            "n_routed_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "moe_shared_expert_intermediate_size": 64,
        },
        name="nm",
    )
    assert [layer.kind for layer in nemotron_moe.layers[1:-1]] == ["mamba", "moe_mlp", "attention", "moe_mlp"]
    assert nemotron_moe.layers[2].moe.activation == "relu2"
    assert set(SUPPORTED_MODEL_TYPES) >= {"llama", "gemma3", "deepseek_v3", "nemotron_h", "jamba", "qwen3_moe"}


# ---------------------------------------------------------------- native spec files


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_native_spec_round_trip(tmp_path: Path, suffix: str) -> None:
    model = load_model("tiny-nemotron-h")
    data = model.model_dump(mode="json")
    data["name"] = "mine"
    path = tmp_path / f"spec{suffix}"
    path.write_text(json.dumps(data) if suffix == ".json" else yaml.safe_dump(data))
    loaded = load_model(str(path))
    assert loaded.name == "mine"
    assert loaded.fingerprint() == model.fingerprint()


# ---------------------------------------------------------------- bad inputs: one line, file + field + fix


def _native(tmp_path: Path, mutate, name: str = "spec.json") -> Path:
    data = load_model("tiny-llama").model_dump(mode="json", exclude_none=True)
    mutate(data)
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2) if name.endswith(".json") else yaml.safe_dump(data))
    return path


def _hf(tmp_path: Path, mutate, name: str = "config.json") -> Path:
    data = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
    mutate(data)
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


def _error(arg: object) -> str:
    with pytest.raises(InputError) as info:
        load_model(str(arg))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}')
    message = _error(path)
    assert message.startswith(f"{path}: not valid JSON (line 3, column 23: ")


def test_malformed_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nhidden_size: [1, 2\nvocab_size: 3\n")
    message = _error(path)
    assert message.startswith(f"{path}: not valid YAML (line 3, column 11)")


def test_native_missing_field(tmp_path: Path) -> None:
    path = _native(tmp_path, lambda d: d["layers"][3]["mlp"].pop("intermediate_size"))
    assert _error(path) == f"{path}: layers[3].mlp.intermediate_size: field required; add it"


def test_native_misspelt_field(tmp_path: Path) -> None:
    def misspell(d: dict) -> None:
        d["layers"][2]["attention"]["num_kv_head"] = d["layers"][2]["attention"].pop("num_kv_heads")

    message = _error(_native(tmp_path, misspell, "spec.yaml"))
    assert "spec.yaml: layers[2].attention.num_kv_head = 4: unknown field; did you mean 'num_kv_heads'?" in message


def test_native_nonpositive_size(tmp_path: Path) -> None:
    path = _native(tmp_path, lambda d: d["layers"][1]["attention"].update(num_heads=-4))
    message = _error(path)
    assert message == f"{path}: layers[1].attention.num_heads = -4: out of range; allowed: 1..10,000,000"


def test_native_kind_without_its_section(tmp_path: Path) -> None:
    message = _error(_native(tmp_path, lambda d: d["layers"][2].pop("mlp")))
    assert "layers[2]" in message and "needs a 'mlp' section" in message


def test_hf_missing_and_misspelt_field(tmp_path: Path) -> None:
    path = _hf(tmp_path, lambda d: d.pop("hidden_size"))
    assert _error(path) == f"{path}: hidden_size: missing; add it (a positive integer)"
    path = _hf(tmp_path, lambda d: d.update(hiden_size=d.pop("hidden_size")))
    assert _error(path) == f"{path}: hidden_size: missing; found 'hiden_size': fix its spelling"


@pytest.mark.parametrize(("field", "value"), [("hidden_size", 0), ("num_local_experts", -8), ("vocab_size", 3.5)])
def test_hf_nonpositive_or_bad_size(tmp_path: Path, field: str, value: object) -> None:
    path = _hf(tmp_path, lambda d: d.update({field: value}))
    message = _error(path)
    assert message.startswith(f"{path}: {field} = {value!r}: must be")


def test_hf_top_k_above_experts(tmp_path: Path) -> None:
    message = _error(_hf(tmp_path, lambda d: d.update(num_experts_per_tok=9)))
    assert "num_experts_per_tok = 9: exceeds num_local_experts (8)" in message


def test_hybrid_pattern_length_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    data = {
        "model_type": "nemotron_h",
        "hidden_size": 64,
        "num_hidden_layers": 5,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "intermediate_size": 128,
        "hybrid_override_pattern": "M-M*",
    }
    path.write_text(json.dumps(data))
    message = _error(path)
    assert f"{path}: hybrid_override_pattern = 'M-M*': has 4 characters but num_hidden_layers is 5" in message
    data["hybrid_override_pattern"] = "M-MXM"
    path.write_text(json.dumps(data))
    assert "unknown characters ['X']" in _error(path)


def test_hf_fields_that_contradict_each_other(tmp_path: Path) -> None:
    """A DeepSeek config whose dense prefix covers every layer, and a Mamba-2 whose groups do not divide its heads."""
    ds = json.loads((CONFIGS / "deepseek-v2-lite.json").read_text())
    ds["first_k_dense_replace"] = ds["num_hidden_layers"]
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds))
    assert f"first_k_dense_replace = {ds['num_hidden_layers']}: makes every one of the" in _error(path)
    nh = json.loads((CONFIGS / "nemotron-h-8b.json").read_text())
    nh["n_groups"] = 7
    path = tmp_path / "nh.json"
    path.write_text(json.dumps(nh))
    assert "n_groups = 7: does not divide mamba_num_heads" in _error(path)


def test_unknown_model_type_lists_supported(tmp_path: Path) -> None:
    path = _hf(tmp_path, lambda d: d.update(model_type="t5"))
    message = _error(path)
    assert message.startswith(f"{path}: model_type = 't5': unsupported model type; supported: ")
    assert "deepseek_v3" in message and "nemotron_h" in message


def test_unknown_builtin_name_suggests_nearest() -> None:
    assert _error("gema-7b") == "unknown model 'gema-7b'; did you mean 'gemma-7b'? `adaptis models` lists them"
    assert _error("zzzzqqq") == "unknown model 'zzzzqqq'; `adaptis models` lists them"


def test_missing_file_and_folder_without_config(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "config.json"
    assert (
        _error(missing)
        == f"{missing}: file not found; check the path, or use a built-in name (`adaptis models` lists them)"
    )
    assert str(tmp_path) in _error(tmp_path) and "no config.json" in _error(tmp_path)


def test_file_that_is_neither_format(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hidden_size": 8}')
    assert "neither 'model_type'" in _error(path)
    path.write_text("[1, 2]")
    assert "not an object" in _error(path)


# ---------------------------------------------------------------- semantic sense of the attention heads


@pytest.mark.parametrize(("head_dim", "needle"), [(3, "narrower than 8"), (9, "odd"), (2, "narrower than 8")])
def test_native_head_dim_that_makes_no_sense(tmp_path: Path, head_dim: int, needle: str) -> None:
    def narrow(d: dict) -> None:
        for layer in d["layers"]:
            if "attention" in layer:
                layer["attention"]["head_dim"] = head_dim

    message = _error(_native(tmp_path, narrow))
    assert f"layers[1].attention.head_dim = {head_dim}: {needle}" in message


def test_hf_head_dim_that_makes_no_sense(tmp_path: Path) -> None:
    message = _error(_hf(tmp_path, lambda d: d.update(head_dim=3)))
    assert "config.json: head_dim = 3: narrower than 8; use 8 or more" in message
    derived = _error(_hf(tmp_path, lambda d: d.update(hidden_size=96, num_attention_heads=32, num_key_value_heads=8)))
    assert "num_attention_heads = 32: hidden_size / num_attention_heads = 3 is narrower than 8" in derived


def test_mla_rotary_width_must_be_even(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    data = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    data["qk_rope_head_dim"] = 63
    path.write_text(json.dumps(data))
    assert "qk_rope_head_dim = 63: odd" in _error(path)


@pytest.mark.parametrize("vocab", [1, 0])
def test_vocabulary_of_one_token(tmp_path: Path, vocab: int) -> None:
    assert "vocab_size" in _error(_hf(tmp_path, lambda d: d.update(vocab_size=vocab)))
    assert "vocab_size" in _error(_native(tmp_path, lambda d: d.update(vocab_size=vocab)))


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("num_hidden_layers", 10**9, "num_hidden_layers = 1000000000: out of range; allowed: 1..99,998"),
        ("hidden_size", 1e30, "hidden_size = 1e+30: out of range; allowed: 1..1,000,000"),
        ("intermediate_size", 10**12, "intermediate_size = 1000000000000: out of range"),
        ("num_local_experts", 2**63, "num_local_experts"),
    ],
)
def test_hf_absurd_sizes_are_refused_before_building(tmp_path: Path, key: str, value: float, needle: str) -> None:
    assert needle in _error(_hf(tmp_path, lambda d: d.update({key: value})))
