"""`bench.megatron_check` (Megatron-LM's parse_args / validate_args on a plan's launch script, from a
checkout the user points at): what it reads from the launch script and refuses without a checkout.
Its run against a Megatron-LM checkout is recorded in docs/launch.md (no checkout in CI)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers_megatron import megatron_parser

from bench.megatron_check import SIX_PLANS, launch_parts, main, model_args
from tests.conftest import run_adaptis


def test_checker_reads_the_launch_scripts_environment_and_arguments(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    options = dict(SIX_PLANS)["cp"]
    r = run_adaptis("plan", *options.split(), "--time-limit", "1", "--no-hard-stop", "-o", plan)
    assert r.exit_code == 0, r.stderr
    script = run_adaptis("export", plan, "--format", "megatron-launch").stdout
    env, args, training_script = launch_parts(script)
    assert env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} and training_script == "pretrain_gpt.py"
    ns = megatron_parser().parse_args(args)
    assert (ns.context_parallel_size, ns.attention_backend) == (2, "fused")
    extra = model_args(json.loads(plan.read_text()))
    assert extra[extra.index("--hidden-size") + 1] == "4096" and "--num-query-groups" not in extra


def test_checker_refuses_a_folder_without_megatron(tmp_path: Path, capsys) -> None:
    assert main(["--megatron", str(tmp_path), "x.json"]) == 2
    assert "no megatron/training/arguments.py" in capsys.readouterr().err
