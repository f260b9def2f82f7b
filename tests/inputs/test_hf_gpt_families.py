"""Hugging Face importers of the GPT-style families (gpt2, gpt_neox, opt, bloom, falcon, mpt).

The configs in tests/data/configs/ are copies of the public `config.json`s; the published sizes
are the checkpoints' parameter counts. The spec leaves out the attention output and MLP biases
(and, per family, a LayerNorm here or there: `inputs/models/hf.py`'s docstring); each case
states by how much, and the count must match the published one less exactly that, to the
parameter, and the published one itself within 1%.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adaptis_plan.cost.table import check_sequence_length
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.models import SUPPORTED_MODEL_TYPES, from_hf_config, load_model
from adaptis_plan.spec.model import ModelSpec

CONFIGS = Path(__file__).parents[1] / "data" / "configs"


def _unmodelled(layers: int, hidden: int, inner: int, biases: bool, per_layer_norms: int = 0) -> int:
    """Parameters of the checkpoint the spec does not count: output and MLP biases, norm adjustments."""
    return layers * ((hidden + inner + hidden if biases else 0) + per_layer_norms * hidden)


CASES = [
    # (file stem, published parameters, published - ours, source)
    ("gpt2", 124_439_808, _unmodelled(12, 768, 3072, True), "HF gpt2 checkpoint: 124,439,808"),
    ("gpt2-xl", 1_557_611_200, _unmodelled(48, 1600, 6400, True), "HF gpt2-xl checkpoint: 1,557,611,200"),
    # published to three digits only: the exact check below is skipped for it
    ("gpt-neox-20b", 20.6e9, None, "GPT-NeoX-20B (Black et al. 2022): 20.6B"),
    ("opt-1.3b", 1_315_758_080, _unmodelled(24, 2048, 8192, True), "HF facebook/opt-1.3b: 1,315,758,080"),
    # + BLOOM's LayerNorm after the embedding (2 x hidden)
    ("bloom", 176_247_271_424, _unmodelled(70, 14336, 57344, True) + 2 * 14336, "BLOOM card: 176,247,271,424"),
    ("bloom-7b1", 7_069_016_064, _unmodelled(30, 4096, 16384, True) + 2 * 4096, "BLOOM-7b1 card: 7,069,016,064"),
    # one LayerNorm per parallel block where the spec counts two
    ("falcon-7b", 6_921_720_704, _unmodelled(32, 4544, 18176, False, -2), "HF tiiuae/falcon-7b: 6,921,720,704"),
    # bias-free LayerNorms: the spec counts 2 x hidden for each of 2 per layer and the final one
    ("mpt-7b", 6_649_286_656, -(2 * 32 + 1) * 4096, "MosaicML MPT-7B: 6,649,286,656"),
]


def _show(path: Path) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "adaptis_plan.cli", "model", "show", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(r.stdout)


@pytest.mark.parametrize(("stem", "published", "missing", "source"), CASES, ids=[c[0] for c in CASES])
def test_parameters_match_the_published_count(stem: str, published: float, missing: int | None, source: str) -> None:
    shown = _show(CONFIGS / f"{stem}.json")
    if missing is not None:
        assert shown["parameters"] == published - missing, source
        assert abs(missing) / published < 0.001  # what is not modelled is below 0.1% of the model
    assert shown["parameters"] == pytest.approx(published, rel=0.01), source


def test_falcon_40b_counts_its_tied_head_once() -> None:
    # The often-quoted 41.8B is the checkpoint's tensor sizes summed: it stores lm_head.weight beside
    # the tied embedding (as falcon-7b's, whose 7.22B = 6.92B + 65024 x 4544). Counted once, as
    # transformers does, the model has 41.30B; no bias, two LayerNorms per block as the spec has.
    model = load_model(str(CONFIGS / "falcon-40b.json"))
    shown = _show(CONFIGS / "falcon-40b.json")
    assert model.tie_word_embeddings
    assert shown["parameters"] == 41_303_293_952
    assert shown["parameters"] + 65024 * 8192 == pytest.approx(41.8e9, rel=0.01)
    attention = model.layers[1].attention
    assert (attention.num_heads, attention.num_kv_heads, attention.head_dim) == (128, 8, 64)


def test_family_shapes() -> None:
    def first(stem: str):  # noqa: ANN202
        model = load_model(str(CONFIGS / f"{stem}.json"))
        assert model.norm == "layernorm" and model.layers[1].kind == "decoder"
        return model, model.layers[1].attention, model.layers[1].mlp

    model, a, m = first("gpt2")
    assert (model.position_encoding, model.max_position_embeddings, model.tie_word_embeddings) == (
        "learned",
        1024,
        True,
    )
    assert (a.num_kv_heads, a.bias, m.activation, m.intermediate_size) == (12, True, "gelu", 3072)
    model, a, m = first("opt-1.3b")
    assert (model.position_encoding, model.max_position_embeddings) == ("learned", 2050)  # OPT's offset of 2
    assert (m.activation, m.intermediate_size, a.bias) == ("relu", 8192, True)
    model, a, m = first("gpt-neox-20b")
    assert (model.position_encoding, model.tie_word_embeddings, a.bias) == (None, False, True)
    model, a, m = first("bloom")
    assert (model.position_encoding, model.hidden_size, a.num_heads, m.intermediate_size) == (
        "alibi",
        14336,
        112,
        57344,
    )
    assert model.num_layers == 72
    model, a, m = first("falcon-7b")
    assert (model.position_encoding, a.num_heads, a.num_kv_heads, a.head_dim, a.bias) == (None, 71, 1, 64, False)
    model, a, m = first("mpt-7b")
    assert (model.position_encoding, model.max_position_embeddings, a.bias, m.intermediate_size) == (
        "alibi",
        None,
        False,
        16384,
    )
    assert {"gpt2", "gpt_neox", "opt", "bloom", "falcon", "mpt"} <= set(SUPPORTED_MODEL_TYPES)


def test_family_options() -> None:
    base = json.loads((CONFIGS / "falcon-7b.json").read_text())
    alibi = _from_dict({**base, "alibi": True})
    assert alibi.position_encoding == "alibi"
    mha = _from_dict({**base, "multi_query": False})
    assert mha.layers[1].attention.num_kv_heads == 71
    mpt = json.loads((CONFIGS / "mpt-7b.json").read_text())
    learned = _from_dict({**mpt, "attn_config": {**mpt["attn_config"], "alibi": False}})
    assert (learned.position_encoding, learned.max_position_embeddings) == ("learned", 2048)
    gqa = _from_dict(
        {**mpt, "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 8}, "no_bias": False}
    )
    assert (gqa.layers[1].attention.num_kv_heads, gqa.layers[1].attention.bias) == (8, True)
    gpt2 = json.loads((CONFIGS / "gpt2.json").read_text())
    generic = {k: v for k, v in gpt2.items() if k not in ("n_embd", "n_layer", "n_head")}
    generic.update(hidden_size=768, num_hidden_layers=12, num_attention_heads=12)  # GPT2Config's attribute map
    assert _from_dict(generic).fingerprint() == _from_dict(gpt2).fingerprint()


def _from_dict(data: dict) -> ModelSpec:
    return from_hf_config(data, name=str(data.get("model_type")))


HOSTILE = [
    # (file stem, change, the one error line's end)
    ("gpt2", {"n_embd": None}, "n_embd = null: required; give a positive integer"),
    ("gpt2", {"n_positions": -1}, "n_positions = -1: must be > 0; use a positive size"),
    ("gpt-neox-20b", {"intermediate_size": None}, "intermediate_size = null: required; give a positive integer"),
    ("gpt-neox-20b", {"num_attention_heads": 100}, "num_attention_heads = 100: does not divide hidden_size (6144)"),
    ("opt-1.3b", {"word_embed_proj_dim": 512}, "word_embed_proj_dim = 512: differs from hidden_size (2048)"),
    ("opt-1.3b", {"do_layer_norm_before": False}, "do_layer_norm_before = False: post-norm OPT (opt-350m)"),
    ("opt-1.3b", {"activation_function": "swish"}, "activation_function = 'swish': unsupported MLP activation"),
    ("bloom", {"n_embed": 0}, "n_embed = 0: must be > 0"),
    ("bloom-7b1", {"n_head": 3}, "n_head = 3: does not divide hidden_size (4096)"),
    ("falcon-40b", {"num_kv_heads": 7}, "num_kv_heads = 7: must divide num_attention_heads (128)"),
    ("falcon-7b", {"multi_query": "yes"}, "multi_query = 'yes': must be true or false"),
    ("mpt-7b", {"d_model": 4096.5}, "d_model = 4096.5: must be a positive integer"),
    ("mpt-7b", {"attn_config": {"attn_type": "flash"}}, "attn_config.attn_type = 'flash': unknown attention type"),
]


@pytest.mark.parametrize(("stem", "change", "needle"), HOSTILE, ids=[f"{h[0]}-{next(iter(h[1]))}" for h in HOSTILE])
def test_hostile_config_gives_one_line_naming_the_field(tmp_path: Path, stem: str, change: dict, needle: str) -> None:
    data = {**json.loads((CONFIGS / f"{stem}.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_model(str(path))
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    assert needle in message, message


def test_missing_field_suggests_the_family_name(tmp_path: Path) -> None:
    data = json.loads((CONFIGS / "mpt-7b.json").read_text())
    data["n_layer"] = data.pop("n_layers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        load_model(str(path))
    assert str(info.value) == f"{path}: n_layers: missing; found 'n_layer': fix its spelling"


# gpt2-xl (25 heads) and falcon-7b (71 heads) have no even TP split; gpt2 learns 1024 positions
PLANS = [("bloom-7b1", [], "alibi"), ("mpt-7b", [], "alibi"), ("gpt2", ["--seq-len", "1024"], "learned")]


@pytest.mark.parametrize(("stem", "extra", "positions"), PLANS, ids=[p[0] for p in PLANS])
def test_plan_runs_on_the_family(tmp_path: Path, stem: str, extra: list[str], positions: str) -> None:
    out = tmp_path / "plan.json"
    args = ["plan", "--model", str(CONFIGS / f"{stem}.json"), "--hardware", "h100", "-o", str(out)]
    args += ["--pp", "4", "--microbatches", "8", "--tp", "2", "--json", *extra]
    r = subprocess.run([sys.executable, "-m", "adaptis_plan.cli", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["step_time_s"] > 0
    assert json.loads(out.read_text())["model"]["spec"]["position_encoding"] == positions


def test_sequence_longer_than_the_learned_positions_is_refused() -> None:
    model = load_model(str(CONFIGS / "gpt2.json"))
    check_sequence_length(model, 1024)
    check_sequence_length(load_model(str(CONFIGS / "bloom-7b1.json")), 1 << 20)  # ALiBi: no table
    with pytest.raises(InputError) as info:
        check_sequence_length(model, 4096)
    assert str(info.value) == (
        "--seq-len = 4096: gpt2 learns positions 0..1023 (max_position_embeddings 1024) and has no embedding"
        " for the later ones: use --seq-len 1024 or less"
    )


def test_position_fields_of_the_spec() -> None:
    gpt2 = load_model(str(CONFIGS / "gpt2.json"))
    data = gpt2.model_dump()
    for change, needle in (
        ({"max_position_embeddings": None}, "position_encoding 'learned' needs max_position_embeddings"),
        ({"position_encoding": "alibi"}, "max_position_embeddings is for position_encoding 'learned' only"),
    ):
        with pytest.raises(ValueError, match=needle):
            ModelSpec.model_validate({**data, **change})
    with pytest.raises(ValueError, match="MLA attention, which is rotary"):
        ModelSpec.model_validate({**load_model("tiny-deepseek").model_dump(), "position_encoding": "alibi"})
    # rotary (the fields absent) hashes as before the fields existed; the others hash apart
    llama = load_model("llama-2-7b")
    assert llama.fingerprint() == "17c48825d733b3b379db1ddb2dc8ebc75c8ec41b863808615856616bd8d7a2b7"
    assert llama.model_copy(update={"position_encoding": "alibi"}).fingerprint() != llama.fingerprint()
