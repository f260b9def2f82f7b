"""Self-contained SVG timelines of simulated plans, for slides and reports.

Data flow: (`SimResult`, `Programs`, `Layout`) -> SVG text (the CLI writes the file). Pure
string building with the standard library; imports the shared helpers in `render`, `core`
and the result type from `simulate` only (no rich, no builder, no solver, no torch).

`timeline_svg` draws one plan: a lane per device, a box per action coloured by op with the
micro-batch number inside when the box is wide enough, a time axis and a legend.
`stacked_svg` stacks several plans on one common time scale, so a classic schedule and an
adaptive plan can be compared by eye (shorter = faster).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from xml.sax.saxutils import escape

from adaptis_plan.core import OPS, Layout, Programs
from adaptis_plan.judge.simulate import SimResult
from adaptis_plan.render import OP_COLORS, OP_NAMES
from adaptis_plan.units import fmt_time

_FONT = "Helvetica, Arial, sans-serif"
_LEFT = 76  # px for lane labels
_RIGHT = 24
_LANE_H = 22
_LANE_GAP = 5
_TITLE_H = 30
_AXIS_H = 30
_PANEL_GAP = 18
_LEGEND_H = 28
_CHAR_W = 6.2  # px per digit at font-size 10
# Tooltips (<title> per box) make huge files; only emit them for modest plans.
_MAX_TOOLTIPS = 20_000

Panel = tuple[str, SimResult, Programs, Layout]


def timeline_svg(result: SimResult, programs: Programs, layout: Layout, title: str, width: int = 1200) -> str:
    """One plan as an SVG document (string)."""
    return stacked_svg([(title, result, programs, layout)], width=width)


def stacked_svg(panels: Sequence[Panel], width: int = 1200) -> str:
    """Several plans, one above the other, sharing one time scale (the longest step fills the width)."""
    if not panels:
        raise ValueError("stacked_svg needs at least one (title, result, programs, layout) panel")
    t_max = max((r.step_time_s for _, r, _, _ in panels), default=0.0) or 1.0
    plot_w = width - _LEFT - _RIGHT
    scale = plot_w / t_max
    tooltips = sum(len(p) for _, _, progs, _ in panels for p in progs) <= _MAX_TOOLTIPS
    body: list[str] = []
    y = 8.0
    present: set[str] = set()
    for title, result, programs, layout in panels:
        present |= {a[1] for prog in programs for a in prog}
        y = _panel(body, y, title, result, programs, layout, scale, t_max, tooltips)
        y += _PANEL_GAP
    y = _legend(body, y, [op for op in OPS if op in present])
    height = math.ceil(y + 6)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{_FONT}">'
    )
    background = f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>'
    return "\n".join([head, background, *body, "</svg>", ""])


def _panel(
    out: list[str],
    y: float,
    title: str,
    result: SimResult,
    programs: Programs,
    layout: Layout,
    scale: float,
    t_max: float,
    tooltips: bool,
) -> float:
    heading = f"{title} — step {fmt_time(result.step_time_s)}, bubble {result.bubble_ratio:.1%}" + (
        f", lower bound {fmt_time(result.lower_bound_s)}" if result.lower_bound_s > 0 else ""
    )
    out.append(
        f'<text x="{_LEFT}" y="{y + 18:.1f}" font-size="15" font-weight="bold" fill="#222">{escape(heading)}</text>'
    )
    y += _TITLE_H
    lanes_top = y
    for d in range(layout.num_devices):
        out.append(
            f'<text x="{_LEFT - 8}" y="{y + _LANE_H / 2 + 4:.1f}" font-size="11" text-anchor="end" fill="#333">'
            f"device {d}</text>"
        )
        out.append(
            f'<rect x="{_LEFT}" y="{y:.1f}" width="{result.step_time_s * scale:.2f}" height="{_LANE_H}" fill="#f1f1f1"/>'
        )
        out.append('<g stroke="#ffffff" stroke-width="0.6">')
        labels: list[str] = []
        for a, (t0, t1) in zip(programs[d], result.times[d], strict=True):
            x, w = _LEFT + t0 * scale, (t1 - t0) * scale
            tip = f"<title>{a[0]}{a[1]}{a[2]}: {OP_NAMES[a[1]]}, stage {a[0]}, mb {a[2]}, {fmt_time(t1 - t0)}</title>"
            out.append(
                f'<rect x="{x:.2f}" y="{y:.1f}" width="{max(w, 0.0):.2f}" height="{_LANE_H}" '
                f'fill="{OP_COLORS[a[1]]}"' + (f">{tip}</rect>" if tooltips else "/>")
            )
            text = str(a[2])
            if w >= len(text) * _CHAR_W + 4:
                fill = "#222" if a[1] in "WI" else "#fff"
                labels.append(
                    f'<text x="{x + w / 2:.2f}" y="{y + _LANE_H / 2 + 3.5:.1f}" font-size="10" text-anchor="middle" '
                    f'fill="{fill}">{text}</text>'
                )
        out.append("</g>")
        if labels:
            out.append('<g pointer-events="none">')
            out.extend(labels)
            out.append("</g>")
        y += _LANE_H + _LANE_GAP
    _axis(out, lanes_top, y, scale, t_max)
    return y + _AXIS_H


def _axis(out: list[str], top: float, y: float, scale: float, t_max: float) -> None:
    unit, factor = ("s", 1.0) if t_max >= 1.0 else ("ms", 1e3) if t_max >= 1e-3 else ("us", 1e6)
    tick = _nice_step(t_max * factor / 8) / factor
    out.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + t_max * scale:.2f}" y2="{y:.1f}" stroke="#555"/>')
    n = int(math.floor(t_max / tick + 1e-9))
    for k in range(n + 1):
        t = k * tick
        x = _LEFT + t * scale
        out.append(f'<line x1="{x:.2f}" y1="{top:.1f}" x2="{x:.2f}" y2="{y:.1f}" stroke="#000" stroke-opacity="0.08"/>')
        out.append(f'<line x1="{x:.2f}" y1="{y:.1f}" x2="{x:.2f}" y2="{y + 4:.1f}" stroke="#555"/>')
        out.append(
            f'<text x="{x:.2f}" y="{y + 15:.1f}" font-size="10" text-anchor="middle" fill="#444">'
            f"{_num(t * factor)}</text>"
        )
    out.append(f'<text x="{_LEFT - 8}" y="{y + 15:.1f}" font-size="10" text-anchor="end" fill="#444">{unit}</text>')


def _legend(out: list[str], y: float, ops: list[str]) -> float:
    x = float(_LEFT)
    for op in ops:
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="14" height="14" fill="{OP_COLORS[op]}"/>')
        label = f"{op} {OP_NAMES[op]}"
        out.append(f'<text x="{x + 19:.1f}" y="{y + 11:.1f}" font-size="11" fill="#333">{escape(label)}</text>')
        x += 19 + len(label) * 6.3 + 18
    out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="14" height="14" fill="#f1f1f1" stroke="#ccc"/>')
    out.append(f'<text x="{x + 19:.1f}" y="{y + 11:.1f}" font-size="11" fill="#333">idle (bubble)</text>')
    return y + _LEGEND_H


def _nice_step(raw: float) -> float:
    """The 1-2-5 step closest above `raw` (axis ticks)."""
    if raw <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * base >= raw:
            return m * base
    return 10 * base


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:.3g}"
