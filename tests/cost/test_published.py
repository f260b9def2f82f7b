"""The analytic cost model against published real measurements (adaptis_plan/cost/published.py).

Each held figure: the published value, its source, our value and the tolerance (per-op times 15%,
end-to-end MFU 10%, peak memory 10%). Context figures (no tolerance) are listed in BENCHMARKS.md
with their errors; here they only have to be computable.
"""

from __future__ import annotations

import pytest

from adaptis_plan.cost.analytic import GRAD_ACCUM_BYTES_PER_PARAM, kernel_seconds, layer_work, op_seconds
from adaptis_plan.cost.published import (
    ADAPTIS_NEMOTRON,
    MEMORY_TOLERANCE,
    MFU_TOLERANCE,
    PER_OP_TOLERANCE,
    gpt_model,
    head_loss_bytes,
    nemotron_forward_ratios,
    nemotron_forward_seconds,
    published_figures,
)
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.spec.training import TrainingConfig

pytestmark = pytest.mark.unit

FIGURES = published_figures()
HELD = [f for f in FIGURES if f.held]
TOLERANCE = {"per-op time": PER_OP_TOLERANCE, "MFU": MFU_TOLERANCE, "peak memory": MEMORY_TOLERANCE}


@pytest.mark.parametrize("fig", HELD, ids=[f.key for f in HELD])
def test_published_figure_within_tolerance(fig) -> None:  # noqa: ANN001
    assert fig.tolerance == TOLERANCE.get(fig.quantity, PER_OP_TOLERANCE)
    assert abs(fig.error) <= fig.tolerance, (
        f"{fig.what} ({fig.setting}): published {fig.measured:.4g} {fig.unit} ({fig.source}),"
        f" ours {fig.ours:.4g} {fig.unit}, error {fig.error:+.1%} > {fig.tolerance:.0%}"
    )


def test_every_kind_of_figure_is_held() -> None:
    """The issue's three tolerances each hold at least one published figure; context rows say why not held."""
    assert {f.quantity for f in HELD} >= {"per-op time", "MFU", "peak memory"}
    keys = {f.key for f in HELD}
    assert {"vp-layer-f", "vp-layer-b", "vp-head-f", "vp-head-b", "cce-loss-memory"} <= keys
    assert {"mpt-7b-2048-a100", "mpt-7b-2048-h100"} <= keys
    assert all(f.note for f in FIGURES if not f.held)
    assert len({f.key for f in FIGURES}) == len(FIGURES)


def test_w_is_one_roofline_with_fused_gradient_accumulation() -> None:
    """Vocabulary Parallelism's transformer layer: B (I + W) 5.25 ms = 2.0x its F. With the fp32
    gradient accumulation in series after each weight-gradient GEMM our B was 5.96 ms (+13.5%);
    as the GEMM's epilogue (one roofline) it is within 1%. A compute-bound W hides the fp32
    main_grad traffic; a memory-bound one (a small expert) is bound by it, not by the sum."""
    model = gpt_model("vp-gpt", 3072, 24, 32, 256000)
    hw = load_hardware("a100")
    device = hw.device_types["a100-sxm4-80gb"]
    work = layer_work(model, model.layers[1], TrainingConfig(num_microbatches=1, pp=1, seq_len=2048))
    f, i, w = op_seconds(work, device)
    assert abs((i + w) / 5.25e-3 - 1) < 0.02
    serial = sum(k.io_bytes for k in work.w.kernels if k.kind == "gemm")  # the epilogue bytes, if paid apart
    assert w < f < w + serial / (device.hbm_bandwidth_gbps * 1e9 * device.memory_efficiency)
    for kernel in work.w.kernels:
        if kernel.kind == "gemm":
            m, n, k = kernel.shape
            assert kernel.io_bytes == pytest.approx((m * k + m * n) * 2 + k * n * GRAD_ACCUM_BYTES_PER_PARAM)
            assert kernel_seconds(kernel, device) == pytest.approx(kernel.flops / (312e12 * _eff(device, m, n, k)))


def _eff(device, m: float, n: float, k: float) -> float:  # noqa: ANN001
    from adaptis_plan.cost.analytic import gemm_efficiency

    return gemm_efficiency(device, m, n, k) * device.sustained_efficiency


def test_moe_weight_gradient_no_longer_outweighs_the_forward() -> None:
    """Measured W / F sits at 0.5-0.9 (Zero Bubble's 1.5B GPT: 9.3 / 18.5 ms); with the accumulation in
    series our DeepSeek MoE layer had W / F 1.23; as one roofline it is below 0.9."""
    from adaptis_plan.inputs.models.load import load_model

    model = load_model("deepseek-s")
    hw = load_hardware("h200")
    device = hw.device_types["h200-sxm-141gb"]
    for tp in (1, 2):
        training = TrainingConfig(num_microbatches=1, pp=1, seq_len=4096, tp=tp)
        for layer in (model.layers[1], model.layers[-2]):
            f, _, w = op_seconds(layer_work(model, layer, training), device, hw.intra_node)
            assert 0.5 < w / f < 0.9, (layer.kind, tp, w / f)


def test_head_peak_memory_is_the_loss_computations() -> None:
    """Cut Cross-Entropy (Wijmans et al., ICLR 2025, Table 1): PyTorch's loss over 8,192 x 256,000 logits
    takes 24,000 MB = 12 bytes per logit; ours holds 12 (F ends at bf16 logits + fp32 copy + fp32
    log-softmax = 10, I at the saved log-softmax + two fp32 gradients = 12); fp32 training needs no copy."""
    tokens, vocab = 8192, 256000
    ours = head_loss_bytes(tokens, vocab)
    assert abs(ours / (24000 * 2**20) - 1) <= MEMORY_TOLERANCE
    assert ours / (tokens * vocab) == pytest.approx(12.0)


def test_attention_vs_mamba_which_layer_differs() -> None:
    """AdaPtis' profiled Nemotron-H (hidden 1024, vocab 131072, TP 2, H200): the head over the Mamba-2
    layer is 8.23 / 10.81 / 13.99 at 1K / 2K / 4K, and ours is within 15%: the Mamba layer agrees,
    measured against the head, whose cost (logits GEMM + cross-entropy, linear in s) the Vocabulary
    Parallelism run confirms within 5%. The attention layer is the one that differs (paper 3.12x the
    Mamba at 4K, ours 0.65x), and the paper's own rows say why: its attention layer takes 11x the
    time for 32x the tokens from 1K to 32K (measured against the head): less than linear, so much of it
    is an s-independent cost. No attention kernel does that: ours (flash attention, head_dim 32) grows at least linearly."""
    paper_growth = 32 * ADAPTIS_NEMOTRON[1024][1] / ADAPTIS_NEMOTRON[32768][1]  # head as the s-linear clock
    paper_attention_growth = paper_growth * ADAPTIS_NEMOTRON[32768][0] / ADAPTIS_NEMOTRON[1024][0]
    assert paper_attention_growth < 16  # 11.4x for 32x the tokens
    ours = {s: nemotron_forward_ratios(s) for s in (1024, 4096, 32768)}
    for s in (1024, 4096):
        paper_head = ADAPTIS_NEMOTRON[s][1]
        assert abs(ours[s][1] / paper_head - 1) <= PER_OP_TOLERANCE
        assert ours[s][0] < 0.4 * ADAPTIS_NEMOTRON[s][0]  # the documented disagreement
    _, short, _ = nemotron_forward_seconds(1024)
    _, long, _ = nemotron_forward_seconds(32768)
    assert long / short > 32  # linear parts + the quadratic core
