"""Recomputation run for real: the same gradients, one forward more, the activations dropped.

In-process checks per layer kind (every block of the four tiny families): full and selective
recompute give bitwise the gradients of no recompute, with the I / W split too; the backward
GEMMs are the same (I + W = B), the only extra work is the recomputed forward (all of the
block's projections for full, none for selective, which reruns the attention core only); the
forward keeps only the block input (full) or less than without recompute where there is
attention (selective). Then real runs under torchrun (gloo, 2 ranks): plans with full,
selective and mixed per-stage recomputation verify against a single process.

Run: `pytest tests/executor/test_recompute.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers_executor import (
    FAMILIES,
    RECOMPUTE_PATTERNS,
    Ran,
    greedy_programs,
    tiny_family,
    write_plan_file,
)

from adaptis_plan.core import Layout
from adaptis_plan.executor.layers import build_layer, set_recompute
from adaptis_plan.executor.profile import profile_recompute, saved_bytes
from adaptis_plan.executor.runtime import Stage
from adaptis_plan.executor.wgrad import FLOPS, WeightGradStore
from adaptis_plan.spec.model import ModelSpec

M = 4  # micro-batches in the executor runs


def _blocks(model: ModelSpec) -> list[int]:
    return [i for i, layer in enumerate(model.layers) if layer.kind not in ("embedding", "head")]


def _step(model: ModelSpec, index: int, mode: str, split: bool) -> dict:
    """Forward and backward of one block under `mode`: what it kept, the FLOPs by phase, the gradients."""
    layer = set_recompute(build_layer(model, index, seed=0), mode)
    g = torch.Generator().manual_seed(index)
    x = torch.randn(2, 16, model.hidden_size, generator=g).requires_grad_()
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    FLOPS.reset()
    y, kept = saved_bytes(lambda: layer(x), params)
    f_forward = FLOPS.forward
    grad_out = torch.randn(y.shape, generator=g)
    FLOPS.reset()
    store = WeightGradStore()
    if split:
        with store.deferring("k"):
            y.backward(grad_out)
        assert FLOPS.weight_grad == 0, "I ran a weight GEMM"
        store.run("k")
    else:
        y.backward(grad_out)
    return {
        "kept": kept,
        "forward": f_forward,
        "rerun": FLOPS.forward,
        "input_grad": FLOPS.input_grad,
        "weight_grad": FLOPS.weight_grad,
        "grads": [x.grad] + [p.grad for p in layer.parameters()],
        "input_bytes": x.numel() * x.element_size(),
    }


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("split", [False, True], ids=["B", "I+W"])
def test_recompute_changes_memory_and_work_not_gradients(family: str, split: bool) -> None:
    model = tiny_family(family)
    for i in _blocks(model):
        base = _step(model, i, "none", split)
        assert base["rerun"] == 0
        for mode in ("selective", "full"):
            r = _step(model, i, mode, split)
            where = (family, i, model.layers[i].kind, mode)
            for a, b in zip(r["grads"], base["grads"], strict=True):
                assert (a is None and b is None) or torch.equal(a, b), where
            # the backward GEMMs are B's, none twice; what is extra is the recomputed forward
            assert (r["input_grad"], r["weight_grad"]) == (base["input_grad"], base["weight_grad"]), where
            assert r["forward"] == base["forward"], where
            if mode == "full":
                assert r["rerun"] == base["forward"], where  # every projection once more
                assert r["kept"] == r["input_bytes"], where  # only the block input
            else:
                assert r["rerun"] == 0, where  # the attention core has no projection
                if model.layers[i].attention is not None:
                    assert r["kept"] < base["kept"], where
                else:
                    assert r["kept"] == base["kept"], where


def test_embedding_and_head_never_recompute() -> None:
    model = tiny_family("gemma")
    for i in (0, model.num_layers - 1):
        layer = build_layer(model, i, seed=0)
        assert set_recompute(layer, "full") is layer
        assert not getattr(layer, "recompute_full", False)
    with pytest.raises(ValueError, match="recompute mode 'partial'"):
        set_recompute(build_layer(model, 1, seed=0), "partial")


def test_a_stage_recomputes_its_blocks_only_as_the_plan_says() -> None:
    model = tiny_family("llama")
    full = Stage(model, 0, 0, 3, seed=0, recompute="full")
    sel = Stage(model, 1, 3, 6, seed=0, recompute="selective")
    assert [getattr(layer, "recompute_full", False) for layer in full.layers.values()] == [False, True, True]
    cores = [m.recompute_core for layer in sel.layers.values() if hasattr(layer, "parts") for m in _attn(layer)]
    assert cores == [True, True]


def _attn(block: torch.nn.Module) -> list:
    return [p["mixer"] for p in block.parts if hasattr(p["mixer"], "recompute_core")]


def test_profile_reports_what_recompute_keeps() -> None:
    model = tiny_family("nemotron")  # mamba, mlp and attention-only blocks
    seq, h = 16, model.hidden_size
    got = profile_recompute(model, seq_len=seq, micro_batch_size=1, repeats=1, warmup=0)
    assert set(got) == {"selective", "full"}
    assert [e.layers for e in got["full"]] == [[1, 4], [2, 5], [3]]  # every distinct block
    assert [e.layers for e in got["selective"]] == [[3]]  # only the block with attention
    for e in got["full"]:
        assert e.act_bytes == seq * h * 4 and min(e.f_s, e.i_s, e.w_s, e.b_s) > 0
    assert 0 < got["selective"][0].act_bytes


# ---------------------------------------------------------------- real runs (torchrun, gloo, 2 processes)


@pytest.mark.slow
def test_plans_with_full_selective_and_mixed_recompute_verify_under_torchrun(two_ranks: dict[str, Ran]) -> None:
    """Per family, no recompute, full everywhere, selective everywhere and mixed, alternately with the I / W split
    and fused B (`helpers_executor.recompute_plans`), jobs of the session's shared two-process launch."""
    named = [(f, n, two_ranks[f"recompute:{f} {n}"]) for f in FAMILIES for n in RECOMPUTE_PATTERNS]
    results = [ran.result for _, _, ran in named]
    failed = [(f, n, r["worst_param"]) for (f, n, _), r in zip(named, results, strict=True) if not r["verified"]]
    assert not failed
    by = {(f, n): r for (f, n, _), r in zip(named, results, strict=True)}
    for (f, n, j), r in zip(named, results, strict=True):
        assert r["recompute"] == [st.recompute for st in j.plan.stages]
        assert r["loss_diff"] <= 1e-5 * r["reference_loss"] and r["max_abs_grad_diff"] < 1e-6
        # the ranks really recomputed: more forward GEMMs where blocks reran, the same backward GEMMs
        base, flops = by[(f, "none")]["gemm_flops"], r["gemm_flops"]
        assert (flops["input_grad"], flops["weight_grad"]) == (base["input_grad"], base["weight_grad"]), (f, n)
        if n in ("full", "mixed"):
            assert flops["forward"] > base["forward"], (f, n)
        else:
            assert flops["forward"] == base["forward"], (f, n)  # selective reruns no projection


@pytest.mark.slow
def test_adaptis_run_verify_on_a_mixed_recompute_plan(adaptis, tmp_path: Path) -> None:
    model = tiny_family("deepseek")
    layout = Layout(bounds=(0, 2, 4, 6), stage_device=(0, 1, 0), num_devices=2)
    modes = ("selective", "full", "none")
    plan = write_plan_file(tmp_path / "p.json", model, layout, greedy_programs(layout, M, "zb"), M, recompute=modes)
    (tmp_path / "m.json").write_text(model.model_dump_json())
    r = adaptis("run", plan, "--model", tmp_path / "m.json", "--steps", "1", "--warmup", "0", "--verify", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["verified"] is True and out["recompute"] == list(modes)
