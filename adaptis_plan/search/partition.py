"""Partition heuristics: consecutive layers -> stages, for a given placement.

Data flow: cost table + placement -> cut points (`bounds`). Cheap and exact enough to be the
hint, fallback and oracle of the CP-SAT partition model (`cpsat_partition`). Pure numpy; no
solver, no simulator.

- `classic_bounds`: the partitions a classic strategy may be asked for (`CLASSIC_PARTITIONS`).
- `min_max_stage_bounds`: the partition minimizing the heaviest stage (each stage timed on its
  own device's row, so heterogeneous devices get proportionate work), by binary search over the
  bottleneck with a greedy fill, which is optimal for contiguous segments.
- `device_balanced_bounds`: starts there and moves single boundary layers while the heaviest
  device's total work drops (AdaPtis' move-one-layer with rollback to the best so far).
- `packed_layouts`: irregular placements whose device loads approach the best assignment of whole
  layers to devices; `exact_packed_layout` reaches it where `judge.bound.best_packing` can be
  computed (the same optimum the lower bound uses), with the fewest stages or spread over the depth.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.errors import InputError
from adaptis_plan.judge.bound import best_packing
from adaptis_plan.schedules.placement import CLASSIC_PARTITIONS, ends_as_layers_bounds, uniform_bounds


def layer_work(costs: CostTable) -> np.ndarray:
    """[num_devices, num_layers] F + I + W seconds."""
    return costs.f_s + costs.i_s + costs.w_s


def _prefix(work: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((work.shape[0], 1)), np.cumsum(work, axis=1)], axis=1)


def _greedy_fill(prefix: list[list[float]], stage_device: tuple[int, ...], limit: float) -> list[int] | None:
    """Cut points giving each stage as many layers as fit under `limit`; None if impossible. `prefix`: each
    device's row of `_prefix` as a list (the bisection calls this some sixty times per partition)."""
    num_layers = len(prefix[0]) - 1
    num_stages = len(stage_device)
    bounds = [0]
    start = 0
    for s, d in enumerate(stage_device):
        remaining_stages = num_stages - s - 1
        row = prefix[d]
        # furthest stop with row[stop] - row[start] <= limit, leaving >= 1 layer per later stage
        stop = bisect.bisect_right(row, row[start] + limit * (1 + 1e-12)) - 1
        stop = min(stop, num_layers - remaining_stages)
        if stop <= start:
            return None
        bounds.append(stop)
        start = stop
    if start != num_layers:
        return None
    return bounds


def classic_bounds(costs: CostTable, stage_device: tuple[int, ...], partition: str) -> tuple[int, ...]:
    """`partition` (one of `CLASSIC_PARTITIONS`) of the cost table's layers over `stage_device`'s
    stages. Raises InputError when it has no layer for some stage."""
    num_layers, num_stages = costs.num_layers, len(stage_device)
    if partition == "uniform":
        return uniform_bounds(num_layers, num_stages)
    if partition == "ends-as-layers":
        return ends_as_layers_bounds(num_layers, num_stages)
    if partition != "balanced":
        raise InputError(f"partition = {partition!r}: unknown; use one of {', '.join(CLASSIC_PARTITIONS)}")
    if num_stages > num_layers:
        raise InputError(f"balanced partition: {num_stages} stages for {num_layers} layers; use at most {num_layers}")
    return min_max_stage_bounds(costs, stage_device)


def min_max_stage_bounds(costs: CostTable, stage_device: tuple[int, ...]) -> tuple[int, ...]:
    """Partition minimizing the maximum stage work (stage timed on its device)."""
    num_layers = costs.num_layers
    if len(stage_device) > num_layers:
        raise ValueError(f"{len(stage_device)} stages for {num_layers} layers")
    work = layer_work(costs)
    prefix_array = _prefix(work)
    prefix = prefix_array.tolist()
    lo = float(max(work[stage_device[0]].min(), 0.0))
    hi = float(prefix_array[:, -1].max())
    best = _greedy_fill(prefix, stage_device, hi)
    assert best is not None
    for _ in range(60):
        mid = (lo + hi) / 2
        got = _greedy_fill(prefix, stage_device, mid)
        if got is None:
            lo = mid
        else:
            hi, best = mid, got
        if hi - lo <= 1e-9 * max(hi, 1e-12):
            break
    return tuple(best)


def stage_work(costs: CostTable, bounds: tuple[int, ...], stage_device: tuple[int, ...]) -> np.ndarray:
    prefix = _prefix(layer_work(costs))
    return np.array([prefix[d, bounds[s + 1]] - prefix[d, bounds[s]] for s, d in enumerate(stage_device)])


def device_work(costs: CostTable, bounds: tuple[int, ...], stage_device: tuple[int, ...]) -> np.ndarray:
    sw = stage_work(costs, bounds, stage_device)
    out = np.zeros(costs.num_devices)
    np.add.at(out, np.array(stage_device), sw)
    return out


class _Scorer:
    """Device loads of a partition, vectorized over a fixed placement."""

    def __init__(self, costs: CostTable, stage_device: tuple[int, ...]) -> None:
        self.prefix = _prefix(layer_work(costs))
        self.sd = np.array(stage_device)
        self.num_devices = costs.num_devices

    def loads(self, bounds: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        b = np.asarray(bounds)
        stage = self.prefix[self.sd, b[1:]] - self.prefix[self.sd, b[:-1]]
        return np.bincount(self.sd, weights=stage, minlength=self.num_devices), stage

    def score(self, bounds: Sequence[int]) -> tuple[float, ...]:
        """Device loads heaviest first (so lowering the second-heaviest also counts), then the heaviest stage."""
        dev, stage = self.loads(bounds)
        return (*np.round(np.sort(dev)[::-1], 12).tolist(), float(stage.max()))


def _target_fill(prefix: list[list[float]], stage_device: tuple[int, ...], target: float) -> tuple[int, ...]:
    """Walk the stages in order; each takes layers until it reaches its device's remaining budget
    shared over the device's remaining stages (stopping at the layer nearest that share). `prefix`:
    each device's row of `_prefix` as a list."""
    num_layers = len(prefix[0]) - 1
    num_stages = len(stage_device)
    left_stages = {d: stage_device.count(d) for d in set(stage_device)}
    budget = {d: target for d in left_stages}
    bounds = [0]
    start = 0
    for s, d in enumerate(stage_device):
        row = prefix[d]
        share = budget[d] / left_stages[d]
        max_stop = num_layers - (num_stages - s - 1)
        if s == num_stages - 1:
            stop = num_layers
        else:
            goal = row[start] + share
            stop = bisect.bisect_right(row, goal) - 1
            stop = max(stop, start + 1)
            if stop + 1 <= max_stop and abs(row[stop + 1] - goal) < abs(row[stop] - goal):
                stop += 1
            stop = min(stop, max_stop)
        budget[d] -= row[stop] - row[start]
        left_stages[d] -= 1
        bounds.append(stop)
        start = stop
    return tuple(bounds)


def device_balanced_bounds(
    costs: CostTable, stage_device: tuple[int, ...], start: tuple[int, ...] | None = None, max_moves: int = 400
) -> tuple[int, ...]:
    """Refine cut points by boundary moves of one or two layers that lower the sorted device loads.

    Starts from the best of `start`, the min-max-stage partition, and budget-driven fills
    (`_target_fill`) for a range of per-device targets around the mean device load.
    """
    scorer = _Scorer(costs, stage_device)
    starts: list[tuple[int, ...]] = [start] if start else []
    starts.append(min_max_stage_bounds(costs, stage_device))
    num_devices = len(set(stage_device))
    mean_load = float(scorer.prefix[:, -1].min()) / num_devices
    rows = scorer.prefix.tolist()
    for factor in np.linspace(0.9, 1.3, 41):
        starts.append(_target_fill(rows, stage_device, mean_load * factor))
    lightest = min(starts, key=scorer.score)
    bounds = list(lightest)
    best = scorer.score(bounds)
    num_stages = len(stage_device)
    for _ in range(max_moves):
        dev, _stage = scorer.loads(bounds)
        hot = int(np.argmax(dev))
        # only moving a boundary of the heaviest device's stages can lower the maximum
        ks = {k for s in range(num_stages) if stage_device[s] == hot for k in (s, s + 1) if 0 < k < num_stages}
        improved = False
        for k in sorted(ks):
            for delta in (-2, -1, 1, 2):
                cand = bounds.copy()
                cand[k] += delta
                if not (cand[k - 1] < cand[k] < cand[k + 1]):
                    continue
                score = scorer.score(cand)
                if score < best:
                    best, bounds, improved = score, cand, True
        if not improved:
            break
    return tuple(bounds)


def packed_layouts(
    costs: CostTable, num_devices: int, chunks: tuple[int, ...] = (2, 3, 4)
) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    """Irregular placements that pack work evenly: (label, stage_device, bounds) per chunk count k.

    Cut the layers into k x P stages of near-equal work (min-max stage partition), deal the stages
    to devices heaviest first onto the least-loaded device (LPT; ties: not the device of a
    neighbouring stage, then the lowest id), then balance the cut points for that map. With many
    small stages this approaches the best assignment of whole layers to devices, which the presets
    (loop, V, mixtures) can miss when layers are few and unequal (a heavy head, attention among
    Mamba layers)."""
    num_layers = costs.num_layers
    work = layer_work(costs).min(axis=0)
    out = []
    for k in chunks:
        num_stages = k * num_devices
        if num_stages > num_layers:
            break
        bounds = min_max_stage_bounds(costs, (0,) * num_stages)
        prefix = np.concatenate([[0.0], np.cumsum(work)])
        stage_w = [prefix[bounds[s + 1]] - prefix[bounds[s]] for s in range(num_stages)]
        load = [0.0] * num_devices
        sd = [-1] * num_stages
        for s in sorted(range(num_stages), key=lambda s: (-stage_w[s], s)):
            neighbours = {sd[x] for x in (s - 1, s + 1) if 0 <= x < num_stages}
            d = min(range(num_devices), key=lambda d: (round(load[d], 12), d in neighbours, d))
            sd[s] = d
            load[d] += stage_w[s]
        if len(set(sd)) < num_devices:
            continue
        placement_ = tuple(sd)
        out.append((f"packed x{k}", placement_, device_balanced_bounds(costs, placement_, start=tuple(bounds))))
    for label, deal in (("packed exact", "runs"), ("packed spread", "spread")):
        exact = exact_packed_layout(costs, num_devices, deal)
        if exact is not None and all(exact[0] != sd for _, sd, _ in out):
            out.append((label, *exact))
    return out


def exact_packed_layout(
    costs: CostTable, num_devices: int, deal: str = "runs"
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(stage_device, bounds) whose device loads are the optimal packing of whole layers
    (`best_packing` on each layer's cheapest F + I + W), or None where it is not computed or leaves
    a device empty. The layers are dealt in order, by one of two rules:

    - "runs" (fewest stages): a layer stays on the previous layer's device while that device still
      needs a layer of its size, else goes to the device that needs it and can take the longest run
      from here, the lowest id on ties;
    - "spread" (every device holds layers from the whole depth): a layer goes to the device, among
      those that need its size, that has received the smallest share of its own total so far; on
      ties not the previous layer's device, then the lowest id. Each device then has work from the
      first micro-batch's forward on and until the last backward, which shortens the fill and the
      drain at the price of more stages (what an interleaved schedule does with equal stages).

    Zero-cost layers stay with the layer before them (leading ones with the first device)."""
    if deal not in ("runs", "spread"):
        raise ValueError(f"deal = {deal!r}: use 'runs' or 'spread'")
    classes = _packing_classes(costs, num_devices)
    if classes is None:
        return None
    kind, need, sizes = classes
    total = [float(np.dot(sizes, d)) for d in need]
    dealt = [0.0] * num_devices

    def run_length(d: int, start: int) -> int:
        left = need[d].copy()
        n = 0
        for c in kind[start:]:
            if c >= 0:
                if left[c] == 0:
                    break
                left[c] -= 1
            n += 1
        return n

    owner: list[int] = []
    for pos, c in enumerate(kind):
        cur = owner[-1] if owner else None
        if c < 0:
            owner.append(cur if cur is not None else -1)
            continue
        takers = [d for d in range(num_devices) if need[d][c] > 0]
        if deal == "spread":
            cur = min(takers, key=lambda d: (round(dealt[d] / total[d], 12), d == cur, d))
        elif cur is None or cur < 0 or need[cur][c] == 0:
            cur = max(takers, key=lambda d: (run_length(d, pos), -d))
        need[cur][c] -= 1
        dealt[cur] += float(sizes[c])
        owner.append(cur)
    return _layout_of_owners(owner)


def _packing_classes(costs: CostTable, num_devices: int) -> tuple[list[int], list[list[int]], np.ndarray] | None:
    """(each layer's size class, -1 for zero-cost layers; per device, how many layers of each class
    the optimal packing gives it; the class sizes), or None where `best_packing` is not computed or
    leaves a device empty."""
    work = layer_work(costs).min(axis=0)
    packing = best_packing(work, num_devices)
    if packing is None or any(sum(d) == 0 for d in packing.per_device):
        return None
    sizes = np.array(packing.sizes)
    # each positive layer's class: the representative it agrees with to 1e-9 (the smallest member)
    kind = [int(np.argmin(np.abs(sizes - x))) if x > 0 else -1 for x in work.tolist()]
    return kind, [list(d) for d in packing.per_device], sizes


def _layout_of_owners(owner: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(stage_device, bounds) of a device per layer (-1: a zero-cost layer, which stays with the
    layer before it, leading ones with the first device that holds a layer); devices are
    renumbered in the order the layers reach them (the packing does not tell them apart)."""
    owner = list(owner)
    for pos in range(1, len(owner)):
        if owner[pos] < 0:
            owner[pos] = owner[pos - 1]
    first = next(d for d in owner if d >= 0)
    owner = [first if d < 0 else d for d in owner]
    rename: dict[int, int] = {}
    for d in owner:
        rename.setdefault(d, len(rename))
    owner = [rename[d] for d in owner]
    stage_device = [owner[0]]
    bounds = [0]
    for pos in range(1, len(owner)):
        if owner[pos] != owner[pos - 1]:
            stage_device.append(owner[pos])
            bounds.append(pos)
    bounds.append(len(owner))
    return tuple(stage_device), tuple(bounds)


def sampled_packed_layouts(
    costs: CostTable,
    num_devices: int,
    num_microbatches: int,
    *,
    samples: int,
    keep: int,
    seed: int = 0,
    stop: Callable[[], bool] | None = None,
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The `keep` layouts with the lowest order bound (`order_instance.device_bound_s`, I / W split)
    among `samples` random deals of the optimal packing (each device gets exactly the layers of
    each size class the packing gives it, in a random arrangement over the depth), distinct,
    ties by stage count then map; [] where the packing is not computed. `stop()` true ends the
    sampling early (the search's wall-clock abort). The bound only screens:
    the successive halving in the generator's critical-path phase picks among them by schedule.

    The two fixed deals of `exact_packed_layout` fix one arrangement each; where the packing
    forces a device to hold many stages (Nemotron-H: eleven Mamba layers, which come in pairs
    between attention layers), the fill and drain of the layout decide the step, and random deals
    ranked by the order bound find arrangements both deals miss (nemotron-h-s 4K on the paper's
    costs: bound 673.3 against 682.7 for the spread deal, the lower bound being 672.3)."""
    from adaptis_plan.core import Layout
    from adaptis_plan.search.order_instance import device_bound_s

    classes = _packing_classes(costs, num_devices)
    if classes is None or samples <= 0 or keep <= 0:
        return []
    kind, need, _ = classes
    positions: dict[int, list[int]] = {}
    for pos, c in enumerate(kind):
        if c >= 0:
            positions.setdefault(c, []).append(pos)
    rng = random.Random(seed)
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    ranked = []
    for _ in range(samples):
        if stop is not None and stop():
            break
        owner = [-1] * len(kind)
        for c, where in sorted(positions.items()):
            pool = [d for d in range(num_devices) for _ in range(need[d][c])]
            rng.shuffle(pool)
            for pos, d in zip(where, pool, strict=True):
                owner[pos] = d
        sd, bounds = _layout_of_owners(owner)
        if (sd, bounds) in seen:
            continue
        seen.add((sd, bounds))
        bound = device_bound_s(Layout(bounds, sd, num_devices), costs, num_microbatches, True)
        ranked.append((round(bound, 9), len(sd), sd, bounds))
    ranked.sort()
    return [(sd, bounds) for _, _, sd, bounds in ranked[:keep]]
