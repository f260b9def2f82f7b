"""bench/report.py renders from records alone: fixture records in (tests/bench/fixtures/), text out.

Asserts structure and values: the headline's size and its figures, a dirty record marked, a suite
without a record "not run yet", the README block equal to what the committed records render.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest
from helpers_common import table_after as _table_after

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import paper, records, report  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def recs() -> dict[str, dict]:
    return records.load_all(FIXTURES / "clean")


def _headline(text: str) -> list[str]:
    part = text[text.index("## Headline") :].splitlines()[2:]
    return part[: next(i for i, line in enumerate(part) if not line.startswith("|"))]


def test_headline_is_short_and_holds_the_records_figures(recs: dict[str, dict]) -> None:
    text = report.render_benchmarks(recs)
    lines = _headline(text)
    assert 0 < len(lines) <= report.MAX_HEADLINE_LINES
    cfg, results = paper.results_from_record(recs["paper"])
    for costs in paper.COST_SETTINGS:
        rs = [results[c] for c in cfg.papertp if c.costs == costs]
        mean = statistics.fmean(r.speedup("Interleaved1F1B") for r in rs)
        name = paper.COST_SETTING_NAMES[costs]
        row = next(x for x in lines if "adaptive vs Interleaved1F1B" in x and name in x)
        assert f"mean {mean:.2f}x" in row
    anchors = [report.anchor(line) for line in text.splitlines() if line.startswith("## ")]
    for line in lines[2:]:
        for link in (part.split(")")[0] for part in line.split("](")[1:]):
            assert link in anchors, link


def test_every_section_has_its_records_reproduce_line(recs: dict[str, dict]) -> None:
    text = report.render_benchmarks(recs)
    for rec in recs.values():
        assert records.reproduce_line(rec) in text
    rows = _table_after(text, "## The same adaptive plan in torch's runtime and ours")
    assert rows[0][:4] == ["adaptis executor", "110.0", "100.0", "120.0"]
    rows = _table_after(text, "## Memory-bound cases")
    assert rows[0][0] == "tiny" and rows[0][1] == "PP 2, TP 1, 4 mb, seq 128"


def test_a_dirty_record_is_marked(recs: dict[str, dict]) -> None:
    dirty = records.load("paper", FIXTURES / "dirty")
    text = report.render_benchmarks({**recs, "paper": dirty})
    assert "with uncommitted changes (not reproducible)" in records.reproduce_line(dirty)
    assert records.reproduce_line(dirty) in text
    assert "Not reproducible (uncommitted changes): paper." in text
    assert "with uncommitted changes" in report.render_readme_block({"paper": dirty})
    assert "with uncommitted changes" not in report.render_readme_block(recs)


@pytest.mark.parametrize("suite", ["paper", "recompute", "targets", "torchcsv"])
def test_a_suite_without_a_record_says_not_run(recs: dict[str, dict], suite: str) -> None:
    text = report.render_benchmarks({k: v for k, v in recs.items() if k != suite})
    assert f"_not run yet: `python -m bench.run --suites {suite}`_" in text


def test_nothing_recorded_renders(recs: dict[str, dict]) -> None:
    text = report.render_benchmarks({})
    for suite in ("paper", "recompute", "real", "targets", "torchcsv", "zb"):
        assert report.not_run(suite) in text
    assert len(_headline(text)) <= report.MAX_HEADLINE_LINES
    block = report.render_readme_block({})
    assert block.startswith(report.README_BEGIN) and block.endswith(report.README_END)


def test_readme_block_names_the_commit_and_the_figures(recs: dict[str, dict]) -> None:
    block = report.render_readme_block(recs)
    assert "`abc1234`" in block and "[BENCHMARKS.md](BENCHMARKS.md)" in block
    cfg, results = paper.results_from_record(recs["paper"])
    rs = [results[c] for c in cfg.papertp if c.costs is None]
    assert f"{statistics.fmean(r.speedup_best for r in rs):.2f}x over the best classic" in block
    readme = f"intro\n\n{report.README_BEGIN}\nold\n{report.README_END}\n\nrest\n"
    assert report.replace_readme_block(readme, block) == f"intro\n\n{block}\n\nrest\n"


def test_render_is_pure(recs: dict[str, dict], tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"a\n{report.README_BEGIN}\n{report.README_END}\nb\n")
    report.render_all(FIXTURES / "clean", tmp_path / "B.md", tmp_path / "img", readme)
    first = ((tmp_path / "B.md").read_text(), readme.read_text(), (tmp_path / "img" / "speedup.svg").read_text())
    (tmp_path / "B.md").write_text("## Paper cases at TP 1\n\nhand-edited\n")  # never read back
    report.render_all(FIXTURES / "clean", tmp_path / "B.md", tmp_path / "img", readme)
    again = ((tmp_path / "B.md").read_text(), readme.read_text(), (tmp_path / "img" / "speedup.svg").read_text())
    assert first == again and first[0] == report.render_benchmarks(recs)


def test_committed_readme_block_matches_the_committed_records() -> None:
    recs = records.load_all(records.RESULTS)
    if not recs:
        pytest.skip("bench/results/ holds no record yet (run `make bench` from a clean commit)")
    readme = (ROOT / "README.md").read_text()
    start, end = readme.index(report.README_BEGIN), readme.index(report.README_END)
    assert readme[start : end + len(report.README_END)] == report.render_readme_block(recs)


def test_readme_leads_with_the_paper_comparison_and_the_runs_at_scale() -> None:
    """The results block sits on the README's first screen and carries both headlines with their settings."""
    recs = records.load_all(records.RESULTS)
    if "paper" not in recs or "scale" not in recs:
        pytest.skip("bench/results/ lacks the paper or scale record")
    readme = (ROOT / "README.md").read_text()
    assert readme.index(report.README_END) < len("\n".join(readme.splitlines()[:50]))
    block = report.render_readme_block(recs)
    from bench import scale

    s = scale.summary(scale.results_from_record(recs["scale"]))
    assert f"median {s['median_abs_error']:.1%} and at worst {s['worst_abs_error']:.1%}" in block
    assert f"{s['runs']} published runs" in block and "memory limit: each GPU's whole memory" in block
    assert "h200 profile, memory limit 90%" in block and "calibrated analytic model" in block
    assert block.index("classic schedules") < block.index("published training runs at scale")


def test_bench_imports_no_private_name_of_the_package() -> None:
    import ast

    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("adaptis_plan"):
                assert not any(part.startswith("_") for part in node.module.split(".")), (path.name, node.module)
                assert not [a.name for a in node.names if a.name.startswith("_")], (path.name, node.module)
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("adaptis_plan"):
                        assert not any(part.startswith("_") for part in a.name.split(".")), (path.name, a.name)
