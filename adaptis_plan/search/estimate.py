"""The configuration screen's closed forms: the estimate that orders the points to screen (`_estimate`),
the whole step around a closed-form pipeline (`_whole_step`), the partition a point's classic schedule
runs on (`_split`), and what a schedule that fills the bubble could reach (`_less_bubble`). Estimates,
not bounds: the proven bound is `judge.configuration_bound`'s, and nothing here is reported as a
prediction (the screen simulates the schedule it picks, `search.screen`).

Data flow: a `Point` of `search.space` and its cost tables -> `_estimate` (screening order, interleaving
degree, the degrees proven to overflow) -> `search.screen`; `_split` also gives the point's planned
classic schedule its partition (`search.plan_point`). Imports the cost model, the judge's step rules and
the classic layouts (`schedules.placement`, `search.partition`); no solver.

The estimate: the fastest classic schedule in closed form, 1F1B or, for adaptive and an
Interleaved1F1B of unstated degree (`_degrees`), Interleaved1F1B at up to `MAX_SCREEN_CHUNKS` stages
per device, on the uniform partition (a classic strategy's requested one, `Request.pipeline.partition`;
for adaptive, ends-as-layers where uniform has too few decoder layers: `_split`) under the first
recompute mode where one fits, with the data-parallel sync, gather and optimizer step around it
(`_whole_step`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.cost.source import CostTables
from adaptis_plan.cost.table import layer_param_shares
from adaptis_plan.judge.simulate import MEM_SLACK
from adaptis_plan.judge.training_step import held_extras
from adaptis_plan.schedules._common import microbatch_groups
from adaptis_plan.schedules.placement import placement
from adaptis_plan.search.partition import classic_bounds
from adaptis_plan.search.space import RECOMPUTE_LADDER, Point, Request
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

#: the most stages per device the screen's estimate tries for Interleaved1F1B beside 1F1B (adaptive,
#: or Interleaved1F1B without --stages-per-device): the bubble falls as 1 / degree. The closed form
#: has no transfer term, so among the degrees that fit it favours the deepest; the screen's simulation
#: and the pipeline search price the transfers. Past 8 the estimate's bubble is within (pp - 1) / (8 M)
#: of the step. Each degree costs one closed form per point, no simulation.
MAX_SCREEN_CHUNKS = 8


def _degrees(req: Request) -> bool:
    """Whether the screen chooses an interleaving degree: adaptive, or Interleaved1F1B, without
    --stages-per-device."""
    return req.pipeline.stages_per_device is None and req.pipeline.strategy.lower() in ("adaptive", "interleaved1f1b")


def _estimate(
    model: ModelSpec, hw: HardwareProfile, req: Request, point: Point, plain: CostTable
) -> tuple[float, int, dict[str, frozenset[int]]]:
    """The screening order (not a bound), the stages per device it chose, and per recompute mode it
    looked at, the degrees (1: 1F1B) whose held activations alone overflow some device. Under the
    first recompute mode (none, selective, full, or the requested one) in which some classic schedule
    fits, the fastest of them in closed form on the requested partition (`Request.partition`: uniform
    unless a classic strategy asks for another), as a whole step (`_whole_step`); infinite when none fits.

    - 1F1B: sum over stages of (F + B) + (M - 1) x the slowest stage's (F + B); stage s holds static
      bytes + min(pp - s, M) micro-batches of activations.
    - Interleaved1F1B at k stages per device (`_degrees`, up to `MAX_SCREEN_CHUNKS`): M x the busiest
      device's (F + B) + (pp - 1) x the slowest stage's (the bubble of one stage per device shrinks to
      one of its k chunks); device d holds its static bytes + the activations of its first
      min((k - 1) g + 2 (pp - 1 - d) + 1, k M) forwards (`schedules.interleaved_1f1b`'s warm-up and
      the first forward after it, g the first micro-batch group), each of its own chunk
      (`_warmup_chunks`): a last stage's big logits count once per micro-batch it holds, not
      spread over the device's chunks.

    Both hold what the simulated schedule holds when its first backward starts, so no more than its
    peak: a degree that overflows here overflows when simulated (`_screen` skips it). The balanced
    partition is estimated on the ends-as-layers cuts and marks no degree unfit."""
    m, pp = point.num_microbatches, point.pp
    unfit: dict[str, frozenset[int]] = {}
    most = _most_stages(model, req)
    if pp > most:
        return math.inf, 1, unfit
    degrees = [1]
    if pp > 1 and _degrees(req):
        deeper = [k for k in range(2, MAX_SCREEN_CHUNKS + 1) if pp * k <= most]
        # an Interleaved1F1B request interleaves: 1F1B is adaptive's own alternative only
        degrees = deeper if not req.pipeline.adaptive and deeper else degrees + deeper
    modes = RECOMPUTE_LADDER if req.pipeline.recompute == "auto" else (req.pipeline.recompute,)
    limit = float(plain.mem_limit_bytes.min())
    limits = plain.mem_limit_bytes[:pp] + MEM_SLACK  # what the simulator lets each device hold
    group = -(-m // max(1, m // pp))  # the first micro-batch group's size (`microbatch_groups`)
    dev = np.arange(pp)
    sizes = np.array([len(g) for g in microbatch_groups(m, pp)])
    # the balanced partition's min-max search costs ~10x the rest of a point's estimate: its ordering takes
    # the ends-as-layers cuts (as many stages allowed), and it proves no overflow (the cuts differ)
    exact = req.pipeline.partition != "balanced"
    training = point.training(req)
    shares = layer_param_shares(model, training)  # the same under every recompute mode and degree
    for mode in modes:
        costs = plain if mode == "none" else CostTables(hw, point.training(req, mode), default_mode=mode).table(model)
        work = (costs.f_s + costs.i_s + costs.w_s).min(axis=0)
        forward = costs.f_s.min(axis=0)
        best, chunks = math.inf, 1
        over: set[int] = set()
        for k in degrees:
            split = _split(model, req, pp * k) if exact else "ends-as-layers"
            cuts = classic_bounds(costs, placement("sequential" if k == 1 else "loop", pp, k), split)[:-1]
            stage = np.add.reduceat(work, cuts)
            static = np.add.reduceat(costs.static_bytes, cuts).reshape(k, pp).sum(axis=0)
            act = np.add.reduceat(costs.act_bytes, cuts).reshape(k, pp)  # [chunk, device]
            if k == 1:
                held = act[0] * np.minimum(pp - dev, m)
                step = float(stage.sum() + (m - 1) * stage.max())
            else:
                forwards = np.minimum((k - 1) * group + 2 * (pp - 1 - dev) + 1, k * m)
                held = (act.T * _warmup_chunks(forwards, k, sizes)).sum(axis=1)
                step = float(m * stage.reshape(k, pp).sum(axis=0).max() + (pp - 1) * stage.max())
            if exact and np.any(static + held > limits):
                over.add(k)
            if np.all(static + held <= limit):
                step = _whole_step(
                    model, hw, training, costs, step, cuts, np.add.reduceat(forward, cuts), stage, shares
                )
                if step < best:
                    best, chunks = step, k
        unfit[mode] = frozenset(over)
        if best < math.inf:
            return best, chunks, unfit
    return math.inf, 1, unfit


def _whole_step(
    model: ModelSpec,
    hw: HardwareProfile,
    training: TrainingConfig,
    costs: CostTable,
    pipeline_s: float,
    cuts: Sequence[int],
    forward: np.ndarray,
    work: np.ndarray,
    shares: tuple[np.ndarray, np.ndarray],
) -> float:
    """The screen's estimate (not a bound) of the whole step around a closed-form pipeline of
    `pipeline_s` whose stages (device s % pp, start layers `cuts`) take `forward` / `work` (F + B)
    seconds per micro-batch: `judge.training_step`'s rule on the times a 1F1B-like schedule gives.
    Device d's first backward starts when micro-batch 0 has gone forward through every stage and back
    through the stages after d's last, its last backward one stage backward before d finishes, and d
    finishes when the backward of the last micro-batch still has the stages before d to go."""
    pp, m = training.pp, training.num_microbatches
    backward = work - forward
    bounds = [int(c) for c in cuts] + [model.num_layers]
    held = [[n for s in range(d, len(cuts), pp) for n in range(bounds[s], bounds[s + 1])] for d in range(pp)]
    extras = held_extras(held, model, training, hw, tuple(costs.device_names[:pp]), shares)
    first_f = forward.reshape(-1, pp).sum(axis=0)
    if not training.dp_overlap:
        ends = [pipeline_s + x.grad_sync_s + x.optimizer_s for x in extras]
        return max(ends) + max(x.param_gather_s for x in extras)
    shift = max(max(0.0, x.param_gather_s - f) for x, f in zip(extras, first_f, strict=True))
    ends = []
    for d, x in enumerate(extras):
        finish = pipeline_s - float(backward[:d].sum())
        last = finish - float(backward[d])
        first = float(forward.sum() + backward[len(cuts) - pp + d + 1 :].sum())
        free = x.param_gather_s - shift
        if x.num_syncs > 1:  # one per micro-batch, from the first backward on, the last from the last
            link = max(max(free, first) + x.grad_sync_s, last + x.grad_sync_s / m)
        elif x.after_backward:  # after the rank's last backward
            link = max(free, finish) + x.grad_sync_s
        else:
            link = max(free, last) + x.grad_sync_s
        ends.append(max(finish, link) + x.optimizer_s)
    return max(ends) + shift


def _most_stages(model: ModelSpec, req: Request) -> int:
    """The most pipeline stages the screen's partitions give a layer each (`_split`; a classic request's
    uniform split: the decoder layers)."""
    return model.num_layers - 2 if _split(model, req, model.num_layers) == "uniform" else model.num_layers


def _split(model: ModelSpec, req: Request, stages: int) -> str:
    """The partition of a point's classic schedule over `stages` stages: a classic request's own
    (`Request.pipeline.partition`); for adaptive, which searches its own, Megatron's uniform split while it has
    a decoder layer per stage, else ends-as-layers (the embedding and the head count as layers)."""
    if req.pipeline.adaptive and stages > model.num_layers - 2:
        return "ends-as-layers"
    return req.pipeline.partition or "uniform"  # a Request always names one (`usecases`)


def _warmup_chunks(forwards: np.ndarray, k: int, sizes: np.ndarray) -> np.ndarray:
    """[device, chunk]: how many of device d's first `forwards[d]` forwards run its local chunk c, in
    the interleaved order (`schedules._common.interleaved_orders`: group by group, each group's
    micro-batches through chunk 0, then chunk 1, ...; `sizes` the groups' sizes)."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    first = starts[:, None] * k + np.arange(k)[None, :] * sizes[:, None]  # [group, chunk]: its first forward
    done = forwards[:, None, None] - first[None]
    return np.clip(done, 0, sizes[None, :, None]).sum(axis=1)


def _closed_form_overflow(model: ModelSpec, hw: HardwareProfile, req: Request, point: Point, mode: str) -> float:
    """The most any device holds over its limit under 1F1B on the uniform partition, when its first backward
    starts (static bytes + min(pp - s, M) micro-batches of activations): a lower bound on its overflow."""
    costs = CostTables(hw, point.training(req, mode), default_mode=mode).table(model)
    pp, dev = point.pp, np.arange(point.pp)
    cuts = classic_bounds(costs, placement("sequential", pp, 1), _split(model, req, pp))[:-1]
    static = np.add.reduceat(costs.static_bytes, cuts)
    held = np.add.reduceat(costs.act_bytes, cuts) * np.minimum(pp - dev, point.num_microbatches)
    return float(max(0.0, (static + held - costs.mem_limit_bytes[:pp]).max()))


def _less_bubble(seconds: float, p: Point, chunks: int, bound_s: float) -> float:
    """`seconds` of a classic schedule at `p` with `chunks` stages per device less its bubble (the closed
    form's (pp - 1) of M k + pp - 1 slowest-stage slots), never below the point's proven bound `bound_s`:
    what a schedule that fills the bubble would reach."""
    slots = p.num_microbatches * chunks
    return max(bound_s, seconds * slots / (slots + p.pp - 1))


__all__ = ["MAX_SCREEN_CHUNKS"]
