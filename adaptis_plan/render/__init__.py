"""Views of a simulated plan: terminal timeline (rich), SVG for slides, Chrome / Perfetto trace;
and the Chrome / Perfetto trace of a measured run.

Data flow: (`Layout`, `Programs`, `SimResult`) -> pure render functions -> a rich renderable,
SVG text or a trace dict; a plan file and its measured timelines -> a trace dict. No IO here (the
CLI and the launcher write files). The renderers may import `rich` (terminal only), `core`, the
plan-file spec and `simulate`'s result types; never a builder, the search, the executor, torch or
ortools. The helpers shared by all views (op colours, bucketed occupancy) live here, and
sizes and durations are formatted by `adaptis_plan.units`; the views are imported lazily so
`import adaptis_plan.render` costs only numpy:

- `render.terminal`: `timeline`, `summary_table`
- `render.svg`: `timeline_svg`, `stacked_svg`
- `render.trace`: `chrome_trace`
- `render.measured`: `measured_trace` (a measured run's timeline, from the executor's result files)
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from adaptis_plan.core import OPS, Programs
from adaptis_plan.units import fmt_bytes as fmt_bytes
from adaptis_plan.units import fmt_time as fmt_time

_EXPORTS = {
    "timeline": "terminal",
    "summary_table": "terminal",
    "timeline_svg": "svg",
    "stacked_svg": "svg",
    "chrome_trace": "trace",
    "measured_trace": "measured",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


OP_NAMES = {"F": "forward", "B": "backward", "I": "backward (inputs)", "W": "backward (weights)"}
# F blue, B / I green-ish, W yellow-ish (colour-blind-safe-ish Tableau tones).
OP_COLORS = {"F": "#4C78A8", "B": "#3A923A", "I": "#88C36A", "W": "#E8B83A"}


def op_codes(programs: Programs) -> list[np.ndarray]:
    """Per device, the `core.OPS` index of each action."""
    code = {o: i for i, o in enumerate(OPS)}
    return [np.fromiter((code[a[1]] for a in prog), dtype=np.int64, count=len(prog)) for prog in programs]


def bucket_occupancy(times: list[tuple[float, float]], ops: np.ndarray, t_max: float, width: int) -> np.ndarray:
    """[width, len(OPS)] seconds each op occupies in each of `width` equal time buckets over [0, t_max].

    Actions of one device never overlap and are in time order, so for each op the cumulative
    busy time up to t is a prefix sum plus the partial action straddling t (searchsorted).
    """
    edges = np.linspace(0.0, t_max, width + 1)
    out = np.zeros((width, len(OPS)))
    if not times:
        return out
    arr = np.asarray(times, dtype=float)
    for c in range(len(OPS)):
        sel = arr[ops == c]
        if sel.size == 0:
            continue
        s, e = sel[:, 0], sel[:, 1]
        cum = np.concatenate([[0.0], np.cumsum(e - s)])
        k = np.searchsorted(e, edges, side="right")  # actions finished by each edge
        partial = np.zeros_like(edges)
        inside = k < len(s)
        kk = np.minimum(k, len(s) - 1)
        partial[inside] = np.clip(edges[inside] - s[kk[inside]], 0.0, None)
        out[:, c] = np.diff(cum[k] + partial)
    return out
