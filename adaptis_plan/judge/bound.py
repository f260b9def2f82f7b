"""Lower bound on the step time of any plan of a layer list: how far a plan is from the best possible.

Data flow: `CostTable` + device and micro-batch counts -> `lower_bound` -> the simulator's
`SimResult.lower_bound_s`, the plan report and the benchmarks. Independent of partition,
placement and schedule. Imports only `core` and `errors` (numpy inside).
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.errors import InputError


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
    (f) the busiest device's load is a sum of whole layers' work (M * min_d (f+i+w)_dl each) and at
        least the mean, so it is at least the smallest such subset sum that reaches the mean
        (`_subset_sum_bound`). It matters when the layers come in a few sizes (a stack of equal
        blocks, an embedding, a head): no subset may land between the mean and the next sum up.
    (e) and (f) give way to the exact packing optimum (`best_packing`) when the layers come in
    few enough sizes for it to be computed.
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
    # a W right after its own I may cost `w_hot` instead, and a backward run fused (B) what the
    # profile measured for it: the bound takes i = min(I, B) and w = min(W, hot W, B - i), so that
    # i + w is at most whichever way the plan runs the backward, and i at most what delays the gradient
    b_s = costs.b_s[:n]
    i_s = np.minimum(costs.i_s[:n], b_s)
    f_s, w_s = costs.f_s[:n], np.minimum(np.minimum(costs.w_s, costs.w_hot)[:n], b_s - i_s)
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
    best = best_packing(fiw, num_devices)
    if best is not None:  # exact: it is at least (e) and (f)
        return max(work, chain, per_layer_tail, per_layer, m * best.max_load)
    packing = m * _packing_bound(fiw, num_devices)
    subset = m * _subset_sum_bound(fiw, num_devices)
    return max(work, chain, per_layer_tail, per_layer, packing, subset)


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


# More distinct subset sums than this and the bound is skipped (then the layers' sizes are varied
# enough that some subset sum lies close to the mean anyway, and (a) says as much).
_MAX_SUBSET_SUMS = 200_000


def _subset_sum_bound(job: np.ndarray, num_devices: int) -> float:
    """The smallest sum of a sub-multiset of `job` that is at least the mean load sum / P (0 when the
    distinct sums would exceed `_MAX_SUBSET_SUMS`). Equal sizes (to 1e-9 relative) form one class,
    so a stack of identical blocks costs one dimension, not one per block."""
    sizes = np.asarray(job, dtype=float)
    total = float(sizes.sum())
    if num_devices <= 1 or total <= 0:
        return total
    mean = total / num_devices
    tol = 1e-9 * float(sizes.max())
    classes, counts = np.unique(np.round(sizes / tol) * tol if tol > 0 else sizes, return_counts=True)
    sums = np.zeros(1)
    for size, count in zip(classes.tolist(), counts.tolist(), strict=True):
        if size <= 0:
            continue
        sums = (sums[:, None] + size * np.arange(count + 1)[None, :]).ravel()
        sums = np.unique(np.round(sums / tol) * tol)
        if sums.size > _MAX_SUBSET_SUMS:
            return 0.0
    # each class's rounding moved a sum by at most tol / 2: keep the bound below the truth
    slack = (len(classes) + 1) * tol
    above = sums[sums >= mean - slack]
    return max(float(above.min()) - slack, 0.0) if above.size else 0.0


# More sub-multisets of the layers than this (the product of (count + 1) over the distinct sizes),
# or more than `_MAX_PACKING_WORK` of them times devices, and `best_packing` gives up (None).
_MAX_PACKING_STATES = 20_000
_MAX_PACKING_WORK = 200_000


@dataclass(frozen=True)
class Packing:
    """The best assignment of whole jobs to devices by their sizes alone (P||Cmax): `sizes` the
    distinct job sizes, `per_device[d][c]` how many jobs of size `sizes[c]` device d gets (zero-size
    jobs are left out), `max_load` the busiest device's load. Sizes that agree to 1e-9 are one class
    at the smallest of them, so `max_load` never exceeds the true optimum."""

    sizes: tuple[float, ...]
    per_device: tuple[tuple[int, ...], ...]
    max_load: float


def _size_classes(job: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct positive sizes, their counts): sizes equal to 1e-9 of the largest are one class,
    represented by its smallest member (so a load computed from the classes never exceeds the
    true load)."""
    sizes = np.asarray(job, dtype=float)
    sizes = np.sort(sizes[sizes > 0])
    if sizes.size == 0:
        return np.zeros(0), np.zeros(0, dtype=int)
    tol = 1e-9 * float(sizes.max())
    _, first, counts = np.unique(np.round(sizes / tol), return_index=True, return_counts=True)
    return sizes[first], counts


def best_packing(job: np.ndarray, num_devices: int) -> Packing | None:
    """The optimal P||Cmax of `job` on `num_devices` devices when the jobs come in few distinct
    sizes (a stack of equal blocks, an embedding, a head, a second block kind), else None.

    Dynamic programme over sub-multisets S (count vectors): g_1(S) = load(S) and
    g_k(S) = min over C <= S of max(load(C), g_{k-1}(S - C)), the best busiest load of S on k
    devices; the answer is g_P(all). Cached per (sizes, counts, devices): the simulator asks for
    the bound of every plan it judges."""
    classes, counts = _size_classes(job)
    if num_devices < 1 or classes.size == 0:
        return None
    key = (tuple(classes.tolist()), tuple(counts.tolist()), int(num_devices))
    states = int(np.prod(counts + 1))
    if states > _MAX_PACKING_STATES or states * min(num_devices, int(counts.sum())) > _MAX_PACKING_WORK:
        return None
    return _best_packing_cached(*key)


@functools.lru_cache(maxsize=256)
def _best_packing_cached(sizes: tuple[float, ...], counts: tuple[int, ...], num_devices: int) -> Packing:
    shape = tuple(c + 1 for c in counts)
    load = np.tensordot(np.array(sizes), np.indices(shape), axes=1)
    full = counts
    # more devices than jobs: the rest stay empty, the busiest holds the largest job
    devices = min(num_devices, sum(counts))
    g = load
    choices: list[np.ndarray] = []  # per k >= 2: the flat index of the chosen C for each S
    # only a device load up to a known packing's busiest (largest first onto the least loaded, the lowest
    # index among equals) matters; with a relative margin: that packing's loads are summed job by job,
    # `load` as count x size, and the two roundings differ (cutting the busiest device's own subset would
    # leave an invalid bound)
    jobs = sorted((x for x, c in zip(sizes, counts, strict=True) for _ in range(c)), reverse=True)
    heap = [(0.0, d) for d in range(devices)]
    for x in jobs:
        least, d = heapq.heappop(heap)
        heapq.heappush(heap, (least + x, d))
    cap = max(busy for busy, _ in heap) * (1 + 1e-9)
    flats = np.flatnonzero(load.ravel() <= cap)  # the subsets C worth trying, in flat order (the empty one too)
    worth = np.stack(np.unravel_index(flats, shape), axis=1)  # their counts, a row each
    best = float(load[full])
    for k in range(2, devices + 1):
        choice = np.full(shape, -1, dtype=np.int64)  # -1: S alone on this device (C = S)
        if k == devices:  # the last count reads the whole multiset's entry alone: only it is computed
            best, choice[full] = _whole_entry(load, g, full, flats, worth)
            choices.append(choice)
            break
        new = load.copy()
        for flat, c in zip(flats.tolist(), worth.tolist(), strict=True):
            dst = tuple(slice(ci, None) for ci in c)
            src = tuple(slice(0, s - ci) for s, ci in zip(shape, c, strict=True))
            cand = np.maximum(load.flat[flat], g[src])
            better = cand < new[dst]
            new[dst] = np.where(better, cand, new[dst])
            choice[dst] = np.where(better, flat, choice[dst])
        g = new
        choices.append(choice)
    # walk the choices back: device by device, what it takes of what is left
    per_device: list[tuple[int, ...]] = []
    left = full
    for choice in reversed(choices):
        flat = int(choice[left])
        take = left if flat < 0 else tuple(int(i) for i in np.unravel_index(flat, shape))
        per_device.append(tuple(int(x) for x in take))
        left = tuple(a - b for a, b in zip(left, take, strict=True))
    per_device.append(tuple(int(x) for x in left))
    per_device += [(0,) * len(sizes)] * (num_devices - devices)
    return Packing(sizes, tuple(per_device), best)


def _whole_entry(
    load: np.ndarray, g: np.ndarray, full: tuple[int, ...], flats: np.ndarray, worth: np.ndarray
) -> tuple[float, int]:
    """The DP's entry for the whole multiset `full` at one more device than `g` is for: min over the subsets C
    (flat indices `flats`, counts the rows of `worth`; the empty one among them) of max(load(C), g(full - C)),
    or load(full) alone, with the C chosen (its flat index; -1: full alone): the first C in `flats`' order that
    reaches the minimum, as the entry-by-entry loop keeps the first strict improvement. One vectorised pass
    instead of a slice per C."""
    alone = float(load[full])
    cand = np.maximum(load.ravel()[flats], g[tuple((np.asarray(full) - worth).T)])
    i = int(np.argmin(cand))
    return (float(cand[i]), int(flats[i])) if cand[i] < alone else (alone, -1)
