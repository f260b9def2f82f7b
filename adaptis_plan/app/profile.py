"""`adaptis profile`: per-layer costs measured on this machine, and the executor's own time per action.

Data flow: model spec -> `executor.profile` (torch, imported inside the calls) -> `spec.cost_profile.CostProfile`
-> `ProfileOutcome`, which the CLI writes as a profile file for `--costs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adaptis_plan.core import Layout
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.planfile.io import make_plan
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.units import fmt_duration

if TYPE_CHECKING:  # the executor (torch) is imported only when a plan is run or a model profiled
    from collections.abc import Callable

    from adaptis_plan.executor.profile_estimate import ProfileEstimate


@dataclass(frozen=True)
class ProfileRequest:
    model_arg: str
    device: str = "cpu"
    seq_len: int = 128
    micro_batch_size: int = 1
    dtype: str = "fp32"
    repeats: int = 7  # timed repeats per op, over all rounds
    rounds: int | None = None  # rounds the repeats are spread over (None: `profile.ROUNDS`, at most `repeats`)
    runtime: bool = False  # also the gloo link and the runtime's time per action (2 local ranks)
    recompute: bool = False  # also every decoder block under selective and full recomputation
    head_chunks: tuple[int, ...] = ()  # also the head split into these many vocabulary chunks
    reverse: bool = False  # the distinct layers last to first (`profile_model`)


@dataclass
class ProfileOutcome:
    model: ModelSpec
    profile: CostProfile
    recompute: dict[str, list] = field(default_factory=dict)  # mode -> LayerCostEntry list

    def json_summary(self) -> dict:
        """The profile file's content, plus `recompute` ({mode: entries}) when it was measured."""
        out = self.profile.model_dump(mode="json", exclude_none=True)
        if self.recompute:
            out["recompute"] = {m: [e.model_dump(mode="json") for e in es] for m, es in self.recompute.items()}
        return out


#: `profile_for` says how long a profile will take when its arithmetic alone takes longer than this
PROFILE_NOTE_S = 60.0


def profile_for(req: ProfileRequest, note: Callable[[str], None] | None = None) -> ProfileOutcome:
    """`adaptis profile`: per-layer costs measured on this machine, then (with `runtime`) the gloo link and
    the executor's time per action (`measure_action_overhead`), which the planner and simulator charge.

    Before it starts, `note` hears what the profile asks of the machine when that is a lot
    (`estimate_profile`): its arithmetic alone over `PROFILE_NOTE_S`, or more memory than is free
    (a 70B model's layers at seq 4K on a CPU: hours, and more memory than a laptop has)."""
    from adaptis_plan.executor.link import measure_link
    from adaptis_plan.executor.profile import profile_model, profile_recompute
    from adaptis_plan.executor.profile_estimate import estimate_profile
    from adaptis_plan.inputs.models.load import load_model

    model = load_model(req.model_arg)
    shape: dict[str, Any] = dict(
        seq_len=req.seq_len, micro_batch_size=req.micro_batch_size, device=req.device, dtype=req.dtype
    )
    timing: dict[str, Any] = dict(repeats=req.repeats, **({} if req.rounds is None else {"rounds": req.rounds}))
    if note is not None:
        for line in profile_notes(model, req, estimate_profile(model, head_chunks=req.head_chunks, **shape, **timing)):
            note(line)
    profile = profile_model(model, head_chunks=req.head_chunks, reverse=req.reverse, **timing, **shape)
    if req.runtime:
        link = measure_link(host_costs=req.device == "cpu")
        profile = profile.model_copy(update={"link": link, "action_overhead_s": measure_action_overhead()})
    recompute = profile_recompute(model, **timing, **shape) if req.recompute else {}
    return ProfileOutcome(model, profile, recompute)


def profile_notes(model: ModelSpec, req: ProfileRequest, est: ProfileEstimate) -> list[str]:
    """The lines `profile_for` tells before a long or oversized profile."""
    what = f"profiling {model.name} at seq {req.seq_len} on {req.device}"
    out = []
    if est.seconds > PROFILE_NOTE_S:
        out.append(
            f"note: {what}: {est.distinct} distinct layers, {est.flops / 1e12:,.1f} TFLOP of arithmetic in all, at"
            f" least {fmt_duration(est.seconds)} at this device's {est.rate / 1e9:,.0f} GFLOP/s (small layers take"
            f" longer than their arithmetic); a shorter --seq-len{', --head-chunks none' if req.head_chunks else ''}"
            " or fewer --repeats shortens it"
        )
    if est.free_bytes is not None and est.need_bytes > est.free_bytes:
        out.append(
            f"note: {what} needs about {est.need_bytes / 2**30:,.1f} GiB (every distinct layer's weights, one"
            f" layer's gradients and activations), and {est.free_bytes / 2**30:,.1f} GiB is free: it will likely run"
            " out of memory; a shorter --seq-len needs less"
        )
    return out


def measure_action_overhead(
    *, num_microbatches: int = 16, steps: int = 5, rounds: int = 3, timeout_s: float = 120.0
) -> float:
    """Host time per action that the executor adds to its layers' own work (one rank, one thread).

    Runs a one-stage GPipe plan of a model whose layers do almost no arithmetic (hidden 8, 8
    tokens) through the executor on one rank, and profiles the same layers (`profile_model`);
    the step's excess over M x the layers' profiled F + B, over the number of actions, is what
    the runtime adds per action (Python dispatch, autograd set-up, its own bookkeeping), which
    the planner and simulator charge on top of the profiled layers. P2P is not in it: the link
    model charges transfers. Over `rounds` (run, profile) pairs, the quickest step against the
    quickest profile, at least 0: another process only ever adds time, and a burst of it during one
    run or one profile (a parallel test suite's torchrun next door) made a median of per-round
    differences read 1.1 ms where a quiet machine reads 0-0.05 ms. Each pair is its own launch, seconds
    apart: a launch's steps take milliseconds, so one burst of load can cover every step of a single launch.

    (A two-rank probe, its step over its critical path in actions, counts the layers' own
    dispatch a second time and every hand-off's wake-up: measured 1.2-2.4 ms per action on a
    2-core VM, where this measures 0-0.1 ms; with it, plans of the tiny models were predicted 7-20 %
    slow on F / B schedules.)
    """
    from adaptis_plan.executor.launch import RunOptions, run_plan
    from adaptis_plan.executor.profile import profile_model

    plan, model, num_actions = _overhead_probe(num_microbatches)
    step, layers = math.inf, math.inf
    for _ in range(max(1, rounds)):
        out = run_plan(plan, model, RunOptions(steps=steps, warmup=2, timeout_s=timeout_s), label="overhead probe")
        prof = profile_model(model, seq_len=8, micro_batch_size=1, repeats=steps, rounds=1)
        step = min(step, *map(float, out["step_times_s"]))
        layers = min(layers, sum(len(e.layers) * (e.f_s + e.b_s) for e in prof.entries) * num_microbatches)
    return max(0.0, (step - layers) / num_actions)


def _overhead_probe(num_microbatches: int) -> tuple[PlanFile, ModelSpec, float]:
    """The probe plan of `measure_action_overhead` (one stage of the whole model on one rank), its model,
    and its critical path in actions (all of them: the rank runs them one after another)."""
    import dataclasses

    from adaptis_plan.core import uniform_costs
    from adaptis_plan.schedules import get_spec
    from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MlpSpec

    block = LayerSpec(kind="decoder", attention=AttentionSpec(num_heads=1, num_kv_heads=1, head_dim=8),
                      mlp=MlpSpec(intermediate_size=8))  # fmt: skip
    model = ModelSpec(name="overhead-probe", hidden_size=8, vocab_size=16,
                      layers=[LayerSpec(kind="embedding"), block, block, LayerSpec(kind="head")])  # fmt: skip
    hw = HardwareProfile.model_validate(
        {"name": "probe", "device_types": {"cpu": {"peak_bf16_tflops": 1, "matmul_efficiency": 1, "hbm_bytes": 2**34,
         "hbm_bandwidth_gbps": 1, "source": "probe"}}, "groups": [{"device_type": "cpu", "num_nodes": 1,
         "devices_per_node": 1}], "intra_node": {"bandwidth_gbps": 1, "latency_s": 0, "source": "probe"},
         "inter_node": {"bandwidth_gbps": 1, "latency_s": 0, "source": "probe"}}
    )  # fmt: skip
    training = TrainingConfig(num_microbatches=num_microbatches, micro_batch_size=1, seq_len=8, pp=1)
    spec = get_spec("GPipe")
    layout = Layout(bounds=(0, 4), stage_device=spec.stage_device(1), num_devices=1)
    programs = spec.build(layout.stage_device, 1, num_microbatches)
    # every action costs one unit of "overhead" and nothing else: the step is the critical path in actions
    unit = dataclasses.replace(uniform_costs(4, 1, f=0.0, i=0.0, w=0.0, mem_limit=2.0**34), action_overhead_s=1.0)
    critical = simulate(layout, unit, programs, num_microbatches)
    plan = make_plan(strategy=spec.name, model=model, hardware=hw, training=training, layout=layout,
                     programs=programs, result=critical, costs=unit)  # fmt: skip
    return plan, model, critical.step_time_s
