"""Hardware profile: device types, the cluster as device groups, and the links (pydantic).

Data flow: read from `profiles/*.json` (built-ins, shipped in the package) or a user file;
read by the cost model (device speed/memory) and by `cost.table.build_cost_table` (links).
Imports only `spec.limits` (the physical-sense bounds).

Pipeline rank r is mapped to a physical slot by filling the groups in order: group 0's
nodes first (`devices_per_node` pipeline ranks per node), then group 1, and so on. With
tensor parallelism of degree T a pipeline rank occupies T devices of one node, or T / devices_per_node
whole nodes when T is a multiple of it (a tp given on the command line that spans nodes).

Units: bandwidths are GB/s (gigabytes) per GPU and per direction; NICs are sold in Gb/s (gigabits), so
`nic_gbit_per_node` converts (x 8 x GPUs per node). A profile file may carry the read-only keys
`adaptis hardware show --json` adds (`HardwareProfileFile`); they are recomputed, never read.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
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
        ge=MIN_TFLOPS, le=MAX_TFLOPS, description="peak dense bf16 tensor throughput of one GPU, TFLOP/s"
    )
    matmul_efficiency: float = Field(ge=MIN_EFFICIENCY, le=1, description="achievable fraction of peak on large GEMMs")
    hbm_bytes: int = Field(
        ge=1,
        le=MAX_BYTES,
        description="memory of one GPU, bytes (decimal, as datasheets state it: 80 GB = 80e9); the planner uses memory_fraction of it",
    )
    hbm_bandwidth_gbps: float = Field(
        ge=MIN_GBPS, le=MAX_GBPS, description="memory bandwidth of one GPU, GB/s (gigabytes per second)"
    )
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
    """The link one GPU has to its peers: NVLink inside a node, its share of the node's NICs across nodes.

    Bandwidths are per GPU and per direction, in GB/s (gigabytes per second, not the gigabits per second
    NICs are sold in: a 400 Gb/s NIC is 50 GB/s). A cluster of 8-GPU nodes with 4 x 200 Gb/s NICs per node
    gives each GPU 4 x 200 / 8 / 8 = 12.5 GB/s across nodes (`adaptis plan --nic-gbit-per-node 4x200`
    converts it, docs/clusters.md).
    """

    bandwidth_gbps: float = Field(
        ge=MIN_GBPS,
        le=MAX_GBPS,
        description="achievable bandwidth of one GPU, one direction, GB/s (gigabytes per second; Gb/s / 8): inside"
        " a node its NVLink bandwidth, across nodes its share of the node's NICs (NIC Gb/s per node / 8 / GPUs per"
        " node); a pipeline send/recv and each GPU's part of a collective run at it",
    )
    latency_s: float = Field(ge=0, le=MAX_LATENCY_S, description="per-message latency, seconds")
    source: str = Field(description="where the numbers come from")
    p2p_bandwidth_gbps: float | None = Field(
        None,
        ge=MIN_GBPS,
        le=MAX_GBPS,
        description="bandwidth of one pipeline send/recv (NCCL point-to-point) between two GPUs, one direction,"
        " GB/s, when it"
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
    num_nodes: int = Field(
        ge=1, le=MAX_NODES, description="nodes in this group (`plan --gpus` resizes a one-group profile)"
    )
    devices_per_node: int = Field(
        ge=1, le=MAX_DEVICES_PER_NODE, description="GPUs per node (`plan --gpus-per-node` overrides it)"
    )


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
    intra_node: LinkSpec = Field(description="one GPU's link to the GPUs of its node (NVLink), per GPU, per direction")
    inter_node: LinkSpec = Field(
        description="one GPU's link to other nodes (InfiniBand / RoCE): its share of the node's NICs, per GPU, per"
        " direction (`plan --nic-gbit-per-node` / `--nic-gbit-per-gpu` override it)"
    )
    memory_fraction: float = Field(
        0.9,
        gt=0,
        le=1,
        description="share of each GPU's hbm_bytes the planner may fill (the rest: CUDA context, allocator fragmentation, NCCL buffers); `plan --memory-fraction` / `--usable-memory-gib` override it",
    )
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
        if all(g.devices_per_node < tp for g in self.groups):
            return self._spanning_slots(pp, tp, max(tp, width or tp))
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
        if len(slots) < pp:
            raise ValueError(
                f"hardware '{self.name}' has room for {len(slots)} pipeline ranks at tp {tp}, pp {pp} asked;"
                " add nodes to the profile's groups or lower --pp"
            )
        return slots[:pp]

    def _wide_slots(self, pp: int, tp: int, width: int) -> list[tuple[str, int]]:
        """`rank_slots` when a pipeline rank spans `width` > tp devices (data / context parallel)."""
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

    def _spanning_slots(self, pp: int, tp: int, width: int) -> list[tuple[str, int]]:
        """`rank_slots` when a tensor-parallel group spans nodes (tp above every group's GPUs per node, as
        Megatron-LM runs it when asked): a group fills whole nodes, so tp is a multiple of the GPUs per node;
        pipeline rank r starts at global rank r x width and sits on that rank's node."""
        sizes = sorted({g.devices_per_node for g in self.groups})
        if len(sizes) > 1 or tp % sizes[0]:
            per = " or ".join(map(str, sizes))
            raise ValueError(
                f"tp {tp} spans nodes of {per} GPUs of hardware '{self.name}' but does not fill whole nodes:"
                f" a tensor-parallel group fits in one node or fills whole ones; use a tp that divides {per}"
                f" or a multiple of {sizes[-1]}"
            )
        per_node = sizes[0]
        ends = list(itertools.accumulate(g.num_nodes for g in self.groups))  # each group's last node + 1
        slots = []
        for r in range(min(pp, ends[-1] * per_node // width)):
            node = r * width // per_node
            slots.append((self.groups[bisect.bisect_right(ends, node)].device_type, node))
        if len(slots) < pp:
            raise ValueError(
                f"hardware '{self.name}' has room for {len(slots)} pipeline ranks of {width} GPUs (tp {tp} spans"
                f" {tp // per_node} nodes), pp {pp} asked; add nodes to the profile's groups or lower --pp"
            )
        return slots

    def fingerprint(self) -> str:
        data = self.model_dump(mode="json", exclude={"name", "description"})
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


def nic_gbit_per_node(hardware: HardwareProfile) -> list[float]:
    """Per group, the network bandwidth of one node, Gb/s per direction (as NICs are sold): the
    inter-node link's GB/s per GPU x 8 x GPUs per node."""
    return [round(hardware.inter_node.bandwidth_gbps * 8 * g.devices_per_node, 6) for g in hardware.groups]


def usable_memory_bytes(hardware: HardwareProfile) -> dict[str, int]:
    """Per device type, the bytes of one GPU the planner may fill: hbm_bytes x memory_fraction."""
    return {name: int(d.hbm_bytes * hardware.memory_fraction) for name, d in hardware.device_types.items()}


def usable_memory_text(hardware: HardwareProfile) -> str:
    """The memory limit in words: '67.1 GiB per GPU (90% of 80 GB HBM)', per device type when they differ."""
    parts = [
        f"{d.hbm_bytes * hardware.memory_fraction / 2**30:.1f} GiB per GPU ({hardware.memory_fraction:.0%} of"
        f" {d.hbm_bytes / 1e9:g} GB HBM" + (f", {name})" if len(hardware.device_types) > 1 else ")")
        for name, d in hardware.device_types.items()
    ]
    return ", ".join(parts)


#: the read-only keys `adaptis hardware show --json` adds to a profile, by JSON key
DERIVED_KEYS = ("num_devices", "usable_memory_bytes", "nic_gbit_per_node")


class HardwareProfileFile(HardwareProfile):
    """A hardware profile file: the profile, and optionally the read-only figures `adaptis hardware show
    --json` derives from it, so its output loads back as `--hardware FILE`. A derived key sets nothing: it is
    recomputed from the fields it comes from, so a profile edited from `show --json` output (its hbm_bytes,
    its groups) plans as edited; one that disagrees with them is named in a note (`stale`)."""

    shown_num_devices: int | None = Field(
        None,
        alias="num_devices",
        ge=1,
        description="read-only, recomputed on load: GPUs in all groups (num_nodes x devices_per_node)",
    )
    shown_usable_memory_bytes: dict[str, int] | None = Field(
        None,
        alias="usable_memory_bytes",
        description="read-only, recomputed on load: per device type, the bytes of one GPU the planner may fill"
        " (hbm_bytes x memory_fraction); set memory_fraction to change it",
    )
    shown_nic_gbit_per_node: list[float] | None = Field(
        None,
        alias="nic_gbit_per_node",
        description="read-only, recomputed on load: per group, one node's network bandwidth per direction in Gb/s"
        " (gigabits, as NICs are sold): inter_node.bandwidth_gbps x 8 x devices_per_node; set"
        " inter_node.bandwidth_gbps to change it",
    )

    def stale(self) -> list[str]:
        """A line for each derived key present that disagrees with the fields it is derived from."""
        plain = self.profile()
        got = {
            "num_devices": (self.shown_num_devices, plain.num_devices, "groups"),
            "usable_memory_bytes": (
                self.shown_usable_memory_bytes,
                usable_memory_bytes(plain),
                "hbm_bytes x memory_fraction",
            ),
            "nic_gbit_per_node": (
                self.shown_nic_gbit_per_node,
                nic_gbit_per_node(plain),
                "inter_node.bandwidth_gbps x 8 x devices_per_node",
            ),
        }
        out = []
        for key, (given, derived, source) in got.items():
            if given is None:
                continue
            same = given == derived
            if isinstance(derived, list) and isinstance(given, list) and len(given) == len(derived):
                same = all(abs(a - b) <= 1e-6 * max(1.0, b) for a, b in zip(given, derived, strict=True))
            if not same:
                field = {"usable_memory_bytes": "memory_fraction", "nic_gbit_per_node": "inter_node.bandwidth_gbps"}
                out.append(
                    f"{key} = {json.dumps(given)} is read-only and ignored: {source} give {json.dumps(derived)};"
                    f" change {field.get(key, source)} to change it, and delete {key} (`adaptis hardware show FILE"
                    " --json` writes it afresh)"
                )
        return out

    def profile(self) -> HardwareProfile:
        """The hardware profile itself, without the derived keys."""
        data = self.model_dump(exclude={f"shown_{k}" for k in DERIVED_KEYS})
        return HardwareProfile.model_validate(data)

    @staticmethod
    def shown(hardware: HardwareProfile) -> dict:
        """`hardware` as `adaptis hardware show --json` prints it: the profile and the derived keys."""
        data = hardware.model_dump(mode="json")
        data["num_devices"] = hardware.num_devices
        data["usable_memory_bytes"] = usable_memory_bytes(hardware)
        data["nic_gbit_per_node"] = nic_gbit_per_node(hardware)
        return data
