"""What is predicted is what is exported: six plans for Megatron (dense TP+PP+DP with the
distributed optimizer, ZeRO-3 as Megatron-FSDP, context parallelism, MoE with expert parallelism,
pp 1, interleaved on a searched layout), exported as `megatron-args` and `megatron-launch`, read
back with Megatron's flag declarations (`tests/helpers_megatron.py`) into the plan's settings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers_megatron import (
    build_six_plans,
    megatron_parser,
    parse_megatron_args,
    settings_from_args,
    settings_of_plan,
    world_size_of,
)

from bench.megatron_check import launch_argv
from tests.conftest import run_adaptis

NAMES = ("dense-tp-pp-dp", "zero3-fsdp", "cp", "moe-ep", "pp1", "interleaved-layout")


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return build_six_plans(tmp_path_factory.mktemp("six"), run_adaptis)


def test_the_six_plans_cover_what_they_name(plans) -> None:
    t = {name: plans[name][1]["training"] for name in NAMES}
    assert t["dense-tp-pp-dp"]["tp"] > 1 and t["dense-tp-pp-dp"]["pp"] > 1 and t["dense-tp-pp-dp"]["dp"] > 1
    assert t["dense-tp-pp-dp"]["zero"] == 1
    assert t["zero3-fsdp"]["zero"] == 3 and t["zero3-fsdp"]["dp"] > 1
    assert t["cp"]["cp"] == 2
    assert t["moe-ep"]["ep"] == 4
    assert t["pp1"]["pp"] == 1
    stages = plans["interleaved-layout"][1]["stages"]
    assert len(stages) > t["interleaved-layout"]["pp"]  # virtual stages
    sizes = {s["layers"][1] - s["layers"][0] for s in stages}
    assert len(sizes) > 1  # not a uniform split: the layout is the plan's own


@pytest.mark.parametrize("name", NAMES)
def test_megatron_args_read_back_into_the_plans_settings(plans, name) -> None:
    path, plan = plans[name]
    r = run_adaptis("export", path, "--format", "megatron-args")
    assert r.exit_code == 0, r.stderr
    ns = parse_megatron_args(r.stdout)
    assert settings_from_args(ns, world_size_of(r.stdout)) == settings_of_plan(plan)


@pytest.mark.parametrize("name", NAMES)
def test_megatron_launch_is_bash_and_reads_back(plans, name, tmp_path: Path) -> None:
    path, plan = plans[name]
    script = tmp_path / "launch.sh"
    r = run_adaptis("export", path, "--format", "megatron-launch", "-o", script)
    assert r.exit_code == 0, r.stderr
    text = script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
    env, torchrun, command = launch_argv(text)
    t = plan["training"]
    world = t["tp"] * t["pp"] * t["cp"] * t["dp"]
    per_node = plan["hardware"]["profile"]["groups"][0]["devices_per_node"]
    nnodes, nproc = int(torchrun[torchrun.index("--nnodes") + 1]), int(torchrun[torchrun.index("--nproc-per-node") + 1])
    assert nnodes * nproc == world and nproc == min(per_node, world)
    for flag, placeholder in (
        ("--master-addr", "MASTER_ADDR"),
        ("--master-port", "MASTER_PORT"),
        ("--node-rank", "NODE_RANK"),
    ):
        assert torchrun[torchrun.index(flag) + 1] == f"${{{placeholder}}}"
    assert command[0] == "${MEGATRON_LM}/pretrain_gpt.py"
    ns = megatron_parser().parse_args(command[1:])
    assert settings_from_args(ns, world) == settings_of_plan(plan)
    # the environment Megatron's validate_args asserts on (arguments.py at d98e8a6)
    want = None if t["zero"] >= 2 else "1" if (t["tp"] > 1 or t["cp"] > 1) else "absent"
    assert env.get("CUDA_DEVICE_MAX_CONNECTIONS", "absent") == want


def test_the_args_and_the_launch_script_carry_the_same_arguments(plans, tmp_path: Path) -> None:
    path, _ = plans["interleaved-layout"]
    args = run_adaptis("export", path, "--format", "megatron-args")
    script = tmp_path / "launch.sh"
    assert run_adaptis("export", path, "--format", "megatron-launch", "-o", script).exit_code == 0
    assert vars(parse_megatron_args(args.stdout)) == vars(
        megatron_parser().parse_args(launch_argv(script.read_text())[2][1:])
    )


@pytest.mark.parametrize(("seeded", "want"), [("InterleavedZeroBubble x3", "Interleaved1F1B x3"),
                                              ("InterleavedZeroBubble/balanced", "Interleaved1F1B/balanced")])  # fmt: skip
def test_a_megatron_plan_is_labelled_by_the_order_it_runs(seeded, want) -> None:
    """--target megatron keeps a seeded classic layout but runs Megatron's order on it: the plan (and
    the report, which shows `search.source`) names that order, not the seed's schedule."""
    from adaptis_plan.core import Layout
    from adaptis_plan.cost.table import build_cost_table
    from adaptis_plan.inputs.hardware import load_hardware
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.schedules import get_spec, placement, uniform_bounds
    from adaptis_plan.schedules.targets import get_target
    from adaptis_plan.search.driver import _with_runtime_order
    from adaptis_plan.search.generator import Candidate
    from adaptis_plan.spec.training import TrainingConfig

    k = 3 if "x3" in seeded else 2
    model = load_model("tiny-llama")
    training = TrainingConfig(num_microbatches=4, seq_len=64, pp=2, dtype="fp32")
    costs = build_cost_table(model, load_hardware("cpu"), training)
    layout = Layout(uniform_bounds(model.num_layers, 2 * k), placement("loop", 2, k), 2)
    programs = get_spec("InterleavedZeroBubble").build(layout.stage_device, 2, 4)
    partition = "balanced" if "balanced" in seeded else "uniform"
    seed = Candidate(layout, programs, 1.0, placement="loop", partition=partition, policy="InterleavedZeroBubble",
                     source=seeded)  # fmt: skip
    chosen = _with_runtime_order(get_target("megatron"), seed, costs, {}, 4)
    assert chosen.programs == get_spec("Interleaved1F1B").build(layout.stage_device, 2, 4)
    assert chosen.label == want
