"""Vocabulary-chunked heads as a search option: which chunk counts to try, and the best plan over them.

Data flow: the model's cost table -> `head_split_options` (the chunked models worth trying) ->
the use case builds one cost table per option -> `search_head_options` runs the generator on
each (sharing the work budget and the wall-clock abort) and keeps the best plan. Imports
`core`, the model transform and the generator; no solver at import time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.generator import Candidate, PlacementFilter, ProgressFn, SearchOutcome, better, search_plan
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


def search_head_options(
    costs: Sequence[CostTable],
    num_layers: Sequence[int],
    num_microbatches: int,
    *,
    components: Sequence[str],
    time_limit_s: float,
    seed: int,
    progress: ProgressFn | None,
    baselines: dict[str, Candidate],
    budget: SearchBudget | None = None,
    deadline: Deadline | None = None,
    placement_ok: PlacementFilter | None = None,
) -> tuple[int, SearchOutcome]:
    """(index of the best option, its search outcome): the generator on each cost table in turn,
    each with an equal share of the work budget (`budget`, default from `time_limit_s`) under one
    wall-clock abort; the classic baselines go with the first (unsplit) one. `placement_ok`
    restricts every candidate layout (`plan --target`)."""
    budget = budget or SearchBudget.for_time_limit(time_limit_s)
    deadline = deadline or Deadline.after(time_limit_s)
    share = budget.scaled(1.0 / len(costs))
    best_k, outcome = 0, None
    for k, (c, n) in enumerate(zip(costs, num_layers, strict=True)):
        got = search_plan(
            c,
            n,
            num_microbatches,
            components=components,
            time_limit_s=time_limit_s,
            seed=seed,
            progress=progress,
            baselines=baselines if k == 0 else {},
            placement_ok=placement_ok,
            budget=share,
            deadline=deadline,
        )
        if outcome is None or better(got.best, outcome.best):
            best_k, outcome = k, got
    assert outcome is not None
    return best_k, outcome
