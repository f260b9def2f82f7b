"""The runtime capability rules (`schedules/targets.py`): what each runtime can run, the same rules
refusing an export and restricting `adaptis plan --target`, and the report of what a restriction
costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptis_plan.errors import InputError
from adaptis_plan.schedules import get_spec
from adaptis_plan.schedules.targets import TARGETS, check_exportable, get_target, loop_map, v_map

IRREGULAR = (0, 0, 1, 0, 1)


def test_maps_match_torch() -> None:
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    for p in (1, 2, 3, 4):
        for k in (1, 2, 3, 4):
            n = p * k
            assert loop_map(n, p) == tuple(generate_stage_to_rank_mapping(p, n, "loop").values())
            assert v_map(n, p) == tuple(generate_stage_to_rank_mapping(p, n, "v").values())


@pytest.mark.parametrize(
    ("stage_device", "runs"),
    [
        ((0, 1), {"adaptis", "torch", "torchtitan", "megatron"}),  # sequential = a loop of 1
        ((0, 1, 0, 1), {"adaptis", "torch", "torchtitan", "megatron"}),  # loop x2
        ((0, 1, 1, 0), {"adaptis", "torch", "torchtitan"}),  # V of 2 per rank
        ((0, 1, 1, 0, 0, 1), {"adaptis", "torch"}),  # V x3: torchtitan's V is 2 per rank
        (IRREGULAR, {"adaptis", "torch"}),
        ((0, 1, 0), {"adaptis", "torch"}),  # unequal stage counts per device
        ((0, 0), {"adaptis"}),  # device 1 idle: torch's runtime needs a stage on every rank
    ],
)
def test_placement_rules(stage_device, runs) -> None:
    got = {t for t in TARGETS if get_target(t).placement_problem(stage_device, 2) is None}
    assert got == runs
    for t in TARGETS:
        assert get_target(t).placement_filter(2)(stage_device) == (t in runs)


def test_megatron_interleaves_only_with_several_pipeline_ranks() -> None:
    """arguments.py: virtual stages need pp > 1; the rule sits with the others, so the search (--target
    megatron, with or without --gpus) never plans what the megatron exports then refuse."""
    assert "pp > 1" in get_target("megatron").placement_problem((0, 0, 0), 1)
    assert get_target("megatron").placement_problem((0,), 1) is None
    assert {t for t in TARGETS if get_target(t).placement_problem((0, 0), 1) is None} == {
        "adaptis", "torch", "torchtitan"}  # fmt: skip


def test_plan_gpus_for_a_target_searches_within_its_rules(adaptis, tmp_path: Path) -> None:
    """With --gpus the configuration search plans for the target too (it used to record the target and
    search without it: a pp 1 plan with 3 stages that megatron-args then refused)."""
    out = tmp_path / "p.json"
    r = adaptis("plan", "--model", "llama-2-7b", "--hardware", "h100", "--gpus", "64", "--global-batch-size", "256",
                "--target", "megatron", "--time-limit", "2", "--no-hard-stop", "-o", out, "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    summary = r.json()
    assert summary["target"] == "megatron" and summary["search"]["target"] == "megatron"
    assert "unrestricted" in summary
    sd = [s["device"] for s in json.loads(out.read_text())["stages"]]
    assert get_target("megatron").problem(sd, summary["configuration"]["pp"], 1) is None
    r = adaptis("export", out, "--format", "megatron-args")
    assert r.exit_code == 0, r.stderr


def test_only_adaptis_runs_a_split_head() -> None:
    assert [t for t in TARGETS if get_target(t).head_problem(3) is None] == ["adaptis"]
    assert all(get_target(t).head_problem(1) is None for t in TARGETS)


def test_every_classic_strategy_runs_where_torch_names_it() -> None:
    """Each classic placement passes the runtimes that run that schedule family."""
    for name in ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"):
        sd = get_spec(name).stage_device(2, 2 if name not in ("GPipe", "1F1B") else None)
        assert all(get_target(t).placement_problem(sd, 2) is None for t in TARGETS), name
    for name in ("ZBVZeroBubble", "DualPipeV"):
        sd = get_spec(name).stage_device(2, 2)
        assert get_target("torchtitan").placement_problem(sd, 2) is None
        assert get_target("megatron").placement_problem(sd, 2) is not None


def test_export_refusal_is_one_line_with_the_fix() -> None:
    with pytest.raises(InputError) as info:
        check_exportable("megatron-layout", IRREGULAR, 2, 1)
    msg = str(info.value)
    assert "\n" not in msg and "--target megatron" in msg and "Megatron-LM" in msg
    with pytest.raises(InputError, match="vocabulary chunks"):
        check_exportable("torch-csv", (0, 1), 2, 2)
    check_exportable("torch-csv", IRREGULAR, 2, 1)
    with pytest.raises(InputError, match="--target = 'tpu'"):
        get_target("tpu")


# ----------------------------------------------------------------------------- plan --target
TINY = ("--model", "tiny-gemma", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "64")


@pytest.mark.parametrize("target", ["torch", "torchtitan", "megatron"])
def test_plan_for_a_target_exports_and_reports_the_cost(adaptis, tmp_path: Path, target: str) -> None:
    out = tmp_path / "p.json"
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "--target", target, "-o", out, "--json")
    assert r.exit_code == 0, r.stderr
    summary = r.json()
    plan = json.loads(out.read_text())
    assert summary["target"] == plan["target"] == target
    unrestricted = summary["unrestricted"]
    assert unrestricted["step_time_s"] > 0
    assert unrestricted["restriction_cost"] == pytest.approx(summary["step_time_s"] / unrestricted["step_time_s"] - 1)
    sd = [s["device"] for s in plan["stages"]]
    assert get_target(target).problem(sd, 2, plan["model"]["head_chunks"]) is None
    fmt = {"torch": "torch-csv", "torchtitan": "torchtitan", "megatron": "megatron-layout"}[target]
    r = adaptis("export", out, "--format", fmt, "--torchtitan-config", "llama3:llama3_8b", "-o", tmp_path / "x_pp.py")
    assert r.exit_code == 0, r.stderr
    if target == "megatron":  # Megatron runs its own order: the plan carries it, so it predicts what Megatron runs
        k = len(sd) // 2
        order = get_spec("1F1B" if k == 1 else "Interleaved1F1B").build(tuple(sd), 2, 4)
        stored = [[f"{a['stage']}{a['op']}{a['mb']}" for a in dev["actions"]] for dev in plan["devices"]]
        assert stored == [[str(a) for a in prog] for prog in order]
    human = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "--target", target, "-o", tmp_path / "h.json")
    assert f"target {target}" in human.stderr and "restriction costs" in human.stderr


def test_default_target_has_no_unrestricted_twin(adaptis, tmp_path: Path) -> None:
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "-o", tmp_path / "p.json", "--json")
    assert r.exit_code == 0 and r.json()["target"] == "adaptis" and "unrestricted" not in r.json()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--strategy", "ZBVZeroBubble", "--target", "megatron"), ("ZBVZeroBubble", "--target megatron", "loop")),
        (("--head-chunks", "2", "--target", "torch"), ("--head-chunks", "split head", "--target adaptis")),
        (("--target", "tpu"), ("--target",)),
    ],
)
def test_plan_refuses_what_the_target_cannot_run(adaptis, tmp_path: Path, args, needles) -> None:
    out = tmp_path / "p.json"
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", *args, "-o", out)
    assert r.exit_code == 2, r.stderr
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)
    assert not out.exists()
