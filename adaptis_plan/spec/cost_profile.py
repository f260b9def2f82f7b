"""Measured layer-cost profile (pydantic boundary model), written by `adaptis profile`.

Data flow: the executor's profiler measures F / I / W time and activation memory per
distinct layer on a real device and writes this file; `adaptis plan --costs` and
`adaptis simulate --costs` read it, and the cost table then uses these numbers instead of
the analytic ones for the layers listed. Imports nothing from the rest of the package.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfiledModel(_Strict):
    name: str
    fingerprint: str = Field(description="ModelSpec.fingerprint() of the profiled model")


class LayerCostEntry(_Strict):
    """Costs of one distinct layer, shared by every layer index in `layers`."""

    layers: list[NonNegativeInt] = Field(min_length=1, description="layer indices these numbers apply to")
    kind: str = Field(description="layer kind, for reading")
    f_s: NonNegativeFloat = Field(description="forward time, seconds (median)")
    i_s: NonNegativeFloat = Field(description="backward-for-inputs time, seconds (median)")
    w_s: NonNegativeFloat = Field(description="backward-for-weights time, seconds (median)")
    b_s: NonNegativeFloat = Field(description="fused full backward time, seconds (median), for reference")
    act_bytes: NonNegativeInt = Field(description="bytes kept from F until I/B per micro-batch")
    act_w_bytes: NonNegativeInt = Field(description="bytes of act_bytes still kept after I until W")


class HeadChunkProfile(_Strict):
    """The model's head split into `num_chunks` vocabulary chunks (`split_head`), measured chunk by chunk."""

    num_chunks: int = Field(ge=2, description="vocabulary chunks the head was split into")
    entries: list[LayerCostEntry] = Field(
        min_length=1, description="costs per distinct chunk; `layers` are chunk numbers 0..num_chunks-1"
    )


class MeasuredLink(_Strict):
    latency_s: NonNegativeFloat = Field(description="one small message, seconds")
    bandwidth_gbps: NonNegativeFloat = Field(description="large-message bandwidth, GB/s")
    backend: str = Field(description="torch.distributed backend used")


class CostProfile(_Strict):
    """Per-layer measured costs for one model, device and step shape."""

    schema_version: Literal[1] = 1
    model: ProfiledModel
    device: str = Field(description="what ran it, e.g. 'cpu' or 'cuda: NVIDIA H200'")
    torch_version: str
    num_threads: PositiveInt = Field(description="intra-op threads during measurement")
    seq_len: PositiveInt
    micro_batch_size: PositiveInt
    dtype: Literal["bf16", "fp16", "fp32"]
    repeats: PositiveInt = Field(description="timed repeats per op after warm-up; medians reported")
    measured_at: str = Field(description="ISO-8601 date and time")
    entries: list[LayerCostEntry] = Field(min_length=1)
    link: MeasuredLink | None = Field(None, description="measured point-to-point link, if any")
    action_overhead_s: NonNegativeFloat | None = Field(
        None, description="measured host time of the pipeline runtime per action (dispatch, P2P posting), if any"
    )
    head_chunks: list[HeadChunkProfile] = Field(
        default_factory=list,
        description="the head also measured split into vocabulary chunks (the chunks' own costs, which are not"
        " a linear share of the whole head's); the planner costs a split head from these",
    )
