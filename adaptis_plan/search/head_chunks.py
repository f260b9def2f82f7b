"""Vocabulary-chunked heads as a search option: which chunk counts to try.

Data flow: the model's cost table -> `head_split_options` (the chunked models worth trying) ->
`search.driver` builds one cost table per option, runs the generator on each (sharing the work
budget and the wall-clock abort) and keeps the best plan. Imports `core` and the model
transform; no solver, no generator.
"""

from __future__ import annotations

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.spec.model import ModelSpec


def head_split_options(model: ModelSpec, costs: CostTable) -> list[ModelSpec]:
    """Vocabulary-chunked heads worth trying: when the head outweighs an average stage (about
    two stages per device), split it into that many stage-sized chunks. None for tied embeddings."""
    if model.tie_word_embeddings or model.num_head_chunks != 1:
        return []
    work = (costs.f_s + costs.i_s + costs.w_s).min(axis=0)
    stage_share = float(work.sum()) / (2 * costs.num_devices)
    k = int(np.ceil(float(work[-1]) / stage_share)) if stage_share > 0 else 1
    k = min(k, 2 * costs.num_devices)
    return [split_head(model, k)] if k >= 2 else []
