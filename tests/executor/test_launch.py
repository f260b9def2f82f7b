"""Real runs under torchrun (gloo, 2-3 CPU processes): verification, timing, failures named.

Run: `pytest tests/executor/test_launch.py`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
import torch
from helpers_executor import (
    FAMILIES,
    PLAN_SHAPES,
    Ran,
    even_bounds,
    greedy_programs,
    job,
    plan_file,
    shape_plans,
    tiny_family,
    write_plan_file,
)

from adaptis_plan.core import Action, Layout
from adaptis_plan.errors import AdaptisError, InputError
from adaptis_plan.executor.cpu import PIN_ENV
from adaptis_plan.executor.launch import RunOptions, run_plan, run_plans
from adaptis_plan.executor.lowering import P2P_ORDERS
from adaptis_plan.executor.verify import compare
from adaptis_plan.planfile.io import read_plan
from adaptis_plan.spec.model import ModelSpec

M = 4  # micro-batches in the executor runs

# ---------------------------------------------------------------- real runs (torchrun, gloo, 2 processes)


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, ModelSpec]]:
    return shape_plans(tmp_path_factory.mktemp("plans"), M)


@pytest.mark.slow
def test_pipelined_step_matches_single_process_for_every_family_and_plan_shape(two_ranks: dict[str, Ran]) -> None:
    """Every family and plan shape against one process; in the same launch (the session's shared two-process
    one), a job where rank 1 drops one micro-batch's weight gradients: verification catches the wrong gradient."""
    keys = sorted(k for k in two_ranks if k.startswith("shapes:") and "drops a W" not in k)
    assert len(keys) == len(FAMILIES) * len(PLAN_SHAPES)
    results = [two_ranks[k].result for k in keys]
    lost = two_ranks["shapes:rank 1 drops a W"].result
    assert lost["verified"] is False and lost["mismatched_params"]
    failed = {
        k: (r["worst_param"], r["max_abs_grad_diff"], r["mismatched_params"][:3])
        for k, r in zip(keys, results, strict=True)
        if not r["verified"]
    }
    assert not failed
    for r in results:
        assert r["steps"] == 1 and len(r["step_times_s"]) == 1 and r["measured_step_time_s"] > 0
        assert r["predicted_step_time_s"] == 0.05
        assert r["loss_diff"] <= 1e-5 * r["reference_loss"] and r["max_abs_grad_diff"] < 1e-6
    events = json.loads(Path(two_ranks["shapes:gemma irregular"].result["trace"]).read_text())["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {0, 1}
    assert {e["args"]["op"] for e in xs} <= {"F", "B", "I", "W"} and all(e["dur"] >= 0 for e in xs)
    assert sum(e["args"]["op"] == "F" for e in xs) == 5 * M  # 5 stages x M micro-batches


@pytest.mark.slow
def test_three_ranks_with_crossing_placements_in_every_p2p_order(tmp_path: Path) -> None:
    """Each case in each order of sends and receives, side by side in one launch (`PlanJob.p2p_order`)."""
    cases = [  # (family, stage -> device, style): traffic between every pair of ranks, in both directions
        ("nemotron", (0, 1, 2, 0, 2, 1), "random"),
        ("llama", (2, 1, 0, 1, 2), "zb"),
        ("deepseek", (1, 2, 0), "1f1b"),
    ]
    jobs = []
    for fam, stage_device, style in cases:
        model = tiny_family(fam)
        layout = Layout(
            bounds=even_bounds(model.num_layers, len(stage_device)), stage_device=stage_device, num_devices=3
        )
        programs = greedy_programs(layout, 3, style, seed=7)
        path = write_plan_file(tmp_path / f"{fam}.json", model, layout, programs, 3)
        for order in P2P_ORDERS:
            jobs.append(dataclasses.replace(job(path, model), label=f"{fam} {order}", p2p_order=order))
    results = run_plans(jobs, RunOptions(steps=1, warmup=0, verify=True))
    assert [r["p2p_order"] for r in results] == [j.p2p_order for j in jobs]
    assert [r["verified"] for r in results] == [True] * len(jobs), {
        r["plan"]: r["mismatched_params"][:3] for r in results if not r["verified"]
    }


def test_compare_flags_a_changed_tensor() -> None:
    ref = {"a": torch.linspace(-1, 1, 10), "b": None, "c": torch.ones(3)}
    same = {k: (None if v is None else v.clone()) for k, v in ref.items()}
    assert compare(1.0, same, 1.0, ref, rtol=1e-5, atol=1e-8).verified
    bumped = dict(same, c=torch.tensor([1.0, 1.0 + 1e-4, 1.0]))
    c = compare(1.0, bumped, 1.0, ref, rtol=1e-5, atol=1e-8)
    assert not c.verified and c.mismatched == ["c"] and c.worst_param == "c"
    assert not compare(1.0, {"a": ref["a"], "b": None}, 1.0, ref, rtol=1e-5, atol=1e-8).verified  # missing param
    assert not compare(1.1, same, 1.0, ref, rtol=1e-5, atol=1e-8).verified  # loss
    assert not compare(
        1.0, dict(same, b=torch.ones(2)), 1.0, dict(ref, b=torch.zeros(2)), rtol=1e-5, atol=1e-8
    ).verified


@pytest.mark.slow
def test_run_reports_median_step_time_and_trains(two_ranks: dict[str, Ran]) -> None:
    """Three steps of gemma's GPipe plan (tied embeddings on two devices), a job of the session's shared
    two-process launch with its own step count (`PlanJob.steps`): the median step, the losses of a model
    that trains, the trace and the cores."""
    r = two_ranks["trains:gemma gpipe"].result
    assert r["steps"] == 3 and len(r["step_times_s"]) == 3 and r["warmup"] == 0
    assert r["measured_step_time_s"] == sorted(r["step_times_s"])[1]
    assert r["predicted_step_time_s"] == 0.05 and r["verified"]
    assert len(r["losses"]) == 3 and r["losses"][0] != r["losses"][1] != r["losses"][2]
    assert Path(r["trace"]).is_file()
    usable = sorted(os.sched_getaffinity(0))  # each rank pinned to a core of its own when they fit
    assert r["cpu_cores"] == (usable[:2] if len(usable) >= 2 and os.environ.get(PIN_ENV) != "0" else [None, None])


@pytest.mark.slow
def test_killed_rank_ends_the_run_quickly_naming_it(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("llama", "1f1b-unequal")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "exit:1:1")  # rank 1 calls os._exit(1) during step 1
    t0 = time.monotonic()
    with pytest.raises(AdaptisError, match=r"^rank 1 failed: the process died") as e:
        run_plan(read_plan(path), model, RunOptions(steps=2, warmup=1, timeout_s=300))
    # torchrun's teardown ended it, not rank 0's 300 s wait (start-up alone takes 10-30 s on a loaded 2-core box)
    assert time.monotonic() - t0 < 120
    assert not isinstance(e.value, InputError)


@pytest.mark.slow
def test_hung_rank_times_out_and_is_named(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("llama", "gpipe")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "hang:1:0")  # rank 1 sleeps after its first action
    t0 = time.monotonic()
    with pytest.raises(AdaptisError, match=r"^rank 1 failed: .*hung.*rank 0 saw: .*Timed out"):
        run_plan(read_plan(path), model, RunOptions(steps=1, warmup=0, timeout_s=3))
    assert time.monotonic() - t0 < 120  # the fault sleeps 3600 s: ended by rank 0's 3 s timeout


@pytest.mark.slow
def test_rank_error_is_reported_with_its_last_line(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("nemotron", "v-shape")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "raise:0:0")
    with pytest.raises(AdaptisError, match=r"^rank 0 failed: RuntimeError: injected failure on rank 0"):
        run_plan(read_plan(path), model, RunOptions(steps=1, warmup=0))


def test_plan_for_another_model_is_refused(plans: dict) -> None:
    path, _ = plans[("llama", "gpipe")]
    with pytest.raises(InputError, match="fingerprint"):
        run_plan(read_plan(path), tiny_family("nemotron"), label=str(path))


def test_deadlocking_plan_is_refused_before_launch(tmp_path: Path) -> None:
    model = tiny_family("llama")
    layout = Layout(bounds=(0, 3, 6), stage_device=(0, 1), num_devices=2)
    programs = [  # every action present, each device's order legal, but device 1 waits for 0F1 first
        [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
        [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)],
    ]
    plan = plan_file(model, layout, programs, 2)  # read_plan would refuse it: the launcher must too
    t0 = time.monotonic()
    with pytest.raises(InputError, match="^dead.json: .*circular wait"):
        run_plan(plan, model, label="dead.json")
    assert time.monotonic() - t0 < 5


@pytest.mark.unit
@pytest.mark.parametrize(
    ("version_py", "gpu"),
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", True),
        ("cuda = None\nhip = '6.3.42131'\n", True),
        ("__version__ = 'x'\n", True),  # unreadable: torch itself is asked
    ],
)
def test_auto_device_reads_the_torch_build_without_importing_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version_py: str, gpu: bool
) -> None:
    import importlib.util
    from types import SimpleNamespace

    from adaptis_plan.executor import launch

    (tmp_path / "version.py").write_text(version_py)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: SimpleNamespace(submodule_search_locations=[tmp_path])
    )
    assert launch._gpu_build() is gpu
    if not gpu:
        assert launch._resolve_device("auto", 2) == "cpu"
    monkeypatch.undo()
    assert launch._gpu_build() is (torch.version.cuda is not None or torch.version.hip is not None)
