"""The paper suite's sections, rendered from a fixture record of tiny cases
(tests/bench/fixtures/clean/paper.json, made by `make_fixtures.py`), and one small end-to-end run.

Checks each section's shape (heading, the record's reproduce line, the tables, the targets with
PASS / MISS), that the per-case numbers are the record's, and that the pictures are well-formed SVG.
The end-to-end test runs `python -m bench.run --quick --suites paper` into a scratch folder.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers_common import table_after as _table_after

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import charts, paper, records, report, run  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def rec() -> dict:
    return records.load("paper", FIXTURES / "clean")


@pytest.fixture(scope="module")
def text(rec: dict) -> str:
    return report.render_benchmarks({"paper": rec})


def test_every_paper_section_with_its_reproduce_line(rec: dict, text: str) -> None:
    line = records.reproduce_line(rec)
    parts = paper.render(rec)
    assert list(parts) == list(paper.SECTIONS)
    for name, section in parts.items():
        assert section.startswith("## ") and section.splitlines()[2] == line, name
        assert section in text
    assert text.index("## Paper cases at the paper's tensor parallelism") < text.index("## Paper cases at TP 1")


def test_record_round_trips(rec: dict) -> None:
    cfg, results = paper.results_from_record(rec)
    assert json.loads(json.dumps(records.to_json(cfg))) == rec["data"]["config"]
    again = [records.to_json(r) for t, r in results.items() if isinstance(t, paper.Case)]
    assert again == [item["result"] for item in rec["data"]["cases"]]
    assert all(t in results for t in [*cfg.paper, *cfg.papertp, *cfg.ablation, *cfg.plantime])


def test_targets_say_pass_or_miss(text: str) -> None:
    rows = _table_after(text, "### Summary against the targets")
    assert len(rows) >= 6
    assert all(r[-1] in ("PASS", "MISS", "–", "context") for r in rows)
    assert sum(r[-1] in ("PASS", "MISS") for r in rows) >= 6


def test_per_case_numbers_are_the_records(rec: dict, text: str) -> None:
    cfg, results = paper.results_from_record(rec)
    rows = _table_after(text[text.index("## Paper cases at TP 1") :], "### Per case")
    assert [r[0] for r in rows] == [c.label for c in cfg.paper]
    for r, case in zip(rows, cfg.paper, strict=True):
        res = results[case]
        assert r[3] == paper.fms(res.adaptive.step_time_s) and r[4] == paper.fpct(res.adaptive.bubble_ratio)
        assert r[7] == paper.fx(res.speedup("Interleaved1F1B"))
        assert int(r[10]) == res.head_chunks
    ablation = _table_after(text, "## Ablation")
    assert ablation[0][0] == "gemma-s" and len(ablation[0]) == 4


def test_paper_tp_tables_under_both_cost_settings(text: str) -> None:
    summary = _table_after(text, "### Summary")
    assert summary[0][0] == "mean adaptive / Interleaved1F1B" and len(summary[0]) == 4
    assert "1.42x" in summary[0][-1]
    for setting in ("calibrated analytic model", "the paper's profiled costs"):
        rows = _table_after(text, f"### Per case, {setting}")
        assert [r[0] for r in rows] == ["deepseek-s 2K"]
        assert (rows[0][1], rows[0][2]) == ("2", "2")


def test_pictures_are_well_formed_svg(rec: dict, text: str, tmp_path: Path) -> None:
    cfg, _ = paper.results_from_record(rec)
    written = report.render_pictures({"paper": rec}, tmp_path)
    assert sorted(p.name for p in written) == ["speedup.svg", f"timeline-{cfg.timeline.slug}.svg"]
    for path in written:
        assert ET.fromstring(path.read_text()).tag.endswith("svg")
        assert f"](docs/img/{path.name})" in text


def test_speedup_chart_without_paper_markers() -> None:
    svg = charts.speedup_chart([charts.SpeedupBar("a", 1.2, None), charts.SpeedupBar("b", None, 0.9)], "t", 1.4)
    ET.fromstring(svg)


def test_unknown_suite_is_refused() -> None:
    with pytest.raises(SystemExit):
        run.main(["--suites", "paper,bogus"])


@pytest.mark.slow
def test_quick_paper_suite_end_to_end(tmp_path: Path) -> None:
    assert run.main(["--quick", "--suites", "paper", "--workers", "1", "--results", str(tmp_path)]) == 0
    rec = records.load("paper", tmp_path)
    assert rec["settings"]["quick"] and rec["provenance"]["command"] == "python -m bench.run --suites paper --quick"
    text = (tmp_path / "BENCHMARKS.md").read_text()
    assert text == report.render_benchmarks(records.load_all(tmp_path))
    assert (tmp_path / "docs" / "img" / "speedup.svg").exists()
    assert report.not_run("recompute") in text
