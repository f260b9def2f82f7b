"""The real-execution suite's record and its section (`bench.real.render`), from a fixture record.

The fixture is a quick run's record (`python -m bench.real --quick`, one model), its profile cut to
what the section reads. No torch, no launch: the section comes from the record alone.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import real, records  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "real-quick.json"


@pytest.fixture(scope="module")
def rec() -> dict:
    return json.loads(FIXTURE.read_text())


def _rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under `heading`."""
    lines = text.splitlines()
    start = lines.index(heading)
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif table or line.startswith("#"):
            break
    return table[2:]


def test_the_results_round_trip_through_json(rec: dict) -> None:
    res = real.results_from_record(rec)
    assert isinstance(res, real.RealResults) and isinstance(res.config.cases[0], real.ModelCase)
    assert records.to_json(res) == rec["data"]
    assert res.models[0].plans["1F1B"].stages == [tuple(s) for s in rec["data"]["models"][0]["plans"]["1F1B"]["stages"]]


def test_the_section_starts_with_its_heading_and_the_reproduce_line(rec: dict) -> None:
    text = real.render(rec)
    assert text.startswith(real.HEADING + "\n\n" + records.reproduce_line(rec) + "\n\n")
    assert rec["settings"]["pp"] == real.PP and rec["settings"]["backend"] == "gloo" and rec["settings"]["tp"] == 1


def test_the_per_model_table_holds_the_records_figures(rec: dict) -> None:
    res = real.results_from_record(rec)
    (m,) = res.models
    rows = _rows(real.render(rec), "### Per model")
    assert [r[2].split(" ")[0] for r in rows] == list(real.RUNS)
    for r in rows:
        p = m.plans[r[2].split(" ")[0]]
        assert r[0] == m.case.model
        assert float(r[5]) == pytest.approx(statistics.median(p.ours_s) * 1e3, abs=0.05)  # ours ms
        assert float(r[7]) == pytest.approx(p.predicted_s * 1e3, abs=0.05)  # predicted ms
        assert r[8] == f"{(p.predicted_s - p.ours) / p.ours * 100:+.1f}%"
        if p.strategy in real.CLASSIC:
            assert float(r[6]) == pytest.approx(p.ours / p.torch, abs=0.005)
        else:
            assert r[4] == "–" and r[6] == "–"


def test_every_table_is_there_and_every_target_is_judged(rec: dict) -> None:
    text = real.render(rec)
    targets = _rows(text, "### Targets")
    judged = [r for r in targets if r[3] != "context"]
    assert all(r[3] in ("PASS", "MISS") for r in judged)
    # ours / torch, tiny-gemma's speed-up, the planning profile's error, the in-launch one's, recompute
    assert len(judged) == 5
    assert all(re.match(r"[-+]?\d", r[1]) for r in targets)
    assert len(_rows(text, "### Where our runtime's time goes")) == len(real.RUNS)
    (speed,) = _rows(text, "### Adaptive vs the best torch schedule")
    assert speed[2] in real.CLASSIC and speed[5].endswith("x")
    (noise,) = _rows(text, "### Other jobs on the machine")
    assert re.fullmatch(r"\d+ of \d+", noise[2])
