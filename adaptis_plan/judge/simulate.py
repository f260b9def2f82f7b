"""Event simulator: the independent judge of every plan.

Data flow: (`Layout`, `CostTable`, `Programs`, num_microbatches) -> `simulate` -> `SimResult`
(step time, per-action start/end, bubbles, memory, transfers, lower bound). Builders, the
search, the CLI and the renderers consume the result. This module imports only `core`,
`errors` and `validate`: no schedule builder, no solver, no rich, no torch — a plan's own
estimate is never trusted, it is re-timed here.

Semantics (see DESIGN.md, "Performance model"):

- Each device runs its program strictly in list order, one compute action at a time. An
  action of stage s on device d lasts the sum over the stage's layers of `f_s[d, l]` (F),
  `i_s` (I), `w_s` (W) or `i_s + w_s` (B).
- F(s, mb) starts after F(s-1, mb) has arrived; I/B(s, mb) after F(s, mb) (earlier on the
  same device, guaranteed by `check_programs`) and, for s < last, after the gradient of
  I/B(s+1, mb) has arrived; W(s, mb) after I(s, mb) (earlier on the same device).
- P2P: the boundary between stages s-1 and s is after layer `bounds[s] - 1`; both the
  activation (forward) and the gradient (backward) carry `out_bytes` of that layer and take
  `costs.p2p_s(src, dst, bytes)`; zero when both stages share a device.
- Sends are asynchronous: a transfer never occupies compute. Transfers on one directed
  device pair are serialized FIFO in order of their ready time (one link carries one message
  at a time): a transfer starts at max(ready, the time the previous one released the link).
  A message holds the link for bytes / bandwidth and arrives one latency after that (the
  latency is flight time, so back-to-back messages overlap their latencies).
  Every transfer on link a->b is sent by device a, whose actions end in program order, so
  ready-time order is device a's program order (ties keep program order).
- Memory per device: static = sum of `static_bytes` over the layers of the device's stages;
  F allocates the stage's `act_bytes` at its start; I frees `act_bytes - act_w_bytes` at its
  end; W frees `act_w_bytes` at its end; B frees `act_bytes` at its end.

Implementation: actions are converted once into flat int/float lists; a worklist of devices
advances each device as far as its inputs allow and parks it on the one input it waits for,
so the run is O(actions). If devices remain parked when the worklist empties, the orders
deadlock and `DeadlockError` names the circular wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from adaptis_plan.core import OPS, Action, CostTable, Layout, Programs
from adaptis_plan.errors import DeadlockError, InputError
from adaptis_plan.judge.semantics import flatten_checked, format_grid

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
    every device's peak is within `mem_limit_bytes`; `overflow_bytes[d]` = max(0, peak - limit).
    """

    step_time_s: float
    times: list[list[tuple[float, float]]]
    busy_s: list[float]
    bubble_ratio_per_device: list[float]
    bubble_ratio: float
    peak_memory_bytes: list[float]
    memory_timeline: list[list[tuple[float, float]]]
    transfers: list[Transfer]
    lower_bound_s: float
    fits_memory: bool
    overflow_bytes: list[float]
    mem_limit_bytes: list[float] = field(default_factory=list)
    static_bytes: list[float] = field(default_factory=list)
    num_microbatches: int = 0

    @property
    def num_devices(self) -> int:
        return len(self.times)

    def summary(self) -> dict[str, object]:
        """The JSON-ready keys that `plan --json` / `simulate --json` carry."""
        return {
            "step_time_s": self.step_time_s,
            "bubble_ratio": self.bubble_ratio,
            "bubble_ratio_per_device": list(self.bubble_ratio_per_device),
            "peak_memory_bytes": list(self.peak_memory_bytes),
            "lower_bound_s": self.lower_bound_s,
            "fits_memory": self.fits_memory,
            "overflow_bytes": list(self.overflow_bytes),
        }


def stage_durations(layout: Layout, costs: CostTable) -> np.ndarray:
    """[num_stages, 4] seconds per op (columns in `core.OPS` order: F, B, I, W) on the stage's device,
    the runtime's per-action overhead included (`CostTable.stage_op_seconds`)."""
    out = np.zeros((layout.num_stages, len(OPS)))
    for s, d in enumerate(layout.stage_device):
        t = costs.stage_op_seconds(d, layout.bounds[s], layout.bounds[s + 1])
        out[s, _F], out[s, _I], out[s, _W], out[s, _B] = t["F"], t["I"], t["W"], t["B"]
    return out


def boundary_p2p(layout: Layout, costs: CostTable) -> tuple[np.ndarray, np.ndarray]:
    """(act_s, grad_s), each [num_stages]: entry s is the transfer time across the boundary
    between stages s-1 and s (forward activation s-1 -> s, backward gradient s -> s-1); entry 0 is 0."""
    act = np.zeros(layout.num_stages)
    grad = np.zeros(layout.num_stages)
    for s in range(1, layout.num_stages):
        a, b = layout.stage_device[s - 1], layout.stage_device[s]
        nbytes = float(costs.out_bytes[layout.bounds[s] - 1])
        act[s] = costs.p2p_s(a, b, nbytes)
        grad[s] = costs.p2p_s(b, a, nbytes)
    return act, grad


def _check_costs(layout: Layout, costs: CostTable) -> None:
    if costs.num_layers != layout.num_layers:
        raise InputError(
            f"cost table: num_layers = {costs.num_layers}, but the layout covers {layout.num_layers} layers; "
            "use the cost table of the same model"
        )
    if costs.num_devices < layout.num_devices:
        raise InputError(
            f"cost table: num_devices = {costs.num_devices}, but the layout uses {layout.num_devices} devices; "
            "profile at least as many devices as the pipeline has"
        )


def simulate(layout: Layout, costs: CostTable, programs: Programs, num_microbatches: int) -> SimResult:
    """Time `programs` on `costs`; raise ProgramError / DeadlockError (both InputError) on bad programs."""
    _check_costs(layout, costs)
    dev_a, step_a, stage_a, op_a, mb_a = flatten_checked(layout, programs, num_microbatches)
    num_devices, num_stages, m = layout.num_devices, layout.num_stages, num_microbatches
    last = num_stages - 1
    sm = num_stages * m

    # Per-action precomputation (vectorized). `ready` index space: [0, sm) activation of
    # (stage, mb) arrived at the stage; [sm, 2 sm) gradient of (stage, mb) arrived.
    dur_table = stage_durations(layout, costs)
    act_p2p, grad_p2p = boundary_p2p(layout, costs)
    stage_device = np.asarray(layout.stage_device, dtype=np.int64)
    is_f = op_a == _F
    is_bwd = (op_a == _I) | (op_a == _B)
    dur = dur_table[stage_a, op_a]
    wait = np.full(dur.shape, -1, dtype=np.int64)
    wf = is_f & (stage_a > 0)
    wait[wf] = stage_a[wf] * m + mb_a[wf]
    wb = is_bwd & (stage_a < last)
    wait[wb] = sm + stage_a[wb] * m + mb_a[wb]
    out = np.full(dur.shape, -1, dtype=np.int64)
    odev = np.full(dur.shape, -1, dtype=np.int64)
    pdur = np.zeros(dur.shape)
    of = is_f & (stage_a < last)
    out[of] = (stage_a[of] + 1) * m + mb_a[of]
    odev[of] = stage_device[np.minimum(stage_a[of] + 1, last)]
    pdur[of] = act_p2p[np.minimum(stage_a[of] + 1, last)]
    ob = is_bwd & (stage_a > 0)
    out[ob] = sm + (stage_a[ob] - 1) * m + mb_a[ob]
    odev[ob] = stage_device[np.maximum(stage_a[ob] - 1, 0)]
    pdur[ob] = grad_p2p[stage_a[ob]]

    # a message holds its link for bytes / bandwidth; the latency is flight time, not occupancy
    sends = odev >= 0
    occ = np.zeros(dur.shape)
    occ[sends] = np.maximum(pdur[sends] - costs.link_latency_s[dev_a[sends], odev[sends]], 0.0)

    lengths = [len(p) for p in programs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def split(arr: np.ndarray) -> list[list]:
        lst = arr.tolist()
        return [lst[offsets[d] : offsets[d + 1]] for d in range(num_devices)]

    wait_l, dur_l, out_l, odev_l, pdur_l, occ_l = (split(x) for x in (wait, dur, out, odev, pdur, occ))
    starts_l = [[0.0] * n for n in lengths]
    ends_l = [[0.0] * n for n in lengths]
    xfer_l = [[-1.0] * n for n in lengths]  # transfer start, -1 when the action sends nothing off-device

    ready = [-1.0] * (2 * sm)
    waiter = [-1] * (2 * sm)
    link_free = [[0.0] * num_devices for _ in range(num_devices)]
    ptr = [0] * num_devices
    clock = [0.0] * num_devices
    work = list(range(num_devices - 1, -1, -1))
    while work:
        d = work.pop()
        k, t_dev, n = ptr[d], clock[d], lengths[d]
        wait_d, dur_d, out_d, odev_d, pdur_d, occ_d = wait_l[d], dur_l[d], out_l[d], odev_l[d], pdur_l[d], occ_l[d]
        st_d, en_d, xf_d, lf_d = starts_l[d], ends_l[d], xfer_l[d], link_free[d]
        while k < n:
            w = wait_d[k]
            t = t_dev
            if w >= 0:
                r = ready[w]
                if r < 0.0:
                    waiter[w] = d
                    break
                if r > t:
                    t = r
            t_dev = t + dur_d[k]
            st_d[k] = t
            en_d[k] = t_dev
            o = out_d[k]
            if o >= 0:
                dd = odev_d[k]
                if dd == d:
                    ready[o] = t_dev
                else:
                    x0 = lf_d[dd]
                    if t_dev > x0:
                        x0 = t_dev
                    lf_d[dd] = x0 + occ_d[k]
                    xf_d[k] = x0
                    ready[o] = x0 + pdur_d[k]
                wk = waiter[o]
                if wk >= 0:
                    work.append(wk)
            k += 1
        ptr[d], clock[d] = k, t_dev

    if any(ptr[d] < lengths[d] for d in range(num_devices)):
        _raise_deadlock(layout, programs, m, ptr, lengths)

    return _assemble(
        layout, costs, programs, m, lengths, offsets, starts_l, ends_l, xfer_l, pdur, odev, stage_a, op_a, mb_a, dev_a
    )


def _assemble(
    layout: Layout,
    costs: CostTable,
    programs: Programs,
    m: int,
    lengths: list[int],
    offsets: np.ndarray,
    starts_l: list[list[float]],
    ends_l: list[list[float]],
    xfer_l: list[list[float]],
    pdur: np.ndarray,
    odev: np.ndarray,
    stage_a: np.ndarray,
    op_a: np.ndarray,
    mb_a: np.ndarray,
    dev_a: np.ndarray,
) -> SimResult:
    num_devices = layout.num_devices
    times = [list(zip(starts_l[d], ends_l[d], strict=True)) for d in range(num_devices)]
    starts = np.array([x for lst in starts_l for x in lst], dtype=float)
    ends = np.array([x for lst in ends_l for x in lst], dtype=float)
    step_time = float(ends.max()) if ends.size else 0.0
    busy = np.bincount(dev_a, weights=ends - starts, minlength=num_devices) if ends.size else np.zeros(num_devices)
    bubbles = [float(1.0 - b / step_time) if step_time > 0 else 0.0 for b in busy]

    # Memory: one change per action, at F's start or at the end of I/W/B. Along a device's list
    # these instants are non-decreasing (start_k <= end_k <= start_k+1), so a cumsum is the timeline.
    act_stage = np.array([float(np.sum(costs.act_bytes[layout.layers(s)])) for s in range(layout.num_stages)])
    actw_stage = np.array([float(np.sum(costs.act_w_bytes[layout.layers(s)])) for s in range(layout.num_stages)])
    delta = np.zeros(starts.shape)
    delta[op_a == _F] = act_stage[stage_a[op_a == _F]]
    delta[op_a == _B] = -act_stage[stage_a[op_a == _B]]
    delta[op_a == _I] = -(act_stage - actw_stage)[stage_a[op_a == _I]]
    delta[op_a == _W] = -actw_stage[stage_a[op_a == _W]]
    when = np.where(op_a == _F, starts, ends)
    static = [
        float(sum(float(np.sum(costs.static_bytes[layout.layers(s)])) for s in layout.stages_of(d)))
        for d in range(num_devices)
    ]
    peaks, timelines = [], []
    for d in range(num_devices):
        lo, hi = offsets[d], offsets[d + 1]
        level = static[d] + np.cumsum(delta[lo:hi])
        peaks.append(float(max(static[d], level.max())) if hi > lo else static[d])
        timelines.append([(0.0, static[d]), *zip(when[lo:hi].tolist(), level.tolist(), strict=True)])
    limits = [float(x) for x in costs.mem_limit_bytes[:num_devices]]
    overflow = [max(0.0, p - lim) for p, lim in zip(peaks, limits, strict=True)]

    xfer = np.array([x for lst in xfer_l for x in lst], dtype=float)
    idx = np.flatnonzero(xfer >= 0.0)
    src, dst, x0 = dev_a[idx], odev[idx], xfer[idx]
    order = np.lexsort((dst, src, x0))
    idx, src, dst, x0 = idx[order], src[order], dst[order], x0[order]
    transfers = list(
        map(
            Transfer,
            src.tolist(),
            dst.tolist(),
            x0.tolist(),
            (x0 + pdur[idx]).tolist(),
            stage_a[idx].tolist(),
            mb_a[idx].tolist(),
            np.where(op_a[idx] == _F, "act", "grad").tolist(),
        )
    )

    return SimResult(
        step_time_s=step_time,
        times=times,
        busy_s=[float(b) for b in busy],
        bubble_ratio_per_device=bubbles,
        bubble_ratio=float(np.mean(bubbles)) if bubbles else 0.0,
        peak_memory_bytes=peaks,
        memory_timeline=timelines,
        transfers=transfers,
        lower_bound_s=lower_bound(costs, num_devices, m),
        fits_memory=all(o == 0.0 for o in overflow),
        overflow_bytes=overflow,
        mem_limit_bytes=limits,
        static_bytes=static,
        num_microbatches=m,
    )


def _raise_deadlock(layout: Layout, programs: Programs, m: int, ptr: list[int], lengths: list[int]) -> None:
    """Every unfinished device is parked on an input whose producer sits on an unfinished device,
    so following "waits for" from any stuck device must close a cycle; report it."""
    where: dict[tuple[int, str, int], tuple[int, int]] = {}
    for d, prog in enumerate(programs):
        for k, a in enumerate(prog):
            where[(a[0], a[1], a[2])] = (d, k)
    stuck = [d for d in range(layout.num_devices) if ptr[d] < lengths[d]]

    def producer(d: int) -> tuple[Action, int, int]:
        stage, op, mb = programs[d][ptr[d]]
        if op == "F":
            dep = Action(stage - 1, "F", mb)
        else:
            dep = Action(stage + 1, "B", mb) if (stage + 1, "B", mb) in where else Action(stage + 1, "I", mb)
        dd, kk = where[tuple(dep)]  # type: ignore[index]
        return dep, dd, kk

    first = stuck[0]
    dep, dd, kk = producer(first)
    head = f"device {first} waits at step {ptr[first]} for {dep}, which never runs: "
    if dd == first:
        msg = (
            head + f"it comes later in device {first}'s own program (step {kk}); "
            f"move {dep} before step {ptr[first]} of device {first}"
        )
    else:
        chain, seen, d = [first], {first}, dd
        while d not in seen:
            chain.append(d)
            seen.add(d)
            d = producer(d)[1]
        cycle = chain[chain.index(d) :] + [d]
        nxt_dep, _, _ = producer(dd)
        msg = (
            head + f"device {dd} is stuck at step {ptr[dd]} on {programs[dd][ptr[dd]]} waiting for {nxt_dep} "
            f"(circular wait {' -> '.join(f'device {x}' for x in cycle)}); reorder the programs, "
            f"e.g. move {dep} (device {dd} step {kk}) before step {ptr[dd]} of device {dd}"
        )
    grid = format_grid(programs, {d: {ptr[d]} for d in stuck}, window=6)
    raise DeadlockError(msg, grid)


def lower_bound(costs: CostTable, num_devices: int, num_microbatches: int) -> float:
    """A lower bound on the step time of ANY plan with these costs on devices 0..num_devices-1.

    It is independent of partition, placement and schedule. With f, i, w the per-layer minima
    over devices (so any placement costs at least that much), H_l = sum_{l'<l} f_l' and
    I_l = sum_{l'<l} i_l', it is the max of:

    (a) total work / capacity: M * sum_l min_d (f+i+w)_dl / sum_d 1/r_d — every (layer, mb) runs
        F, I and W (or B = I+W) on the one device holding the layer; device d is at least
        r_d = min_l (f+i+w)_dl / min_d' (f+i+w)_d'l times slower than the fastest on every layer,
        so in time T it does at most T / r_d of fastest-device work (r_d = 1 on a homogeneous
        cluster: total work / P).
    (b) one micro-batch's chain: sum_l f_l + sum_l i_l + w_0 — F through all layers, then I
        back through all layers, then W of the stage holding layer 0 (P2P may be zero, so omitted).
    (c) per layer l: H_l + M * min_d (f+i)_dl + I_l + w_0 — take the stage S = [a, b) holding l;
        no action of S starts before H_a; its device runs all M F and I of S one at a time, so the
        last I of S ends at >= H_a + M * sum_{S}(f+i); that micro-batch then still needs I of the
        layers < a and a W holding layer 0 (>= I_a + w_0). Since M * min(f+i) >= f + i per layer,
        the expression only shrinks as a grows to l, so a = l is the worst case and still valid.
    (d) per layer l: H_l + M * min_d (f+i+w)_dl — as (c), counting all of S's work and no tail.
    (e) layer granularity: every layer's M * min_d (f+i+w)_dl lands on one device, so some device
        carries at least the optimal makespan of packing these indivisible jobs onto P devices
        (P||Cmax). `_packing_bound` gives a valid lower bound on it: a capacity C for which the
        Martello-Toth L2 bound proves that more than P bins are needed cannot be reached.
    """
    if num_devices < 1 or num_microbatches < 1:
        raise InputError(
            f"lower_bound: num_devices = {num_devices}, num_microbatches = {num_microbatches}: both must be >= 1"
        )
    if num_devices > costs.num_devices:
        raise InputError(
            f"lower_bound: num_devices = {num_devices}, but the cost table has {costs.num_devices} devices; "
            "profile at least as many devices as the pipeline has"
        )
    n = num_devices
    f_s, i_s, w_s = costs.f_s[:n], costs.i_s[:n], costs.w_s[:n]
    if f_s.shape[1] == 0:
        return 0.0
    m = num_microbatches
    f = f_s.min(axis=0)
    i = i_s.min(axis=0)
    w0 = float(w_s[:, 0].min())
    fiw = (f_s + i_s + w_s).min(axis=0)
    fi = (f_s + i_s).min(axis=0)
    head = np.concatenate([[0.0], np.cumsum(f)[:-1]])
    head_i = np.concatenate([[0.0], np.cumsum(i)[:-1]])
    # a device slower than the fastest by at least r_d on every layer does 1 / r_d of its share
    slowdown = (f_s + i_s + w_s).astype(float) / np.maximum(fiw, 1e-300)
    capacity = float((1.0 / np.maximum(slowdown.min(axis=1), 1.0)).sum())
    work = m * float(fiw.sum()) / capacity
    chain = float(f.sum() + i.sum()) + w0
    per_layer_tail = float(np.max(head + m * fi + head_i)) + w0
    per_layer = float(np.max(head + m * fiw))
    packing = m * _packing_bound(fiw, num_devices)
    return max(work, chain, per_layer_tail, per_layer, packing)


def _bins_l2(sizes: np.ndarray, capacity: float) -> int:
    """A lower bound on the bins of `capacity` needed to pack `sizes` (all <= capacity): the max of
    Martello-Toth L2 and the cardinality bound (a bin holds at most as many items as the smallest
    ones that fit in it)."""
    total = len(sizes)
    fit = int(np.searchsorted(np.cumsum(np.sort(sizes)), capacity * (1 + 1e-12), side="right"))
    best = -(-total // max(fit, 1))
    half = capacity / 2
    for k in np.unique(np.concatenate([[0.0], sizes[sizes <= half]])):
        n1 = sizes > capacity - k
        n2 = (sizes <= capacity - k) & (sizes > half)
        n3 = (sizes <= half) & (sizes >= k)
        free2 = int(n2.sum()) * capacity - float(sizes[n2].sum())
        extra = max(0.0, float(sizes[n3].sum()) - free2)
        best = max(best, int(n1.sum()) + int(n2.sum()) + int(np.ceil(extra / capacity - 1e-12)))
        if best > total:
            break
    return best


def _packing_bound(job: np.ndarray, num_devices: int) -> float:
    """A lower bound on P||Cmax: the pigeonhole bound over the largest jobs, raised to the largest
    capacity for which L2 / cardinality prove that `num_devices` bins do not suffice."""
    sizes = np.sort(np.asarray(job, dtype=float))[::-1]
    lo = max(float(sizes.max()), float(sizes.sum()) / num_devices)
    if num_devices == 1 or len(sizes) <= num_devices or lo <= 0:
        return lo
    # pigeonhole: of the j*P + 1 largest jobs some device gets j + 1, at least the j + 1 smallest of them
    for j in range(1, (len(sizes) - 1) // num_devices + 1):
        top = j * num_devices
        lo = max(lo, float(sizes[top - j : top + 1].sum()))
    hi = float(sizes.sum())
    proven = lo
    for _ in range(40):
        mid = (lo + hi) / 2
        if _bins_l2(sizes, mid) > num_devices:
            proven = max(proven, mid)
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-9 * hi:
            break
    return proven
