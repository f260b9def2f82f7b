"""A measured profile must describe the planned model: every layer once, under its own kind.

The profile of the unsplit model also costs a head split into vocabulary chunks (from its
`head_chunks` or the whole head's share); nothing else falls back to the analytic model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers_cli import analytic_entry, one_line_error, tiny_cost_profile

from adaptis_plan.cost.table import build_cost_table, layer_cost_rows
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

CPU = load_hardware("cpu")
TINY = ("--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "128")
FIX = "re-run adaptis profile --model tiny-llama"


def _training(pp: int = 2) -> TrainingConfig:
    return TrainingConfig(num_microbatches=4, seq_len=128, pp=pp)


def _tiny() -> ModelSpec:
    return load_model("tiny-llama")


def _data() -> dict:
    """tiny-llama's profile as `adaptis profile` groups it: embedding, the 8 equal decoders, head."""
    data = tiny_cost_profile()
    entries = data["entries"]
    decoders = [e for e in entries if e["kind"] == "decoder"]
    data["entries"] = [entries[0], decoders[0] | {"layers": [e["layers"][0] for e in decoders]}, entries[-1]]
    return data


def _build(data: dict, model: ModelSpec | None = None, source: str = "costs.json"):
    profile = CostProfile.model_validate(data)
    return build_cost_table(model or _tiny(), CPU, _training(), profile, profile_source=source)


def _refused(data: dict, model: ModelSpec | None = None) -> str:
    with pytest.raises(InputError) as info:
        _build(data, model)
    return str(info.value)


def test_a_complete_profile_is_taken_as_measured() -> None:
    data = _data()
    table = _build(data)
    decoder = data["entries"][1]
    assert np.all(table.f_s[:, 1:9] == decoder["f_s"]) and np.all(table.b_s[:, 1:9] == decoder["b_s"])


def test_a_layer_left_out_is_refused_not_costed_analytically() -> None:
    data = _data()
    data["entries"][1]["layers"] = [1, 2, 3, 4, 5, 6, 7]
    assert _refused(data) == (
        f"costs.json: entries: layer 8 of model 'tiny-llama' is not measured: every layer needs its measured cost; {FIX}"
    )
    data["entries"] = data["entries"][:2]  # no head, and a run of decoders
    data["entries"][1]["layers"] = [1, 2, 5, 6]
    assert "entries: layers 3..4, 7..9 of model 'tiny-llama' are not measured" in _refused(data)


def test_a_layer_in_two_entries_or_twice_in_one_is_refused() -> None:
    data = _data()
    data["entries"][1]["layers"] = [1, 2, 3, 4, 5, 6, 7, 8, 8]
    assert _refused(data) == (
        f"costs.json: entries[1].layers lists layer 8 twice: each layer has one measured cost; list it once, or {FIX}"
    )
    data = _data()
    data["entries"].insert(2, data["entries"][1] | {"layers": [8], "f_s": 1.0})
    assert _refused(data).startswith("costs.json: entries[1] and entries[2] both list layer 8: ")


@pytest.mark.parametrize("kind", ["moe", "zzz", "head"])
def test_an_entry_of_another_kind_than_the_models_layers_is_refused(kind: str) -> None:
    data = _data()
    data["entries"][1]["kind"] = kind
    assert _refused(data) == (
        f"costs.json: entries[1].kind = '{kind}': layers 1..8 of model 'tiny-llama' are of kind 'decoder'; {FIX}"
    )


def test_an_entry_spanning_two_kinds_is_refused() -> None:
    data = _data()
    data["entries"] = data["entries"][1:]
    data["entries"][0]["layers"].insert(0, 0)  # the embedding in the decoders' entry
    assert _refused(data) == (
        f"costs.json: entries[0].kind = 'decoder': layer 0 of model 'tiny-llama' is of kind 'embedding'; {FIX}"
    )


def test_a_profile_of_another_shape_of_the_same_model_names_the_fingerprint() -> None:
    data = _data()
    data["model"]["fingerprint"] = "abc"
    msg = _refused(data)
    assert msg.startswith("costs.json: model.fingerprint = 'abc': profile was measured on another shape of model")
    assert "not 'tiny-llama'" not in msg and msg.endswith(FIX)
    # another name: the names tell them apart
    data["model"]["name"] = "other"
    assert "profile was measured on model 'other', not 'tiny-llama'" in _refused(data)


# ---- a head split into vocabulary chunks --------------------------------------------------------


def _chunks(model: ModelSpec, counts: tuple[int, ...]) -> list[dict]:
    """Head chunk profiles (JSON data) of `model` split into each of `counts` chunks: the analytic numbers."""
    out = []
    for k in counts:
        split = split_head(model, k)
        rows = layer_cost_rows(split, CPU, _training(pp=1))[-k:]
        entries = [analytic_entry(r, layers=[c], kind="head") for c, r in enumerate(rows)]
        out.append({"num_chunks": k, "entries": entries})
    return out


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("measured", [(), (2, 4)])
def test_the_unsplit_models_profile_costs_every_chunk_of_a_split_head(k: int, measured: tuple[int, ...]) -> None:
    model = _tiny()
    data = _data() | {"head_chunks": _chunks(model, measured)}
    table = _build(data, split_head(model, k))
    head = table.f_s[0, 9:]
    assert len(head) == k and np.all(head > 0)
    if not measured:  # the whole head's share
        assert head.sum() == pytest.approx(data["entries"][-1]["f_s"])


def test_a_profile_of_the_split_model_costs_that_split_only() -> None:
    model = _tiny()
    split2 = split_head(model, 2)
    data = _data()
    rows = layer_cost_rows(split2, CPU, _training(pp=1))
    data["entries"][-1] |= {"layers": [9], "f_s": rows[9]["f_s"]}
    data["entries"].append(data["entries"][-1] | {"layers": [10], "f_s": rows[10]["f_s"]})
    table = _build(data, split2)
    assert list(table.f_s[0, 9:]) == [rows[9]["f_s"], rows[10]["f_s"]]
    # three chunks: the third was never measured
    msg = _refused(data, split_head(model, 3))
    assert msg.startswith("costs.json: entries: layer 11 of model 'tiny-llama' is not measured")


def test_a_split_models_profile_says_so_and_costs_no_other_split() -> None:
    """`model.head_chunks` (what `adaptis profile` records) tells a profile of a split model from one of the
    unsplit model: the fingerprint is the same for both, and without it a split model's profile that lost its
    last chunk read as the unsplit model's, its first chunk spread over the whole head."""
    model = _tiny()
    split2 = split_head(model, 2)
    rows = layer_cost_rows(split2, CPU, _training(pp=1))
    data = _data()
    data["model"]["head_chunks"] = 2
    data["entries"][-1] |= {"layers": [9], "f_s": rows[9]["f_s"]}
    msg = _refused(data, split2)  # chunk 1 (layer 10) was not measured
    assert msg.startswith("costs.json: entries: layer 10 of model 'tiny-llama' is not measured")
    del data["model"]["head_chunks"]  # an older profile: read by its layer count, as the unsplit model's
    assert _build(data, split2).f_s[0, 9:].sum() == pytest.approx(rows[9]["f_s"])
    data["model"]["head_chunks"] = 2
    data["entries"].append(data["entries"][-1] | {"layers": [10], "f_s": rows[10]["f_s"]})
    assert list(_build(data, split2).f_s[0, 9:]) == [rows[9]["f_s"], rows[10]["f_s"]]
    for other, head in ((model, "one layer"), (split_head(model, 3), "in 3 chunks")):
        assert _refused(data, other) == (
            "costs.json: model.head_chunks = 2: the profile measured the head split into 2 chunks, and this plan's"
            f" head is {head}; plan with --head-chunks 2, or profile the model with its head whole (it costs every"
            " split)"
        )
    data["model"]["head_chunks"] = 1  # the unsplit model's profile that says so: its head costs every split
    data["entries"].pop()
    assert _build(data, split_head(model, 3)).f_s[0, 9:].sum() == pytest.approx(rows[9]["f_s"])


def test_bad_head_chunk_profiles_are_refused() -> None:
    model = _tiny()
    fix = "re-run adaptis profile (--head-chunks)"

    def refused(mutate) -> str:
        data = _data() | {"head_chunks": _chunks(model, (2, 3))}
        mutate(data["head_chunks"])
        return _refused(data, split_head(model, 4))

    def out_of_range(h):
        h[0]["entries"][1]["layers"] = [2]

    assert refused(out_of_range) == (
        f"costs.json: head_chunks[0].entries[1].layers = 2: a head in 2 chunks has chunks 0..1; {fix}"
    )

    def twice(h):
        h[1]["entries"][2]["layers"] = [1]

    assert refused(twice) == (
        "costs.json: head_chunks[1].entries[1] and head_chunks[1].entries[2] both list chunk 1:"
        f" each chunk has one measured cost; list it once, or {fix}"
    )

    def left_out(h):
        del h[1]["entries"][2]

    assert refused(left_out) == f"costs.json: head_chunks[1]: chunk 2 of 3 is not measured; {fix}"

    def wrong_kind(h):
        h[0]["entries"][0]["kind"] = "decoder"

    assert refused(wrong_kind) == (
        f"costs.json: head_chunks[0].entries[0].kind = 'decoder': head chunks are 'head'; {fix}"
    )

    def same_count(h):
        h[1] = h[0]

    assert refused(same_count).startswith("costs.json: head_chunks[0] and head_chunks[1] both measure num_chunks = 2")


# ---- through the command line -------------------------------------------------------------------


def test_plan_refuses_an_incomplete_profile_in_one_line(adaptis, tmp_path: Path) -> None:
    data = _data()
    data["entries"][1]["layers"] = [1, 2, 3, 4, 5, 6, 7]
    costs = tmp_path / "measured.json"
    costs.write_text(json.dumps(data))
    r = adaptis("plan", *TINY, "--strategy", "1F1B", "--costs", costs, "-o", tmp_path / "p.json")
    one_line_error(r, 2, "measured.json", "entries: layer 8 of model 'tiny-llama' is not measured", FIX)
    assert not (tmp_path / "p.json").exists()
    costs.write_text(json.dumps(_data()))
    r = adaptis("plan", *TINY, "--strategy", "1F1B", "--head-chunks", "2", "--costs", costs, "-o", tmp_path / "p.json")
    assert r.exit_code == 0, r.stderr


def test_simulate_refuses_a_profile_of_the_wrong_kind_in_one_line(adaptis, tiny_plan: Path, tmp_path: Path) -> None:
    data = _data()
    data["entries"][1]["kind"] = "moe"
    costs = tmp_path / "measured.json"
    costs.write_text(json.dumps(data))
    r = adaptis("simulate", tiny_plan, "--costs", costs)
    line = one_line_error(r, 2, "entries[1].kind = 'moe'", "are of kind 'decoder'")
    assert line.startswith(f"error: {costs}: ")  # the --costs file, not the plan
