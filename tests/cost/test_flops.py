"""Model FLOPs and MFU (`cost.flops`): the PaLM-style count (6 x parameters a token uses + causal attention)
on a model whose parameter count is published, and MFU rated at the slowest GPU of a mixed cluster."""

from __future__ import annotations

import pytest

from adaptis_plan.cost.flops import model_flops_per_token, throughput
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.spec.config import Parallelism

pytestmark = pytest.mark.unit

#: HF meta-llama/Llama-2-7b-hf safetensors total (embedding and head untied, both counted)
LLAMA_2_7B_PARAMS = 6_738_415_616


def test_llama_2_7b_flops_per_token_are_6n_plus_causal_attention() -> None:
    # 32 layers of 32 heads x 128, full causal attention over 4,096 tokens: 6 x L x h x d x s
    attention = 6 * 32 * 32 * 128 * 4096
    assert model_flops_per_token(load_model("llama-2-7b"), 4096) == 6 * LLAMA_2_7B_PARAMS + attention


def test_mfu_rates_every_gpu_at_the_slowest_peak() -> None:
    """h100-a100-mixed: 8 H100 (989 TFLOP/s bf16) + 8 A100 (312): 16 GPUs at the A100's peak."""
    model, hw = load_model("llama-2-7b"), load_hardware("h100-a100-mixed")
    p = Parallelism(tp=1, pp=2, dp=8, micro_batch_size=1, num_microbatches=4)
    tps, mfu = throughput(model, hw, p, 4096, 2.0)
    assert tps == 8 * 4 * 4096 / 2.0
    assert mfu == pytest.approx(tps * model_flops_per_token(model, 4096) / (16 * 312e12), rel=1e-12)
