"""The communication of the whole configuration (`cost.comm`), context and expert parallelism and the
unfused and cuDNN attention cores in `cost.analytic`, and the whole step (`judge.training_step`)."""

from __future__ import annotations

import pytest

from adaptis_plan.cost.analytic import Collective, collective_seconds, layer_work, op_seconds
from adaptis_plan.cost.comm import placement, step_extras
from adaptis_plan.cost.recompute import recompute_work
from adaptis_plan.inputs.hardware import cluster, load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.spec.training import TrainingConfig

pytestmark = pytest.mark.unit


def _train(**kw) -> TrainingConfig:
    base = {"num_microbatches": 8, "pp": 4, "seq_len": 4096}
    return TrainingConfig(**(base | kw))


def test_groups_inside_a_node_use_nvlink_and_spanning_groups_share_the_nics() -> None:
    hw = cluster(load_hardware("h100"), 256)
    nvlink, nic = hw.intra_node.bandwidth_gbps * 1e9, hw.inter_node.bandwidth_gbps * 1e9
    place = placement(hw, _train(tp=8, dp=8))
    assert place.tp.in_node and place.tp.bus_bps == nvlink
    # dp ranks sit 8 apart: one per node, each on its own NIC
    assert not place.dp.in_node and place.dp.per_node == 1 and place.dp.bus_bps == nic
    place = placement(hw, _train(tp=2, dp=16))
    # 4 of the 16 dp ranks per node: 4 NICs at once, still below NVLink
    assert place.dp.per_node == 4 and place.dp.bus_bps == pytest.approx(4 * nic)
    place = placement(hw, _train(tp=1, dp=4))
    assert place.dp.in_node and place.dp.bus_bps == nvlink


def test_tensor_parallel_ring_matches_the_intra_node_collective() -> None:
    hw = load_hardware("h200")
    place = placement(hw, _train(tp=4))
    c = Collective("all_gather", 3.0e7)
    assert place.tp.seconds(c.kind, c.nbytes) == collective_seconds(c, 4, hw.intra_node)
    ar = Collective("all_reduce", 3.0e7)
    assert place.tp.seconds(ar.kind, ar.nbytes) == pytest.approx(2 * place.tp.seconds("all_gather", 3.0e7))


def test_zero_stages_price_the_gradient_sync_as_their_runtimes_do() -> None:
    hw = cluster(load_hardware("h100"), 64)
    hbm = 3.35e12
    got = {}
    for zero in (0, 1, 2, 3):
        t = _train(tp=8, dp=8, pp=1, zero=zero)
        got[zero] = step_extras(1e9, 0.0, t, placement(hw, t), hbm)
    # ZeRO 0 all-reduces fp32 gradients (2 passes); ZeRO 1 reduce-scatters them + gathers bf16 weights
    assert got[0].grad_sync_s == pytest.approx(2 * got[1].grad_sync_s, rel=1e-6)
    assert got[1].param_gather_s == pytest.approx(got[1].grad_sync_s / 2, rel=1e-3)
    # ZeRO 2 reduce-scatters every micro-batch
    assert got[2].grad_sync_s == pytest.approx(8 * got[1].grad_sync_s)
    # ZeRO 3's collectives run inside the ops; the optimizer shards from ZeRO 1 on
    assert got[3].grad_sync_s == 0.0 and got[3].param_gather_s == 0.0
    assert got[1].optimizer_s == pytest.approx(got[0].optimizer_s / 8)


def test_context_parallelism_splits_tokens_and_overlaps_the_kv_exchange() -> None:
    model = load_model("llama-2-7b")
    block = model.layers[1]
    hw = cluster(load_hardware("h100"), 16)
    dev = next(iter(hw.device_types.values()))
    one, two = _train(seq_len=8192, dp=4), _train(seq_len=8192, dp=2, cp=2)
    w1, w2 = layer_work(model, block, one), layer_work(model, block, two)
    assert w2.f.flops == pytest.approx(w1.f.flops / 2, rel=1e-9)
    assert w2.act_bytes == pytest.approx(w1.act_bytes / 2, rel=1e-9)
    assert w2.static_bytes == pytest.approx(w1.static_bytes)  # optimizer shards over dp x cp = 4 both
    kv = [c for c in w2.f.collectives if c.group == "cp"]
    assert kv and all(c.overlap for c in kv)
    f1 = op_seconds(w1, dev, hw.intra_node, placement(hw, one))[0]
    f2 = op_seconds(w2, dev, hw.intra_node, placement(hw, two))[0]
    assert f2 == pytest.approx(f1 / 2, rel=0.05)  # the exchange hides under the attention core


def test_expert_parallelism_shards_experts_and_adds_all_to_alls() -> None:
    model = load_model("deepseek-v2-lite")
    moe = next(layer for layer in model.layers if layer.moe is not None)
    plain, sharded = _train(dp=8), _train(dp=8, ep=8)
    w1, w8 = layer_work(model, moe, plain), layer_work(model, moe, sharded)
    assert w8.expert_params == pytest.approx(w1.expert_params / 8)
    assert w8.dense_params == w1.dense_params
    assert w8.f.flops == pytest.approx(w1.f.flops, rel=1e-9)  # same routed tokens per rank
    assert [c.kind for c in w8.f.collectives if c.group == "ep"] == ["all_to_all", "all_to_all"]
    assert w8.static_bytes < w1.static_bytes


def test_unfused_attention_moves_and_keeps_the_scores() -> None:
    model = load_model("llama-2-7b")
    block = model.layers[1]
    flash, unfused = _train(seq_len=2048), _train(seq_len=2048, attention="unfused")
    dev = next(iter(load_hardware("a100").device_types.values()))
    wf, wu = layer_work(model, block, flash), layer_work(model, block, unfused)
    scores = 2048 * 2048 * block.attention.num_heads
    assert wu.act_bytes - wf.act_bytes == pytest.approx(5 * scores - 2048 * block.attention.num_heads * 4)
    assert sum(op_seconds(wu, dev)) > sum(op_seconds(wf, dev))
    selective = recompute_work(wu, block, model, unfused, "selective")
    assert wu.act_bytes - selective.act_bytes == pytest.approx(5 * scores)


def test_cudnn_attention_runs_the_same_core_faster_where_the_device_measured_it() -> None:
    """`--attention cudnn`: the flash core's work and memory, its kernel time divided by the device's
    cudnn_attention_speedup (Hopper profiles: 1.6, FlashAttention-3's side-by-side figures; the A100 profile
    has no measurement: no faster); the GEMMs and everything else as flash."""
    from adaptis_plan.cost.analytic import kernel_seconds

    model = load_model("llama-2-7b")
    block = model.layers[1]
    flash, cudnn = layer_work(model, block, _train()), layer_work(model, block, _train(attention="cudnn"))
    assert cudnn.act_bytes == flash.act_bytes and cudnn.f.flops == flash.f.flops
    for name, speedup in (("h100", 1.6), ("h200", 1.6), ("a100", 1.0)):
        dev = next(iter(load_hardware(name).device_types.values()))
        assert dev.cudnn_attention_speedup == speedup
        for op in ("F", "I"):
            kf, kc = flash.op(op).kernels, cudnn.op(op).kernels
            for a, b in zip(kf, kc, strict=True):
                ratio = kernel_seconds(a, dev) / kernel_seconds(b, dev)
                assert ratio == pytest.approx(speedup if a.kind == "attention" else 1.0, rel=1e-9), (name, a.what)
        assert sum(op_seconds(cudnn, dev)) <= sum(op_seconds(flash, dev))


def test_the_training_step_adds_what_the_pipeline_does_not_hide() -> None:
    from adaptis_plan.cost.source import CostTables
    from adaptis_plan.judge.training_step import device_extras, training_step
    from adaptis_plan.search.generator import classic_candidate

    model = load_model("llama-2-7b")
    hw = cluster(load_hardware("h100"), 64)
    steps = {}
    for overlap in (True, False):
        training = _train(tp=8, pp=2, dp=4, num_microbatches=4, dp_overlap=overlap, zero=1)
        costs = CostTables(hw, training).table(model)
        cand = classic_candidate(costs, 4, "1F1B")
        step = training_step(cand.layout, cand.programs, cand.result, model, training, hw, costs.device_names)
        extras = device_extras(cand.layout, model, training, hw, costs.device_names)
        assert step.pipeline_step_time_s == cand.result.step_time_s
        assert step.grad_sync_s == pytest.approx(max(x.grad_sync_s for x in extras))
        steps[overlap] = step
    hidden, exposed = steps[True], steps[False]
    # without overlap every rank's whole sync and gather follow its last action
    assert exposed.grad_sync_exposed_s == pytest.approx(exposed.grad_sync_s)
    assert exposed.step_time_s > hidden.step_time_s >= hidden.pipeline_step_time_s
    assert hidden.grad_sync_exposed_s < hidden.grad_sync_s


def test_a_layer_s_share_of_the_sync_drops_only_its_own_groups_latency() -> None:
    """Without overlap, each layer carries its sync and parameter gather less the latency of the rings
    its parameters sync over (paid once per rank, not per layer): a dense layer of a MoE model keeps
    every byte of its data-parallel sync and gather, and the shares of a rank's layers never add up to
    more than its whole sync, gather and optimizer step."""
    from adaptis_plan.cost.table import layer_param_shares
    from adaptis_plan.judge.training_step import layer_bound_parts

    model = load_model("deepseek-v2-lite")
    hw = cluster(load_hardware("h100"), 64)
    training = _train(tp=1, pp=4, dp=16, ep=8, zero=1, dp_overlap=False)
    place = placement(hw, training)
    device = next(iter(hw.device_types))
    hbm = hw.device_types[device].hbm_bandwidth_gbps * 1e9 * hw.device_types[device].memory_efficiency
    shares, _ = layer_bound_parts(model, training, hw, device)
    dense, expert = layer_param_shares(model, training)
    n = next(i for i, layer in enumerate(model.layers) if layer.kind == "decoder" and layer.moe is None)
    x = step_extras(float(dense[n]), float(expert[n]), training, place, hbm)
    assert expert[n] == 0 and place.edp.size > 1
    # one reduce-scatter and one all-gather ring over the dense group, each of dp - 1 latencies
    rings = 2 * (place.dp.size - 1) * place.dp.latency_s
    assert shares[n] == pytest.approx(x.optimizer_s + x.grad_sync_s + x.param_gather_s - rings)
    whole = step_extras(float(dense.sum()), float(expert.sum()), training, place, hbm)
    assert shares.sum() <= whole.optimizer_s + whole.grad_sync_s + whole.param_gather_s
