"""bench/published_runs.json: the measured dense runs the planner is validated against.

Every run must be self-consistent (bench/published_runs.py's checks), and the set must cover what issue 34's
acceptance needs: >= 12 dense runs from >= 4 independent sources, on A100 and H100, from <= 8 to >= 4,096 GPUs.
The checker is also shown to reject broken runs, so a passing file means something.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import published_runs as pr  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return pr.load_runs()


def test_every_run_is_self_consistent(runs: list[dict]) -> None:
    assert pr.check_runs(runs) == []


def test_coverage_meets_the_acceptance_set(runs: list[dict]) -> None:
    cov = pr.coverage(runs)
    assert cov["runs"] >= 12
    assert len(cov["source_keys"]) >= 4
    assert cov["device_kinds"] == ["a100", "h100"]
    assert cov["min_gpus"] <= 8
    assert cov["max_gpus"] >= 4096
    # independent of the calibration: enough runs, sources and scale remain without the calibration rows
    held_out = [r for r in runs if not r["used_for_calibration"]]
    cov_held = pr.coverage(held_out)
    assert cov_held["runs"] >= 12 and len(cov_held["source_keys"]) >= 4 and cov_held["min_gpus"] <= 8


def test_each_device_kind_has_runs_from_two_sources_and_both_scales(runs: list[dict]) -> None:
    for kind in ("a100", "h100"):
        of_kind = [r for r in runs if r["device"].startswith(kind)]
        assert len({r["source_key"] for r in of_kind}) >= 2, kind
        assert max(r["gpus"] for r in of_kind) >= 4096, kind


def test_calibration_rows_are_the_8_gpu_h100_llm_foundry_rows(runs: list[dict]) -> None:
    flagged = {r["id"] for r in runs if r["used_for_calibration"]}
    expected = {
        r["id"] for r in runs if r["source_key"] == "llmfoundry_mpt" and r["device"] == "h100-80gb" and r["gpus"] == 8
    }
    assert flagged == expected and flagged


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("gpus", 9999, "gpus: 9999 != tp*pp*dp*cp"),
        ("global_batch_size", 7, "global_batch_size: 7 is not a multiple"),
        ("tokens_per_s_per_gpu", 1.0, "derivation: evaluates to"),
        ("device", "v100-32gb", "device: 'v100-32gb' is not one of"),
        ("derivation", "tokens/s/GPU = __import__('os')", "derivation: only numbers"),
        ("partition", "balanced", "partition: 'balanced' is not one of"),
    ],
)
def test_checker_rejects_a_broken_run(runs: list[dict], field: str, value: object, complaint: str) -> None:
    broken = copy.deepcopy(runs[0])
    broken[field] = value
    assert any(complaint in p for p in pr.check_run(broken)), pr.check_run(broken)


def test_checker_rejects_a_measured_throughput_that_disagrees(runs: list[dict]) -> None:
    with_time = copy.deepcopy(next(r for r in runs if "iteration_time_s" in r["measured"]))
    with_time["measured"]["iteration_time_s"] *= 1.5
    assert any("iteration_time" in p for p in pr.check_run(with_time))
    extra = copy.deepcopy(runs[0])
    extra["flops"] = 1
    assert pr.check_run(extra) == ["keys: missing [], unexpected ['flops']"]


def test_eval_expression_is_arithmetic_only() -> None:
    assert pr.eval_expression("2*(3+4)**2/7 - 1") == 13.0
    with pytest.raises(ValueError):
        pr.eval_expression("open('x')")


def test_main_reports_one_line_per_problem_and_exits_2(tmp_path: Path, runs: list[dict], capsys) -> None:
    broken = copy.deepcopy(runs[:2])
    broken[1]["gpus"] += 1
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(broken))
    assert pr.main([str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{broken[1]['id']}: gpus:" in err[0]
    assert pr.main([str(tmp_path / "missing.json")]) == 2
