"""Data parallelism run for real: PP2 x DP2 (4 gloo processes under torchrun) against one process.

The planner's adaptive plan for tiny-llama (split backward: I and W) with training.dp = 2 and
ZeRO 1 / 2 / 3 (ZeRO 3 also with full and selective recomputation, whose backward reruns the
forward with gathered parameters), and a tied-embedding gemma-like model's interleaved zero-bubble
plan (two stages per rank, so ZeRO 3 switches the gathered stage; the embedding and its tied
head copy on two ranks) with ZeRO 3: every replica's averaged gradients must equal one process's
gradients over the whole global batch, and every replica's parameters after the optimizer step
must equal one process's step with them; a replica that loses a W must fail the check.

The launch is the session's shared four-process one (`four_ranks`, tests/executor/conftest.py).

Run: `pytest tests/executor/test_dataparallel.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_executor import Ran, cpu_plan_file, tiny_family, with_training

from adaptis_plan.executor.launch import PlanJob, RunOptions, run_plans
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.usecases import executor_refusal, load_plan_and_model


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cpu_plan_file(tmp_path_factory.mktemp("dp") / "adaptive.json", "tiny-llama")


@pytest.mark.slow
def test_pp2_dp2_zero_1_2_3_match_one_process(four_ranks: dict[str, Ran]) -> None:
    """ZeRO 1-3 (with recomputation; a tied interleaved model) against one process; in the same launch, a
    job where global rank 1 (pp rank 0 of replica 1) drops one W: the dp average spreads the error to
    replica 0, and verification fails."""
    plan = four_ranks["dp:zero1"].plan
    ops = {a.op for d in plan.devices for a in d.actions}
    assert {"I", "W"} <= ops, ops  # the adaptive plan splits backward: W runs after the rank's I
    gemma = four_ranks["dp:gemma-interleaved-zero3"]
    assert [st.device for st in gemma.plan.stages] == [0, 1, 0, 1] and gemma.model.tie_word_embeddings
    labels = ["zero1", "zero2", "zero3", "zero3+recompute", "gemma-interleaved-zero3"]
    results = [four_ranks[f"dp:{label}"].result for label in labels]
    lost = four_ranks["dp:zero1, rank 1 drops a W"].result
    assert lost["verified"] is False
    # replica 0 ran every W itself: its gradients are wrong only through the average
    assert any(n.endswith("(dp rank 0)") for n in lost["mismatched_params"]), lost["mismatched_params"]
    summary = {
        r["plan"]: (r["verified"], r["max_abs_grad_diff"], r["loss_diff"], r["max_abs_param_diff"]) for r in results
    }
    assert all(v[0] for v in summary.values()), summary
    for r in results:
        assert r["world_size"] == 4 and r["dp"] == 2 and r["global_batch_size"] == 2 * 1 * 4
        assert r["steps"] == len(r["losses"]) == 2 and r["losses"][0] != r["losses"][1]  # the step trained
        assert len(r["comm_step_s"]) == 2 and r["comm_s"]["dp"] > 0 and r["predicted_comm_s"] == {"dp": 0.001}
        for step in r["comm_step_s"]:
            assert step["dp_grad_sync"] > 0 and step["dp"] >= step["dp_grad_sync"]
            assert (step["dp_param_gather"] > 0) == (r["zero"] >= 2)  # ZeRO 2's gather after the step, 3's in it
        held = r["held_elements"]  # ranks 2 p, 2 p + 1 hold pipeline rank p's stages
        for p in range(2):
            a, b = held[2 * p], held[2 * p + 1]
            assert a["params"] == b["params"] > 0
            assert max(a["optimizer"], b["optimizer"]) < a["params"] <= a["optimizer"] + b["optimizer"]  # sharded
            assert a["full_params"] == (0 if r["zero"] == 3 else a["params"])
    # the same data and weights whatever the ZeRO stage: the same loss
    assert len({round(r["loss"], 5) for r in results[:4]}) == 1


def test_executor_refuses_cp_ep_and_runs_dp_tp(adaptive: Path) -> None:
    plan = PlanFile.model_validate_json(adaptive.read_text())
    assert executor_refusal(with_training(plan, dp=2, zero=3)) is None
    assert executor_refusal(with_training(plan, dp=2, tp=2)) is None  # tests/executor/test_tensorparallel.py runs it
    kept = {"dp": 2, "zero": 3, "stage_keeps_unsharded": True}  # priced for torch's stages (--target torchtitan)
    assert executor_refusal(with_training(plan, **{**kept, "dp": 1})) is None  # nothing sharded: nothing differs
    for dims, says in (({"cp": 2}, "training.cp = 2"), ({"dp": 2, "ep": 4}, "ep = 4"), (kept, "--target adaptis")):
        why = executor_refusal(with_training(plan, **dims))
        assert why is not None and says in why and "\n" not in why, why


def test_plans_run_together_need_the_same_number_of_processes(adaptive: Path) -> None:
    """pp 2 and pp 2 x dp 2 cannot share a launch (tests/executor/conftest.py's `four_ranks` runs pp 2 x tp 2,
    tp 2 x dp 2, pp 2 x dp 2 and dp 4 side by side)."""
    from adaptis_plan.errors import InputError

    plan, model = load_plan_and_model(str(adaptive), None)
    jobs = [PlanJob(plan, model, label="a"), PlanJob(with_training(plan, dp=2), model, label="b")]
    with pytest.raises(
        InputError, match=r"b: pp x dp x tp = 2 x 2 x 1 = 4 processes: .* the same number of processes \(2\)"
    ):
        run_plans(jobs, RunOptions(steps=1))
    # a plan's own steps and dtype are checked as the launch's are, the message naming the plan
    with pytest.raises(InputError, match=r"^c: --steps = 0: need at least 1 measured step$"):
        run_plans([PlanJob(plan, model, label="c", steps=0)], RunOptions(steps=1))
    with pytest.raises(InputError, match=r"^d: dtype = 'fp8': use one of "):
        run_plans([PlanJob(plan, model, label="d", dtype="fp8")], RunOptions(steps=1))


@pytest.mark.unit
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_zero3_frees_parameters_between_f_and_i_and_gets_the_same_gradients(one_rank_group, recompute: str) -> None:
    """F with gathered parameters, storage freed, gathered again, then I and W: the gradients of a plain
    F / I / W, bitwise (autograd's saved parameters see the refilled storage, not a stale or empty one)."""
    import torch

    from adaptis_plan.executor.dataparallel import _FlatStage
    from adaptis_plan.executor.runtime import Stage
    from adaptis_plan.executor.wgrad import WeightGradStore

    model = tiny_family("llama")
    ids = torch.randint(0, model.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))

    def run(shard: bool) -> dict[str, torch.Tensor]:
        stage = Stage(model, 0, 0, 3, seed=0, recompute=recompute)
        named = stage.named_layer_parameters()
        flat = _FlatStage(named, one_rank_group, 0, 1) if shard else None
        out = stage(ids)
        if flat is not None:
            flat.free()
            assert flat.flat.untyped_storage().nbytes() == 0 and not flat.gathered
            assert all(p.untyped_storage().nbytes() == 0 for _, p in named)  # the parameters are its views
            flat.gather()
        store = WeightGradStore()
        with store.deferring("k"):
            out.backward(torch.ones_like(out))
        if flat is not None:
            flat.free()  # W needs no parameters
        store.run("k")
        return {n: p.grad.clone() for n, p in named}

    plain, sharded = run(False), run(True)
    assert plain.keys() == sharded.keys()
    assert all(torch.equal(plain[n], sharded[n]) for n in plain)
