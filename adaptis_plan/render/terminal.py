"""Terminal views of a simulated plan (rich): a bucketed per-device timeline and a summary table.

Data flow: (`SimResult`, `Programs`, `Layout`) -> rich renderables that the CLI prints. Pure:
no console, no printing here. Imports rich, numpy, `core` and `simulate`'s result type only.
"""

from __future__ import annotations

import itertools

import numpy as np
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from adaptis_plan.core import OPS, Layout, Programs
from adaptis_plan.judge.simulate import SimResult
from adaptis_plan.render import OP_COLORS, OP_NAMES, bucket_occupancy, op_codes
from adaptis_plan.units import fmt_bytes, fmt_time

_IDLE = "·"
# A bucket shows its dominant op when the device is busy for at least this share of it.
_BUSY_SHARE = 0.5


def _style(op: str) -> str:
    return f"bold black on {OP_COLORS[op]}"


def timeline(result: SimResult, programs: Programs, layout: Layout, width: int = 100) -> RenderableType:
    """One row per device, at most `width` characters wide (label, time buckets, bubble %).

    Time [0, step] is cut into equal buckets; each shows its dominant op (F blue, B/I green,
    W yellow) or a dim '·' when the device idles for most of it. A legend and the step time,
    mean bubble and lower bound follow.
    """
    step = result.step_time_s
    label_w = len(f"dev {max(layout.num_devices - 1, 0)}") + 1
    suffix_w = 8  # " 100.0%"
    cols = max(int(width) - label_w - suffix_w, 10)
    rows: list[RenderableType] = []
    axis = Text(" " * label_w)
    left, right = "0", fmt_time(step)
    axis.append(left + " " * max(cols - len(left) - len(right), 1) + right, style="dim")
    axis.append("  bubble", style="dim")
    rows.append(axis)
    codes = op_codes(programs)
    for d in range(layout.num_devices):
        row = Text()
        row.append(f"dev {d}".rjust(label_w - 1) + " ", style="bold")
        cells = [_IDLE] * cols
        if step > 0:
            occ = bucket_occupancy(result.times[d], codes[d], step, cols)
            busy = occ.sum(axis=1)
            dominant = occ.argmax(axis=1)
            for c in np.flatnonzero(busy >= _BUSY_SHARE * step / cols).tolist():
                cells[c] = OPS[int(dominant[c])]
        for ch, run in itertools.groupby(cells):
            row.append(ch * len(list(run)), style="dim" if ch == _IDLE else _style(ch))
        row.append(f" {result.bubble_ratio_per_device[d]:7.1%}", style="dim")
        rows.append(row)
    legend = Text(" " * label_w)
    present = {a[1] for prog in programs for a in prog}
    for op in OPS:
        if op in present:
            legend.append(f" {op} ", style=_style(op))
            legend.append(f" {OP_NAMES[op]}   ")
    legend.append(f"{_IDLE} idle", style="dim")
    rows.append(legend)
    rows.append(
        Text(
            f"step {fmt_time(step)}   bubble {result.bubble_ratio:.1%} (mean over devices)   "
            f"lower bound {fmt_time(result.lower_bound_s)}",
            style="bold",
        )
    )
    return Group(*rows)


def _layer_range(lo: int, hi: int) -> str:
    return str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}"


def summary_table(result: SimResult, programs: Programs, layout: Layout, title: str | None = None) -> Table:
    """Per device: stages, layers, actions, busy time, bubble, peak memory vs limit."""
    table = Table(title=title, show_lines=False)
    for name, justify in (
        ("device", "right"),
        ("stages", "left"),
        ("layers", "left"),
        ("actions", "right"),
        ("busy", "right"),
        ("bubble", "right"),
        ("peak memory", "right"),
        ("limit", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for d in range(layout.num_devices):
        stages = layout.stages_of(d)
        layers = ", ".join(_layer_range(layout.bounds[s], layout.bounds[s + 1]) for s in stages)
        peak = result.peak_memory_bytes[d]
        limit = result.mem_limit_bytes[d] if d < len(result.mem_limit_bytes) else float("inf")
        over = result.overflow_bytes[d] > 0
        table.add_row(
            str(d),
            ", ".join(map(str, stages)) or "-",
            layers or "-",
            str(len(programs[d])),
            fmt_time(result.busy_s[d]),
            f"{result.bubble_ratio_per_device[d]:.1%}",
            Text(
                fmt_bytes(peak) + (f" (+{fmt_bytes(result.overflow_bytes[d])})" if over else ""),
                style="bold red" if over else "",
            ),
            "-" if not np.isfinite(limit) else fmt_bytes(limit),
        )
    ratio = result.step_time_s / result.lower_bound_s if result.lower_bound_s > 0 else float("nan")
    table.caption = (
        f"step {fmt_time(result.step_time_s)}, lower bound {fmt_time(result.lower_bound_s)} ({ratio:.2f}x), "
        f"bubble {result.bubble_ratio:.1%}, memory {'fits' if result.fits_memory else 'DOES NOT FIT'}"
    )
    return table
