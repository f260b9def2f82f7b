"""The AdaPtis author's profiled per-layer costs as the author's simulator takes them.

Data flow: the built-in paper profile (`adaptis_plan.cost.paper.paper_layer_ratios`: the
AdaPtis author's profiled F, B, W of the transformer / dense layer T, the other kind X -- MoE for DeepSeek,
Mamba for Nemotron-H -- and the head H, as ratios of the reference layer's forward) + a zoo
model -> `paper_costs` -> a `CostTable` in units of that reference forward (`UNIT_S` seconds each),
zero communication, no memory limit, and an embedding that costs nothing, as the author's
simulator runs it (`adaptis plan --costs paper` instead keeps the analytic embedding, links and
memory, in absolute time). The paper's B is our I. Imports `adaptis_plan` only.
"""

from __future__ import annotations

import math

import numpy as np

from adaptis_plan.core import CostTable

#: Seconds per reference-layer forward: figures read as "reference forwards" when printed in seconds.
UNIT_S = 1.0


def paper_costs(model: str, seq_len: int, num_devices: int) -> tuple[CostTable, int]:
    """(cost table, number of layers) of a zoo model of the paper's families with its profiled costs."""
    from adaptis_plan.cost.paper import paper_layer_ratios
    from adaptis_plan.inputs.models.load import load_model

    spec = load_model(model)
    _, ratios = paper_layer_ratios(spec, seq_len)
    f, i, w = (np.nan_to_num(r, nan=0.0) * UNIT_S for r in ratios)  # the embedding: no entry, no cost
    n = spec.num_layers
    ones = np.ones((num_devices, 1))
    table = CostTable(
        f_s=ones * f,
        i_s=ones * i,
        w_s=ones * w,
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
