"""Hardware profile: device types, the cluster as device groups, and the links (pydantic).

Data flow: read from `profiles/*.json` (built-ins, shipped in the package) or a user file;
read by the cost model (device speed/memory) and by `cost.table.build_cost_table` (links).
Imports only `spec.limits` (the physical-sense bounds).

Pipeline rank r is mapped to a physical slot by filling the groups in order: group 0's
nodes first (`devices_per_node` pipeline ranks per node), then group 1, and so on. With
tensor parallelism of degree T a pipeline rank occupies T devices of one node.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import Field, model_validator

from adaptis_plan.spec.base import StrictModel
from adaptis_plan.spec.limits import (
    MAX_BYTES,
    MAX_DEVICES_PER_NODE,
    MAX_DIM,
    MAX_GBPS,
    MAX_LATENCY_S,
    MAX_NODES,
    MAX_TFLOPS,
    MIN_EFFICIENCY,
    MIN_GBPS,
    MIN_TFLOPS,
)


class DeviceTypeSpec(StrictModel):
    """One accelerator model."""

    peak_bf16_tflops: float = Field(
        ge=MIN_TFLOPS, le=MAX_TFLOPS, description="peak dense bf16 tensor throughput, TFLOP/s"
    )
    matmul_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1, description="achievable fraction of peak on large GEMMs")
    hbm_bytes: int = Field(ge=1, le=MAX_BYTES, description="device memory, bytes")
    hbm_bandwidth_gbps: float = Field(ge=MIN_GBPS, le=MAX_GBPS, description="memory bandwidth, GB/s")
    memory_efficiency: float = Field(0.8, ge=MIN_EFFICIENCY, le=1, description="achievable fraction of HBM bandwidth")
    source: str = Field(description="where the numbers come from")
    # Kernel-level refinements of the roofline (`cost/analytic.py`'s docstring has the formulas). The
    # defaults switch each one off, so a profile without them times every kernel as before.
    kernel_overhead_s: float = Field(
        0.0, ge=0, le=MAX_LATENCY_S, description="fixed time per kernel launch (launch + ramp-up + tail), seconds"
    )
    gemm_half_mn: float = Field(
        0.0,
        ge=0,
        le=float(MAX_DIM) ** 2,
        description="GEMM output elements (m*n) at which wave / tile quantization halves the efficiency;"
        " about half a wave of output tiles (SMs / 2 * 128 * 128); 0: no falloff",
    )
    gemm_half_k: float = Field(
        0.0,
        ge=0,
        le=MAX_DIM,
        description="GEMM inner dimension k at which the K loop's prologue / epilogue halves the efficiency;"
        " 0: no falloff",
    )
    attention_half_head_dim: float = Field(
        0.0,
        ge=0,
        le=MAX_DIM,
        description="head_dim at which flash attention reaches half of matmul_efficiency"
        " (its softmax work per score does not shrink with head_dim); 0: attention at matmul_efficiency",
    )
    cudnn_attention_speedup: float = Field(
        1.0,
        ge=1,
        le=4,
        description="how much faster cuDNN's fused flash attention (TransformerEngine's FusedAttention,"
        " `--attention cudnn`) runs the attention core than the FlashAttention-2-class kernel the other"
        " attention parameters describe; 1: no faster (no measurement on this device type)",
    )
    scan_efficiency: float | None = Field(
        None,
        ge=MIN_EFFICIENCY,
        le=1,
        description="fraction of peak of the Mamba-2 SSD chunked scan (a chain of small batched matmuls and"
        " cumsums); null: matmul_efficiency",
    )
    kernel_model_source: str = Field("", description="where the kernel-level parameters above come from")
    sustained_efficiency: float = Field(
        1.0,
        ge=MIN_EFFICIENCY,
        le=1,
        description="fraction of the compute rate (peak x the kernel efficiencies above) the device sustains over"
        " a training step, on every compute kernel (memory-bound work apart): power and clock limits under"
        " sustained tensor-core load and what else a real training stack loses on this device type; 1: none."
        " Evidence (calibration_source): the built-in Hopper profiles' 0.69 reproduces MosaicML's MPT-7B H100 run"
        " (46.4% MFU against 64.2% on A100, same software and settings; llm-foundry benchmarks)",
    )
    layer_overhead_s: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_S,
        description="fixed time per layer and op (F, I, W) beyond its kernels' launches, seconds: framework host"
        " time that a layer's kernels wait for; 0 unless measured on this device type. No built-in profile sets"
        " it: no published per-layer host time matches our kernel set (the AdaPtis profile implies one for its"
        " Nemotron-H attention layer, see cost/published.py)",
    )
    calibration_source: str = Field(
        "", description="the published measurements sustained_efficiency and layer_overhead_s come from"
    )


class LinkSpec(StrictModel):
    """A point-to-point path between two pipeline ranks."""

    bandwidth_gbps: float = Field(
        ge=MIN_GBPS, le=MAX_GBPS, description="achievable unidirectional bandwidth per rank pair, GB/s"
    )
    latency_s: float = Field(ge=0, le=MAX_LATENCY_S, description="per-message latency, seconds")
    source: str = Field(description="where the numbers come from")
    p2p_bandwidth_gbps: float | None = Field(
        None,
        ge=MIN_GBPS,
        le=MAX_GBPS,
        description="bandwidth of one pipeline send/recv (NCCL point-to-point) between two ranks, GB/s, when it"
        " falls short of bandwidth_gbps (which the tensor-parallel collectives use); null: bandwidth_gbps."
        " Evidence (p2p_source): nccl-tests sendrecv between two NVLink-connected H100s measures ~80 GB/s at"
        " 32 MB messages, 180 GB/s only for GB-sized ones (NVIDIA/nccl-tests issue 268)",
    )
    p2p_latency_s: float | None = Field(
        None,
        ge=0,
        le=MAX_LATENCY_S,
        description="latency of one pipeline send/recv, seconds; null: latency_s. Evidence (p2p_source): ~3 us on"
        " two H100s over NVLink, 3.7 us on H800s (NVIDIA/nccl issues 1487, 1984)",
    )
    p2p_source: str = Field("", description="the published measurements p2p_bandwidth_gbps and p2p_latency_s come from")


class DeviceGroupSpec(StrictModel):
    """A homogeneous block of nodes."""

    device_type: str = Field(description="key into device_types")
    num_nodes: int = Field(ge=1, le=MAX_NODES, description="nodes in this group")
    devices_per_node: int = Field(ge=1, le=MAX_DEVICES_PER_NODE, description="accelerators per node")


class HardwareProfile(StrictModel):
    """A cluster: device types, groups of nodes, and the links inside and across nodes."""

    name: str = Field(description="profile name: the built-in name, or what plans and reports call this cluster")
    description: str = Field("", description="one line for `adaptis hardware` listings")
    device_types: dict[str, DeviceTypeSpec] = Field(
        min_length=1, description="accelerator models by name; groups refer to them by that name"
    )
    groups: list[DeviceGroupSpec] = Field(
        min_length=1, max_length=MAX_NODES, description="filled in order by pipeline ranks"
    )
    intra_node: LinkSpec = Field(description="link between ranks in one node (NVLink)")
    inter_node: LinkSpec = Field(description="link between ranks on different nodes (InfiniBand)")
    memory_fraction: float = Field(0.9, gt=0, le=1, description="usable share of each device's memory")
    action_overhead_s: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_S,
        description="host time of the pipeline runtime per action (Python dispatch, P2P posting) that does not"
        " overlap compute: about zero on GPUs (kernels run asynchronously), real on CPU ranks",
    )

    @model_validator(mode="after")
    def _check_groups(self) -> HardwareProfile:
        for i, g in enumerate(self.groups):
            if g.device_type not in self.device_types:
                known = ", ".join(sorted(self.device_types))
                raise ValueError(f"groups[{i}].device_type '{g.device_type}' is not one of: {known}")
        return self

    @property
    def num_devices(self) -> int:
        return sum(g.num_nodes * g.devices_per_node for g in self.groups)

    def rank_slots(self, pp: int, tp: int = 1, width: int | None = None) -> list[tuple[str, int]]:
        """(device type, global node id) of each of `pp` pipeline ranks, each `tp` devices wide.

        `width` (default tp): the ranks one pipeline rank spans in the global order, tp x cp x dp
        (`spec.ranks.RankLayout`: pp slowest): pipeline rank r starts at global rank r x width, and
        its node is that rank's. Raises ValueError when the cluster is too small.
        """
        if width is not None and width > tp:
            return self._wide_slots(pp, tp, width)
        slots: list[tuple[str, int]] = []
        node = 0
        for g in self.groups:
            per_node = g.devices_per_node // tp
            # only the first pp slots matter: a profile may list 1e5 nodes of 1e3 devices
            nodes = min(g.num_nodes, -(-(pp - len(slots)) // per_node)) if per_node and len(slots) < pp else 0
            for k in range(nodes):
                slots.extend([(g.device_type, node + k)] * per_node)
            node += g.num_nodes
        if tp > 1 and all(g.devices_per_node < tp for g in self.groups):
            raise ValueError(f"tp {tp} exceeds devices_per_node of every group of hardware '{self.name}'")
        if len(slots) < pp:
            raise ValueError(
                f"hardware '{self.name}' has room for {len(slots)} pipeline ranks at tp {tp}, pp {pp} asked;"
                " add nodes to the profile's groups or lower --pp"
            )
        return slots[:pp]

    def _wide_slots(self, pp: int, tp: int, width: int) -> list[tuple[str, int]]:
        """`rank_slots` when a pipeline rank spans `width` > tp devices (data / context parallel)."""
        if all(g.devices_per_node < tp for g in self.groups):
            raise ValueError(f"tp {tp} exceeds devices_per_node of every group of hardware '{self.name}'")
        slots: list[tuple[str, int]] = []
        node = 0
        for g in self.groups:
            per_node = g.devices_per_node // tp * tp  # devices a tp-wide rank can use on a node
            devices = g.num_nodes * per_node
            first = 0
            while len(slots) < pp and first + width <= devices:
                slots.append((g.device_type, node + first // per_node))
                first += width
            node += g.num_nodes
        if len(slots) < pp:
            raise ValueError(
                f"hardware '{self.name}' has room for {len(slots)} pipeline ranks of {width} devices"
                f" (tp x cp x dp), pp {pp} asked; add nodes to the profile's groups or lower --pp"
            )
        return slots

    def fingerprint(self) -> str:
        data = self.model_dump(mode="json", exclude={"name", "description"})
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()
