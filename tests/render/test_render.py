"""Renderers: terminal timeline / table, Chrome trace JSON, SVG (well-formed, complete)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter

import numpy as np
import pytest
from helpers_common import one_f_one_b
from rich.console import Console

from adaptis_plan import render
from adaptis_plan.core import Action, Layout, Programs, uniform_costs
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.render import bucket_occupancy, fmt_time
from adaptis_plan.render.svg import stacked_svg, timeline_svg
from adaptis_plan.render.terminal import summary_table, timeline
from adaptis_plan.render.trace import chrome_trace

pytestmark = pytest.mark.unit

SVG_NS = "{http://www.w3.org/2000/svg}"


def interleaved_case() -> tuple[Layout, Programs, SimResult]:
    """Two stages per device (looped), P2P latency, I/W split on the last stage."""
    layout = Layout((0, 1, 2, 3, 4), (0, 1, 0, 1), 2)
    m = 3
    progs: Programs = [[], []]
    for s in range(4):
        progs[s % 2] += [Action(s, "F", mb) for mb in range(m)]
    for s in reversed(range(4)):
        for mb in range(m):
            progs[s % 2] += [Action(s, "I", mb), Action(s, "W", mb)] if s == 3 else [Action(s, "B", mb)]
    costs = uniform_costs(4, 2, f=1e-3, i=1e-3, w=1e-3, out=1e6, bw=1e10, latency=1e-4, static=1e9)
    return layout, progs, simulate(layout, costs, progs, m)


@pytest.fixture(scope="module")
def case() -> tuple[Layout, Programs, SimResult]:
    return interleaved_case()


def _console() -> Console:
    return Console(width=160, record=True, force_terminal=True, color_system="truecolor")


def test_timeline_rows_legend_and_bubbles(case) -> None:
    layout, progs, r = case
    con = _console()
    con.print(timeline(r, progs, layout, width=80))
    text = con.export_text(clear=False)
    lines = text.splitlines()
    dev_rows = [ln for ln in lines if ln.lstrip().startswith("dev ")]
    assert len(dev_rows) == 2
    for d, row in enumerate(dev_rows):
        assert len(row) <= 80
        assert row.endswith(f"{r.bubble_ratio_per_device[d]:.1%}")
        cells = row.split(" ", 2)[2][: 80 - 6 - 8]
        assert set(cells) <= set("FBIW·") and "F" in cells
    assert "·" in dev_rows[1]  # device 1 waits at the start
    assert "forward" in text and "idle" in text and fmt_time(r.step_time_s) in text
    html = con.export_html()
    assert "#4c78a8" in html.lower()  # F in blue


def test_timeline_handles_empty_device() -> None:
    layout = Layout((0, 1), (0,), 2)
    progs: Programs = [[Action(0, "F", 0), Action(0, "B", 0)], []]
    r = simulate(layout, uniform_costs(1, 2), progs, 1)
    con = _console()
    con.print(timeline(r, progs, layout, width=30))
    assert "100.0%" in con.export_text()


def test_summary_table(case) -> None:
    layout, progs, r = case
    con = _console()
    con.print(summary_table(r, progs, layout, title="looped"))
    text = con.export_text()
    assert "looped" in text and "peak memory" in text and "lower bound" in text
    assert "0, 2" in text  # device 0 holds stages 0 and 2


def test_bucket_occupancy_conserves_busy_time(case) -> None:
    layout, progs, r = case
    codes = render.op_codes(progs)
    for d in range(layout.num_devices):
        occ = bucket_occupancy(r.times[d], codes[d], r.step_time_s, 37)
        assert occ.sum() == pytest.approx(r.busy_s[d])
        assert np.all(occ >= -1e-15)
        assert np.all(occ.sum(axis=1) <= r.step_time_s / 37 * (1 + 1e-9))


def test_chrome_trace_is_valid_json_with_paired_flows(case) -> None:
    layout, progs, r = case
    trace = json.loads(json.dumps(chrome_trace(r, progs, layout, "looped")))
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"device 0", "device 1"}
    xs = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    assert len(xs) == sum(len(p) for p in progs)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e["ph"] == "X")
    assert {"stage", "mb", "op", "layers"} <= set(xs[0]["args"])
    slices = {(e["pid"], e["tid"]): [] for e in xs}
    for e in xs:
        slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert Counter(e["ph"] for e in events)["s"] == len(r.transfers) == len(starts) == len(ends) > 0
    assert set(starts) == set(ends)
    for i, s in starts.items():
        f = ends[i]
        assert f["bp"] == "e" and s["pid"] != f["pid"] and s["ts"] <= f["ts"]
        for ev in (s, f):  # each flow end lies inside a compute slice of its device
            assert any(t0 <= ev["ts"] <= t1 for t0, t1 in slices[(ev["pid"], ev["tid"])])
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {0, 1}
    peak_mib = max(e["args"]["MiB"] for e in counters if e["pid"] == 0)
    assert peak_mib == pytest.approx(r.peak_memory_bytes[0] / 2**20)


def test_timeline_svg_is_well_formed(case) -> None:
    layout, progs, r = case
    svg = timeline_svg(r, progs, layout, "looped <BFS> & co")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    texts = [t.text or "" for t in root.iter(f"{SVG_NS}text")]
    assert any(t.startswith("looped <BFS> & co") and "bubble" in t for t in texts)
    assert "device 0" in texts and "device 1" in texts and "ms" in texts
    op_fills = {"#4C78A8", "#3A923A", "#88C36A", "#E8B83A"}
    boxes = [e for e in root.iter(f"{SVG_NS}rect") if e.get("fill") in op_fills]
    assert len(boxes) >= sum(len(p) for p in progs)  # action boxes (+ legend swatches)
    assert all(float(b.get("width")) >= 0 for b in boxes)


def test_stacked_svg_shares_the_time_scale(case) -> None:
    layout, progs, r = case
    p = 2
    lay2 = Layout((0, 2, 4), (0, 1), 2)
    progs2 = one_f_one_b(p, 3, split=True)
    r2 = simulate(lay2, uniform_costs(4, 2, f=1e-3, i=1e-3, w=1e-3), progs2, 3)
    svg = stacked_svg([("looped", r, progs, layout), ("1F1B", r2, progs2, lay2)])
    root = ET.fromstring(svg)
    lanes = [e for e in root.iter(f"{SVG_NS}rect") if e.get("fill") == "#f1f1f1" and e.get("stroke") is None]
    assert len(lanes) == 4
    widths = sorted({round(float(e.get("width")), 1) for e in lanes})
    longer, shorter = max(r.step_time_s, r2.step_time_s), min(r.step_time_s, r2.step_time_s)
    assert widths[0] / widths[-1] == pytest.approx(shorter / longer, rel=1e-3)
    with pytest.raises(ValueError):
        stacked_svg([])


def test_lazy_package_exports() -> None:
    assert render.timeline is timeline and render.chrome_trace is chrome_trace
    with pytest.raises(AttributeError):
        render.nope  # noqa: B018
