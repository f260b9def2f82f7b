"""Event simulator: the independent judge of every plan.

Data flow: (`Layout`, `CostTable`, `Programs`, num_microbatches) -> `simulate` -> `SimResult`
(step time, per-action start/end, bubbles, memory, transfers, lower bound). Builders, the
search, the CLI and the renderers consume the result. This module imports only `core` and the
rest of `judge/` (`semantics`, `bound`): no schedule builder, no solver, no rich, no torch -- a
plan's own estimate is never trusted, it is re-timed here.

What an action costs, the action contract and the dependency replay (with link occupancy: one
message at a time per directed device pair) are `judge.semantics`'; this module adds what
a plan's figures need on top:
- step time = the latest end; busy time and bubble ratio per device;
- memory per device: static = the device's stages' `static_bytes`; F allocates the stage's
  `act_bytes` at its start; I frees `act_bytes - act_w_bytes` at its end (allocates, when a
  recomputed stage's W inputs outweigh what F kept); W frees `act_w_bytes` at its end; B frees
  `act_bytes` at its end;
- the cross-device transfers (when each took its link and arrived);
- the lower bound (`judge.bound`);
- with costs that carry a measured `time_spread`, the expected step time (`expected_step`: replays
  with every action's time varied about its cost), for the final verdict on a plan only.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from adaptis_plan.core import OPS, CostTable, Layout, Programs
from adaptis_plan.judge.bound import lower_bound
from adaptis_plan.judge.semantics import Replay, StageCosts, check_programs, replay, stage_costs

#: what a device's peak may exceed its limit by and still fit: float rounding, not memory. The list
#: scheduler gives the oldest micro-batch this much room (`search.listsched`), so what it admits, the
#: judge calls fitting (a peak of 6.375000000000001 against a limit of 6.375 did not, before)
MEM_SLACK = 1e-9

_F, _B, _I, _W = (OPS.index(o) for o in ("F", "B", "I", "W"))


class Transfer(NamedTuple):
    """One P2P message: `stage` / `mb` of the sending action; `kind` "act" (F) or "grad" (I/B)."""

    src_device: int
    dst_device: int
    start_s: float
    end_s: float
    stage: int
    mb: int
    kind: str


@dataclass(frozen=True)
class SimResult:
    """Timing and memory of one simulated step.

    `times[d][k]` is (start_s, end_s) of `programs[d][k]`. `memory_timeline[d]` is a list of
    (time_s, bytes) points of a step function (bytes in use from that time on), starting at
    (0, static bytes). `transfers` lists cross-device messages only. `fits_memory` is true when
    every device's peak is within `mem_limit_bytes` (up to `MEM_SLACK`); `overflow_bytes[d]` = peak - limit
    beyond that slack, else 0.
    """

    step_time_s: float
    busy_s: list[float]
    bubble_ratio_per_device: list[float]
    bubble_ratio: float
    peak_memory_bytes: list[float]
    lower_bound_s: float
    fits_memory: bool
    overflow_bytes: list[float]
    mem_limit_bytes: list[float] = field(default_factory=list)
    static_bytes: list[float] = field(default_factory=list)
    num_microbatches: int = 0
    # the median step when each action's time varies as the costs say (`expected_step`); None: not
    # computed, or costs without variation
    expected_step_time_s: float | None = None
    # per-action times, memory timelines and transfers, built on first use (`_Detail`)
    detail: _Detail | None = field(default=None, repr=False, compare=False)

    @property
    def times(self) -> list[list[tuple[float, float]]]:
        return self.detail.times()  # type: ignore[union-attr]

    @property
    def memory_timeline(self) -> list[list[tuple[float, float]]]:
        return self.detail.memory_timeline()  # type: ignore[union-attr]

    @property
    def transfers(self) -> list[Transfer]:
        return self.detail.transfers()  # type: ignore[union-attr]

    @property
    def num_devices(self) -> int:
        return len(self.busy_s)

    def summary(self) -> dict[str, object]:
        """The JSON-ready keys that `plan --json` / `simulate --json` carry."""
        return {
            "step_time_s": self.step_time_s,
            "expected_step_time_s": self.expected_step_time_s,
            "bubble_ratio": self.bubble_ratio,
            "bubble_ratio_per_device": list(self.bubble_ratio_per_device),
            "peak_memory_bytes": list(self.peak_memory_bytes),
            "lower_bound_s": self.lower_bound_s,
            "fits_memory": self.fits_memory,
            "overflow_bytes": list(self.overflow_bytes),
        }


def simulate(layout: Layout, costs: CostTable, programs: Programs, num_microbatches: int) -> SimResult:
    """Time `programs` on `costs`; raise ProgramError / DeadlockError (both InputError) on bad programs."""
    flat = check_programs(layout, programs, num_microbatches)
    sc = stage_costs(layout, costs)
    run = replay(
        layout,
        programs,
        num_microbatches,
        sc.durations(),
        (sc.p2p_act, sc.p2p_grad),
        (sc.occ_act, sc.occ_grad),
        flat=flat,
        w_hot=sc.w_hot,
    )
    return _assemble(layout, costs, sc, run, num_microbatches)


#: replays behind an expected step time (`expected_step`), fewer for a long program (`EXPECTED_ACTIONS`); how
#: much the figure moves from seed to seed at 64 and 256: experiments/findings-readme.md
EXPECTED_SAMPLES = 256
#: at most this many actions replayed for one expected step time (and at least 8 replays)
EXPECTED_ACTIONS = 1_000_000


def expected_step(
    layout: Layout, costs: CostTable, programs: Programs, num_microbatches: int, result: SimResult, *, seed: int = 0
) -> float | None:
    """The median step time of `programs` when each action's time varies about what `result` charged
    it, as a measured profile says one op's time varies within a round (`costs.time_spread` = sigma):
    each replay draws every action's seconds independently as its cost x exp(sigma z), z standard
    normal (so each action's median stays its cost), P2P as simulated; `EXPECTED_SAMPLES` replays
    from a fixed `seed`, so the same inputs give the same figure. None when sigma is 0.

    Why: with every action at its median, a plan whose devices hand work to each other with no
    slack waits for nobody; with times that vary, each hand-off waits for the later of two, and the
    step grows (a tight, balanced plan more than a slack one); `bench.actions` measures it."""
    sigma = costs.time_spread
    if sigma <= 0:
        return None
    flat = check_programs(layout, programs, num_microbatches)
    sc = stage_costs(layout, costs)
    base = np.array([t1 - t0 for row in result.times for t0, t1 in row], dtype=float)
    samples = max(8, min(EXPECTED_SAMPLES, EXPECTED_ACTIONS // max(1, base.size)))
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(samples):
        run = replay(
            layout, programs, num_microbatches, None, (sc.p2p_act, sc.p2p_grad), (sc.occ_act, sc.occ_grad),
            flat=flat, action_durations=base * np.exp(sigma * rng.standard_normal(base.size)),
        )  # fmt: skip
        steps.append(max((row[-1] for row in run.ends if row), default=0.0))
    return float(np.median(steps))


def with_expected(
    layout: Layout, costs: CostTable, programs: Programs, num_microbatches: int, result: SimResult
) -> SimResult:
    """`result` with its `expected_step_time_s` (`expected_step`): for the final verdict on a plan,
    not for the search's many candidates."""
    return replace(result, expected_step_time_s=expected_step(layout, costs, programs, num_microbatches, result))


def judged(
    layout: Layout, costs: CostTable, programs: Programs, num_microbatches: int, result: SimResult | None = None
) -> SimResult:
    """The final verdict on a plan: `result` (a search's stored simulation of these programs on these
    costs) or, when None, a fresh simulation, with its `expected_step_time_s` (`with_expected`)."""
    if result is None:
        result = simulate(layout, costs, programs, num_microbatches)
    return with_expected(layout, costs, programs, num_microbatches, result)


class _Detail:
    """What a `SimResult` shows action by action, built from the replay on first use and kept: the
    search judges many candidates by their step time and memory peaks alone, and a big pipeline's
    per-action tuples cost more than its replay."""

    def __init__(self, layout: Layout, sc: StageCosts, run: Replay, when: np.ndarray, levels: list) -> None:
        self._layout, self._sc, self._run, self._when, self._levels = layout, sc, run, when, levels
        self._times: list[list[tuple[float, float]]] | None = None
        self._timeline: list[list[tuple[float, float]]] | None = None
        self._transfers: list[Transfer] | None = None

    def times(self) -> list[list[tuple[float, float]]]:
        if self._times is None:
            run = self._run
            self._times = [list(zip(s, e, strict=True)) for s, e in zip(run.starts, run.ends, strict=True)]
        return self._times

    def memory_timeline(self) -> list[list[tuple[float, float]]]:
        if self._timeline is None:
            self._timeline = [
                [(0.0, static), *zip(when.tolist(), level.tolist(), strict=True)]
                for static, when, level in self._levels
            ]
        return self._timeline

    def transfers(self) -> list[Transfer]:
        if self._transfers is None:
            self._transfers = _transfers(self._layout, self._sc, self._run)
        return self._transfers


def _transfers(layout: Layout, sc: StageCosts, run: Replay) -> list[Transfer]:
    """The cross-device messages of `run`, by start time, then source and destination device."""
    dev_a, _, stage_a, op_a, mb_a = run.flat
    xfer = np.array([x for lst in run.xfer_starts for x in lst], dtype=float)
    idx = np.flatnonzero(xfer >= 0.0)
    is_f = op_a[idx] == _F
    stage_device = np.asarray(layout.stage_device, dtype=np.int64)
    last = layout.num_stages - 1
    src = dev_a[idx]
    dst = np.where(
        is_f, stage_device[np.minimum(stage_a[idx] + 1, last)], stage_device[np.maximum(stage_a[idx] - 1, 0)]
    )
    pdur = np.where(is_f, sc.p2p_act[np.minimum(stage_a[idx] + 1, last)], sc.p2p_grad[stage_a[idx]])
    x0 = xfer[idx]
    order = np.lexsort((dst, src, x0))
    idx, src, dst, x0, pdur = idx[order], src[order], dst[order], x0[order], pdur[order]
    return list(
        map(
            Transfer,
            src.tolist(),
            dst.tolist(),
            x0.tolist(),
            (x0 + pdur).tolist(),
            stage_a[idx].tolist(),
            mb_a[idx].tolist(),
            np.where(op_a[idx] == _F, "act", "grad").tolist(),
        )
    )


def _assemble(layout: Layout, costs: CostTable, sc: StageCosts, run: Replay, m: int) -> SimResult:
    num_devices = layout.num_devices
    dev_a, _, stage_a, op_a, mb_a = run.flat
    lengths = [len(x) for x in run.starts]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    starts = np.fromiter(itertools.chain.from_iterable(run.starts), dtype=float, count=int(offsets[-1]))
    ends = np.fromiter(itertools.chain.from_iterable(run.ends), dtype=float, count=int(offsets[-1]))
    step_time = float(ends.max()) if ends.size else 0.0
    busy = np.bincount(dev_a, weights=ends - starts, minlength=num_devices) if ends.size else np.zeros(num_devices)
    bubbles = [float(1.0 - b / step_time) if step_time > 0 else 0.0 for b in busy]

    # Memory: one change per action, at F's start or at the end of I/W/B. Along a device's list
    # these instants are non-decreasing (start_k <= end_k <= start_k+1), so a cumsum is the timeline.
    act_stage, actw_stage = sc.act, sc.act_w
    delta = np.zeros(starts.shape)
    delta[op_a == _F] = act_stage[stage_a[op_a == _F]]
    delta[op_a == _B] = -act_stage[stage_a[op_a == _B]]
    delta[op_a == _I] = -(act_stage - actw_stage)[stage_a[op_a == _I]]
    delta[op_a == _W] = -actw_stage[stage_a[op_a == _W]]
    when = np.where(op_a == _F, starts, ends)
    static = [float(x) for x in sc.static]
    peaks, levels = [], []
    for d in range(num_devices):
        lo, hi = offsets[d], offsets[d + 1]
        level = static[d] + np.cumsum(delta[lo:hi])
        peaks.append(float(max(static[d], level.max())) if hi > lo else static[d])
        levels.append((static[d], when[lo:hi], level))
    limits = [float(x) for x in costs.mem_limit_bytes[:num_devices]]
    overflow = [p - lim if p - lim > MEM_SLACK else 0.0 for p, lim in zip(peaks, limits, strict=True)]

    return SimResult(
        step_time_s=step_time,
        busy_s=[float(b) for b in busy],
        bubble_ratio_per_device=bubbles,
        bubble_ratio=float(np.mean(bubbles)) if bubbles else 0.0,
        peak_memory_bytes=peaks,
        lower_bound_s=lower_bound(costs, num_devices, m),
        fits_memory=all(o == 0.0 for o in overflow),
        overflow_bytes=overflow,
        mem_limit_bytes=limits,
        static_bytes=static,
        num_microbatches=m,
        detail=_Detail(layout, sc, run, when, levels),
    )
