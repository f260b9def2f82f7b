"""The AdaPtis author's profiled per-layer costs as a cost table (one place, to swap for `--costs paper`).

Data flow: `research/paper-profiled-ratios.csv` (per family, hidden size, sequence length and
vocabulary: F, B, W of a transformer / dense layer T, of the other layer kind X -- MoE for
DeepSeek, Mamba for Nemotron-H -- and of the head H, as ratios of the reference layer's
forward) + a zoo model's layer kinds -> `paper_costs` -> a `CostTable` in units of that
reference forward (`UNIT_S` seconds each), zero communication, no memory limit, as the paper
profiled them. The paper's B is our I. The embedding has no entry (the author's simulator adds
none to its profile) and costs nothing here. Imports `adaptis_plan` only.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from adaptis_plan.core import CostTable
from bench.common import REPO

#: Where the profile lives (the research notes shared with this repository's worktrees).
CSV_CANDIDATES = (
    REPO.parent / "shared" / "research" / "paper-profiled-ratios.csv",
    Path("/work/shared/research/paper-profiled-ratios.csv"),
)
#: Seconds per reference-layer forward: figures read as "reference forwards" when printed in seconds.
UNIT_S = 1.0

_FAMILY = {"gemma": "gemma", "deepseek": "deepseek", "nemotron-h": "nemotronh"}
#: The zoo's layer kinds -> the profile's columns.
_KIND = {"decoder": "T", "attention": "T", "moe": "X", "mamba": "X", "head": "H", "embedding": None}
#: The paper's scaled families (research/paper.md §5.1): hidden size and vocabulary per scale.
PAPER_MODELS = {
    "gemma-s": (1536, 256000),
    "gemma-m": (1536, 512000),
    "deepseek-s": (2048, 131072),
    "deepseek-m": (2048, 262144),
    "nemotron-h-s": (1024, 131072),
    "nemotron-h-m": (1024, 262144),
}


@dataclass(frozen=True)
class ProfileRow:
    T: tuple[float, float, float]
    X: tuple[float, float, float]
    H: tuple[float, float, float]


def csv_path() -> Path:
    for path in CSV_CANDIDATES:
        if path.is_file():
            return path
    raise FileNotFoundError(f"paper-profiled-ratios.csv not found in {', '.join(map(str, CSV_CANDIDATES))}")


@cache
def _rows() -> dict[tuple[str, int, int, int], ProfileRow]:
    out = {}
    with csv_path().open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            key = (r["family"], int(r["hidden"]), int(r["seq_len"]), int(r["vocab"]))
            out[key] = ProfileRow(
                *(tuple(float(r[f"{k}_{op}"]) for op in ("F", "B", "W")) for k in ("T", "X", "H"))  # type: ignore[arg-type]
            )
    return out


def profile_row(model: str, seq_len: int) -> ProfileRow:
    family = next(f for f in _FAMILY if model.startswith(f + "-"))
    hidden, vocab = PAPER_MODELS[model]
    return _rows()[(_FAMILY[family], hidden, seq_len, vocab)]


def paper_costs(model: str, seq_len: int, num_devices: int) -> tuple[CostTable, int]:
    """(cost table, number of layers) of a zoo model (`PAPER_MODELS`) with the paper's profiled costs."""
    from adaptis_plan.inputs.models.load import load_model

    spec = load_model(model)
    row = profile_row(model, seq_len)
    f, i, w = [], [], []
    for layer in spec.layers:
        col = _KIND[layer.kind]
        vals = (0.0, 0.0, 0.0) if col is None else getattr(row, col)
        f.append(vals[0] * UNIT_S)
        i.append(vals[1] * UNIT_S)
        w.append(vals[2] * UNIT_S)
    n = len(f)
    ones = np.ones((num_devices, 1))
    table = CostTable(
        f_s=ones * np.array(f),
        i_s=ones * np.array(i),
        w_s=ones * np.array(w),
        act_bytes=np.ones(n),
        act_w_bytes=np.full(n, 0.5),
        static_bytes=np.zeros(n),
        out_bytes=np.zeros(n),
        mem_limit_bytes=np.full(num_devices, math.inf),
        link_bw_bytes_per_s=np.full((num_devices, num_devices), math.inf),
        link_latency_s=np.zeros((num_devices, num_devices)),
        layer_kinds=tuple(layer.kind for layer in spec.layers),
        device_names=("paper-profile",) * num_devices,
    )
    return table, n
