"""A measured profile used with hardware it was plainly not measured on: named, never refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_cli import run_reader_gone, tiny_cost_profile

from adaptis_plan.cost.source import costs_notes
from adaptis_plan.cost.table import profile_device_mismatch
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.spec.cost_profile import CostProfile


def _profile(device: str) -> CostProfile:
    return CostProfile.model_validate(tiny_cost_profile() | {"device": device})


@pytest.mark.parametrize(
    ("device", "hardware", "expected"),
    [
        ("cpu", "cpu", []),
        ("cpu", "h200", ["h200-sxm-141gb"]),  # a laptop's profile planned for a GPU cluster
        ("cuda: NVIDIA H200", "h200", []),
        ("cuda: NVIDIA H200", "cpu", ["cpu-core"]),
        ("cuda: NVIDIA H100 80GB HBM3", "h100", []),
        ("cuda: NVIDIA H100 80GB HBM3", "h200", ["h200-sxm-141gb"]),
        ("cuda: NVIDIA A100-SXM4-80GB", "h100-a100-mixed", ["h100-sxm5-80gb"]),  # the H100 nodes were not measured
        ("cuda: NVIDIA GeForce RTX 4090", "h200", []),  # no model token in common form: cannot tell, says nothing
        ("cuda: AMD Instinct MI300X", "h100", ["h100-sxm5-80gb"]),
    ],
)
def test_mismatch_by_kind_and_model(device: str, hardware: str, expected: list[str]) -> None:
    assert profile_device_mismatch(_profile(device), load_hardware(hardware)) == expected


def test_note_names_the_file_the_device_and_what_comes_from_where() -> None:
    prof = _profile("cpu")
    (line,) = costs_notes(prof, load_hardware("h200"), "measured.json")
    assert line.startswith("measured.json: device = 'cpu', but hardware 'h200' has h200-sxm-141gb:")
    assert "links from the hardware" in line  # the fact that differs from a profile with a link
    linked = CostProfile.model_validate(
        tiny_cost_profile() | {"link": {"latency_s": 1e-4, "bandwidth_gbps": 1.0, "backend": "gloo"}}
    )
    (line,) = costs_notes(linked, load_hardware("h200"), "m.json")
    assert "links come from this profile" in line
    assert costs_notes(prof, load_hardware("cpu"), "m.json") == []
    assert costs_notes(None, load_hardware("h200"), "m.json") == []
    assert costs_notes("paper", load_hardware("h200"), "m.json") == []


TINY = ("--model", "tiny-llama", "--pp", "2", "--microbatches", "4", "--seq-len", "128", "--strategy", "1F1B")


def test_plan_and_simulate_print_the_note_and_still_plan(adaptis, tmp_path: Path) -> None:
    costs = tmp_path / "measured.json"
    costs.write_text(json.dumps(tiny_cost_profile()))
    plan = tmp_path / "p.json"
    r = adaptis("plan", *TINY, "--hardware", "h200", "--costs", costs, "-o", plan, "--json")
    assert r.exit_code == 0, r.stderr
    json.loads(r.stdout)  # stdout stays the JSON alone
    assert "note: " + str(costs) + ": device = 'cpu', but hardware 'h200' has h200-sxm-141gb" in r.stderr
    s = adaptis("simulate", plan, "--json")
    assert s.exit_code == 0, s.stderr
    assert f"note: {plan}: costs.profile: device = 'cpu'" in s.stderr
    s = adaptis("simulate", plan, "--hardware", "cpu", "--json")
    assert s.exit_code == 0 and "note:" not in s.stderr, s.stderr
    r = adaptis("plan", *TINY, "--hardware", "cpu", "--costs", costs, "-o", plan, "--json")
    assert r.exit_code == 0 and "note:" not in r.stderr, r.stderr


def test_with_stderr_closed_the_json_and_the_plan_come_first(tmp_path: Path) -> None:
    """The note goes out after the outputs: a reader of stderr that went away ends the command (141)
    only once the JSON is on stdout and the plan file is written."""
    costs = tmp_path / "measured.json"
    costs.write_text(json.dumps(tiny_cost_profile()))
    plan = tmp_path / "p.json"
    r = run_reader_gone("stderr", "plan", *TINY, "--hardware", "h200", "--costs", costs, "-o", plan, "--json")
    assert r.returncode == 141
    assert json.loads(r.stdout)["strategy"] == "1F1B" and plan.exists()
