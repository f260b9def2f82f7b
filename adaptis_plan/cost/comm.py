"""Communication of the whole training configuration: where each parallel group's ranks sit, what
its collectives cost, the data-parallel gradient sync and the optimizer step.

Data flow: `TrainingConfig` (tp, cp, ep, dp, pp, zero) + `HardwareProfile` -> `GroupLinks`: one
`GroupLink` per dimension -> `cost.analytic` times the tensor-, context- and expert-parallel
collectives inside each op with it, and `step_extras` prices what runs once per step around the
pipeline (gradient sync, parameter all-gather, optimizer). Imports only the specs. Never prints.

Rank placement: `spec.ranks.RankLayout` (Megatron-LM's order, tp fastest). A group of `size` ranks at
`stride` fits in one node when stride x size <= devices per node; otherwise `per_node` =
devices_per_node // stride of its members (at least 1) share each node.

Collectives (NCCL's ring algorithms; nccl-tests' PERFORMANCE.md defines the bus bandwidth they run
at): on n ranks an all-gather or reduce-scatter of S bytes (the whole, unsharded tensor) takes
(n - 1) x (latency + S / n / busbw); an all-reduce twice that. busbw:
- inside a node: the intra-node link's `bandwidth_gbps` (NVLink; the tensor-parallel collectives
  have always used it);
- across nodes: min(intra-node bandwidth, per_node x inter-node bandwidth). Each GPU has its own
  NIC (`inter_node.bandwidth_gbps` is per GPU) and NCCL runs one ring per NIC, so the k members of a
  group on one node cross the network on k NICs at once: the node's NICs are shared by the groups
  whose members it holds. Published: DGX A100 (8 x 200 Gb/s HDR = 8 x 25 GB/s) multi-node all-reduce
  reaches ~190 GB/s busbw (NVIDIA/nccl-tests issues 149, 178: 8 x 25 = 200 predicted), a
  one-GPU-per-node group gets one NIC's 25 GB/s.
- All-to-all (expert dispatch / combine) of S bytes per rank: S x (k - 1) / n over the intra-node
  link and S x (n - k) / n over the rank's own NIC, concurrently, plus (n - 1) latencies.

Data-parallel gradient sync, per pipeline rank, over its dense parameters on the dp x cp group and
its expert parameters on the dp x cp / ep group (Megatron reduces over data- and context-parallel
ranks together). Gradients are reduced in fp32 (Megatron-LM forces
`accumulate_allreduce_grads_in_fp32` with bf16: megatron/training/arguments.py):
- ZeRO 0: all-reduce of the fp32 gradients, once per step (Megatron's DDP: gradient accumulation
  runs under `no_sync` and the buckets are reduced during the last micro-batch's backward only);
- ZeRO 1 (Megatron's distributed optimizer): reduce-scatter of the fp32 gradients once per step,
  during the last micro-batch's backward as ZeRO 0's all-reduce, then an all-gather of the updated
  bf16 parameters;
- ZeRO 2 (DeepSpeed's ZeRO-2): gradients are sharded, so a rank keeps only its shard of the
  accumulated gradients and must reduce-scatter every micro-batch's, bucket by bucket during that
  micro-batch's backward (DeepSpeed's stage_1_and_2.py reduces after every backward, not only at the
  accumulation boundary: deepspeedai/DeepSpeed issue 2252): M reduce-scatters, one all-gather;
- ZeRO 3: parameters are sharded too: each stage all-gathers its parameters before every F and
  every backward and reduce-scatters its gradients after it, prefetched one layer ahead (FSDP);
  `cost.analytic` prices that inside the ops (`zero3_collectives`); nothing is left for the step end.

How much of it hides (`dp_link_end`, used by `judge.training_step` and, in closed form, by the
configuration search): a pipeline rank's data-parallel traffic runs on one link, its share of the
node's NICs (or NVLink, for a group inside a node), which serves one transfer after another (a
FIFO queue, as NCCL runs the collectives of one communicator in issue order on one stream). Each
transfer becomes available when its gradients start to appear (the buckets go out during the
backward, Megatron's --overlap-grad-reduce, DeepSpeed's overlap_comm) and is served once the link
is free: ZeRO 0/1's one all-reduce / reduce-scatter from the start of the rank's last micro-batch
backward, ZeRO 2's reduce-scatter of micro-batch k from the start of micro-batch k's backward. The
parameter all-gather (ZeRO 1/2, Megatron's --overlap-param-gather) goes first, at the start of the
step, under the first micro-batch's forward, and holds the link until it is done. Whatever the
link still has to send when the rank's last action ends is exposed, so the hidden sync never
exceeds (the rank's finish - its earliest backward start), and the link never carries more than a
step's worth of traffic per step. ZeRO 3's per-op gathers and reduce-scatters take the same link
inside each op (an op lasts at least its collective, and a rank's ops run one at a time), so they
queue one after another too. Without overlap every one of these transfers is exposed: ZeRO 0-2's
after the pipeline drains, ZeRO 3's added to its op. Not modelled: the pipeline's own inter-node
sends and receives use the same NIC as a data-parallel group that crosses nodes; the simulator
times them on a link of their own, so where both are busy at once the step is under-estimated.

Optimizer step (Adam, fp32 master weights, multi-tensor apply: memory-bound): per parameter it
reads the fp32 master, m, v and the fp32 gradient (16 bytes) and writes master, m, v (12) and the
bf16 weight (2): 30 bytes over HBM (4 + 4 + 4 + 4 reads, the same writes less the gradient, as
apex's / torch's fused Adam kernels move them), on the parameters the rank owns after sharding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adaptis_plan.spec.hardware import HardwareProfile, LinkSpec
from adaptis_plan.spec.ranks import RankLayout
from adaptis_plan.spec.training import TrainingConfig

GRAD_REDUCE_BYTES = 4  # fp32 gradients (module docstring)
ADAM_BYTES_PER_PARAM = 30.0  # fp32 master, m, v, gradient read; master, m, v, bf16 weight written


@dataclass(frozen=True)
class GroupLink:
    """The ranks of one parallel group and the links their collectives run on."""

    size: int
    per_node: int  # members of the group on one node (size when the group fits in a node)
    intra_bps: float
    intra_latency_s: float
    inter_bps: float
    inter_latency_s: float

    @property
    def in_node(self) -> bool:
        return self.per_node >= self.size

    @property
    def bus_bps(self) -> float:
        if self.in_node:
            return self.intra_bps
        return min(self.intra_bps, self.per_node * self.inter_bps)

    @property
    def latency_s(self) -> float:
        return self.intra_latency_s if self.in_node else self.inter_latency_s

    def ring(self, kind: str, nbytes: float) -> float:
        """All-gather / reduce-scatter (one ring pass) or all-reduce (two) of `nbytes`, whole tensor."""
        n = self.size
        if n <= 1:
            return 0.0
        one = (n - 1) * (self.latency_s + nbytes / n / self.bus_bps)
        return 2.0 * one if kind == "all_reduce" else one

    def all_to_all(self, nbytes: float) -> float:
        """Each rank sends (n-1)/n of its `nbytes`: inside the node over NVLink, the rest on its NIC."""
        n, k = self.size, min(self.per_node, self.size)
        if n <= 1:
            return 0.0
        intra = nbytes * (k - 1) / n / self.intra_bps
        inter = nbytes * (n - k) / n / self.inter_bps
        return max(intra, inter) + (n - 1) * self.latency_s

    def seconds(self, kind: str, nbytes: float) -> float:
        return self.all_to_all(nbytes) if kind == "all_to_all" else self.ring(kind, nbytes)


def _group(size: int, stride: int, devices_per_node: int, intra: LinkSpec, inter: LinkSpec) -> GroupLink:
    per_node = size if stride * size <= devices_per_node else max(1, devices_per_node // stride)
    return GroupLink(
        size=size,
        per_node=min(per_node, size),
        intra_bps=intra.bandwidth_gbps * 1e9,
        intra_latency_s=intra.latency_s,
        inter_bps=inter.bandwidth_gbps * 1e9,
        inter_latency_s=inter.latency_s,
    )


@dataclass(frozen=True)
class GroupLinks:
    """Every parallel group of one configuration on a hardware profile (module docstring)."""

    tp: GroupLink
    cp: GroupLink
    ep: GroupLink
    dp: GroupLink  # the dense parameters' gradient group: dp x cp ranks
    edp: GroupLink  # the expert parameters' gradient group: dp x cp / ep ranks
    zero: int = 1
    param_bytes: int = 2  # bytes of one weight in the training dtype
    tp_overlap: bool = False  # tensor-parallel collectives hide under the op's GEMMs
    dp_overlap: bool = True  # ZeRO-3's per-op collectives hide under the op's compute

    def group(self, dim: str) -> GroupLink:
        return getattr(self, dim)


def devices_per_node(hardware: HardwareProfile) -> int:
    """GPUs per node: the smallest group's (a placement spanning groups takes the tighter one)."""
    return min(g.devices_per_node for g in hardware.groups)


def placement(hardware: HardwareProfile, training: TrainingConfig) -> GroupLinks:
    """The links of every group of `training`'s rank layout on `hardware`."""
    ranks = RankLayout.of(training)
    dpn = devices_per_node(hardware)

    def link(dim: str) -> GroupLink:
        return _group(ranks.size(dim), ranks.stride(dim), dpn, hardware.intra_node, hardware.inter_node)

    return GroupLinks(
        tp=link("tp"),
        cp=link("cp"),
        ep=link("ep"),
        dp=link("dp_cp"),
        edp=link("edp"),
        zero=training.zero_in_effect,
        param_bytes=4 if training.dtype == "fp32" else 2,
        tp_overlap=training.tp_comm_overlap,
        dp_overlap=training.dp_overlap,
    )


@dataclass(frozen=True)
class StepExtras:
    """What one pipeline rank spends around the pipeline per step (seconds) and why."""

    grad_sync_s: float  # reduce-scatter / all-reduce of its gradients, all of them
    param_gather_s: float  # all-gather of updated parameters (ZeRO >= 1)
    optimizer_s: float  # Adam over the parameters it owns
    num_syncs: int = 1  # the equal transfers `grad_sync_s` is made of (ZeRO 2: one per micro-batch)
    after_backward: bool = False  # the sync starts after the rank's last backward (`reduces_after_backward`)


def step_extras(
    dense_params: float, expert_params: float, training: TrainingConfig, place: GroupLinks, hbm_bps: float
) -> StepExtras:
    """Gradient sync, parameter gather and optimizer time of one pipeline rank holding
    `dense_params` + `expert_params` parameters per tensor-parallel rank (module docstring)."""
    z, m = training.zero_in_effect, training.num_microbatches
    e = 4.0 if training.dtype == "fp32" else 2.0
    sync = gather = 0.0
    for params, group in ((dense_params, place.dp), (expert_params, place.edp)):
        if params <= 0 or group.size <= 1:
            continue
        grads = params * GRAD_REDUCE_BYTES
        if z == 0:
            sync += group.ring("all_reduce", grads)
        elif z in (1, 2):
            sync += group.ring("reduce_scatter", grads) * (m if z == 2 else 1)
            gather += group.ring("all_gather", params * e)
    owned = dense_params / (place.dp.size if z >= 1 else 1) + expert_params / (place.edp.size if z >= 1 else 1)
    syncs = m if z == 2 and sync > 0 else 1
    return StepExtras(sync, gather, owned * ADAM_BYTES_PER_PARAM / hbm_bps, syncs, training.reduces_after_backward)


def exposed(comm_s: float, window_s: float, overlap: bool) -> float:
    """What of `comm_s` is left when it may hide under `window_s` of compute."""
    return max(0.0, comm_s - window_s) if overlap else comm_s


def dp_link_end(free_s: float, transfers: Sequence[tuple[float, float]]) -> float:
    """When a rank's data-parallel link has sent `transfers` ((available at, seconds) each), served one
    after another in the order they become available, the link being busy until `free_s` (module
    docstring)."""
    t = free_s
    for ready, seconds in sorted(transfers):
        t = max(t, ready) + seconds
    return t
