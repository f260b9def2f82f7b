"""torchtitan's per-op selective activation checkpointing (`--recompute op`, adaptis_plan/cost/recompute.py):
what a block keeps (its input, every odd-numbered matmul's output, the flash attention output and
log-sum-exp, the tensor-parallel reduce-scatters' outputs) and what its backward reruns (the rest of
its forward), worked by hand from the policy at pytorch/torchtitan 9dec370ad."""

from __future__ import annotations

import pytest
from helpers_common import EMB, HEAD
from helpers_common import train_config as _train

from adaptis_plan.cost.analytic import layer_work, op_seconds
from adaptis_plan.cost.recompute import measured_recompute, recompute_work, strongest_per_stage
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec

H200 = load_hardware("h200")
H200_DEV = H200.device_types["h200-sxm-141gb"]
# Llama 3 8B's block: GQA 32 query heads, 8 KV heads of 128, SwiGLU 14336
H, NH, NKV, D, FFN = 4096, 32, 8, 128, 14336
S = 4096


def llama3_block() -> tuple[ModelSpec, LayerSpec]:
    block = LayerSpec(
        kind="decoder",
        attention=AttentionSpec(num_heads=NH, num_kv_heads=NKV, head_dim=D),
        mlp=MlpSpec(activation="swiglu", intermediate_size=FFN),
    )
    return ModelSpec(name="llama3-8b-like", hidden_size=H, vocab_size=128256, layers=[EMB, block, HEAD]), block


def _work(model: ModelSpec, block: LayerSpec, mode: str, **kw: object):  # noqa: ANN202
    training = _train(S, **kw)
    return recompute_work(layer_work(model, block, training), block, model, training, mode)


def test_a_llama_block_keeps_its_input_wq_wv_w1_w2_and_the_flash_outputs() -> None:
    model, block = llama3_block()
    op = _work(model, block, "op")
    # mm order wq, wk, wv, wo, w1, w3, w2: the 1st, 3rd, 5th and 7th are saved
    per_token = (H + NH * D + NKV * D + NH * D + FFN + H) * 2 + NH * 4  # x, wq, wv, SDPA out, w1, w2; fp32 lse
    assert op.act_bytes == pytest.approx(S * per_token)
    plain = _work(model, block, "none")
    assert op.act_w_bytes == plain.act_w_bytes  # the rerun rebuilds the weight GEMMs' inputs for W
    # about 46% of what the block keeps without recomputation, far less than selective's
    assert op.act_bytes < _work(model, block, "selective").act_bytes
    assert _work(model, block, "full").act_bytes < op.act_bytes < 0.5 * plain.act_bytes


def test_a_llama_block_reruns_wk_wo_w3_and_the_memory_bound_ops_not_the_attention_core() -> None:
    model, block = llama3_block()
    plain, op = _work(model, block, "none"), _work(model, block, "op")
    rerun = op.recompute_i
    assert rerun.flops == pytest.approx(2.0 * S * H * (NKV * D + NH * D + FFN))  # wk, wo, w3
    assert all(k.kind == "gemm" for k in rerun.kernels) and len(rerun.kernels) == 3
    assert rerun.mem_bytes == plain.f.mem_bytes and rerun.mem_launches == plain.f.mem_launches
    f, i, w = op_seconds(plain, H200_DEV)
    f2, i2, w2 = op_seconds(op, H200_DEV)
    assert (f2, w2) == (f, w)
    # costs more than selective (the attention core alone), less than full (the whole forward)
    i_sel = op_seconds(_work(model, block, "selective"), H200_DEV)[1]
    i_full = op_seconds(_work(model, block, "full"), H200_DEV)[1]
    assert i < i_sel < i2 < i_full


def test_tensor_parallel_blocks_keep_the_reduce_scatters_and_rerun_the_all_gathers() -> None:
    model, block = llama3_block()
    t = 2
    op = _work(model, block, "op", tp=t)
    # rank's shards: x, wq, wv, the SDPA output and lse, w1 (column-parallel), plus w2's whole partial
    # sum (row-parallel, before its reduce-scatter) and the two reduce-scatters' outputs
    per_token = (H + NH * D + NKV * D + NH * D + FFN) * 2 / t + NH * 4 / t + H * 2 + 2 * H * 2 / t
    assert op.act_bytes == pytest.approx(S * per_token)
    kinds = sorted(c.kind for c in op.recompute_i.collectives)
    assert kinds == ["all_gather", "all_gather"]  # the sequence-parallel all-gathers run again


@pytest.mark.parametrize("attention", ["cudnn", "unfused"])
def test_attention_kernels_not_in_the_save_list_are_rerun(attention: str) -> None:
    """`_save_list` holds the flash and memory-efficient SDPA ops only: cuDNN's SDPA and the math
    path (the unfused core) are recomputed, and nothing of theirs is kept."""
    model, block = llama3_block()
    flash, other = _work(model, block, "op"), _work(model, block, "op", attention=attention)
    assert any(k.kind == "attention" for k in other.recompute_i.kernels)
    assert not any(k.kind == "attention" for k in flash.recompute_i.kernels)
    assert other.act_bytes == pytest.approx(flash.act_bytes - S * (NH * D * 2 + NH * 4))


def test_mamba_keeps_in_proj_and_reruns_the_scan_and_out_proj() -> None:
    mamba = LayerSpec(kind="mamba", mamba=MambaSpec(num_heads=32, head_dim=64, state_size=128, num_groups=8))
    model = ModelSpec(name="mamba", hidden_size=1024, vocab_size=1000, layers=[EMB, mamba, HEAD])
    plain, op = _work(model, mamba, "none"), _work(model, mamba, "op")
    di, zxbcdt = 32 * 64, 2 * 32 * 64 + 2 * 8 * 128 + 32
    assert op.act_bytes == pytest.approx(S * (1024 + zxbcdt) * 2)  # x and in_proj's output
    assert sorted(k.kind for k in op.recompute_i.kernels) == ["gemm", "scan"]
    assert op.recompute_i.flops == pytest.approx(2.0 * S * 1024 * di + plain.f.kernels[-1].flops)


def test_routed_experts_alternate_per_expert_as_a_loop_over_them_runs() -> None:
    """Router (mm 1, saved), then expert e's w1, w3, w2: with 2 experts the mms are router, w1, w3, w2,
    w1, w3, w2 -> saved router, w3 of expert 0, w1 and w2 of expert 1."""
    moe = LayerSpec(
        kind="moe_mlp",
        moe=MoeSpec(num_experts=2, top_k=1, expert_intermediate_size=512, activation="swiglu"),
    )
    model = ModelSpec(name="moe", hidden_size=256, vocab_size=1000, layers=[EMB, moe, HEAD])
    op = _work(model, moe, "op")
    per_expert = S / 2  # balanced routing, top-1 over 2 experts
    saved = S * 2 + per_expert * 512 + per_expert * 512 + per_expert * 256  # router, w3_0, w1_1, w2_1
    assert op.act_bytes == pytest.approx(S * 256 * 2 + saved * 2)
    assert len([k for k in op.recompute_i.kernels if k.kind == "gemm"]) == 3  # w1_0, w2_0, w3_1


def test_op_ranks_between_selective_and_full_within_a_stage() -> None:
    kinds = ["embedding", "decoder", "decoder", "decoder", "head"]
    assert strongest_per_stage([0, 3, 5], ["none", "op", "selective", "full", "none"], kinds) == (
        ["op"] * 3 + ["full"] * 2
    )
    # the embedding and the head never recompute
    model, _ = llama3_block()
    for layer in (model.layers[0], model.layers[-1]):
        work = layer_work(model, layer, _train(S))
        assert recompute_work(work, layer, model, _train(S), "op") is work


def test_a_measured_layer_drops_what_the_analytic_op_stops_keeping() -> None:
    model, block = llama3_block()
    plain, op = _work(model, block, "none"), _work(model, block, "op")
    dropped = plain.act_bytes - op.act_bytes
    i_s, act, act_w = measured_recompute(plain, op, 0.3, 1.0, 2.0, 2 * plain.act_bytes, 4e8)
    assert (i_s, act, act_w) == (pytest.approx(2.3), pytest.approx(2 * plain.act_bytes - dropped), 4e8)
    # a measurement below the analytic drop keeps at least what the analytic op keeps (or all it measured)
    assert measured_recompute(plain, op, 0.3, 1.0, 2.0, dropped, 4e8)[1] == pytest.approx(op.act_bytes)
    assert measured_recompute(plain, op, 0.3, 1.0, 2.0, 1e6, 4e8)[1] == 1e6
