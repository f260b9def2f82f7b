"""Model FLOPs and MFU: what one trained token costs in model FLOPs, and the throughput and model FLOPs
utilization of a configuration's whole step.

Data flow: model spec (+ hardware profile, the configuration's degrees and its judged step time) ->
`model_flops_per_token`, `throughput` -> the `--json` record of a whole-configuration plan
(`app.plan.configuration_record`). Pure arithmetic over the spec (`cost.params` counts the
parameters); imports no judge, builder or search. Never prints.
"""

from __future__ import annotations

from adaptis_plan.cost.params import layer_params
from adaptis_plan.spec.config import Parallelism
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec


def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Model FLOPs per trained token: 6 x the parameters a token uses (active experts only, the
    embedding and head included) + causal attention, 6 x heads x head_dim x seq_len per attention
    layer (half of the 12 x L x h x s of non-causal attention; no recomputation counted)."""
    active = sum(layer_params(model, layer).active for layer in model.layers)
    attn = 0.0
    for layer in model.layers:
        a = layer.attention
        if a is None:
            continue
        width = a.num_heads * (
            a.head_dim
            if a.type == "gqa"
            else ((a.qk_nope_head_dim or 0) + (a.qk_rope_head_dim or 0) + (a.v_head_dim or 0)) / 2
        )  # noqa: E501
        window = min(a.sliding_window or seq_len, seq_len)
        attn += 6.0 * width * window
    return 6.0 * active + attn


def throughput(
    model: ModelSpec, hardware: HardwareProfile, parallelism: Parallelism, seq_len: int, step_time_s: float
) -> tuple[float, float]:
    """(tokens per second of the cluster, MFU) of one optimizer step of `step_time_s` at `parallelism`:
    the step trains the global batch's dp x micro-batch size x micro-batches sequences of `seq_len`
    tokens on tp x cp x dp x pp GPUs, each rated at the slowest device type's peak bf16 throughput."""
    p = parallelism
    tokens = p.dp * p.micro_batch_size * p.num_microbatches * seq_len
    tps = tokens / step_time_s
    gpus = p.tp * p.cp * p.dp * p.pp
    peaks = [hardware.device_types[g.device_type].peak_bf16_tflops for g in hardware.groups]
    mfu = tps * model_flops_per_token(model, seq_len) / (gpus * min(peaks) * 1e12)
    return tps, mfu


__all__ = ["model_flops_per_token", "throughput"]
