"""The whole training step around a simulated pipeline: data-parallel gradient sync, parameter
all-gather and optimizer step per pipeline rank (`cost.comm`), placed after each rank's own work.

Data flow: a simulated plan (`SimResult`, its layout and programs), the model, the training config
and the hardware -> `training_step` -> `TrainingStep` (seconds and what they are made of). The
pipeline's `step_time_s` stays the simulator's; `TrainingStep.step_time_s` is what one optimizer
step of the whole cluster takes, and what tokens per second and the configuration search use.

Per pipeline rank d (device d of the plan), with finish_d its last action's end:
- gradient sync (reduce-scatter or all-reduce, `cost.comm.step_extras`) starts bucket by bucket
  under the backward of the last micro-batch on d, so with overlap only what exceeds that window
  (from the start of d's first backward action of the last micro-batch to finish_d) is exposed;
- then Adam over the parameters d owns;
- the all-gather of updated parameters (ZeRO >= 1) hides under the next step's first forward on
  d (its F actions of micro-batch 0), else it is exposed.
step = max_d (finish_d + exposed sync_d + optimizer_d) + max_d exposed gather_d.
Per layer, what its parameters add to their rank's step end (`layer_extras`): the optimizer step
(+ the sync when it cannot overlap), the part of a lower bound `search.configuration` adds to the
pipeline's.
Imports `core`, `cost` and the specs only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import Layout, Programs
from adaptis_plan.cost.comm import StepExtras, exposed, placement, step_extras
from adaptis_plan.cost.table import layer_param_shares
from adaptis_plan.judge.simulate import SimResult
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig


@dataclass(frozen=True)
class TrainingStep:
    step_time_s: float  # the whole optimizer step of the cluster
    pipeline_step_time_s: float  # the simulated pipeline alone
    grad_sync_s: float  # the slowest rank's gradient sync, all of it
    grad_sync_exposed_s: float  # what of it extends the step
    param_gather_exposed_s: float
    optimizer_s: float  # the slowest rank's optimizer step

    def summary(self) -> dict[str, float]:
        return {
            "training_step_time_s": self.step_time_s,
            "pipeline_step_time_s": self.pipeline_step_time_s,
            "grad_sync_s": self.grad_sync_s,
            "grad_sync_exposed_s": self.grad_sync_exposed_s,
            "param_gather_exposed_s": self.param_gather_exposed_s,
            "optimizer_s": self.optimizer_s,
        }


def device_extras(
    layout: Layout, model: ModelSpec, training: TrainingConfig, hardware: HardwareProfile, device_types: tuple[str, ...]
) -> list[StepExtras]:
    """`cost.comm.step_extras` of every pipeline rank of `layout`."""
    dense, expert = layer_param_shares(model, training)
    place = placement(hardware, training)
    out = []
    for d in range(layout.num_devices):
        held = [layer for s in layout.stages_of(d) for layer in layout.layers(s)]
        dev = hardware.device_types[device_types[d]]
        hbm = dev.hbm_bandwidth_gbps * 1e9 * dev.memory_efficiency
        out.append(step_extras(float(dense[held].sum()), float(expert[held].sum()), training, place, hbm))
    return out


def training_step(
    layout: Layout,
    programs: Programs,
    result: SimResult,
    model: ModelSpec,
    training: TrainingConfig,
    hardware: HardwareProfile,
    device_types: tuple[str, ...],
) -> TrainingStep:
    """The whole step of a simulated plan (module docstring)."""
    extras = device_extras(layout, model, training, hardware, device_types)
    last = result.num_microbatches - 1
    ends, gathers = [], []
    sync_exposed = 0.0
    for d, (prog, times) in enumerate(zip(programs, result.times, strict=True)):
        if not prog:
            ends.append(0.0)
            gathers.append(0.0)
            continue
        finish = max(end for _, end in times)
        backward = [start for a, (start, _) in zip(prog, times, strict=True) if a.mb == last and a.op != "F"]
        window = finish - min(backward) if backward else 0.0
        first_f = sum(end - start for a, (start, end) in zip(prog, times, strict=True) if a.mb == 0 and a.op == "F")
        x = extras[d]
        if training.zero == 2:  # every micro-batch's reduce-scatter runs under its own backward
            window *= result.num_microbatches
        hidden = exposed(x.grad_sync_s, window, training.dp_overlap)
        sync_exposed = max(sync_exposed, hidden)
        ends.append(finish + hidden + x.optimizer_s)
        gathers.append(exposed(x.param_gather_s, first_f, training.dp_overlap))
    step = max(ends) + max(gathers)
    return TrainingStep(
        step_time_s=step,
        pipeline_step_time_s=result.step_time_s,
        grad_sync_s=max(x.grad_sync_s for x in extras),
        grad_sync_exposed_s=sync_exposed,
        param_gather_exposed_s=max(gathers),
        optimizer_s=max(x.optimizer_s for x in extras),
    )


def layer_extras(model: ModelSpec, training: TrainingConfig, hardware: HardwareProfile, device_type: str) -> np.ndarray:
    """Per layer, what its parameters add to their rank's step end: the optimizer step, plus the
    gradient sync when it cannot overlap (sync is linear in bytes up to latencies, so the per-layer
    sum under-counts a rank's total: a valid part of a lower bound, `search.configuration`)."""
    dense, expert = layer_param_shares(model, training)
    place = placement(hardware, training)
    dev = hardware.device_types[device_type]
    hbm = dev.hbm_bandwidth_gbps * 1e9 * dev.memory_efficiency
    out = np.empty(len(dense))
    for n, (a, b) in enumerate(zip(dense, expert, strict=True)):
        x = step_extras(float(a), float(b), training, place, hbm)
        sync = x.grad_sync_s - _latencies(training, place, float(a) > 0, float(b) > 0)
        out[n] = x.optimizer_s + (0.0 if training.dp_overlap else sync)
    return np.maximum(out, 0.0)


def _latencies(training: TrainingConfig, place, dense: bool, expert: bool) -> float:  # noqa: ANN001
    """The latency part of a layer's sync: the rings of the groups its parameters sync over (data-parallel
    for `dense`, expert-data-parallel for `expert`), as `step_extras` runs them. Latency is paid once per
    ring per rank, not per layer, so it is taken out of each layer's share (a valid part of a bound)."""
    groups = [g for g, held in ((place.dp, dense), (place.edp, expert)) if held and g.size > 1]
    per_ring = sum((g.size - 1) * g.latency_s for g in groups)
    rings = {0: 2, 1: 1, 2: training.num_microbatches}.get(training.zero, 0)
    return per_ring * rings
