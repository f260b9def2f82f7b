"""Tensor parallelism run for real (gloo processes under torchrun) against one process.

PP2 x TP2 (4 ranks): the planner's adaptive tiny-llama plan (split backward: I and W) with
training.tp = 2, the planner's tp = 2 plans with full recomputation and with the head split into
two vocabulary chunks, and a tied-embedding gemma-like model (one kv head: replicated kv with
summed partial gradients; qk-norm; sliding window) on an interleaved zero-bubble plan. TP2 x DP2
(pp 1) with ZeRO 1 and 3, and PP2 x TP2 x DP2 (8 ranks). Every case: the tp-gathered gradients
and parameters after the optimizer step of every (dp rank, tp rank) must equal one process's
step; a tp rank that loses a W must fail the check.

Run: `pytest tests/executor/test_tensorparallel.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers_executor import (
    Ran,
    cpu_plan_file,
    tiny_family,
    with_training,
)

from adaptis_plan.executor.launch import PlanJob, RunOptions, run_plans
from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MlpSpec, ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.usecases import executor_refusal, load_plan_and_model

M = 4


def _plan(tmp: Path, name: str, **kw: object) -> Path:
    return cpu_plan_file(tmp / f"{name}.json", "tiny-llama", num_microbatches=M, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The plans this module's own tests read (the four-process cases are `four_ranks` jobs)."""
    tmp = tmp_path_factory.mktemp("tp")
    return {
        "adaptive": _plan(tmp, "adaptive", pp=2),  # tp 1: the planner splits backward here
        "recompute": _plan(tmp, "recompute", pp=2, tp=2, recompute="full"),
    }


def _ops(plan: PlanFile) -> set[str]:
    return {a.op for d in plan.devices for a in d.actions}


def _check(results: list[dict[str, Any]], world: int) -> None:
    summary = {
        r["plan"]: (r["verified"], r["max_abs_grad_diff"], r["loss_diff"], r["mismatched_params"][:3]) for r in results
    }
    assert all(v[0] for v in summary.values()), summary
    for r in results:
        assert r["world_size"] == world and r["tp"] == 2
        assert r["comm_s"]["tp"] > 0 and all(s["tp_bytes"] > 0 for s in r["comm_step_s"])
        assert r["max_abs_param_diff"] <= 1e-5 * 0.1  # AdamW moves a parameter by ~lr = 1e-3: diff << step


@pytest.mark.slow
def test_pp2_tp2_matches_one_process(four_ranks: dict[str, Ran]) -> None:
    """Split backward, recomputation, a split head and a tied interleaved model on pp 2 x tp 2 against one
    process; in the same launch, a job where global rank 1 (tp rank 1 of pipeline rank 0) drops one W:
    its slices' gathered gradients are wrong, and verification fails."""
    adaptive = four_ranks["tp:adaptive"]
    assert {"I", "W"} <= _ops(adaptive.plan)  # split backward: W's deferred GEMMs on tp shards
    recompute = four_ranks["tp:recompute"].plan
    assert {st.recompute for st in recompute.stages} == {"full"} and recompute.training.tp == 2
    chunks = four_ranks["tp:chunks"].plan
    assert chunks.model.head_chunks == 2 and chunks.training.tp == 2
    gemma = four_ranks["tp:gemma-interleaved"].model
    assert gemma.tie_word_embeddings and gemma.layers[1].attention.num_kv_heads == 1
    lost = four_ranks["tp:adaptive, rank 1 drops a W"].result
    assert lost["verified"] is False and lost["mismatched_params"], lost
    # one step per tp job, beside the dp jobs' two in the same launch (`PlanJob.steps`)
    assert adaptive.result["steps"] == len(adaptive.result["step_times_s"]) == len(adaptive.result["losses"]) == 1
    labels = ["tp:adaptive", "tp:recompute", "tp:adaptive+recompute", "tp:chunks", "tp:gemma-interleaved"]
    ran = [four_ranks[label] for label in labels]
    _check([r.result for r in ran], 4)
    for r in ran[:3]:  # tiny-llama, one head: the bytes are countable
        assert r.result["comm_step_s"][0]["tp_bytes"] == _tp_bytes(r.plan, r.model), r.result["plan"]
    assert ran[2].result["comm_step_s"][0]["tp_bytes"] > ran[0].result["comm_step_s"][0]["tp_bytes"]  # rerun forwards


def _tp_bytes(plan: PlanFile, model: ModelSpec) -> int:
    """The slowest rank's bytes all-reduced by the layers over a step (fp32, no split head, no partial
    gradients): per micro-batch, a decoder block 2 activations forward (attention, MLP), 2 backward (their
    input gradients) and 2 more under full recomputation (the forward rerun); the embedding 1 forward; the
    head 1 backward and 3 fp32 [b, s] tensors forward (max, sum-exp, target logit)."""
    t = plan.training
    tokens = t.micro_batch_size * t.seq_len
    act = tokens * model.hidden_size * 4
    per_device = [0] * t.pp
    for st in plan.stages:
        for i in range(*st.layers):
            kind = model.layers[i].kind
            if kind == "embedding":
                n = act
            elif kind == "head":
                n = act + 3 * tokens * 4
            else:
                n = (6 if st.recompute == "full" else 4) * act
            per_device[st.device] += n * t.num_microbatches
    return max(per_device)


@pytest.mark.slow
def test_tp2_dp2_zero_1_3_match_one_process(four_ranks: dict[str, Ran]) -> None:
    results = [four_ranks[f"tp:zero{z}"].result for z in (1, 3)]
    _check(results, 4)
    for r in results:
        assert r["dp"] == 2 and r["pp"] == 1 and r["comm_s"]["dp"] > 0


@pytest.mark.slow
def test_pp2_tp2_dp2_matches_one_process(plans: dict[str, Path]) -> None:
    plan, model = load_plan_and_model(str(plans["adaptive"]), None)
    (r,) = run_plans(
        [PlanJob(with_training(plan, tp=2, dp=2, zero=2), model, label="pp2-tp2-dp2")],
        RunOptions(steps=1, warmup=0, verify=True, timeout_s=180),
    )
    _check([r], 8)
    assert r["comm_s"]["dp"] > 0


def test_executor_runs_tp_and_refuses_what_it_cannot_split(plans: dict[str, Path]) -> None:
    plan, model = load_plan_and_model(str(plans["recompute"]), None)
    assert executor_refusal(plan, model) is None
    assert executor_refusal(with_training(plan, dp=2, zero=3), model) is None
    emb, head = LayerSpec(kind="embedding"), LayerSpec(kind="head")
    mla = tiny_family("deepseek").layers[1]
    three_heads = LayerSpec(
        kind="decoder",
        attention=AttentionSpec(num_heads=3, num_kv_heads=3, head_dim=8),
        mlp=MlpSpec(intermediate_size=64),
    )
    cases = {
        "moe": (tiny_family("deepseek"), "MoE block"),
        "mamba": (tiny_family("nemotron"), "Mamba-2"),
        "mla": (ModelSpec(name="m", hidden_size=32, vocab_size=128, layers=[emb, mla, head]), "mla attention"),
        "heads": (ModelSpec(name="h", hidden_size=32, vocab_size=128, layers=[emb, three_heads, head]), "3 heads"),
        "vocab": (tiny_family("llama").model_copy(update={"vocab_size": 127}), "127 rows"),
    }
    for name, (m, says) in cases.items():
        why = executor_refusal(plan, m)
        assert why is not None and says in why and "training.tp = 2" in why and "\n" not in why, (name, why)
    for dims, says in (({"cp": 2}, "training.cp = 2"), ({"dp": 2, "ep": 2}, "ep = 2")):
        why = executor_refusal(with_training(plan, **dims), model)
        assert why is not None and says in why and "\n" not in why, why


@pytest.mark.unit
@pytest.mark.parametrize(
    ("heads", "kv", "extras"), [(4, 4, False), (4, 2, False), (4, 1, False), (6, 3, False), (4, 2, True)]
)
def test_tp_slices_sum_to_the_whole_layer(heads: int, kv: int, extras: bool) -> None:
    """Without a group the collectives are identities, so each tp rank's slice of a decoder block's
    attention and MLP gives its partial output: the ranks' partials must sum to the whole mixer's output,
    and the slices must tile the whole weights (kv heads split when tp divides them, else replicated with partial
    gradients). `extras`: q/k/v biases, qk-norm and ALiBi slopes (cut by heads) too."""
    import torch

    from adaptis_plan.executor.layers import build_layer
    from adaptis_plan.executor.tensorparallel import PARTIAL, shard_layer

    base = tiny_family("llama")
    dec = base.layers[1].model_copy(
        update={
            "attention": base.layers[1].attention.model_copy(
                update={"num_heads": heads, "num_kv_heads": kv, "bias": extras, "qk_norm": extras}
            )
        }
    )
    model = base.model_copy(
        update={"layers": [base.layers[0], dec, base.layers[-1]], "position_encoding": "alibi" if extras else None}
    )
    x = torch.randn(2, 16, model.hidden_size, generator=torch.Generator().manual_seed(0))
    whole = build_layer(model, 1, seed=3)
    parts = [build_layer(model, 1, seed=3) for _ in range(2)]
    layouts = [shard_layer(p, r, 2, None) for r, p in enumerate(parts)]
    full = dict(whole.named_parameters())
    for name, entry in layouts[0].items():
        mine = [dict(p.named_parameters())[name] for p in parts]
        if entry in (0, 1):
            assert torch.equal(torch.cat(mine, dim=entry), full[name]), name
        else:
            assert all(torch.equal(m, full[name]) for m in mine), name
    kv_entry = layouts[0]["parts.0.mixer.k_proj.weight"]
    assert kv_entry == (0 if kv % 2 == 0 else PARTIAL)
    with torch.no_grad():
        for i, part in enumerate(whole.parts):
            h = part["norm"](x)
            got = sum(p.parts[i]["mixer"](h) for p in parts)
            torch.testing.assert_close(got, part["mixer"](h), rtol=1e-5, atol=1e-6)
