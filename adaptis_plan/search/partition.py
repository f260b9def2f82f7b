"""Partition heuristics: consecutive layers -> stages, for a given placement.

Data flow: cost table + placement -> cut points (`bounds`). Cheap and exact enough to be the
hint, fallback and oracle of the CP-SAT partition model (`cpsat_partition`). Pure numpy; no
solver, no simulator.

- `min_max_stage_bounds`: the partition minimizing the heaviest stage (each stage timed on its
  own device's row, so heterogeneous devices get proportionate work), by binary search over the
  bottleneck with a greedy fill, which is optimal for contiguous segments.
- `device_balanced_bounds`: starts there and moves single boundary layers while the heaviest
  device's total work drops (AdaPtis' move-one-layer with rollback to the best so far).
"""

from __future__ import annotations

import numpy as np

from ..core import CostTable


def layer_work(costs: CostTable) -> np.ndarray:
    """[num_devices, num_layers] F + I + W seconds."""
    return costs.f_s + costs.i_s + costs.w_s


def _prefix(work: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((work.shape[0], 1)), np.cumsum(work, axis=1)], axis=1)


def _greedy_fill(prefix: np.ndarray, stage_device: tuple[int, ...], limit: float) -> list[int] | None:
    """Cut points giving each stage as many layers as fit under `limit`; None if impossible."""
    num_layers = prefix.shape[1] - 1
    num_stages = len(stage_device)
    bounds = [0]
    start = 0
    for s, d in enumerate(stage_device):
        remaining_stages = num_stages - s - 1
        row = prefix[d]
        # furthest stop with row[stop] - row[start] <= limit, leaving >= 1 layer per later stage
        stop = int(np.searchsorted(row, row[start] + limit * (1 + 1e-12), side="right")) - 1
        stop = min(stop, num_layers - remaining_stages)
        if stop <= start:
            return None
        bounds.append(stop)
        start = stop
    if start != num_layers:
        return None
    return bounds


def min_max_stage_bounds(costs: CostTable, stage_device: tuple[int, ...]) -> tuple[int, ...]:
    """Partition minimizing the maximum stage work (stage timed on its device)."""
    num_layers = costs.num_layers
    if len(stage_device) > num_layers:
        raise ValueError(f"{len(stage_device)} stages for {num_layers} layers")
    work = layer_work(costs)
    prefix = _prefix(work)
    lo = float(max(work[stage_device[0]].min(), 0.0))
    hi = float(prefix[:, -1].max())
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


def _score(costs: CostTable, bounds: tuple[int, ...], stage_device: tuple[int, ...]) -> tuple[float, float]:
    return float(device_work(costs, bounds, stage_device).max()), float(stage_work(costs, bounds, stage_device).max())


def device_balanced_bounds(
    costs: CostTable, stage_device: tuple[int, ...], start: tuple[int, ...] | None = None, max_moves: int = 400
) -> tuple[int, ...]:
    """Refine cut points by single-layer boundary moves that lower (max device work, max stage work)."""
    bounds = list(start or min_max_stage_bounds(costs, stage_device))
    best = _score(costs, tuple(bounds), stage_device)
    for _ in range(max_moves):
        improved = False
        for k in range(1, len(bounds) - 1):
            for delta in (-1, 1):
                cand = bounds.copy()
                cand[k] += delta
                if not (cand[k - 1] < cand[k] < cand[k + 1]):
                    continue
                score = _score(costs, tuple(cand), stage_device)
                if score < best:
                    best, bounds, improved = score, cand, True
        if not improved:
            break
    return tuple(bounds)
