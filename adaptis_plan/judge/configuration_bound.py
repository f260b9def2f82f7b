"""The lower bound of a whole configuration, before any plan of it is made: whether it can fit in memory at
all, and the least whole step any plan of it can take.

Data flow: model spec + hardware profile + a configuration's `TrainingConfig` (without recomputation) ->
`configuration_bound` -> `ConfigurationBound` -> the configuration search's screen (`search.screen`: a
point whose bound is above the best step found cannot win; the least bound over every point that may fit
is the configuration-level lower bound `adaptis plan --gpus` reports). Imports the cost model and the
judge's own bounds (`judge.bound`, `judge.training_step`); never a builder, the search, a solver or torch.

The memory check is proven: parameters, gradients and optimizer state over an even split of the layers
must fit (some rank holds at least the mean static bytes and no rank has more than the largest memory; no
schedule holds less on its fullest rank). The bound on the whole step is the pipeline's bound
(`judge.bound.lower_bound`: any partition, placement and schedule, on the costs without recomputation,
which only adds work) plus the optimizer step (`judge.training_step.layer_bound_parts`; the gradient sync
and parameter gather too without data-parallel overlap): every rank ends with its own, so
step >= max(pipeline bound + the smallest layer's, (all work + all optimizer steps) / pp); and each rank's
data-parallel link carries its layers' sync and gather within the step before its optimizer step (the same
function's link part), so step >= the largest layer's and their sum / pp. Per layer, each part is the least
over the pipeline's device types (a layer may sit on any of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.cost.source import CostTables
from adaptis_plan.errors import InputError
from adaptis_plan.judge.bound import lower_bound
from adaptis_plan.judge.training_step import layer_bound_parts
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.units import fmt_gib

#: how the reason of a configuration whose weights, gradients and optimizer state alone overflow begins
STATIC_REASON = "weights, gradients and optimizer state alone"


@dataclass(frozen=True)
class ConfigurationBound:
    """The verdict on one configuration before planning: `bound_s`, a lower bound on its whole step, or
    infinite with the `reason` no plan of it fits (the cost model refuses it, or its static state alone
    overflows, by `overflow_bytes`). `costs`: its cost table without recomputation, where the cost model
    gives one (the screen's estimate reads it)."""

    bound_s: float
    costs: CostTable | None = None
    reason: str = ""
    overflow_bytes: float = 0.0

    @property
    def fits(self) -> bool:
        """Whether some plan of the configuration may fit in memory (no proof that none does)."""
        return not self.reason


def configuration_bound(model: ModelSpec, hw: HardwareProfile, training: TrainingConfig) -> ConfigurationBound:
    """The proven memory check and the lower bound on the whole step of the configuration `training`
    (without recomputation) on `hw` (module docstring)."""
    try:
        costs = CostTables(hw, training).table(model)
    except InputError as e:
        return ConfigurationBound(math.inf, reason=str(e))
    # proven: some rank holds at least the mean static bytes; no rank has more than the largest memory
    limit = float(costs.mem_limit_bytes.max())
    static = float(costs.static_bytes.sum()) / training.pp
    if static > limit:
        return ConfigurationBound(
            math.inf, costs, f"{STATIC_REASON} need {fmt_gib(static)} per GPU at best, {fmt_gib(limit)} usable",
            static - limit,
        )  # fmt: skip
    m, pp = training.num_microbatches, training.pp
    # per layer, the least over the pipeline's device types (a layer may sit on any of them)
    kinds = sorted(set(costs.device_names[:pp]))
    parts = [layer_bound_parts(model, training, hw, k) for k in kinds]
    extras = np.min([e for e, _ in parts], axis=0)
    link = np.min([ln for _, ln in parts], axis=0)
    work = (costs.f_s + costs.i_s + costs.w_s).min(axis=0)
    bound = max(
        lower_bound(costs, pp, m) + float(extras.min()),
        (m * float(work.sum()) + float(extras.sum())) / pp,
        float(link.max()),
        float(link.sum()) / pp,
    )
    return ConfigurationBound(bound, costs)


__all__ = ["STATIC_REASON", "ConfigurationBound", "configuration_bound"]
