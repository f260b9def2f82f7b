"""Expert parallelism run for real: tiny-deepseek PP2 x DP2 x EP2 (4 gloo processes under torchrun).

Each dp rank holds half of every MoE layer's 8 experts (and with PP1 x DP4 x EP2 two ranks hold each half,
averaging its gradients over the expert-data-parallel pair); tokens go to their experts' owners and back
by all-to-all. The planner's adaptive plan (split backward: the experts' weight gradients are
deferred to W) with ZeRO 1, and with ZeRO 3 plus full / selective recomputation (the backward
reruns the exchanges): every replica's gradients, the experts' gathered from their owners, must
equal one process's over the whole global batch with all experts. In one process (ep = 1) the
sharded MoE must reproduce `layers.Moe`, under the I / W split too. Plans the executor
cannot run (ep not dividing dp or the expert count, tp > 1) are refused in one line, exit 2.

The four-process runs are jobs of the session's shared launch (`four_ranks`, tests/executor/conftest.py).

Run: `pytest tests/executor/test_expertparallel.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_executor import Ran, cpu_plan_file, with_training

from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.usecases import executor_refusal, load_plan_and_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cpu_plan_file(tmp_path_factory.mktemp("ep") / "deepseek.json", "tiny-deepseek")


def _expert_elements(plan: PlanFile, model: object, device: int) -> tuple[int, int]:
    """(all parameters, routed experts' parameters) of pipeline rank `device`'s stages, unsharded."""
    from adaptis_plan.executor.expertparallel import is_expert_param
    from adaptis_plan.executor.runtime import Stage

    total = experts = 0
    for st in plan.stages:  # layers: [start, stop)
        if st.device == device:
            for name, p in Stage(model, st.stage, *st.layers, seed=0).named_layer_parameters():
                total += p.numel()
                experts += p.numel() if is_expert_param(name) else 0
    return total, experts


@pytest.mark.slow
def test_pp2_dp2_ep2_match_one_process(four_ranks: dict[str, Ran]) -> None:
    ran = [four_ranks[f"ep:{label}"] for label in ("ep2-zero1", "ep2-zero3+recompute")]
    plan, model = ran[0].plan, ran[0].model
    ops = {a.op for d in plan.devices for a in d.actions}
    assert {"I", "W"} <= ops, ops  # the adaptive plan defers the experts' weight gradients to W
    assert [st.recompute for st in ran[1].plan.stages][:2] == ["full", "selective"]
    for r in ran:
        assert executor_refusal(r.plan) is None
    results = [r.result for r in ran]
    summary = {r["plan"]: (r["verified"], r["max_abs_grad_diff"], r["loss_diff"], r["worst_param"]) for r in results}
    assert all(v[0] for v in summary.values()), summary
    for r in results:
        assert r["world_size"] == 4 and r["dp"] == 2 and r["ep"] == 2
        assert len(r["losses"]) == 2 and r["losses"][0] != r["losses"][1]  # the step trained
        assert r["comm_s"]["ep"] > 0 and all(step["ep"] > 0 for step in r["comm_step_s"])
        held = r["held_elements"]  # ranks 2 p, 2 p + 1 hold pipeline rank p's stages, half the experts each
        for p in range(2):
            total, experts = _expert_elements(plan, model, p)
            assert experts > 0
            assert held[2 * p]["params"] == held[2 * p + 1]["params"] == total - experts // 2
    assert len({round(r["loss"], 5) for r in results}) == 1  # same data and weights, same loss


@pytest.mark.slow
def test_dp4_ep2_syncs_experts_over_the_expert_data_parallel_group(four_ranks: dict[str, Ran]) -> None:
    """PP1 x DP4 x EP2: dp ranks 0 and 2 hold experts 0-3, 1 and 3 experts 4-7; each pair averages its
    experts' gradients (ZeRO 3 shards them, and their optimizer state, over the pair), the 4 ranks the
    dense ones."""
    ran = four_ranks["ep:dp4-ep2-zero3"]
    plan, model, r = ran.plan, ran.model, ran.result
    assert (plan.training.pp, plan.training.dp, plan.training.ep, plan.training.zero) == (1, 4, 2, 3)
    assert executor_refusal(plan) is None
    assert r["verified"], (r["max_abs_grad_diff"], r["worst_param"], r["mismatched_params"])
    assert r["world_size"] == 4 and r["comm_s"]["ep"] > 0
    total, experts = _expert_elements(plan, model, 0)
    for held in r["held_elements"]:
        assert held["params"] == total - experts // 2 and held["full_params"] == 0  # ZeRO 3 between steps
        # dense state over 4 ranks, the half of the experts this rank holds over 2 (flat shards padded)
        want = (total - experts) / 4 + experts / 4
        assert want <= held["optimizer"] <= want + 4 * len(plan.stages), (held, want)


@pytest.mark.unit
@pytest.mark.parametrize("deferred", [False, True])
def test_sharded_moe_on_one_rank_is_the_moe(one_rank_group, deferred: bool) -> None:
    """ep = 1: the exchanges are identities, so the output equals `layers.Moe`'s bitwise and every gradient
    to float rounding (verify.py's rtol 1e-5), the experts' weight GEMMs run at once (B) or in W."""
    import torch

    from adaptis_plan.executor.expertparallel import ExpertParallelMoe, _Timer
    from adaptis_plan.executor.layers import build_layer
    from adaptis_plan.executor.wgrad import WeightGradStore
    from adaptis_plan.inputs.models.zoo import build

    model = build("tiny-deepseek")
    index = next(i for i, lay in enumerate(model.layers) if lay.moe is not None)
    x = torch.randn(2, 16, model.hidden_size, generator=torch.Generator().manual_seed(0))

    def run(shard: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        block = build_layer(model, index, seed=0)
        timer = _Timer()
        if shard:
            for part in block.parts:
                if part["mixer"].__class__.__name__ == "Moe":
                    part["mixer"] = ExpertParallelMoe(part["mixer"], ep_rank=0, ep=1, group=one_rank_group, timer=timer)
        xi = x.clone().requires_grad_()
        out = block(xi)
        store = WeightGradStore()
        if deferred:
            with store.deferring("k"):
                out.backward(torch.ones_like(out))
            store.run("k")
        else:
            out.backward(torch.ones_like(out))
        if shard:
            assert timer.seconds > 0
        grads = {n: p.grad.clone() for n, p in block.named_parameters() if p.grad is not None}
        grads["input"] = xi.grad.clone()
        return out.detach(), grads

    (a, ga), (b, gb) = run(False), run(True)
    assert torch.equal(a, b)
    assert ga.keys() == gb.keys() and any(".experts." in n for n in ga)
    # the gradient rows of a token's k experts and the shared expert are summed in another order
    bad = {
        n: float((ga[n] - gb[n]).abs().max()) for n in ga if not (ga[n] - gb[n]).abs().max() <= 1e-5 * ga[n].abs().max()
    }
    assert not bad, bad


def test_executor_refuses_ep_that_does_not_divide(deepseek: Path, tmp_path: Path) -> None:
    plan = PlanFile.model_validate_json(deepseek.read_text())
    assert executor_refusal(with_training(plan, dp=2, ep=2)) is None
    for dims, says in (
        ({"dp": 2, "ep": 4}, "ep = 4 does not divide dp"),
        ({"dp": 3, "ep": 3}, "does not divide the MoE layers' 8 experts"),
        ({"dp": 2, "ep": 2, "tp": 2}, "training.tp = 2"),
    ):
        why = executor_refusal(with_training(plan, **dims))
        assert why is not None and says in why and "\n" not in why, why
    # through the CLI: the plan file's own check, one line, exit 2
    data = json.loads(deepseek.read_text())
    data["training"].update(dp=2, ep=4)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = subprocess.run(
        [sys.executable, "-m", "adaptis_plan.cli", "run", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "ep = 4 does not divide dp x cp = 2 x 1" in lines[0], r.stderr


def test_predicted_ep_comm_prices_the_all_to_alls(deepseek: Path) -> None:
    """`run`'s predicted_comm_s["ep"]: per MoE layer and micro-batch two all-to-alls in F and two in I
    (`cost.analytic`), so full recomputation (F again inside I) adds half."""
    from adaptis_plan.usecases import predicted_comm

    plan, model = load_plan_and_model(str(deepseek), None)
    assert "ep" not in (predicted_comm(with_training(plan, dp=2, ep=1), model) or {})
    plain = predicted_comm(with_training(plan, dp=2, ep=2), model)["ep"]
    full = predicted_comm(with_training(plan, dp=2, ep=2, recompute=["full"] * len(plan.stages)), model)["ep"]
    assert plain > 0 and full == pytest.approx(1.5 * plain)
