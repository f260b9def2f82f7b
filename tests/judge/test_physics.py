"""Physical invariants of the whole training step (`judge.training_step`, `cost.comm`'s data-parallel
queue, ZeRO-3's per-op collectives in `cost.analytic`) and of the configuration lower bound
(`judge.configuration_bound`), over random small models, clusters and configurations.

Each case: a small model (a random LLaMA-shaped one built here, or a CPU-sized zoo model), a built-in
profile sized to tp x pp x dp GPUs with its NIC and NVLink bandwidths scaled (down to where the
data-parallel traffic outweighs the compute), and a legal tp / pp / dp / ZeRO / micro-batch point,
planned with a classic schedule and judged by the simulator. The windows a transfer may hide under
are taken from the simulated action times here, not from what `training_step` reports.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adaptis_plan.core import CostTable, Layout, Programs
from adaptis_plan.cost.source import CostTables
from adaptis_plan.cost.table import tensor_parallel_sizes, zero3_seconds
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import cluster, load_hardware
from adaptis_plan.inputs.models.hf import from_hf_config
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.judge.configuration_bound import configuration_bound
from adaptis_plan.judge.simulate import SimResult, simulate
from adaptis_plan.judge.training_step import TrainingStep, device_extras, training_step
from adaptis_plan.search.generator import classic_candidate
from adaptis_plan.search.screen import _screen, _screen_bound
from adaptis_plan.search.space import Point, Request
from adaptis_plan.spec.config import RuntimeSettings
from adaptis_plan.spec.hardware import DeviceGroupSpec, HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

pytestmark = pytest.mark.unit

#: relative float slack of every comparison (sums of a few hundred float terms)
TOL = 1e-9
CASES = settings(
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
ZOO = ("tiny-llama", "tiny-gemma", "tiny-deepseek")
#: classic schedules drawn where pp > 1 (1F1B where the drawn one does not apply to the case); the
#: zero-bubble ones defer W, which stretches a rank's last backward: the hardest case for the sync windows
STRATEGIES = ["1F1B", "GPipe", "Interleaved1F1B", "ZBVZeroBubble", "InterleavedZeroBubble", "ZBVZeroBubble"]


@dataclass(frozen=True)
class Case:
    model: ModelSpec
    hardware: HardwareProfile
    training: TrainingConfig
    strategy: str


@st.composite
def _model(draw: st.DrawFn) -> ModelSpec:
    if draw(st.booleans()):
        return load_model(draw(st.sampled_from(ZOO)))
    heads = draw(st.sampled_from([2, 4, 8]))
    head_dim = draw(st.sampled_from([16, 32, 64]))
    config = {
        "model_type": "llama",
        "hidden_size": heads * head_dim,
        "intermediate_size": heads * head_dim * draw(st.sampled_from([2, 3, 4])),
        "num_hidden_layers": draw(st.integers(2, 10)),
        "num_attention_heads": heads,
        "num_key_value_heads": heads // draw(st.sampled_from([1, 2])),
        "vocab_size": draw(st.sampled_from([1024, 8192, 32000])),
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    return from_hf_config(config, name="random-llama")


def _scaled(hw: HardwareProfile, nic: float, nvlink: float) -> HardwareProfile:
    """`hw` with its inter-node links `nic` times and its intra-node ones `nvlink` times as fast."""

    def scale(link, k):  # noqa: ANN001, ANN202
        update = {"bandwidth_gbps": link.bandwidth_gbps * k}
        if link.p2p_bandwidth_gbps is not None:
            update["p2p_bandwidth_gbps"] = link.p2p_bandwidth_gbps * k
        return link.model_copy(update=update)

    return hw.model_copy(update={"inter_node": scale(hw.inter_node, nic), "intra_node": scale(hw.intra_node, nvlink)})


def _memory(hw: HardwareProfile, k: float) -> HardwareProfile:
    types = {n: t.model_copy(update={"hbm_bytes": int(t.hbm_bytes * k)}) for n, t in hw.device_types.items()}
    return hw.model_copy(update={"device_types": types})


@st.composite
def cases(draw: st.DrawFn, zero3: bool = True) -> Case:
    model = draw(_model())
    sizes = [n for _, n in tensor_parallel_sizes(model)]
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if all(n % t == 0 for n in sizes)]))
    decoders = sum(layer.kind == "decoder" for layer in model.layers)
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if p <= decoders]))
    dp = draw(st.sampled_from([1, 2, 4, 8, 8, 16]))
    experts = [layer.moe.num_experts for layer in model.layers if layer.moe is not None]
    ep = draw(st.sampled_from([e for e in (1, 2, 4) if dp % e == 0 and all(n % e == 0 for n in experts)]))
    zero = draw(st.sampled_from((0, 1, 2, 2, 3) if zero3 else (0, 1, 2, 2))) if dp > 1 else 0
    m = draw(st.integers(1, 8))
    strategy = draw(st.sampled_from(STRATEGIES if pp > 1 else ["1F1B"]))
    hw = cluster(load_hardware(draw(st.sampled_from(["h100", "h200", "a100"]))), tp * pp * dp)
    # nodes of fewer GPUs than the profile's, so that data-parallel groups cross them too
    group = hw.groups[0]
    per_node = draw(st.sampled_from([k for k in (1, 2, 4, 8) if tp <= k <= group.devices_per_node]))
    nodes = group.num_nodes * group.devices_per_node // per_node
    hw = hw.model_copy(update={"groups": [DeviceGroupSpec(device_type=group.device_type, num_nodes=nodes,
                                                          devices_per_node=per_node)]})  # fmt: skip
    # down to where a step's data-parallel traffic of these small models outweighs their compute
    nic = 10 ** draw(st.floats(-5, 0.5))
    nvlink = 10 ** draw(st.floats(-4, 0.3))
    hw = _scaled(hw, nic, nvlink)
    training = TrainingConfig(
        num_microbatches=m,
        micro_batch_size=draw(st.sampled_from([1, 2])),
        seq_len=draw(st.sampled_from([128, 256, 512, 1024])),
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        zero=zero,
        dp_overlap=draw(st.booleans()) if dp > 1 else True,
        stage_keeps_unsharded=draw(st.booleans()),  # torch's pipeline stages (--target torch / torchtitan)
    )
    return Case(model, hw, training, strategy)


@dataclass(frozen=True)
class Planned:
    layout: Layout
    programs: Programs
    result: SimResult
    step: TrainingStep
    costs: CostTable


def _plan(case: Case) -> Planned:
    costs = CostTables(case.hardware, case.training).table(case.model)
    m = case.training.num_microbatches
    try:
        cand = classic_candidate(costs, m, case.strategy)
    except InputError:  # the drawn schedule's own rules (stages per device, micro-batches)
        cand = classic_candidate(costs, m, "1F1B")
    result = cand.result or simulate(cand.layout, costs, cand.programs, m)
    step = training_step(
        cand.layout, cand.programs, result, case.model, case.training, case.hardware, costs.device_names
    )
    return Planned(cand.layout, cand.programs, result, step, costs)


def _windows(programs: Programs, result: SimResult) -> list[tuple[float, float, float, float]]:
    """Per rank, from the simulated times: (finish, earliest backward start, the latest micro-batch's
    backward start, micro-batch 0's forward seconds)."""
    out = []
    for prog, times in zip(programs, result.times, strict=True):
        finish = max(end for _, end in times)
        starts: dict[int, float] = {}
        first_f = 0.0
        for a, (start, end) in zip(prog, times, strict=True):
            if a.op == "F":
                first_f += (end - start) if a.mb == 0 else 0.0
            else:
                starts[a.mb] = min(start, starts.get(a.mb, math.inf))
        out.append((finish, min(starts.values()), max(starts.values()), first_f))
    return out


def _le(a: float, b: float) -> bool:
    return a <= b + TOL * max(1.0, abs(a), abs(b))


def _one_per_node(gpus: int, nic: float) -> HardwareProfile:
    hw = _scaled(cluster(load_hardware("h100"), gpus), nic, 1.0)
    group = DeviceGroupSpec(device_type=hw.groups[0].device_type, num_nodes=gpus, devices_per_node=1)
    return hw.model_copy(update={"groups": [group]})


#: ZeRO-2 under a zero-bubble schedule on slow NICs: its deferred W stretch the last micro-batch's
#: backward, and M times that window once hid more sync than the rank had compute beside it
ZERO2_ZB = Case(
    load_model("tiny-llama"),
    _one_per_node(32, 1e-2),
    TrainingConfig(num_microbatches=8, micro_batch_size=1, seq_len=512, pp=4, dp=8, zero=2),
    "ZBVZeroBubble",
)
#: ZeRO-3 without data-parallel overlap: its per-op gathers and reduce-scatters add to the ops
ZERO3_EXPOSED = Case(
    load_model("tiny-llama"),
    _one_per_node(16, 1e-2),
    TrainingConfig(num_microbatches=4, micro_batch_size=1, seq_len=512, pp=2, dp=8, zero=3, dp_overlap=False),
    "1F1B",
)


@given(cases())
@example(ZERO2_ZB)
@settings(CASES, max_examples=200)
def test_exposed_sync_is_at_least_what_its_window_cannot_hold(case: Case) -> None:
    """Per rank and ZeRO stage: the exposed gradient sync is at least the sync less the compute it may
    overlap (ZeRO 0/1: from the last micro-batch's backward start, ZeRO 2: from the first backward
    start, none where the stages reduce after their last backward) and all of it without overlap; the
    hidden part never exceeds finish - first backward."""
    plan = _plan(case)
    t, step = case.training, plan.step
    extras = device_extras(plan.layout, case.model, t, case.hardware, plan.costs.device_names)
    for d, (x, rank, (finish, first, last, first_f)) in enumerate(
        zip(extras, step.ranks, _windows(plan.programs, plan.result), strict=True)
    ):
        assert rank.grad_sync_s == pytest.approx(x.grad_sync_s, rel=1e-12), d
        assert rank.finish_s == finish
        got = rank.grad_sync_exposed_s
        assert _le(0.0, got) and _le(got, x.grad_sync_s), d
        if not t.dp_overlap:
            assert got == pytest.approx(x.grad_sync_s, rel=1e-12), d
            continue
        assert _le(x.grad_sync_s - (finish - first), got), (d, t.zero)
        if t.reduces_after_backward:  # torch's stages reduce once, after the rank's last backward
            assert got == pytest.approx(x.grad_sync_s, rel=1e-12), d
        elif t.zero_in_effect == 2:  # micro-batch k's reduce-scatter only from its own backward on: the last one's too
            assert _le(x.grad_sync_s / t.num_microbatches - (finish - last), got), d
        else:
            assert _le(x.grad_sync_s - (finish - last), got), (d, t.zero)
        # the gather is exposed beyond micro-batch 0's forward, the whole step waits for the worst rank's
        assert _le(x.param_gather_s - first_f, step.param_gather_exposed_s), d
    if t.zero_in_effect == 3 or t.dp * t.cp == 1:
        assert step.grad_sync_s == 0.0 and step.param_gather_exposed_s == 0.0


@given(cases())
@example(ZERO2_ZB)
@example(ZERO3_EXPOSED)
@settings(CASES, max_examples=140)
def test_the_step_covers_every_rank_s_compute_and_every_link_s_traffic(case: Case) -> None:
    """The whole step is at least every rank's last action + its optimizer step, at least every rank's
    gradient sync + parameter gather + optimizer step (its data-parallel link sends one after another,
    once per step) and at least its first backward's start + its sync + its optimizer step, and under ZeRO-3 every rank is busy at least as long as its per-op gathers and
    reduce-scatters take its link (one micro-batch's F, backward and W each wait for their own)."""
    plan = _plan(case)
    t, step, layout, result = case.training, plan.step, plan.layout, plan.result
    assert _le(result.step_time_s, step.step_time_s)
    extras = device_extras(layout, case.model, t, case.hardware, plan.costs.device_names)
    per_layer = zero3_seconds(case.model, case.hardware, t) if t.zero_in_effect == 3 else None
    if per_layer is not None:  # the same ops without ZeRO-3's collectives
        plain = CostTables(case.hardware, t.model_copy(update={"zero": 1})).table(case.model)
        compute = simulate(layout, plain, plan.programs, t.num_microbatches)
    for d, (x, (finish, first, *_)) in enumerate(zip(extras, _windows(plan.programs, result), strict=True)):
        assert _le(finish + x.optimizer_s, step.step_time_s), d
        assert _le(x.grad_sync_s + x.param_gather_s + x.optimizer_s, step.step_time_s), d
        # no gradient leaves before the rank's first backward starts, and its optimizer step waits for all
        assert _le(first + x.grad_sync_s + x.optimizer_s, step.step_time_s), d
        if per_layer is not None:
            held = [layer for s in layout.stages_of(d) for layer in layout.layers(s)]
            traffic = t.num_microbatches * float(per_layer[held].sum())
            assert _le(traffic, result.busy_s[d]), d
            assert _le(traffic, step.step_time_s), d
            if not t.dp_overlap:  # nothing prefetched: every op waits for its own collective, then computes
                assert _le(compute.busy_s[d] + traffic, result.busy_s[d]), d


@given(cases(), st.floats(1.0, 100.0), st.floats(1.0, 100.0), st.booleans())
@settings(CASES, max_examples=110)
def test_more_bandwidth_never_makes_the_step_longer(case: Case, nic: float, nvlink: float, both: bool) -> None:
    """The same schedule on faster NICs (and, in half the cases, faster NVLink) is never slower."""
    plan = _plan(case)
    faster = _scaled(case.hardware, nic, nvlink if both else 1.0)
    costs = CostTables(faster, case.training).table(case.model)
    result = simulate(plan.layout, costs, plan.programs, case.training.num_microbatches)
    again = training_step(plan.layout, plan.programs, result, case.model, case.training, faster, costs.device_names)
    assert _le(again.step_time_s, plan.step.step_time_s)


def _request(t: TrainingConfig, **pipeline: str) -> Request:
    """The configuration request of exactly `t`'s cluster and batch, its runtime settings and `pipeline`."""
    return Request(
        gpus=t.tp * t.pp * t.dp,
        global_batch_size=t.dp * t.micro_batch_size * t.num_microbatches,
        seq_len=t.seq_len,
        pipeline=dataclasses.replace(
            Request.pipeline, target="torchtitan" if t.stage_keeps_unsharded else "adaptis", **pipeline
        ),
        runtime=RuntimeSettings(attention=t.attention, tp_comm_overlap=t.tp_comm_overlap, dp_overlap=t.dp_overlap),
    )


@given(cases(zero3=False), st.floats(-0.2, 1.2), st.floats(1.0, 3.0))
@settings(CASES, max_examples=50)
def test_more_memory_never_makes_the_screened_step_worse(case: Case, where: float, more: float) -> None:
    """A point screened with a fixed classic schedule on more memory takes its first recomputation
    mode that fits no later in none < selective < full, which only removes work: never a longer step.
    The smaller memory lies about `where` of the way from what 1F1B peaks at under full recomputation to
    what it peaks at without, so that the modes that fit change between the two."""
    t = case.training
    req = _request(t, strategy="1F1B")
    point = Point(t.tp, t.pp, t.dp, t.cp, t.ep, t.zero, t.micro_batch_size, t.num_microbatches)
    peak = {}
    for mode in ("none", "full"):
        planned = _plan(Case(case.model, case.hardware, t.model_copy(update={"recompute": mode}), "1F1B"))
        peak[mode] = max(planned.result.peak_memory_bytes)
    limit = float(planned.costs.mem_limit_bytes.max())
    hw = _memory(case.hardware, (peak["full"] + where * (peak["none"] - peak["full"])) / limit)
    steps, modes = [], []
    for h in (hw, _memory(hw, more)):
        row = _screen_bound(case.model, h, req, point)
        got = _screen(case.model, h, req, row, ("none", "selective", "full")) if row.status != "out_of_memory" else None
        fits = got is not None and got.step is not None
        steps.append(got.step.step_time_s if fits else math.inf)
        modes.append(got.mode if fits else None)
    assert _le(steps[1], steps[0]), modes


@given(cases())
@settings(CASES, max_examples=110)
def test_the_configuration_bound_never_exceeds_a_plan_s_step(case: Case) -> None:
    """`configuration_bound`'s bound of a point (any partition, schedule and recomputation there) is at
    most the whole step of the classic plan at that point."""
    t = case.training
    req = _request(t)
    point = Point(t.tp, t.pp, t.dp, t.cp, t.ep, t.zero, t.micro_batch_size, t.num_microbatches)
    step = _plan(case).step
    verdict = configuration_bound(case.model, case.hardware, point.training(req, "none"))
    assert not verdict.fits or _le(verdict.bound_s, step.step_time_s)
