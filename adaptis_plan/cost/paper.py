"""The AdaPtis paper's own profiled layer costs as a built-in cost profile (`--costs paper`).

What it is for: comparability with the paper. The paper (arXiv 2509.23722) planned with costs
profiled on H200s and stored as ratios to a reference layer's forward time; with them our
planner sees the workload the paper's planner saw. It is not a claim of accuracy: on the head's
backward, real runs disagree with the table (the Vocabulary Parallelism run measures an output
layer B of 1.2x its F, the table 0.2-0.5x; see `published.py`), and the analytic model is held
to those runs instead.

Data flow: `ModelSpec` + `HardwareProfile` + `TrainingConfig` -> `paper_cost_table` -> the
analytic `CostTable` (`table.build_cost_table`) with the F / I / W seconds of the layer kinds the
table covers replaced by ratio x the analytic forward of the model's reference layer, per device
row. Everything else stays analytic: memory, parameters, P2P bytes and links, the embedding
(the table has no embedding column), and layer kinds the table does not cover.
Imports the specs, `table`, `core` and `errors` only; no torch, no ortools, no rich/click.

The table (`PAPER_ROWS`, all 36 rows of the AdaPtis paper's profiled ratios, arXiv
2509.23722): per model family, hidden size, sequence length and vocabulary, the F, B (input
gradient, our I) and W of
T = the transformer / attention layer, X = the MoE (DeepSeek) or Mamba (Nemotron-H) layer and
H = the head (final norm, LM head and loss), each over the reference layer's F: T for Gemma and
DeepSeek, X (the Mamba layer) for Nemotron-H. Our layer kinds: Gemma T = `decoder`; DeepSeek
T = `decoder` (its dense layers), X = `moe`; Nemotron-H T = `attention`, X = `mamba`; H = `head`.
A model is matched to a row by its structure (Mamba layers: Nemotron-H; MoE layers: DeepSeek;
else Gemma), its hidden size, vocabulary and the planned sequence length; the paper's scaled
models are the zoo's `gemma-s|m|l`, `deepseek-s|m|l` and `nemotron-h-s|m|l`. A head split into
vocabulary chunks gives each chunk H in proportion to its share of the vocabulary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.errors import InputError
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

PAPER_COSTS = "paper"  # the built-in name `--costs` reserves for this profile

# family, hidden, seq_len, vocab, T_F, T_B, T_W, X_F, X_B, X_W, H_F, H_B, H_W
PAPER_ROWS: tuple[tuple[str, int, int, int, float, float, float, float, float, float, float, float, float], ...] = (
    ("gemma", 1536, 2048, 256000, 1.0, 1.61, 0.2, 0.0, 0.0, 0.0, 4.17, 0.65, 0.4),
    ("gemma", 1536, 2048, 512000, 1.0, 1.64, 0.2, 0.0, 0.0, 0.0, 7.23, 1.6, 0.82),
    ("gemma", 1536, 2048, 1024000, 1.0, 1.65, 0.2, 0.0, 0.0, 0.0, 12.81, 3.64, 1.59),
    ("gemma", 1536, 4096, 256000, 1.0, 1.65, 0.22, 0.0, 0.0, 0.0, 5.72, 1.21, 0.58),
    ("gemma", 1536, 4096, 512000, 1.0, 1.65, 0.22, 0.0, 0.0, 0.0, 10.37, 2.85, 1.15),
    ("gemma", 1536, 4096, 1024000, 1.0, 1.67, 0.22, 0.0, 0.0, 0.0, 19.22, 5.93, 2.29),
    ("gemma", 1536, 8192, 256000, 1.0, 1.68, 0.22, 0.0, 0.0, 0.0, 6.98, 1.68, 0.77),
    ("gemma", 1536, 8192, 512000, 1.0, 1.69, 0.22, 0.0, 0.0, 0.0, 13.24, 4.05, 1.51),
    ("gemma", 1536, 8192, 1024000, 1.0, 1.69, 0.22, 0.0, 0.0, 0.0, 25.97, 8.69, 3.06),
    ("deepseek", 2048, 2048, 131072, 1.0, 1.99, 0.0, 2.62, 3.87, 0.17, 5.11, 1.37, 0.62),
    ("deepseek", 2048, 2048, 262144, 1.0, 2.1, 0.0, 2.69, 4.0, 0.18, 8.91, 3.0, 1.27),
    ("deepseek", 2048, 2048, 524288, 1.0, 2.28, 0.0, 2.72, 4.04, 0.18, 16.31, 5.56, 2.54),
    ("deepseek", 2048, 4096, 131072, 1.0, 2.05, 0.0, 2.28, 3.49, 0.16, 6.26, 1.98, 0.82),
    ("deepseek", 2048, 4096, 262144, 1.0, 2.11, 0.0, 2.29, 3.52, 0.17, 11.2, 3.73, 1.59),
    ("deepseek", 2048, 4096, 524288, 1.0, 2.24, 0.0, 2.31, 3.55, 0.17, 21.57, 7.82, 3.23),
    ("deepseek", 2048, 8192, 131072, 1.0, 2.1, 0.0, 1.93, 3.08, 0.15, 6.99, 2.4, 0.98),
    ("deepseek", 2048, 8192, 262144, 1.0, 2.13, 0.0, 1.91, 3.03, 0.15, 13.14, 4.98, 1.95),
    ("deepseek", 2048, 8192, 524288, 1.0, 2.22, 0.0, 1.93, 3.05, 0.15, 26.22, 10.21, 3.98),
    ("nemotronh", 1024, 1024, 131072, 3.17, 5.17, 0.5, 1.0, 2.54, 0.02, 8.23, 0.12, 0.4),
    ("nemotronh", 1024, 1024, 262144, 2.69, 4.45, 0.43, 1.0, 2.46, 0.02, 10.01, 1.28, 0.63),
    ("nemotronh", 1024, 1024, 524288, 3.38, 5.32, 0.52, 1.0, 2.75, 0.02, 17.1, 2.82, 1.38),
    ("nemotronh", 1024, 2048, 131072, 3.38, 5.18, 0.53, 1.0, 2.75, 0.02, 10.81, 0.9, 0.57),
    ("nemotronh", 1024, 2048, 262144, 2.79, 4.45, 0.46, 1.0, 2.53, 0.02, 13.92, 2.22, 0.95),
    ("nemotronh", 1024, 2048, 524288, 3.06, 4.99, 0.5, 1.0, 2.53, 0.02, 24.37, 5.4, 1.96),
    ("nemotronh", 1024, 4096, 131072, 3.12, 4.96, 0.52, 1.0, 2.79, 0.02, 13.99, 2.13, 0.86),
    ("nemotronh", 1024, 4096, 262144, 3.22, 5.07, 0.54, 1.0, 2.85, 0.02, 23.94, 5.24, 1.71),
    ("nemotronh", 1024, 4096, 524288, 3.06, 4.96, 0.53, 1.0, 2.7, 0.02, 39.97, 10.33, 3.18),
    ("nemotronh", 1024, 8192, 131072, 3.14, 5.26, 0.54, 1.0, 2.85, 0.02, 19.38, 3.53, 1.33),
    ("nemotronh", 1024, 8192, 262144, 3.15, 5.32, 0.55, 1.0, 2.8, 0.01, 35.93, 9.04, 2.72),
    ("nemotronh", 1024, 8192, 524288, 3.17, 5.2, 0.55, 1.0, 2.95, 0.02, 66.15, 18.69, 5.3),
    ("nemotronh", 1024, 16384, 131072, 4.74, 7.84, 0.75, 1.0, 3.54, 0.02, 32.48, 6.14, 2.27),
    ("nemotronh", 1024, 16384, 262144, 3.95, 7.21, 0.68, 1.0, 3.03, 0.01, 55.09, 14.06, 4.07),
    ("nemotronh", 1024, 16384, 524288, 3.53, 6.23, 0.61, 1.0, 3.1, 0.02, 97.43, 29.09, 7.8),
    ("nemotronh", 1024, 32768, 131072, 4.81, 9.94, 0.65, 1.0, 2.91, 0.01, 35.18, 4.34, 2.54),
    ("nemotronh", 1024, 32768, 262144, 4.93, 9.84, 0.66, 1.0, 3.09, 0.0, 68.75, 15.87, 5.23),
    ("nemotronh", 1024, 32768, 524288, 4.79, 9.49, 0.65, 1.0, 3.25, 0.01, 369.05, 37.76, 10.86),
)

#: family -> (layer kind of T, layer kind of X or None, which column is the reference forward: "T" or "X")
FAMILY_KINDS: dict[str, tuple[str, str | None, str]] = {
    "gemma": ("decoder", None, "T"),
    "deepseek": ("decoder", "moe", "T"),
    "nemotronh": ("attention", "mamba", "X"),
}


@dataclass(frozen=True)
class PaperRow:
    """One profiled row: (F, B, W) over the reference forward for T, X and H."""

    family: str
    hidden: int
    seq_len: int
    vocab: int
    t: tuple[float, float, float]
    x: tuple[float, float, float]
    h: tuple[float, float, float]

    def ratios(self) -> dict[str, tuple[float, float, float]]:
        """Our layer kind -> its (F, I, W) over the reference forward."""
        t_kind, x_kind, _ = FAMILY_KINDS[self.family]
        out = {t_kind: self.t, "head": self.h}
        if x_kind is not None:
            out[x_kind] = self.x
        return out

    @property
    def reference_kind(self) -> str:
        t_kind, x_kind, ref = FAMILY_KINDS[self.family]
        return x_kind if ref == "X" and x_kind is not None else t_kind


def paper_rows() -> list[PaperRow]:
    return [
        PaperRow(f, h, s, v, (tf, tb, tw), (xf, xb, xw), (hf, hb, hw))
        for f, h, s, v, tf, tb, tw, xf, xb, xw, hf, hb, hw in PAPER_ROWS
    ]


def model_family(model: ModelSpec) -> str:
    """The paper's family a model's structure matches: Mamba layers -> nemotronh, MoE -> deepseek, else gemma."""
    kinds = {layer.kind for layer in model.layers}
    if "mamba" in kinds:
        return "nemotronh"
    if "moe" in kinds:
        return "deepseek"
    return "gemma"


def _coverage() -> str:
    parts = []
    for family in FAMILY_KINDS:
        rows = [r for r in paper_rows() if r.family == family]
        seqs = "/".join(f"{s // 1024}K" for s in sorted({r.seq_len for r in rows}))
        vocabs = "/".join(str(v) for v in sorted({r.vocab for r in rows}))
        parts.append(f"{family} hidden {rows[0].hidden} (seq {seqs}; vocab {vocabs})")
    return "; ".join(parts)


def paper_row(model: ModelSpec, seq_len: int) -> PaperRow:
    """The profiled row of `model` at `seq_len`; InputError (one line, with the fix) when there is none."""
    family = model_family(model)
    for row in paper_rows():
        if (row.family, row.hidden, row.seq_len, row.vocab) == (family, model.hidden_size, seq_len, model.vocab_size):
            covered = set(row.ratios()) | {"embedding"}
            other = sorted({layer.kind for layer in model.layers} - covered)
            if other:
                raise InputError(
                    f"--costs paper: model '{model.name}' has {', '.join(other)} layers, which the paper's {family}"
                    f" profile has no costs for; plan it with the analytic model (omit --costs)"
                )
            return row
    raise InputError(
        f"--costs paper: the paper's profile has no row for model '{model.name}' ({family}-like, hidden"
        f" {model.hidden_size}, vocab {model.vocab_size}) at seq {seq_len}; it covers {_coverage()}."
        " Use one of the paper's models (gemma-s|m|l, deepseek-s|m|l, nemotron-h-s|m|l) at a profiled"
        " --seq-len, or omit --costs (the analytic model)"
    )


def paper_layer_ratios(model: ModelSpec, seq_len: int) -> tuple[str, np.ndarray]:
    """(reference layer kind, [3, num_layers] F / I / W over the reference forward, NaN where the
    table has no costs: the embedding). A head vocabulary chunk takes H times its vocabulary share."""
    row = paper_row(model, seq_len)
    ratios = row.ratios()
    out = np.full((3, model.num_layers), np.nan)
    for index, layer in enumerate(model.layers):
        if layer.kind not in ratios:
            continue
        share = 1.0
        if layer.kind == "head" and layer.vocab_range is not None:
            lo, hi = layer.vocab_range
            share = (hi - lo) / model.vocab_size
        out[:, index] = np.asarray(ratios[layer.kind]) * share
    return row.reference_kind, out


def paper_cost_table(
    model: ModelSpec, hardware: HardwareProfile, training: TrainingConfig, recompute: Sequence[str] | None = None
) -> CostTable:
    """The cost table with the paper's profiled F / I / W (module docstring); raises InputError when the
    profile has no row for this model and sequence length.

    `recompute` (one mode per layer, as `cost.table.build_cost_table` takes it): the profile has no
    recomputed rows, so a recomputed layer's I gets the analytic model's extra work on top of the
    profiled I (both are in the reference layer's absolute units), and its memory is the analytic one.
    """
    from adaptis_plan.cost.table import build_cost_table

    reference_kind, ratios = paper_layer_ratios(model, training.seq_len)
    plain = build_cost_table(model, hardware, training, recompute=["none"] * model.num_layers)
    table = plain if recompute is None else build_cost_table(model, hardware, training, recompute=recompute)
    extra_i = table.i_s - plain.i_s
    reference = model.layers.index(next(x for x in model.layers if x.kind == reference_kind))
    ref_f = plain.f_s[:, reference][:, None]  # [devices, 1]: each device row scales by its own reference
    covered = ~np.isnan(ratios[0])
    times = []
    for analytic, ratio in zip((plain.f_s, plain.i_s, plain.w_s), ratios, strict=True):
        t = analytic.copy()
        t[:, covered] = ref_f * ratio[covered][None, :]
        times.append(t)
    return dataclasses.replace(table, f_s=times[0], i_s=times[1] + extra_i, w_s=times[2])


__all__ = [
    "FAMILY_KINDS",
    "PAPER_COSTS",
    "PAPER_ROWS",
    "PaperRow",
    "model_family",
    "paper_cost_table",
    "paper_layer_ratios",
    "paper_row",
    "paper_rows",
]
