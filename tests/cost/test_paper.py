"""The paper's profiled costs as a built-in cost profile (adaptis_plan/cost/paper.py, `--costs paper`).

Every row of the paper's profile (tests/data/paper-profiled-ratios.csv, the AdaPtis
paper's profiled ratios, arXiv 2509.23722, read here independently of the package's table) must come out
of the cost table exactly, to 2 decimals, for a model of that row's family, vocabulary and
sequence length.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from adaptis_plan.cost.paper import PAPER_ROWS, model_family, paper_cost_table, paper_row
from adaptis_plan.cost.table import build_cost_table
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

pytestmark = pytest.mark.unit

CSV = Path(__file__).resolve().parents[1] / "data" / "paper-profiled-ratios.csv"
ROWS = list(csv.DictReader(CSV.read_text().splitlines()))
ZOO = {"gemma": "gemma-s", "deepseek": "deepseek-s", "nemotronh": "nemotron-h-s"}
PAPER_TP = {"gemma": 4, "deepseek": 2, "nemotronh": 2}  # the AdaPtis paper (arXiv 2509.23722) §5.1
H200 = load_hardware("h200")


def _model(family: str, vocab: int) -> ModelSpec:
    """The paper's small model of `family` (zoo) with the row's vocabulary."""
    return load_model(ZOO[family]).model_copy(update={"vocab_size": vocab})


def _training(row: dict, pp: int = 4) -> TrainingConfig:
    return TrainingConfig(num_microbatches=8, pp=pp, seq_len=int(row["seq_len"]), tp=PAPER_TP[row["family"]])


def test_package_table_is_the_csv() -> None:
    assert len(ROWS) == len(PAPER_ROWS) == 36
    for row, ours in zip(ROWS, PAPER_ROWS, strict=True):
        assert (row["family"], int(row["hidden"]), int(row["seq_len"]), int(row["vocab"])) == ours[:4]
        assert [float(row[k]) for k in list(row)[4:]] == list(ours[4:])


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['family']}-{r['seq_len']}-{r['vocab']}" for r in ROWS])
def test_paper_profile_reproduces_the_row(row: dict) -> None:
    family = row["family"]
    model = _model(family, int(row["vocab"]))
    table = paper_cost_table(model, H200, _training(row))
    kinds = list(table.layer_kinds)
    t_kind, x_kind, ref = {"gemma": ("decoder", None, "T"), "deepseek": ("decoder", "moe", "T")}.get(
        family, ("attention", "mamba", "X")
    )
    ref_f = table.f_s[0, kinds.index(t_kind if ref == "T" else x_kind)]
    for letter, kind in (("T", t_kind), ("X", x_kind), ("H", "head")):
        if kind is None:
            continue
        col = kinds.index(kind)
        for op, times in (("F", table.f_s), ("B", table.i_s), ("W", table.w_s)):
            ours = times[0, col] / ref_f
            assert round(ours, 2) == float(row[f"{letter}_{op}"]), (letter, op, ours)
            # every layer of that kind on every device alike (one device type)
            cols = [i for i, k in enumerate(kinds) if k == kind]
            assert np.allclose(times[:, cols], times[0, col])


def test_absolute_time_is_our_reference_layer_and_the_rest_stays_analytic() -> None:
    model = load_model("deepseek-s")
    training = TrainingConfig(num_microbatches=8, pp=4, seq_len=4096, tp=2)
    analytic = build_cost_table(model, H200, training)
    paper = paper_cost_table(model, H200, training)
    kinds = list(paper.layer_kinds)
    dense = kinds.index("decoder")
    assert paper.f_s[0, dense] == analytic.f_s[0, dense]  # the reference forward: ours
    assert paper.i_s[0, dense] == pytest.approx(2.05 * analytic.f_s[0, dense])
    assert paper.w_s[0, dense] == 0.0  # the paper's dense layers have no separate W
    emb = kinds.index("embedding")
    assert (paper.f_s[:, emb] == analytic.f_s[:, emb]).all() and (paper.w_s[:, emb] == analytic.w_s[:, emb]).all()
    for name in ("act_bytes", "act_w_bytes", "static_bytes", "out_bytes", "link_bw_bytes_per_s", "mem_limit_bytes"):
        assert np.array_equal(getattr(paper, name), getattr(analytic, name)), name


def test_split_head_chunks_share_the_head_by_vocabulary() -> None:
    model = load_model("gemma-s")
    training = TrainingConfig(num_microbatches=8, pp=4, seq_len=4096, tp=4)
    whole = paper_cost_table(model, H200, training)
    split = split_head(model, 3)
    chunks = paper_cost_table(split, H200, training)
    head = whole.num_layers - 1
    for times_whole, times_split in ((whole.f_s, chunks.f_s), (whole.i_s, chunks.i_s), (whole.w_s, chunks.w_s)):
        assert times_split[0, head:].sum() == pytest.approx(times_whole[0, head])


def test_the_zoo_paper_models_match_their_rows() -> None:
    for name, family, vocab in (
        ("gemma-m", "gemma", 512000),
        ("deepseek-l", "deepseek", 524288),
        ("nemotron-h-l", "nemotronh", 262144),
    ):
        model = load_model(name)
        assert model_family(model) == family
        for seq in (2048, 4096):
            row = paper_row(model, seq)
            assert (row.family, row.vocab, row.seq_len) == (family, vocab, seq)


def test_models_and_lengths_outside_the_profile_are_refused() -> None:
    with pytest.raises(InputError, match=r"--costs paper: the paper's profile has no row for model 'llama-2-s'"):
        paper_row(load_model("llama-2-s"), 4096)
    with pytest.raises(InputError, match=r"at seq 3000; it covers gemma hidden 1536 \(seq 2K/4K/8K"):
        paper_row(load_model("gemma-s"), 3000)
    with pytest.raises(InputError, match="omit --costs"):
        paper_row(load_model("nemotron-h-8b"), 4096)
