"""Measured layer-cost profile (pydantic boundary model), written by `adaptis profile`.

Data flow: the executor's profiler measures F / I / W time and activation memory per
distinct layer on a real device and writes this file; `adaptis plan --costs` and
`adaptis simulate --costs` read it, and the cost table then uses these numbers instead of
the analytic ones for the layers listed. Imports only `spec.limits` (the physical-sense bounds).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from adaptis_plan.spec.base import StrictModel
from adaptis_plan.spec.limits import (
    MAX_BYTES,
    MAX_GBPS,
    MAX_LATENCY_S,
    MAX_LAYERS,
    MAX_MICRO_BATCH_SIZE,
    MAX_SECONDS,
    MAX_SEQ_LEN,
)


class ProfiledModel(StrictModel):
    name: str = Field(description="the profiled model's name, for reading")
    fingerprint: str = Field(description="ModelSpec.fingerprint() of the profiled model")
    head_chunks: int | None = Field(
        None,
        ge=1,
        le=MAX_LAYERS,
        description="the profiled model's head chunks (ModelSpec.num_head_chunks; 1 = one head). The"
        " fingerprint is the same for every split of the head, so this tells a profile of the unsplit model"
        " (which costs any split) from one of a split model (which costs that split only). Absent in older"
        " profiles, which are told apart by how many layers they measured",
    )


class LayerCostEntry(StrictModel):
    """Costs of one distinct layer, shared by every layer index in `layers`."""

    layers: list[Annotated[int, Field(ge=0, lt=MAX_LAYERS)]] = Field(
        min_length=1, max_length=MAX_LAYERS, description="layer indices these numbers apply to"
    )
    kind: str = Field(description="layer kind, for reading")
    f_s: float = Field(ge=0, le=MAX_SECONDS, description="forward time, seconds (median)")
    i_s: float = Field(ge=0, le=MAX_SECONDS, description="backward-for-inputs time, seconds (median)")
    w_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        description="backward-for-weights time, seconds (median), of a W that runs after other work (measured"
        " after a later micro-batch's I): its stash is no longer in cache",
    )
    w_hot_s: float | None = Field(
        None,
        ge=0,
        le=MAX_SECONDS,
        description="backward-for-weights time, seconds (median), of a W that runs right after its own I, with"
        " all it reads still in cache; the simulator charges it to such a W (absent: w_s)",
    )
    b_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        description="fused full backward time, seconds (median): one autograd pass computing input and weight"
        " gradients together; the simulator charges it to a B (fused backward) of this layer",
    )
    act_bytes: int = Field(ge=0, le=MAX_BYTES, description="bytes kept from F until I/B per micro-batch")
    act_w_bytes: int = Field(ge=0, le=MAX_BYTES, description="bytes of act_bytes still kept after I until W")
    stage_copies: int | None = Field(
        None,
        ge=2,
        le=64,
        description=(
            "when set, the times and bytes are per layer of a chain of this many copies of the layer (each"
            " with its own weights) timed as one stage runs them: a layer timed alone keeps its weights in"
            " a cache that a stage of several layers does not leave it (`executor.profile.stage_copies`);"
            " absent: the layer timed alone"
        ),
    )

    @property
    def w_hot(self) -> float:
        """A W's seconds right after its own I: `w_hot_s`, or `w_s` when the profile did not time it."""
        return self.w_s if self.w_hot_s is None else self.w_hot_s


class HeadChunkProfile(StrictModel):
    """The model's head split into `num_chunks` vocabulary chunks (`split_head`), measured chunk by chunk."""

    num_chunks: int = Field(ge=2, description="vocabulary chunks the head was split into")
    entries: list[LayerCostEntry] = Field(
        min_length=1, description="costs per distinct chunk; `layers` are chunk numbers 0..num_chunks-1"
    )


class MeasuredLink(StrictModel):
    latency_s: float = Field(ge=0, le=MAX_LATENCY_S, description="one small message, seconds")
    bandwidth_gbps: float = Field(gt=0, le=MAX_GBPS, description="large-message bandwidth, GB/s")
    backend: str = Field(description="torch.distributed backend used")
    host_s_per_message: float | None = Field(
        None,
        ge=0,
        le=MAX_LATENCY_S,
        description="time one end of a message costs a rank (the mean of a send's and a receive's), fixed part,"
        " seconds; measured on CPU ranks only, while both ranks compute, where gloo's I/O threads take the cores"
        " from compute: the planner charges it to each action that sends or receives across devices",
    )
    host_s_per_byte: float | None = Field(
        None, ge=0, le=1e-3, description="time one end of a message costs a rank per byte (see host_s_per_message)"
    )


class CostProfile(StrictModel):
    """Per-layer measured costs for one model, device and step shape."""

    schema_version: Literal[1] = Field(1, description="version of this file format")
    model: ProfiledModel = Field(description="the model the costs were measured on")
    device: str = Field(description="what ran it, e.g. 'cpu' or 'cuda: NVIDIA H200'")
    torch_version: str = Field(description="torch version of the measurement")
    num_threads: int = Field(ge=1, le=1_000_000, description="intra-op threads during measurement")
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN, description="tokens per sequence of the measured step")
    micro_batch_size: int = Field(
        ge=1, le=MAX_MICRO_BATCH_SIZE, description="sequences per micro-batch of the measured step"
    )
    dtype: Literal["bf16", "fp16", "fp32"] = Field(description="compute and weight dtype of the measurement")
    repeats: int = Field(
        ge=1, le=1_000_000, description="timed repeats per op after warm-up, over all rounds; medians reported"
    )
    rounds: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="rounds the repeats were spread over, each timing every distinct layer (and head chunk) a few"
        " repeats, so that a slowdown of the machine for a while moves a few repeats of every layer instead of"
        " one layer's whole sample; the medians pool all rounds' repeats (absent: one round, layer after layer)",
    )
    measured_at: str = Field(description="ISO-8601 date and time")
    entries: list[LayerCostEntry] = Field(
        min_length=1, max_length=MAX_LAYERS, description="one entry per distinct layer shape"
    )
    link: MeasuredLink | None = Field(None, description="measured point-to-point link, if any")
    action_overhead_s: float | None = Field(
        None,
        ge=0,
        le=MAX_LATENCY_S,
        description="measured host time of the pipeline runtime per action (dispatch, P2P posting), if any",
    )
    time_spread: float | None = Field(
        None,
        ge=0,
        le=5,
        description="how much one op's time varies from one repeat to the next within a round: the standard"
        " deviation of log seconds about each (layer, op, round)'s own mean, pooled over all of them; the"
        " simulator's expected step time varies every action's time by this much (absent or 0: no variation"
        " charged)",
    )
    head_chunks: list[HeadChunkProfile] = Field(
        default_factory=list,
        description="the head also measured split into vocabulary chunks (the chunks' own costs, which are not"
        " a linear share of the whole head's); the planner costs a split head from these",
    )
