"""Vocabulary-chunked heads in the executor: exact loss and gradients, fp32 statistics, real runs.

Run: `pytest tests/executor/test_head_chunks.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_executor import HEAD_CHUNK_CASES, Ran, head_chunk_jobs, untied_gemma

from adaptis_plan.errors import InputError
from adaptis_plan.executor.launch import run_plan
from adaptis_plan.executor.layers import build_layer
from adaptis_plan.executor.profile import distinct_layers, profile_model
from adaptis_plan.executor.wgrad import WeightGradStore
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.planfile.io import check_model_matches

M = 4  # micro-batches in the executor runs

# ---------------------------------------------------------------- head split into vocabulary chunks


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("k", [2, 3])
def test_head_chunks_reproduce_the_unsplit_head_loss_and_gradients(k: int) -> None:
    model = untied_gemma()
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
    split = split_head(untied_gemma(), 3)
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


def test_split_head_plans_keep_the_model_fingerprint(tmp_path: Path) -> None:
    base = untied_gemma()
    *split, (_, unsplit) = head_chunk_jobs(tmp_path)
    for (k, *_), (_, job) in zip(HEAD_CHUNK_CASES, split, strict=True):
        path = Path(job.label)
        assert job.plan.model.head_chunks == k and job.plan.model.num_layers == job.model.num_layers
        check_model_matches(job.plan, job.model, path)  # a split model keeps its fingerprint
        check_model_matches(job.plan, base, path)
    assert unsplit.model == base and unsplit.plan.model.head_chunks == 3  # the launcher splits it as planned
    with pytest.raises(InputError, match=r"head in 3 chunk\(s\).*head in 2 chunk\(s\)"):
        run_plan(unsplit.plan, split_head(base, 2))


@pytest.mark.slow
def test_split_head_plans_verify_under_torchrun(two_ranks: dict[str, Ran]) -> None:
    """fp32: the jobs of `head_chunk_jobs` in the session's shared two-process launch (`two_ranks`)."""
    ran = [r for label, r in two_ranks.items() if label.startswith("heads:")]
    assert len(ran) == len(HEAD_CHUNK_CASES) + 1
    results = [r.result for r in ran]
    assert [r["verified"] for r in results] == [True] * len(ran), [r["mismatched_params"][:3] for r in results]
    for r in results:
        assert r["loss_diff"] <= 1e-5 * r["reference_loss"] and r["max_abs_grad_diff"] < 1e-6


@pytest.mark.slow
def test_split_head_plan_verifies_in_bf16(two_ranks: dict[str, Ran]) -> None:
    """bf16: the packed boundary crosses devices in fp32 while the hidden states are bf16 (a job of the
    session's fp32 two-process launch with its own dtype, `PlanJob.dtype`)."""
    bf16 = two_ranks["bf16:heads split1"].result
    assert bf16["dtype"] == "bf16" and bf16["verified"], bf16["mismatched_params"][:3]
    fp32 = two_ranks["heads:split1"].result  # the same plan in fp32, checked against its own reference
    assert fp32["dtype"] == "fp32" and fp32["tolerance"] != bf16["tolerance"]


def test_profile_measures_every_head_chunk() -> None:
    model = split_head(untied_gemma(), 5)  # slices 205, 205, 204, 205, 205
    groups = distinct_layers(model)
    assert groups == [[0], [1, 3], [2, 4], [5], [6, 8], [7], [9]]  # equal middle slices share an entry
    prof = profile_model(model, seq_len=8, micro_batch_size=1, repeats=1, warmup=0)
    assert [e.layers for e in prof.entries] == groups
    for e in prof.entries[3:]:
        assert e.kind == "head" and min(e.f_s, e.i_s, e.w_s, e.b_s) > 0 and 0 < e.act_w_bytes <= e.act_bytes
