"""bench/published_runs.json: the measured dense runs the planner is validated against.

Every run must be self-consistent (bench/published_runs.py's checks), and the set must cover what issue 34's
acceptance needs: >= 12 dense runs from >= 4 independent sources, on A100 and H100, from <= 8 to >= 4,096 GPUs;
every setting names its provenance (stated by the source, or the one rule), and every row of a source that fed
a cost-model coefficient is flagged.
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


#: how each source is named where a profile cites the evidence it fitted a coefficient on
SOURCE_NAMES = {
    "narayanan2021": "Narayanan", "korthikanti2022": "Korthikanti", "megascale2024": "MegaScale",
    "megatron_core_h100_2024": "Megatron-Core", "llama3_2024": "Llama 3", "llmfoundry_mpt": "llm-foundry",
    "bloom2022": "BLOOM", "nemo_megatron_launcher_2022": "NeMo-Megatron-Launcher", "mtnlg2022": "Megatron-Turing",
}  # fmt: skip


def test_calibration_rows_are_every_row_of_a_source_that_fed_a_coefficient(runs: list[dict]) -> None:
    """A source named in a built-in profile's calibration_source fed a coefficient: all its rows are flagged
    (shown, not counted); no other row is."""
    texts = []
    for name in ("a100", "h100"):
        for dt in json.loads((ROOT / "profiles" / f"{name}.json").read_text())["device_types"].values():
            texts.append(dt.get("calibration_source", ""))
    assert set(SOURCE_NAMES) >= {r["source_key"] for r in runs}, "name every source"
    fed = {key for key, name in SOURCE_NAMES.items() if any(name in t for t in texts)}
    assert fed == {"llmfoundry_mpt"}
    flagged = {r["id"] for r in runs if r["used_for_calibration"]}
    assert flagged == {r["id"] for r in runs if r["source_key"] in fed} and flagged


def test_every_counted_run_cites_where_its_figures_are(runs: list[dict]) -> None:
    for r in runs:
        if not r["used_for_calibration"]:
            assert any(w in r["source"] for w in ("Table", "table", "commit", "Sec.", "Figure")), r["id"]
            stated = [v for v in r["settings"].values() if v.startswith(pr.STATED)]
            assert stated, r["id"]


def test_the_rule_is_written_down_and_every_setting_names_its_provenance(runs: list[dict]) -> None:
    assert "default" in pr.RULE and "micro-batch size 1" in pr.RULE
    for r in runs:
        assert set(r["settings"]) == set(pr.SETTING_KEYS), r["id"]
        for k, v in r["settings"].items():
            assert v.startswith((pr.STATED, pr.FROM_RULE)), (r["id"], k)


def test_a_rule_setting_must_hold_the_rules_value() -> None:
    run = copy.deepcopy(next(r for r in pr.load_runs() if r["settings"]["micro_batch_size"].startswith(pr.FROM_RULE)))
    run["micro_batch_size"] = 2
    run["global_batch_size"] = run["dp"] * 2 * 4
    assert any("the rule gives 1" in p for p in pr.check_run(run)), pr.check_run(run)
    run["settings"]["micro_batch_size"] = "stated: somewhere"
    assert not any("the rule gives 1" in p for p in pr.check_run(run))


@pytest.mark.parametrize(
    ("field", "value", "complaint"),
    [
        ("gpus", 9999, "gpus: 9999 != tp*pp*dp*cp"),
        ("global_batch_size", 7, "global_batch_size: 7 is not a multiple"),
        ("tokens_per_s_per_gpu", 1.0, "derivation: evaluates to"),
        ("device", "v100-32gb", "device: 'v100-32gb' is not one of"),
        ("derivation", "tokens/s/GPU = __import__('os')", "derivation: only numbers"),
        ("partition", "balanced", "partition: 'balanced' is not one of"),
        ("settings", {"tp": "stated: Table 1"}, "settings: keys must be"),
        ("attention", "sdpa", "attention: 'sdpa' is not one of"),
        ("alternatives", [{"label": "x", "tp": 2}], "alternatives[0]: may set only"),
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
