"""Complete measured profiles for the cost tests: a profile covers every layer of its model, so a test that
measures a few layers gives the others the analytic model's own numbers."""

from __future__ import annotations

from collections.abc import Sequence

from helpers_cli import analytic_entry

from adaptis_plan.cost.table import layer_cost_rows
from adaptis_plan.spec.cost_profile import LayerCostEntry
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig


def with_analytic_rest(
    model: ModelSpec, hardware: HardwareProfile, training: TrainingConfig, measured: Sequence[LayerCostEntry]
) -> list[LayerCostEntry]:
    """`measured`, then one entry per layer it leaves out with the analytic F / I / W seconds and bytes of
    the first rank's device type (B = I + W, no hot W): a table built from it equals the analytic one there."""
    listed = {i for e in measured for i in e.layers}
    rest = [
        LayerCostEntry(**analytic_entry(r))
        for r in layer_cost_rows(model, hardware, training)
        if r["index"] not in listed
    ]
    return [*measured, *rest]
