"""Smoke run of the benchmark harness (`bench/`): tiny cases at short time limits, seconds not minutes.

Checks the report's shape (every section, its reproduce line, the tables, the targets with
PASS / MISS), that every number in the per-case table parses, and that the pictures are
well-formed SVG. No fixed result is asserted: the planner's numbers change as it is tuned.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers_common import table_after as _table_after

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import charts, paper, run  # noqa: E402

# nemotron-h-s at PP 4 tends to split its head into vocabulary chunks (the chunked-baseline path)
TINY = (paper.Case("llama-2-s", 2, 1024, 4, 0.5), paper.Case("nemotron-h-s", 4, 1024, 8, 0.5))
# the paper-TP section: one case of the paper's, under both cost settings
PAPER_TP = tuple(paper.Case("deepseek-s", 2, 2048, 4, 0.5, tp=2, costs=c) for c in paper.COST_SETTINGS)


def tiny_config() -> paper.BenchConfig:
    ablation = tuple(
        paper.AblationTask("gemma-s", comps, pp=2, seq_len=1024, num_microbatches=4, time_limit_s=0.3)
        for comps in (("schedule",), ("partition", "placement"), paper.COMPONENTS)
    )
    plantime = (TINY[0], paper.Case("llama-2-s", 2, 1024, 8, 0.5))
    return paper.BenchConfig(
        paper=TINY,
        bubbles=TINY,
        seq=(TINY[1],),
        ablation=ablation,
        plantime=plantime,
        timeline=TINY[1],
        quick=True,
        papertp=PAPER_TP,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "BENCHMARKS.md"
    prov = run.provenance(str(out), quick=True)
    # bench/real.py and bench/interop.py launch torchrun or plan every paper case: not CI-sized; the
    # recompute section has its own smoke test
    sections = [
        s for s in run.SECTIONS if s not in ("real", "replay", "targets", "torchcsv", "recompute", *run.ZB_SECTIONS)
    ]
    text, ok = run.build_report(tiny_config(), sections, out, tmp / "docs" / "img", prov, workers=1)
    assert ok
    out.write_text(text)
    return text, tmp


@pytest.mark.slow
def test_every_section_with_its_reproduce_line(report: tuple[str, Path]) -> None:
    text, _ = report
    for heading in (
        "## Paper cases at the paper's tensor parallelism",
        "## Paper cases at TP 1",
        "## Bubble ratios",
        "## Sequence-length sweep",
        "## Ablation",
        "## Planning time vs micro-batches",
        "## Does the model match real runs?",
        "## How steady is this machine? (CPU)",
    ):
        assert heading in text
    assert text.index("## Paper cases at the paper's tensor parallelism") < text.index("## Paper cases at TP 1")
    for section in ("papertp", "paper", "bubbles", "seq", "ablation", "plantime", "match", "hostmodes"):
        assert f"--quick --sections {section}`" in text
    assert re.search(r"commit: `([0-9a-f]{4,}(\+dirty)?|unknown[^`]*)`", text)
    assert "CPUs" in text and "UTC" in text
    assert "adaptis plan --model llama-2-s --hardware h200 --pp 2 --microbatches 4 --seq-len 1024" in text
    assert "Sections not run this time: recompute, real, replay, targets, torchcsv, zbgrid, zbpaper, zbtime." in text


@pytest.mark.slow
def test_targets_say_pass_or_miss(report: tuple[str, Path]) -> None:
    text, _ = report
    rows = _table_after(text, "### Summary against the targets")
    assert len(rows) >= 6
    assert all(r[-1] in ("PASS", "MISS", "–", "context") for r in rows)
    assert sum(r[-1] in ("PASS", "MISS") for r in rows) >= 6


@pytest.mark.slow
def test_per_case_numbers_parse(report: tuple[str, Path]) -> None:
    text, _ = report
    rows = _table_after(text[text.index("## Paper cases at TP 1") :], "### Per case")
    assert [r[0] for r in rows] == [c.label for c in TINY]
    for r in rows:
        step, bubble, peak = float(r[3]), float(r[4].rstrip("%")), float(r[5])
        assert step > 0 and 0 <= bubble <= 100 and peak > 0
        assert float(r[7].removesuffix("x")) > 0  # vs I-1F1B
        assert float(r[9].split("x")[0]) > 0  # vs best classic
        assert int(r[10]) >= 1  # head chunks
        assert float(r[14]) >= 0  # planning seconds
    ablation = _table_after(text, "## Ablation")
    assert ablation[0][0] == "gemma-s" and len(ablation[0]) == 4
    for cell in ablation[0][1:]:
        assert float(cell.split("x")[0]) > 0


@pytest.mark.slow
def test_pictures_are_well_formed_svg(report: tuple[str, Path]) -> None:
    text, tmp = report
    img = tmp / "docs" / "img"
    names = sorted(p.name for p in img.glob("*.svg"))
    assert names == ["speedup.svg", f"timeline-{TINY[1].slug}.svg"]
    for name in names:
        root = ET.fromstring((img / name).read_text())
        assert root.tag.endswith("svg")
        assert f"](docs/img/{name})" in text


def test_speedup_chart_without_paper_markers() -> None:
    svg = charts.speedup_chart([charts.SpeedupBar("a", 1.2, None), charts.SpeedupBar("b", None, 0.9)], "t", 1.4)
    ET.fromstring(svg)


@pytest.mark.slow
def test_pool_keeps_the_task_order() -> None:
    results = paper.run_tasks(list(reversed(TINY)), workers=2)
    assert list(results) == list(reversed(TINY))
    assert all(r.adaptive is not None for r in results.values())


def test_real_section_placeholder_and_bad_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run.importlib.util, "find_spec", lambda _name: None)
    text, ok = run.real_section(run.provenance("B.md", quick=True), quick=True)
    assert ok and "## Real execution (CPU, gloo)" in text and "not run" in text
    with pytest.raises(SystemExit):
        run.main(["--sections", "paper,bogus"])


def test_paper_tp_tables_under_both_cost_settings(report: tuple[str, Path]) -> None:
    text, _ = report
    summary = _table_after(text, "### Summary")
    assert summary[0][0] == "mean adaptive / Interleaved1F1B" and len(summary[0]) == 4
    assert "1.42x" in summary[0][-1]
    aborted = next(r for r in summary if r[0].startswith("searches the wall-clock abort cut short"))
    assert all(re.fullmatch(r"[01] of 1", c) for c in aborted[1:3])  # one case per cost setting here
    for setting in ("calibrated analytic model", "the paper's profiled costs"):
        rows = _table_after(text, f"### Per case, {setting}")
        assert [r[0] for r in rows] == ["deepseek-s 2K"]
        r = rows[0]
        assert (r[1], r[2]) == ("2", "2") and 0 < float(r[4].rstrip("%")) < 100  # PP, TP, h
        assert all(float(c.split("x")[0]) > 0 for c in r[6:12])  # speed-ups over the baselines
    idealized = next(line for line in text.splitlines() if "I-1F1B idealized" in line)
    assert "with our P2P (2.7%)" in idealized


def test_match_section_lists_every_held_published_figure(report: tuple[str, Path]) -> None:
    from adaptis_plan.cost.published import published_figures

    text, _ = report
    rows = _table_after(text, "## Does the model match real runs?")
    held = [f for f in published_figures() if f.held]
    assert len(rows) == len(published_figures())
    assert sum(r[6].endswith(("PASS", "MISS")) for r in rows) == len(held)


def test_real_errors_read_back_from_a_kept_section() -> None:
    doc = "\n".join(
        [
            "# Benchmarks",
            "## Real execution (CPU, gloo)",
            "### Per model",
            "",
            "| model | shape | plan | split | torch ms | ours ms | ours / torch | predicted ms | error | after |",
            "|---|---|---|---|---|---|---|---|---|---|",
            "| tiny-a | s | 1F1B | 0-4@d0 | 1.0 | 1.0 | 1.00 | 1.1 | +5.0% | +4.0% |",
            "| tiny-a | s | adaptive (`loop x2`, head in 4 chunks) | 0-4@d0 | – | 1.0 | – | 0.8 | -15.0% | -17.0% |",
            "",
            "### Adaptive vs the best torch schedule",
            "",
            "| model | head share | best | its ms | adaptive ms | speed-up | predicted (error) | chunks profiled (error) |",
            "|---|---|---|---|---|---|---|---|",
            "| tiny-a | 80% | 1F1B | 1.0 | 1.0 | 1.00x | 0.8 (-15.0%) | 1.02 (+2.0%) |",
            "## Next section",
        ]
    )
    section = run.kept_section(doc, run.REAL_HEADING)
    assert section.startswith(run.REAL_HEADING) and "## Next section" not in section
    rows = run.real_errors_from_markdown(section)
    assert [(r.plan, r.planning, r.layers) for r in rows] == [("1F1B", 0.05, 0.05), ("adaptive", -0.15, 0.02)]
    assert run.kept_section(doc, "## Missing") is None
    # with the in-launch column (paired by round, unpaired in brackets): its first figure, for every plan
    doc = (
        doc.replace("| error | after |", "| error | in-launch | after |")
        .replace("|---|---|---|---|---|---|---|---|---|---|", "|---|---|---|---|---|---|---|---|---|---|---|")
        .replace("| +5.0% | +4.0% |", "| +5.0% | +1.0% (+2.0%) | +4.0% |")
        .replace("| -15.0% | -17.0% |", "| -15.0% | -8.0% (-9.0%) | -17.0% |")
    )
    rows = run.real_errors_from_markdown(run.kept_section(doc, run.REAL_HEADING))
    assert [(r.plan, r.planning, r.layers, r.in_launch) for r in rows] == [
        ("1F1B", 0.05, 0.01, True),
        ("adaptive", -0.15, -0.08, True),
    ]


def test_sections_not_rerun_are_kept_from_the_previous_report(tmp_path: Path) -> None:
    out = tmp_path / "B.md"
    out.write_text(
        "# Benchmarks\n\nold header\n\n## Ablation (paper §5.6)\n\nold ablation table\n\n"
        "## Real execution (CPU, gloo)\n\nold real runs\n"
    )
    cfg = paper.BenchConfig(
        paper=(), bubbles=(), seq=(), ablation=(), plantime=(), timeline=None, quick=True, papertp=()
    )
    prov = run.provenance(str(out), quick=True)
    text, ok = run.build_report(cfg, ["match"], out, tmp_path / "img", prov, workers=1)
    assert ok and "old header" not in text
    assert text.index("## Ablation") < text.index("## Does the model match real runs?") < text.index("## Real")
    assert "old ablation table" in text and "old real runs" in text
    assert "Kept from the previous report, not rerun this time (each with its own reproduce line and date):" in text
    assert "ablation, real." in text
    assert (
        "Sections not run this time: papertp, paper, bubbles, seq, plantime, recompute, hostmodes, hostdrift, replay, targets, torchcsv, zbgrid, zbpaper, zbtime."
        in text
    )
