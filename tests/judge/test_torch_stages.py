"""torch's pipeline stages with FSDP2 (`--target torch` / `torchtitan`): they keep the gathered parameters and the
fp32 unsharded gradients from a step's first micro-batch to the rank's last backward, then reduce once
(`TrainingConfig.stage_keeps_unsharded`): ZeRO-1's memory and traffic, the reduce-scatter after the last backward.

Run: `pytest tests/judge/test_torch_stages.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptis_plan.cost.analytic import bytes_per_param
from adaptis_plan.cost.source import CostTables
from adaptis_plan.inputs.hardware import cluster, load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.judge.training_step import training_step
from adaptis_plan.search.generator import classic_candidate
from adaptis_plan.spec.training import TrainingConfig
from tests.conftest import run_adaptis


def _training(zero: int = 3, pp: int = 4, m: int = 8, keep: bool = True) -> TrainingConfig:
    return TrainingConfig(num_microbatches=m, pp=pp, dp=8, zero=zero, seq_len=512, stage_keeps_unsharded=keep)


@pytest.mark.unit
def test_the_stages_hold_and_move_what_zero_1_does_where_they_keep_state_over_micro_batches() -> None:
    kept = _training()
    assert kept.reduces_after_backward and kept.zero_in_effect == 1
    # whole bf16 weights and fp32 gradients, Adam's fp32 master and moments sharded over dp
    assert bytes_per_param(kept) == 2 + 4 + 12 / 8 == bytes_per_param(_training(zero=1, keep=False))
    assert bytes_per_param(_training(keep=False)) == (2 + 4 + 12) / 8
    assert _training(zero=2).zero_in_effect == 1 and _training(zero=1).zero_in_effect == 1
    # where nothing is kept over micro-batches the stage is as planned: no pipeline, one micro-batch, DDP
    for t in (_training(pp=1), _training(m=1), _training(zero=0), _training(keep=False)):
        assert not t.reduces_after_backward and t.zero_in_effect == t.zero, t


@pytest.mark.unit
def test_kept_state_costs_memory_spares_the_per_op_gathers_and_reduces_after_the_last_backward() -> None:
    model = load_model("tiny-llama")
    nodes = cluster(load_hardware("h100"), 32)
    group = nodes.groups[0].model_copy(update={"num_nodes": 32, "devices_per_node": 1})  # dp crosses nodes
    hw = nodes.model_copy(update={"groups": [group]})
    steps, static = {}, {}
    for keep in (False, True):
        t = _training(keep=keep)
        costs = CostTables(hw, t).table(model)
        cand = classic_candidate(costs, t.num_microbatches, "1F1B")
        assert cand.result is not None
        static[keep] = max(cand.result.static_bytes)
        steps[keep] = training_step(cand.layout, cand.programs, cand.result, model, t, hw, costs.device_names)
    assert static[True] > static[False]
    # ZeRO-3's per-op collectives are gone; one reduce-scatter per step, none of it hidden after the last backward
    assert steps[False].grad_sync_s == 0.0 and steps[True].grad_sync_s > 0.0
    assert steps[True].grad_sync_exposed_s == pytest.approx(steps[True].grad_sync_s, rel=1e-12)
    assert steps[True].pipeline_step_time_s < steps[False].pipeline_step_time_s


def _plan(tmp_path: Path, target: str) -> Path:
    out = tmp_path / f"{target}.json"
    r = run_adaptis(
        "plan", "--model", "tiny-llama", "--hardware", "h100", "--gpus", "16", "--pp", "2", "--dp", "8", "--zero",
        "3", "--micro-batch-size", "1", "--global-batch-size", "32", "--seq-len", "128", "--strategy", "1F1B",
        "--target", target, "--no-hard-stop", "-o", out,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    return out


def test_a_torchtitan_plan_records_the_kept_state_and_exports_it_and_other_runtimes_refuse(tmp_path: Path) -> None:
    titan, ours = _plan(tmp_path, "torchtitan"), _plan(tmp_path, "adaptis")
    assert json.loads(titan.read_text())["training"]["stage_keeps_unsharded"] is True
    assert json.loads(ours.read_text())["training"]["stage_keeps_unsharded"] is False
    module = tmp_path / "adaptis_pipeline.py"
    config = ("--torchtitan-config", "llama3:llama3_debugmodel")
    r = run_adaptis("export", titan, "--format", "torchtitan", *config, "-o", module)
    assert r.exit_code == 0, r.stderr
    assert "\"fsdp_reshard_after_forward\": 'never'" in module.read_text()
    # a plan priced for sharded stages is refused by torchtitan, one priced for kept state by Megatron-LM
    refused = ((ours, "torchtitan", config, "--target torchtitan"), (titan, "megatron-args", (), "--target megatron"))
    for plan, fmt, extra, fix in refused:
        r = run_adaptis("export", plan, "--format", fmt, *extra, "-o", tmp_path / f"out_{fmt[:5]}.py")
        assert r.exit_code == 2 and fix in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / f"out_{fmt[:5]}.py").exists()
