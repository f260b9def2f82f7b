"""bench.repro: the same plan idle and under load, at the default options (the check itself, on a small case)."""

from __future__ import annotations

import pytest

from bench import repro

SMALL = repro.ReproCase(
    "tiny-gemma PP 3", ("--model", "tiny-gemma", "--hardware", "h200", "--pp", "3", "--microbatches", "6")
)


@pytest.mark.unit
def test_the_cases_are_the_papers_eighteen_mixtral_and_three_cluster_searches() -> None:
    names = [c.name for c in repro.CASES]
    assert len(names) == len(set(names)) == 22
    assert all("--time-limit" not in c.args and "--no-hard-stop" not in c.args for c in repro.CASES)
    assert sum("--gpus" in c.args for c in repro.CASES) == 3
    assert set(repro.QUICK) <= set(names)


@pytest.mark.unit
def test_a_case_is_reproducible_only_with_one_plan_and_no_cut() -> None:
    same = repro.CaseReport(SMALL, [repro.Run(1.0, "a", False)], [repro.Run(2.0, "a", False)])
    assert same.reproducible
    assert not repro.CaseReport(SMALL, [repro.Run(1.0, "a", False)], [repro.Run(2.0, "b", False)]).reproducible
    assert not repro.CaseReport(SMALL, [repro.Run(1.0, "a", True)], [repro.Run(2.0, "a", True)]).reproducible
    assert not repro.CaseReport(SMALL, [repro.Run(1.0, None, False, "error: x")]).reproducible
    table = repro.render([same], 2)
    assert "| tiny-gemma PP 3 |" in table and "| 1.0 | 2.0 | a | yes |" in table


@pytest.mark.slow
def test_a_small_default_plan_is_the_same_idle_and_under_load() -> None:
    (rep,) = repro.check([SMALL], runs=1, load=repro.LOAD_PROCESSES)
    assert [r.error for r in rep.runs] == [None, None]
    assert rep.reproducible, repro.render([rep], repro.LOAD_PROCESSES)
