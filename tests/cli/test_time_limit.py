"""`adaptis plan`'s wall clock: at the defaults a safety net that the default work never reaches, with an
explicit `--time-limit` a hard stop (spec.limits: DEFAULT_TIME_LIMIT_S, DEFAULT_HARD_STOP_S).

The machine is made slow by the clock, not by work: `search.budget`'s `time.perf_counter` is patched to
run `LATE_S` ahead from the moment the command starts, as if the search's work had taken that much
longer than it did (a machine ten times slower than the one the default work was sized on).
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest

from adaptis_plan.search import budget
from adaptis_plan.spec.limits import DEFAULT_HARD_STOP_S, DEFAULT_TIME_LIMIT_S

CASE = "plan --model tiny-gemma --hardware h200 --pp 3 --microbatches 6 --seq-len 512".split()
#: how far the patched clock runs ahead: ten times the default limit, well inside the safety net
LATE_S = 10 * DEFAULT_TIME_LIMIT_S


@pytest.fixture
def late_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(perf_counter=lambda: time.perf_counter() + LATE_S)
    monkeypatch.setattr(budget, "time", fake)


def _plan(adaptis, out: Path, *extra: str) -> tuple[bytes, dict]:  # noqa: ANN001
    r = adaptis(*CASE, *extra, "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    return out.read_bytes(), json.loads(out.read_text())["search"]


def test_the_safety_net_is_far_beyond_the_default_limit() -> None:
    assert LATE_S + 10 * DEFAULT_TIME_LIMIT_S < 0.95 * DEFAULT_HARD_STOP_S


@pytest.mark.slow
def test_the_default_plan_is_not_cut_by_a_slow_clock(adaptis, tmp_path: Path, late_clock: None) -> None:  # noqa: ANN001
    # the same clock cuts an explicit --time-limit of the default's value at once: the patch takes effect
    cut, cut_info = _plan(adaptis, tmp_path / "cut.json", "--time-limit", f"{DEFAULT_TIME_LIMIT_S:g}")
    assert cut_info["aborted"]
    default, info = _plan(adaptis, tmp_path / "default.json")
    assert not info["aborted"]
    # and the default's plan is the one the same work gives with no wall clock at all
    free, _ = _plan(adaptis, tmp_path / "free.json", "--no-hard-stop")
    assert default == free
