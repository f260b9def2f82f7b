"""The torch executor: layers, the I/W split, lowering, and real runs under torchrun (gloo, 2 CPU processes).

Run: `pytest tests/test_executor.py` (about a minute on 2 cores; nothing is skipped).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from helpers_executor import (
    FAMILIES,
    PLAN_SHAPES,
    even_bounds,
    greedy_programs,
    layout_for,
    tiny_family,
    write_plan_file,
)

from adaptis_plan.core import Action, Layout
from adaptis_plan.cost.params import layer_params
from adaptis_plan.errors import AdaptisError, DeadlockError, InputError
from adaptis_plan.executor.launch import PlanJob, run_plan, run_plans
from adaptis_plan.executor.layers import HeadChunkLayer, build_layer, build_model, own_param_count, ssd_scan
from adaptis_plan.executor.lowering import lower
from adaptis_plan.executor.profile import distinct_layers, measure_link, profile_model
from adaptis_plan.executor.verify import compare
from adaptis_plan.executor.wgrad import FLOPS, WeightGradStore
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.planfile.io import check_model_matches, read_plan
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec

M = 4  # micro-batches in the executor runs


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread, like the workers: on a busy 2-core machine OpenMP spinning makes tiny ops 100x slower."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


# ---------------------------------------------------------------- layers


def _all_kinds_model(norm: str, tie: bool) -> ModelSpec:
    gqa = AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True, bias=True, sliding_window=5)
    mla_q = AttentionSpec(
        type="mla", num_heads=4, num_kv_heads=4, head_dim=8, q_lora_rank=16, kv_lora_rank=16,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
    )  # fmt: skip
    mla = mla_q.model_copy(update={"q_lora_rank": None})
    moe = MoeSpec(num_experts=4, top_k=2, expert_intermediate_size=16, num_shared_experts=2, shared_intermediate_size=8)
    moe_plain = MoeSpec(num_experts=3, top_k=1, expert_intermediate_size=8, activation="gelu")
    mamba = MambaSpec(num_heads=4, head_dim=8, state_size=8, num_groups=2, conv_kernel=4)
    layers = [
        LayerSpec(kind="embedding"),
        LayerSpec(kind="decoder", attention=gqa, mlp=MlpSpec(activation="geglu", intermediate_size=64)),
        LayerSpec(kind="moe", attention=mla_q, moe=moe),
        LayerSpec(kind="attention", attention=mla),
        LayerSpec(kind="mlp", mlp=MlpSpec(activation="relu2", intermediate_size=48)),
        LayerSpec(kind="moe_mlp", moe=moe_plain),
        LayerSpec(kind="mamba", mamba=mamba),
        LayerSpec(kind="mamba_moe", mamba=mamba, moe=moe),
        LayerSpec(kind="mamba_mlp", mamba=mamba, mlp=MlpSpec(activation="gelu", intermediate_size=40)),
        LayerSpec(kind="head"),
    ]
    return ModelSpec(
        name="all-kinds", hidden_size=32, vocab_size=100, norm=norm, tie_word_embeddings=tie, layers=layers
    )


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("tie", [False, True])
def test_layer_param_counts_match_params_py(norm: str, tie: bool) -> None:
    model = _all_kinds_model(norm, tie)
    for i, spec in enumerate(model.layers):
        assert own_param_count(build_layer(model, i, seed=3)) == layer_params(model, spec).total, (i, spec.kind)
    if not tie:  # a head split into vocabulary chunks: the norm in chunk 0, each chunk its slice
        split = split_head(model, 3)
        for i in range(split.num_layers - 3, split.num_layers):
            layer = build_layer(split, i, seed=3)
            assert isinstance(layer, HeadChunkLayer)
            assert own_param_count(layer) == layer_params(split, split.layers[i]).total, i


def test_every_kind_runs_forward_and_backward() -> None:
    model = _all_kinds_model("rmsnorm", True)
    layers = build_model(model, seed=0)
    x = torch.randint(0, model.vocab_size, (2, 12))
    labels = torch.randint(0, model.vocab_size, (2, 12))
    for i in range(model.num_layers - 1):
        x = layers[str(i)](x)
    loss = layers[str(model.num_layers - 1)](x, labels)
    loss.backward()
    assert torch.isfinite(loss)
    assert layers["0"].weight is layers[str(model.num_layers - 1)].lm_weight  # tied in the single-process model
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all() for n, p in layers.named_parameters() if "experts" not in n
    )


def test_layers_are_built_from_seed_and_index_alone() -> None:
    model = tiny_family("deepseek")
    a, b = build_layer(model, 2, seed=5), build_layer(model, 2, seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    c = build_layer(model, 3, seed=5)  # same spec, another index: other weights
    assert not torch.equal(c.parts[0]["mixer"].kv_a_proj.weight, a.parts[0]["mixer"].kv_a_proj.weight)
    tied = tiny_family("gemma")
    assert torch.equal(build_layer(tied, 0, seed=1).weight, build_layer(tied, tied.num_layers - 1, seed=1).lm_weight)


def test_ssd_scan_matches_the_sequential_recurrence() -> None:
    g = torch.Generator().manual_seed(0)
    b, s, h, p, grp, n = 2, 150, 4, 3, 2, 5  # 150 tokens: three chunks, the last one partial
    x = torch.randn(b, s, h, p, generator=g, dtype=torch.float64)
    dt = torch.rand(b, s, h, generator=g, dtype=torch.float64) * 0.5
    a = -torch.rand(h, generator=g, dtype=torch.float64) * 2
    bm = torch.randn(b, s, grp, n, generator=g, dtype=torch.float64)
    cm = torch.randn(b, s, grp, n, generator=g, dtype=torch.float64)
    state = torch.zeros(b, h, p, n, dtype=torch.float64)
    bh, ch = bm.repeat_interleave(h // grp, 2), cm.repeat_interleave(h // grp, 2)
    ys = []
    for t in range(s):
        state = (
            state * torch.exp(dt[:, t] * a)[:, :, None, None]
            + (dt[:, t, :, None] * x[:, t])[..., None] * bh[:, t, :, None, :]
        )
        ys.append(torch.einsum("bhpn,bhn->bhp", state, ch[:, t]))
    torch.testing.assert_close(ssd_scan(x, dt, a, bm, cm), torch.stack(ys, 1), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- I / W split


def _grads(model: ModelSpec, split: bool) -> tuple[dict[str, torch.Tensor], int, int, int]:
    layers = build_model(model, seed=0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.vocab_size, (2, 16), generator=g)
    labels = torch.randint(0, model.vocab_size, (2, 16), generator=g)
    x = ids
    for i in range(model.num_layers - 1):
        x = layers[str(i)](x)
    loss = layers[str(model.num_layers - 1)](x, labels)
    FLOPS.reset()
    if split:
        store = WeightGradStore()
        with store.deferring("k"):
            loss.backward()
        i_input, i_weight = FLOPS.input_grad, FLOPS.weight_grad
        assert store.pending_bytes("k") > 0
        store.run("k")
        w_weight = FLOPS.weight_grad - i_weight
        assert i_weight == 0, "I ran a weight GEMM"
    else:
        loss.backward()
        i_input, w_weight = FLOPS.input_grad, FLOPS.weight_grad
    grads = {n: p.grad for n, p in layers.named_parameters() if p.grad is not None}
    return grads, i_input, w_weight, FLOPS.input_grad


@pytest.mark.parametrize("family", FAMILIES)
def test_i_plus_w_equals_b_bitwise_and_in_flops(family: str) -> None:
    model = tiny_family(family)
    fused, b_in, b_w, _ = _grads(model, split=False)
    split, i_in, w_w, total_in = _grads(model, split=True)
    assert fused.keys() == split.keys()
    for name in fused:
        assert torch.equal(fused[name], split[name]), name
    assert (i_in, w_w) == (b_in, b_w)  # the same GEMMs, none repeated
    assert total_in == i_in  # W ran no input-gradient GEMM


def test_i_plus_w_time_is_close_to_b() -> None:
    h = 256
    dec = LayerSpec(
        kind="decoder",
        attention=AttentionSpec(num_heads=8, num_kv_heads=4, head_dim=32),
        mlp=MlpSpec(intermediate_size=4 * h),
    )
    model = ModelSpec(
        name="timing", hidden_size=h, vocab_size=512, layers=[LayerSpec(kind="embedding"), dec, LayerSpec(kind="head")]
    )
    prof = profile_model(model, seq_len=256, micro_batch_size=1, repeats=7, warmup=2)
    block = next(e for e in prof.entries if e.kind == "decoder")
    ratio = (block.i_s + block.w_s) / block.b_s
    # Measured ~0.95-1.05 here; the margin keeps a loaded CI machine from failing it.
    assert ratio < 1.5, f"I + W took {ratio:.2f}x of fused B"


# ---------------------------------------------------------------- lowering


def test_lowering_lists_only_cross_device_transfers_in_a_consistent_order() -> None:
    layout = Layout(bounds=(0, 1, 2, 3, 4, 5), stage_device=(0, 0, 1, 0, 1), num_devices=2)
    low = lower(layout, greedy_programs(layout, 3, "random", seed=4), 3)
    kinds = {(t.kind, t.stage) for t in low.transfers}
    assert ("act", 0) not in kinds and ("grad", 1) not in kinds  # stages 0 and 1 share device 0
    assert {("act", 1), ("act", 2), ("act", 3), ("grad", 2), ("grad", 3), ("grad", 4)} == kinds
    assert len({t.tag for t in low.transfers}) == len(low.transfers)
    q0, q1 = low.peer_queues(0)[1], low.peer_queues(1)[0]
    assert [t.seq for t in q0] == [t.seq for t in q1] == sorted(t.seq for t in q0)


def test_lowering_refuses_a_deadlocking_order() -> None:
    layout = Layout(bounds=(0, 3, 6), stage_device=(0, 1), num_devices=2)
    programs = [
        [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
        [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)],
    ]
    with pytest.raises(DeadlockError, match="circular wait") as e:
        lower(layout, programs, 2)
    assert "[0B0]" in e.value.grid and "[1F1]" in e.value.grid


# ---------------------------------------------------------------- real runs (torchrun, gloo, 2 processes)


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, ModelSpec]]:
    d = tmp_path_factory.mktemp("plans")
    out = {}
    for fam in FAMILIES:
        model = tiny_family(fam)
        for name, stage_device, style in PLAN_SHAPES:
            layout = layout_for(model, name, stage_device)
            programs = greedy_programs(layout, M, style, seed=1)
            out[(fam, name)] = (
                write_plan_file(d / f"{fam}-{name}.json", model, layout, programs, M, predicted_s=0.05),
                model,
            )
    return out


def test_pipelined_step_matches_single_process_for_every_family_and_plan_shape(plans: dict, tmp_path: Path) -> None:
    keys = sorted(plans)
    trace = tmp_path / "trace.json"
    jobs = [PlanJob(plans[k][0], plans[k][1], trace if k == ("gemma", "irregular") else None) for k in keys]
    results = run_plans(jobs, steps=1, warmup=0, verify=True)
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
    events = json.loads(trace.read_text())["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {0, 1}
    assert {e["args"]["op"] for e in xs} <= {"F", "B", "I", "W"} and all(e["dur"] >= 0 for e in xs)
    assert sum(e["args"]["op"] == "F" for e in xs) == 5 * M  # 5 stages x M micro-batches


@pytest.mark.parametrize("p2p_order", ["peer", "global"])
def test_three_ranks_with_crossing_placements_in_both_p2p_orders(p2p_order: str, tmp_path: Path) -> None:
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
        jobs.append(PlanJob(write_plan_file(tmp_path / f"{fam}.json", model, layout, programs, 3), model))
    results = run_plans(jobs, steps=1, warmup=0, verify=True, p2p_order=p2p_order)
    assert [r["verified"] for r in results] == [True] * len(cases), [r["mismatched_params"][:3] for r in results]


def test_verification_catches_a_wrong_gradient(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("deepseek", "interleaved-zb")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "skipw:1")  # rank 1 drops one micro-batch's weight gradients
    r = run_plan(path, model, steps=1, warmup=0, verify=True)
    assert r["verified"] is False and r["mismatched_params"]


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


def test_run_reports_median_step_time_and_trains(plans: dict, tmp_path: Path) -> None:
    path, model = plans[("gemma", "gpipe")]  # tied embeddings on two different devices
    r = run_plan(path, model, steps=3, warmup=1, optimizer="sgd", lr=0.5, trace_path=tmp_path / "t.json")
    assert r["steps"] == 3 and len(r["step_times_s"]) == 3
    assert r["measured_step_time_s"] == sorted(r["step_times_s"])[1]
    assert r["predicted_step_time_s"] == 0.05 and "verified" not in r
    assert len(r["losses"]) == 4 and r["losses"][0] != r["losses"][1]
    assert (tmp_path / "t.json").is_file()


def test_killed_rank_ends_the_run_quickly_naming_it(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("llama", "1f1b-unequal")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "exit:1:1")  # rank 1 calls os._exit(1) during step 1
    t0 = time.monotonic()
    with pytest.raises(AdaptisError, match=r"^rank 1 failed: the process died") as e:
        run_plan(path, model, steps=2, warmup=1, timeout_s=60)
    assert time.monotonic() - t0 < 20
    assert not isinstance(e.value, InputError)


def test_hung_rank_times_out_and_is_named(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("llama", "gpipe")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "hang:1:0")  # rank 1 sleeps after its first action
    t0 = time.monotonic()
    with pytest.raises(AdaptisError, match=r"^rank 1 failed: .*hung.*rank 0 saw: .*Timed out"):
        run_plan(path, model, steps=1, warmup=0, timeout_s=3)
    assert time.monotonic() - t0 < 20


def test_rank_error_is_reported_with_its_last_line(plans: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    path, model = plans[("nemotron", "v-shape")]
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "raise:0:0")
    with pytest.raises(AdaptisError, match=r"^rank 0 failed: RuntimeError: injected failure on rank 0"):
        run_plan(path, model, steps=1, warmup=0)


def test_plan_for_another_model_is_refused(plans: dict) -> None:
    path, _ = plans[("llama", "gpipe")]
    with pytest.raises(InputError, match="fingerprint"):
        run_plan(path, tiny_family("nemotron"))


def test_deadlocking_plan_is_refused_before_launch(tmp_path: Path) -> None:
    model = tiny_family("llama")
    layout = Layout(bounds=(0, 3, 6), stage_device=(0, 1), num_devices=2)
    programs = [
        [Action(0, "F", 0), Action(0, "B", 1), Action(0, "F", 1), Action(0, "B", 0)],
        [Action(1, "F", 0), Action(1, "F", 1), Action(1, "B", 0), Action(1, "B", 1)],
    ]
    path = write_plan_file(tmp_path / "dead.json", model, layout, programs, 2)
    t0 = time.monotonic()
    with pytest.raises(InputError, match="dead.json"):
        run_plan(path, model)
    assert time.monotonic() - t0 < 5


# ---------------------------------------------------------------- head split into vocabulary chunks


def _untied_gemma() -> ModelSpec:
    g = tiny_family("gemma")
    return ModelSpec.model_validate({**g.model_dump(), "name": "tiny-gemma-untied", "tie_word_embeddings": False})


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("k", [2, 3])
def test_head_chunks_reproduce_the_unsplit_head_loss_and_gradients(k: int) -> None:
    model = _untied_gemma()
    h, v = model.hidden_size, model.vocab_size
    head = build_layer(model, model.num_layers - 1, seed=0)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        head.norm.weight.add_(0.1 * torch.randn(h, generator=g))
        head.lm_weight.mul_(20.0)  # peaked logits, so a wrong slice or label offset shows
    x = torch.randn(2, 16, h, generator=g)
    labels = torch.randint(0, v, (2, 16), generator=g)
    split = split_head(model, k)
    first = split.num_layers - k
    chunks = [build_layer(split, first + c, seed=0) for c in range(k)]
    assert [(ch.lo, ch.hi) for ch in chunks] == [layer.vocab_range for layer in split.layers[first:]]
    edges = [e for ch in chunks for e in (ch.lo, ch.hi - 1)]  # labels on every chunk's first and last entry
    labels[0, : len(edges)] = torch.tensor(edges)
    with torch.no_grad():
        for ch in chunks:
            ch.lm_weight.copy_(head.lm_weight[ch.lo : ch.hi])
        chunks[0].norm.weight.copy_(head.norm.weight)
    assert all(ch.norm is None for ch in chunks[1:])

    x_ref = x.clone().requires_grad_()
    loss_ref = head(x_ref, labels)
    loss_ref.backward()

    x_split = x.clone().requires_grad_()
    out = x_split
    for ch in chunks:
        out = ch(out, labels)
        if ch is not chunks[-1]:
            assert out.shape == (2, 16, h + 2) and out.dtype == torch.float32
    store = WeightGradStore()  # I then W, as a zero-bubble schedule runs the chunks
    with store.deferring("k"):
        out.backward()
    assert all(ch.lm_weight.grad is None for ch in chunks)
    store.run("k")

    assert out.shape == () and abs(out.item() - loss_ref.item()) <= 1e-6 * loss_ref.item()
    assert _rel_err(x_split.grad, x_ref.grad) < 2e-6
    w_grad = torch.cat([ch.lm_weight.grad for ch in chunks])
    assert _rel_err(w_grad, head.lm_weight.grad) < 2e-6
    assert _rel_err(chunks[0].norm.weight.grad, head.norm.weight.grad) < 2e-6


def test_head_chunks_keep_the_running_statistics_in_fp32_in_bf16() -> None:
    split = split_head(_untied_gemma(), 3)
    first = split.num_layers - 3
    chunks = [build_layer(split, first + c, seed=0) for c in range(3)]
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 8, split.hidden_size, generator=g)
    labels = torch.randint(0, split.vocab_size, (1, 8), generator=g)
    losses = []
    for dtype in (torch.float32, torch.bfloat16):
        out = x.to(dtype).requires_grad_()
        for ch in chunks:
            out = ch.to(dtype)(out, labels)
            assert out.dtype == torch.float32
        out.backward()
        losses.append(out.item())
    assert abs(losses[0] - losses[1]) < 2e-2 * losses[0]


def test_split_head_plans_verify_under_torchrun(tmp_path: Path) -> None:
    base = _untied_gemma()  # 6 layers; split: blocks 1-4, then the k head chunks from layer 5 on
    cases = [  # (k, bounds, stage -> device, order style)
        (2, (0, 3, 6, 7), (0, 1, 0), "zb"),  # chunk 0 with two blocks on device 1, chunk 1 on device 0; I/W
        (3, (0, 5, 6, 7, 8), (0, 1, 0, 1), "zb"),  # one stage per chunk, every boundary crosses devices; I/W
        (3, (0, 3, 6, 8), (0, 1, 0), "1f1b"),  # chunks 1 and 2 in one stage
        (3, (0, 5, 6, 7, 8), (0, 1, 1, 0), "random"),  # chunks 0 and 1: adjacent stages on device 1; B and I/W
    ]
    jobs = []
    for j, (k, bounds, stage_device, style) in enumerate(cases):
        model = split_head(base, k)
        layout = Layout(bounds=bounds, stage_device=stage_device, num_devices=2)
        path = write_plan_file(tmp_path / f"split{j}.json", model, layout, greedy_programs(layout, M, style, seed=2), M)
        plan = read_plan(path)
        assert plan.model.head_chunks == k and plan.model.num_layers == model.num_layers
        check_model_matches(plan, model, path)  # a split model keeps its fingerprint
        check_model_matches(plan, base, path)
        jobs.append(PlanJob(path, model))
    jobs.append(PlanJob(jobs[1].plan_path, base))  # given unsplit, the launcher splits it as planned
    with pytest.raises(InputError, match=r"head in 3 chunk\(s\).*head in 2 chunk\(s\)"):
        run_plan(jobs[1].plan_path, split_head(base, 2))
    results = run_plans(jobs, steps=1, warmup=0, verify=True)
    assert [r["verified"] for r in results] == [True] * len(jobs), [r["mismatched_params"][:3] for r in results]
    for r in results:
        assert r["loss_diff"] <= 1e-5 * r["reference_loss"] and r["max_abs_grad_diff"] < 1e-6
    # bf16: the packed boundary crosses devices in fp32 while the hidden states are bf16
    (bf16,) = run_plans(jobs[1:2], steps=1, warmup=0, verify=True, dtype="bf16")
    assert bf16["verified"], bf16["mismatched_params"][:3]


def test_profile_measures_every_head_chunk() -> None:
    model = split_head(_untied_gemma(), 5)  # slices 205, 205, 204, 205, 205
    groups = distinct_layers(model)
    assert groups == [[0], [1, 3], [2, 4], [5], [6, 8], [7], [9]]  # equal middle slices share an entry
    prof = profile_model(model, seq_len=8, micro_batch_size=1, repeats=1, warmup=0)
    assert [e.layers for e in prof.entries] == groups
    for e in prof.entries[3:]:
        assert e.kind == "head" and min(e.f_s, e.i_s, e.w_s, e.b_s) > 0 and 0 < e.act_w_bytes <= e.act_bytes


# ---------------------------------------------------------------- profiling


def test_profile_groups_identical_layers_and_measures_every_op() -> None:
    model = tiny_family("nemotron")
    prof = profile_model(model, seq_len=16, micro_batch_size=1, repeats=2, warmup=1)
    assert [e.layers for e in prof.entries] == distinct_layers(model) == [[0], [1, 4], [2, 5], [3], [6]]
    for e in prof.entries:
        assert e.kind == model.layers[e.layers[0]].kind
        assert min(e.f_s, e.i_s, e.w_s, e.b_s) > 0
        assert 0 < e.act_w_bytes <= e.act_bytes
    assert prof.num_threads == 1 and prof.link is None
    assert CostProfile.model_validate_json(prof.model_dump_json()) == prof


def test_measure_link_between_two_local_processes() -> None:
    link = measure_link(repeats=3, large_bytes=2**20)
    assert link.backend == "gloo" and link.latency_s > 0 and link.bandwidth_gbps > 0
