"""SVG pictures for BENCHMARKS.md: pure string building, no matplotlib.

Data flow: the `paper` suite's record -> SVG text -> docs/img/*.svg (written by `bench.report`).

- `timeline_chart`: the best classic plan above the adaptive plan on one time scale
  (`adaptis_plan.render.svg.stacked_svg`).
- `speedup_chart`: per case, bars for the adaptive speed-up over Interleaved1F1B and over the
  best feasible classic, with the paper's AdaPtis / I-1F1B speed-up as a marker where it has one.

Imports only the standard library and `adaptis_plan.render.svg`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

_FONT = "Helvetica, Arial, sans-serif"
_C_I1F1B = "#4C78A8"
_C_BEST = "#F58518"
_C_PAPER = "#222222"
_C_TARGET = "#54A24B"


def timeline_chart(panels: Sequence[dict], width: int = 1200, prefix: str = "") -> str:
    """`panels` = plain panels (`bench.paper.plain_panel`: title, step, bubble, lower bound, and per
    device its actions as [stage, op, mb, start s, end s]), drawn on one time scale; `prefix` goes
    before each title."""
    from types import SimpleNamespace

    from adaptis_plan.render.svg import stacked_svg

    drawn = []
    for p in panels:
        lanes = p["lanes"]
        result = SimpleNamespace(
            step_time_s=p["step_time_s"],
            bubble_ratio=p["bubble_ratio"],
            lower_bound_s=p["lower_bound_s"],
            times=[[(a[3], a[4]) for a in lane] for lane in lanes],
        )
        programs = [[(a[0], a[1], a[2]) for a in lane] for lane in lanes]
        drawn.append((prefix + p["title"], result, programs, SimpleNamespace(num_devices=len(lanes))))
    return stacked_svg(drawn, width=width)


@dataclass(frozen=True)
class SpeedupBar:
    label: str  # case name on the x axis
    vs_i1f1b: float | None
    vs_best: float | None
    paper_vs_i1f1b: float | None = None
    i1f1b_oom: bool = False  # Interleaved1F1B's plan is over the memory limit (its bar is drawn pale)


def speedup_chart(bars: Sequence[SpeedupBar], title: str, target: float | None = None) -> str:
    """Grouped bars (two per case) on a linear axis starting at 0, a reference line at 1.0x."""
    vals = [v for b in bars for v in (b.vs_i1f1b, b.vs_best, b.paper_vs_i1f1b) if v is not None and math.isfinite(v)]
    top = max([1.0, *(vals or [1.0])] + ([target] if target else []))
    y_max = _nice_ceil(top * 1.08)
    left, right, top_pad, bottom = 56, 16, 68, 118
    group_w = 34
    group_w = max(group_w, 640 // max(1, len(bars)))  # room for the title and the legend
    plot_w = max(1, len(bars)) * group_w
    plot_h = 300
    width = left + plot_w + right
    height = top_pad + plot_h + bottom

    def y(v: float) -> float:
        return top_pad + plot_h * (1 - v / y_max)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{_FONT}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{left}" y="20" font-size="15" font-weight="bold" fill="#222">{escape(title)}</text>',
    ]
    step = _nice_step(y_max / 6)
    k = 0
    while k * step <= y_max + 1e-9:
        v = k * step
        out.append(
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#000" '
            f'stroke-opacity="{0.35 if abs(v - 1) < 1e-9 else 0.08}"/>'
        )
        out.append(
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="10" text-anchor="end" fill="#444">{v:.2g}x</text>'
        )
        k += 1
    if target:
        out.append(
            f'<line x1="{left}" y1="{y(target):.1f}" x2="{left + plot_w}" y2="{y(target):.1f}" '
            f'stroke="{_C_TARGET}" stroke-dasharray="5,4"/>'
        )
    bar_w = 12
    for n, b in enumerate(bars):
        x0 = left + n * group_w + (group_w - 2 * bar_w) / 2
        for j, (v, color, what, pale) in enumerate(
            (
                (b.vs_i1f1b, _C_I1F1B, "vs Interleaved1F1B" + (" (over memory)" if b.i1f1b_oom else ""), b.i1f1b_oom),
                (b.vs_best, _C_BEST, "vs best classic", False),
            )
        ):
            if v is None or not math.isfinite(v):
                continue
            x = x0 + j * bar_w
            opacity = ' fill-opacity="0.4"' if pale else ""
            out.append(
                f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bar_w - 1}" height="{y(0) - y(v):.1f}" '
                f'fill="{color}"{opacity}><title>{escape(b.label)} {what}: {v:.2f}x</title></rect>'
            )
        if b.paper_vs_i1f1b is not None:
            cx, cy = x0 + bar_w / 2 - 0.5, y(b.paper_vs_i1f1b)
            out.append(
                f'<path d="M{cx - 5:.1f},{cy:.1f} L{cx:.1f},{cy - 5:.1f} L{cx + 5:.1f},{cy:.1f} '
                f'L{cx:.1f},{cy + 5:.1f} Z" fill="{_C_PAPER}"><title>{escape(b.label)} paper AdaPtis /'
                f" I-1F1B: {b.paper_vs_i1f1b:.2f}x</title></path>"
            )
        lx, ly = left + n * group_w + group_w / 2 + 3, top_pad + plot_h + 8
        out.append(
            f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" fill="#333" text-anchor="end" '
            f'transform="rotate(-60 {lx:.1f} {ly:.1f})">{escape(b.label)}</text>'
        )
    out.append(f'<line x1="{left}" y1="{y(0):.1f}" x2="{left + plot_w}" y2="{y(0):.1f}" stroke="#555"/>')
    lx, ly = left, 38
    for color, label, shape in (
        (_C_I1F1B, "adaptive vs Interleaved1F1B", "bar"),
        (_C_BEST, "adaptive vs best feasible classic", "bar"),
        (_C_PAPER, "paper: AdaPtis vs I-1F1B", "diamond"),
        (_C_I1F1B, "pale: Interleaved1F1B over the memory limit", "pale"),
        *([(_C_TARGET, f"dashed: target mean vs Interleaved1F1B {target:.2f}x", "dash")] if target else []),
    ):
        item_w = 16 + int(len(label) * 6.0) + 18
        if lx > left and lx + item_w > width - right:  # wrap to a second legend row
            lx, ly = left, ly + 16
        if shape == "diamond":
            out.append(
                f'<path d="M{lx + 1},{ly - 4} L{lx + 6},{ly - 9} L{lx + 11},{ly - 4} L{lx + 6},{ly + 1} Z" '
                f'fill="{color}"/>'
            )
        elif shape == "dash":
            out.append(
                f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 12}" y2="{ly - 4}" stroke="{color}" stroke-dasharray="4,2"/>'
            )
        else:
            opacity = ' fill-opacity="0.4"' if shape == "pale" else ""
            out.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="10" fill="{color}"{opacity}/>')
        out.append(f'<text x="{lx + 16}" y="{ly}" font-size="11" fill="#333">{escape(label)}</text>')
        lx += item_w
    out += ["</svg>", ""]
    return "\n".join(out)


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * base >= raw:
            return m * base
    return 10 * base


def _nice_ceil(v: float) -> float:
    step = _nice_step(v / 6)
    return math.ceil(v / step) * step
