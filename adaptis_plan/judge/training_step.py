"""The whole training step around a simulated pipeline: data-parallel gradient sync, parameter
all-gather and optimizer step per pipeline rank (`cost.comm`), placed after each rank's own work.

Data flow: a simulated plan (`SimResult`, its layout and programs), the model, the training config
and the hardware -> `training_step` -> `TrainingStep` (seconds and what they are made of). The
pipeline's `step_time_s` stays the simulator's; `TrainingStep.step_time_s` is what one optimizer
step of the whole cluster takes, and what tokens per second and the configuration search use.

Per pipeline rank d (device d of the plan), with finish_d its last action's end, its data-parallel
traffic on one link served one transfer after another (`cost.comm`'s module docstring: the queue,
its evidence, `cost.comm.dp_link_end`):
- the all-gather of updated parameters (ZeRO 1/2) runs first, under the step's first forward on d
  (its F actions of micro-batch 0); what does not fit delays the whole step (the largest of any
  rank's, X) and holds d's link until g_d - X in the pipeline's time;
- the gradient sync (`cost.comm.step_extras`): ZeRO 0/1's all-reduce / reduce-scatter becomes
  available when the backward of d's last micro-batch starts (the micro-batch whose backward starts
  last on d), ZeRO 2's reduce-scatter of micro-batch k when micro-batch k's backward starts on d, and
  at finish_d where the runtime reduces after the rank's last backward
  (`TrainingConfig.reduces_after_backward`: torch's pipeline stages with FSDP2);
  the link sends them in that order; what it still has to send at finish_d is exposed;
- then Adam over the parameters d owns.
step = max_d (max(finish_d, link end_d) + optimizer_d) + X. Without overlap every transfer is
exposed: step = max_d (finish_d + sync_d + optimizer_d) + max_d gather_d.
So the hidden sync of a rank is at most finish_d - (its earliest backward start), and every rank's
link carries at most one step of traffic per step.
Per layer, what its parameters add to their rank's step end: the optimizer step (+ the sync and
gather when they cannot overlap), and what they put on their rank's link (`layer_bound_parts`);
both are parts of the lower bound `judge.configuration_bound` adds to the pipeline's.
Imports `core`, `cost` and the specs only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import Layout, Programs
from adaptis_plan.cost.comm import StepExtras, dp_link_end, exposed, placement, step_extras
from adaptis_plan.cost.table import layer_param_shares
from adaptis_plan.judge.simulate import SimResult
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig


@dataclass(frozen=True)
class RankStep:
    """One pipeline rank's part of the step, in the pipeline's time (seconds from its start)."""

    finish_s: float  # its last action's end
    first_backward_s: float  # its first backward action's start (finish_s when it has none)
    last_backward_s: float  # the start of the backward of the micro-batch whose backward starts last
    grad_sync_s: float  # all its gradient sync traffic
    grad_sync_exposed_s: float  # what of it ends after finish_s
    param_gather_s: float  # its parameter all-gather
    optimizer_s: float
    end_s: float  # finish, exposed sync and optimizer step: where the rank is done


@dataclass(frozen=True)
class TrainingStep:
    step_time_s: float  # the whole optimizer step of the cluster
    pipeline_step_time_s: float  # the simulated pipeline alone
    grad_sync_s: float  # the slowest rank's gradient sync, all of it
    grad_sync_exposed_s: float  # what of it extends the step
    param_gather_exposed_s: float
    optimizer_s: float  # the slowest rank's optimizer step
    ranks: tuple[RankStep, ...] = ()  # per pipeline rank, what its step end is made of

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
    held = [[layer for s in layout.stages_of(d) for layer in layout.layers(s)] for d in range(layout.num_devices)]
    return held_extras(held, model, training, hardware, device_types)


def held_extras(
    held: list[list[int]],
    model: ModelSpec,
    training: TrainingConfig,
    hardware: HardwareProfile,
    device_types: tuple[str, ...],
    shares: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[StepExtras]:
    """`cost.comm.step_extras` of pipeline ranks holding the layers `held[d]` each (`shares`: the
    model's `layer_param_shares` under `training`, when the caller has them)."""
    dense, expert = shares if shares is not None else layer_param_shares(model, training)
    place = placement(hardware, training)
    out = []
    for d, layers in enumerate(held):
        dev = hardware.device_types[device_types[d]]
        hbm = dev.hbm_bandwidth_gbps * 1e9 * dev.memory_efficiency
        out.append(step_extras(float(dense[layers].sum()), float(expert[layers].sum()), training, place, hbm))
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
    overlap = training.dp_overlap
    finishes, backward, gathers = [], [], []
    for x, prog, times in zip(extras, programs, result.times, strict=True):
        starts: dict[int, float] = {}  # per micro-batch: when its backward starts on this rank
        first_f = 0.0  # the compute the parameter gather hides under
        for a, (start, end) in zip(prog, times, strict=True):
            if a.op != "F":
                starts[a.mb] = min(start, starts.get(a.mb, start))
            elif a.mb == 0:
                first_f += end - start
        finishes.append(max((end for _, end in times), default=0.0))
        backward.append(starts)
        gathers.append(exposed(x.param_gather_s, first_f, overlap) if prog else 0.0)
    shift = max(gathers)
    ranks = []
    for x, finish, starts, prog in zip(extras, finishes, backward, programs, strict=True):
        if not prog:
            ranks.append(RankStep(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            continue
        if overlap:
            link_end = dp_link_end(x.param_gather_s - shift, _sync_transfers(x, starts, finish))
            sync = max(0.0, link_end - finish)
        else:
            sync = x.grad_sync_s
        first, last = min(starts.values(), default=finish), max(starts.values(), default=finish)
        end = finish + sync + x.optimizer_s
        ranks.append(RankStep(finish, first, last, x.grad_sync_s, sync, x.param_gather_s, x.optimizer_s, end))
    return TrainingStep(
        step_time_s=max(r.end_s for r in ranks) + shift,
        pipeline_step_time_s=result.step_time_s,
        grad_sync_s=max(x.grad_sync_s for x in extras),
        grad_sync_exposed_s=max(r.grad_sync_exposed_s for r in ranks),
        param_gather_exposed_s=shift,
        optimizer_s=max(x.optimizer_s for x in extras),
        ranks=tuple(ranks),
    )


def _sync_transfers(x: StepExtras, starts: dict[int, float], finish: float) -> list[tuple[float, float]]:
    """(available at, seconds) of a rank's gradient sync transfers, `starts` its micro-batches' backward
    starts: one per micro-batch under ZeRO 2 (`StepExtras.num_syncs`), one from the rank's `finish` where
    the runtime reduces after its last backward (`StepExtras.after_backward`), else one from the latest."""
    if x.grad_sync_s <= 0 or not starts:
        return []
    if x.after_backward:
        return [(finish, x.grad_sync_s)]
    if x.num_syncs > 1:
        each = x.grad_sync_s / len(starts)
        return [(start, each) for start in starts.values()]
    return [(max(starts.values()), x.grad_sync_s)]


def layer_bound_parts(
    model: ModelSpec, training: TrainingConfig, hardware: HardwareProfile, device_type: str
) -> tuple[np.ndarray, np.ndarray]:
    """Per layer on one device type, priced once, (extras, link):

    - extras: what its parameters add to their rank's step end: the optimizer step, plus the gradient
      sync and parameter gather when they cannot overlap;
    - link: the seconds its gradient sync and parameter gather hold their rank's data-parallel link each
      step, plus its optimizer step. A rank's link serves its transfers one after another within the step
      and its optimizer step follows the last sync, so every rank's sum of these is at most the step, with
      or without overlap (module docstring).

    Bandwidth parts only: latency is paid once per ring per rank, not per layer, so the per-layer sums
    under-count a rank's totals (valid parts of a lower bound, `judge.configuration_bound`)."""
    sync, gather, optimizer = _per_layer(model, training, hardware, device_type)
    return (optimizer if training.dp_overlap else optimizer + sync + gather), sync + gather + optimizer


def _per_layer(
    model: ModelSpec, training: TrainingConfig, hardware: HardwareProfile, device_type: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per layer, (gradient sync, parameter gather, optimizer) seconds of its parameters alone, the
    collectives without their latencies (`step_extras` on the same groups with zero latency)."""
    dense, expert = layer_param_shares(model, training)
    place = placement(hardware, training)
    place = dataclasses.replace(
        place,
        dp=dataclasses.replace(place.dp, intra_latency_s=0.0, inter_latency_s=0.0),
        edp=dataclasses.replace(place.edp, intra_latency_s=0.0, inter_latency_s=0.0),
    )
    dev = hardware.device_types[device_type]
    hbm = dev.hbm_bandwidth_gbps * 1e9 * dev.memory_efficiency
    out = np.zeros((3, len(dense)))
    seen: dict[tuple[float, float], tuple[float, float, float]] = {}  # a model's blocks repeat: one each
    for n, (a, b) in enumerate(zip(dense, expert, strict=True)):
        key = (float(a), float(b))
        if key not in seen:
            x = step_extras(key[0], key[1], training, place, hbm)
            seen[key] = (x.grad_sync_s, x.param_gather_s, x.optimizer_s)
        out[:, n] = seen[key]
    return out[0], out[1], out[2]
