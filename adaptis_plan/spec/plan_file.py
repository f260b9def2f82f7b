"""The plan file (pydantic boundary model): the one artifact `plan` writes and `simulate`,
`export` and `run` read.

Core fields are a contract (schemas/plan.schema.json is generated from this module). A plan stands alone: beside the core
fields it embeds the model spec as planned (`model.spec`: layers with kinds and shapes, the
head in its vocabulary chunks, no weights), the hardware profile (`hardware.profile`), the
training settings (`training`) and the costs it was planned with (`costs`: the cost source,
the measured profile when one was used, and what every action of every stage cost), so no
other file is needed to simulate, export or run it.

Schema version 2. Each device's program is written in the documented form, one object per
action (`{"op", "stage", "mb", "start_s", "end_s"}`, each on one line of the file). A shorter
form is read too: `actions` as strings in torch's notation (`"7I3"` = stage 7, op I,
micro-batch 3) with `start_s` / `end_s` as parallel arrays (optional), which is handy for
hand-written plans; in memory every action is a `PlanAction` with those five fields either way.

Structural checks that need only the file itself live here (stages cover every layer once, in
order, non-empty; devices in range; action indices within the plan's own sizes, checked before
anything is allocated by them); order checks (every (stage, mb) has its F and B or I + W on
the right device) are done by `adaptis_plan.judge.semantics` when the plan is read. Imports
only the other boundary models in `spec/`.

Every count and index has a physical-sense bound here (`spec.limits`), so the semantics, which
checks indices against the plan's own sizes, never meets a number it cannot hold. Simulated
times and memory are only required to be finite: they are outputs, whatever the inputs' sizes.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal, NamedTuple, cast

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    PlainValidator,
    ValidationError,
    model_serializer,
    model_validator,
)

from adaptis_plan.spec.base import StrictModel
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.limits import MAX_HEAD_CHUNKS, MAX_LAYERS, MAX_MICROBATCHES, MAX_PP
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig

#: The plan format this version writes and reads.
PLAN_SCHEMA_VERSION = 2

_ACTION_RE = re.compile(r"(\d{1,9})([FBIW])(\d{1,9})")
_OPS = ("F", "B", "I", "W")


class _Strict(StrictModel):
    model_config = ConfigDict(frozen=False)


class PlanModelRef(_Strict):
    """Which model the plan is for."""

    name: str = Field(description="the model's name (a built-in name is found again by `simulate` / `run`)")
    fingerprint: str = Field(description="sha256 of the normalized model spec")
    num_layers: int = Field(ge=2, le=MAX_LAYERS, description="layers as planned (with the head's vocabulary chunks)")
    head_chunks: int = Field(
        1, ge=1, le=MAX_HEAD_CHUNKS, description="the LM head is split into this many vocabulary chunks"
    )
    spec: ModelSpec = Field(
        description="the model as planned: layers with kinds and shapes, the head in its vocabulary chunks; no weights"
    )


class PlanHardwareRef(_Strict):
    """Which hardware profile the plan is for."""

    name: str = Field(description="the profile's name (a built-in name is found again by `simulate`)")
    fingerprint: str = Field(description="sha256 of the profile's numbers (name and description excluded)")
    profile: HardwareProfile = Field(description="the hardware profile the plan was made for")


Recompute = Literal["none", "selective", "op", "full"]


class PlanStage(_Strict):
    """A run of consecutive layers executed as one unit on one device."""

    stage: int = Field(ge=0, lt=MAX_LAYERS, description="stage id: its position along the model, from 0")
    device: int = Field(ge=0, lt=MAX_PP, description="the pipeline rank that runs the stage")
    layers: tuple[Annotated[int, Field(ge=0, le=MAX_LAYERS)], Annotated[int, Field(ge=0, le=MAX_LAYERS)]] = Field(
        description="half-open [start, stop) layer indices"
    )
    recompute: Recompute = Field(
        "none",
        description=(
            "activation recomputation of the stage's decoder blocks: none (keep every activation until the"
            " backward), selective (keep all but the attention core's, recomputed in the backward), op"
            " (torchtitan's per-op selective checkpointing: keep the block input, every other matmul's and the"
            " attention kernel's outputs; the backward reruns the rest) or full"
            " (keep only each block's input; the backward reruns the block's forward first)"
        ),
    )


class PlanStageCosts(_Strict):
    """What every action of one stage cost as planned, on the stage's device."""

    stage: int = Field(ge=0, lt=MAX_LAYERS, description="the stage, in model order")
    f_s: NonNegativeFloat = Field(
        description="one forward (F), seconds, the runtime's per-action overhead included, and on CPU ranks with a"
        " measured link the host time of the messages it sends and receives (so do I and B)"
    )
    i_s: NonNegativeFloat = Field(description="one backward for inputs (I), seconds")
    w_s: NonNegativeFloat = Field(description="one backward for weights (W), seconds")
    w_hot_s: NonNegativeFloat | None = Field(
        None,
        description="one W that runs right after its own I on the device, seconds (its inputs still in cache;"
        " from a profile that measured it; absent: w_s)",
    )
    b_s: NonNegativeFloat = Field(description="one full backward (B), seconds")
    act_bytes: NonNegativeFloat = Field(description="activation bytes one F allocates until its I / B")
    act_w_bytes: NonNegativeFloat = Field(description="of act_bytes, what W still needs after I")
    recv_act_s: NonNegativeFloat = Field(
        description="moving the previous stage's activation here, seconds (0 on the same device)"
    )
    send_grad_s: NonNegativeFloat = Field(
        description="moving this stage's input gradient back to the previous stage, seconds (0 on the same device)"
    )


class PlanCosts(_Strict):
    """The costs the plan was made with."""

    source: Literal["analytic", "measured", "paper"] = Field(
        description="analytic: adaptis' cost model on the hardware profile; measured: `profile` replaced the"
        " per-layer times and activation bytes it lists; paper: the AdaPtis paper's profiled per-layer ratios"
        " (`--costs paper`), absolute time from the analytic reference layer"
    )
    profile: CostProfile | None = Field(None, description="the measured layer-cost profile, when one was used")
    action_overhead_s: NonNegativeFloat = Field(0.0, description="the runtime's host time charged per action")
    static_bytes: list[NonNegativeFloat] = Field(
        description="per device: weights, gradients and optimizer state of its stages"
    )
    mem_limit_bytes: list[NonNegativeFloat] = Field(description="per device: the memory the plan had to fit in")
    stages: list[PlanStageCosts] = Field(description="per stage, in stage order: what each of its actions cost")


class PlanAction(NamedTuple):
    """One action of a device's program with its simulated start and end (seconds)."""

    op: str
    stage: int
    mb: int
    start_s: float = 0.0
    end_s: float = 0.0

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.mb}"


class PlanActionRecord(_Strict):
    """The documented object form of one action: how plans are written; the string form is read too."""

    op: Literal["F", "B", "I", "W"] = Field(
        description="F forward, B full backward, I backward for inputs, W backward for weights"
    )
    stage: int = Field(ge=0, lt=MAX_LAYERS, description="the stage it runs (on this device)")
    mb: int = Field(ge=0, lt=MAX_MICROBATCHES, description="the micro-batch it runs")
    start_s: float = Field(0.0, ge=0, description="simulated start, seconds from the step's start")
    end_s: float = Field(0.0, ge=0, description="simulated end, seconds from the step's start")


_ACTIONS_RE = re.compile(r"(?:\d{1,9}[FBIW]\d{1,9},)*\d{1,9}[FBIW]\d{1,9}")
_new_tuple = tuple.__new__


def _parse_strings(value: list[str]) -> list[tuple[str, int, int]]:
    """Action strings -> (op, stage, mb); one regex pass over the joined program (a plan can hold
    hundreds of thousands of actions), falling back to item by item to name a bad one."""
    if not value:
        return []
    if all(type(a) is str for a in value):
        joined = ",".join(value)
        if _ACTIONS_RE.fullmatch(joined):
            return [(op, int(st), int(mb)) for st, op, mb in _ACTION_RE.findall(joined)]
    for k, item in enumerate(value):
        if not isinstance(item, str) or not _ACTION_RE.fullmatch(item):
            shown = repr(item[:30]) if isinstance(item, str) else type(item).__name__
            raise ValueError(f"[{k}] = {shown}: not an action like '2F0' or '7I3' (stage, op F/B/I/W, micro-batch)")
    raise AssertionError("unreachable: every item matched")


def _parse_actions(value: Any) -> list:
    """Action strings (`"7I3"`, kept as (op, stage, mb) until their times are attached), action
    records or `PlanAction`s -> the device's actions."""
    if not isinstance(value, list):
        raise ValueError("must be a list of actions like '2F0' or {op, stage, mb} objects")
    if not value or isinstance(value[0], str):
        return _parse_strings(value)
    out: list[PlanAction] = []
    for k, item in enumerate(value):
        if isinstance(item, PlanAction):
            out.append(item)
        elif type(item) is dict and (fast := _fast_record(item)) is not None:
            out.append(fast)
        elif isinstance(item, dict):
            try:
                rec = PlanActionRecord.model_validate(item)
            except ValidationError as e:
                err = e.errors(include_url=False)[0]
                field = ".".join(str(p) for p in err["loc"])
                shown = json.dumps(err.get("input")) if err["type"] != "missing" else "missing"
                raise ValueError(f"[{k}].{field} = {shown[:40]}: {err['msg']}") from None
            out.append(PlanAction(rec.op, rec.stage, rec.mb, rec.start_s, rec.end_s))
        else:
            raise ValueError(f"[{k}] = {type(item).__name__}: use an action string like '2F0'")
    return out


_RECORD_KEYS = frozenset(("op", "stage", "mb", "start_s", "end_s"))
_OP_SET = frozenset(_OPS)


def _fast_record(item: dict) -> PlanAction | None:
    """An action record that plainly obeys `PlanActionRecord` (a plan holds up to hundreds of
    thousands), None for anything else, which then gets the model's full check and message."""
    if item.keys() != _RECORD_KEYS:
        return None
    op, stage, mb, t0, t1 = item["op"], item["stage"], item["mb"], item["start_s"], item["end_s"]
    if type(op) is not str or op not in _OP_SET or type(stage) is not int or type(mb) is not int:
        return None
    if not (0 <= stage < MAX_LAYERS and 0 <= mb < MAX_MICROBATCHES):
        return None
    if type(t0) not in (float, int) or type(t1) not in (float, int) or not (0 <= t0 < math.inf and 0 <= t1 < math.inf):
        return None
    return _new_tuple(PlanAction, (op, stage, mb, float(t0), float(t1)))


_ActionList = Annotated[
    list[PlanAction],
    PlainValidator(
        _parse_actions,
        json_schema_input_type=list[PlanActionRecord] | list[Annotated[str, Field(pattern=r"^\d+[FBIW]\d+$")]],
    ),
]


class PlanDevice(_Strict):
    """One device's program in execution order.

    Written as `{"device", "actions": ["0F0", ...], "start_s": [...], "end_s": [...]}`; the
    object form of each action (`PlanActionRecord`) is read too.
    """

    device: int = Field(ge=0, lt=MAX_PP, description="the pipeline rank, from 0")
    actions: _ActionList = Field(description="the program: action strings like '7I3' in execution order")
    start_s: list[NonNegativeFloat] | None = Field(
        None, description="simulated start of each action, seconds (parallel to actions)"
    )
    end_s: list[NonNegativeFloat] | None = Field(
        None, description="simulated end of each action, seconds (parallel to actions)"
    )

    @model_validator(mode="after")
    def _merge_times(self) -> PlanDevice:
        """Attach the parallel time arrays to the actions (in memory every action carries its times)."""
        starts, ends, acts = self.start_s, self.end_s, self.actions
        if starts is None and ends is None:
            if acts and type(acts[0]) is tuple:  # action strings without times
                bare = cast(list[tuple[str, int, int]], acts)
                self.actions = [_new_tuple(PlanAction, (op, st, mb, 0.0, 0.0)) for op, st, mb in bare]
            return self
        n = len(acts)
        for name, times in (("start_s", starts), ("end_s", ends)):
            if times is None or len(times) != n:
                got = "missing" if times is None else f"{len(times)} entries"
                raise ValueError(f"devices[{self.device}].{name}: {got} for {n} actions; give one time per action")
        assert starts is not None and ends is not None  # checked just above
        self.actions = [
            _new_tuple(PlanAction, (a[0], a[1], a[2], t0, t1)) for a, t0, t1 in zip(acts, starts, ends, strict=True)
        ]
        self.start_s = self.end_s = None
        return self

    @model_serializer(mode="plain")
    def _documented(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "actions": [
                {"op": a.op, "stage": a.stage, "mb": a.mb, "start_s": a.start_s, "end_s": a.end_s} for a in self.actions
            ],
        }


class Predicted(_Strict):
    """The simulator's verdict on the plan when it was made (`simulate` recomputes it, never trusts it)."""

    step_time_s: float = Field(ge=0, description="the latest end_s: one step's predicted time")
    expected_step_time_s: float | None = Field(
        None,
        ge=0,
        description="the median step time when every action's time varies as the measured profile's"
        " `time_spread` says (`judge.simulate.expected_step`); absent: costs without measured variation",
    )
    bubble_ratio: float = Field(0.0, ge=0, le=1, description="mean over devices")
    bubble_ratio_per_device: list[float] = Field(description="idle share of the step per device (0..1)")
    peak_memory_bytes: list[float] = Field(description="peak memory per device, bytes")
    lower_bound_s: float = Field(0.0, ge=0, description="a lower bound on any plan's step time")


class PlanFile(_Strict):
    schema_version: Literal[2] = Field(description="the plan format; this version writes and reads 2")
    strategy: str = Field(description="how the plan was made: adaptive, or a classic schedule's name")
    target: Literal["adaptis", "torch", "torchtitan", "megatron"] = Field(
        "adaptis", description="the runtime the plan was restricted to (`adaptis plan --target`)"
    )
    model: PlanModelRef = Field(description="the model the plan is for, embedded")
    hardware: PlanHardwareRef = Field(description="the hardware profile the plan is for, embedded")
    training: TrainingConfig = Field(description="the step planned: micro-batches, sizes, pp, tp, recomputation")
    costs: PlanCosts = Field(description="the costs the plan was made with")
    stages: list[PlanStage] = Field(
        min_length=1, max_length=MAX_LAYERS, description="the partition and placement, in model order"
    )
    devices: list[PlanDevice] = Field(
        min_length=1, max_length=MAX_PP, description="each device's program, device 0 first"
    )
    predicted: Predicted = Field(description="the simulator's figures for the plan when it was made")
    search: dict[str, Any] | None = Field(None, description="how the plan was found: phases, solver status, bounds")
    created_by: str | None = Field(None, description="the adaptis version that wrote the file")

    @model_validator(mode="after")
    def _check_structure(self) -> PlanFile:
        pp = self.training.pp
        expected_start = 0
        for i, st in enumerate(self.stages):
            if st.stage != i:
                raise ValueError(f"stages[{i}].stage is {st.stage}; stages must be listed in order 0, 1, 2, ...")
            start, stop = st.layers
            if stop <= start:
                raise ValueError(f"stages[{i}].layers = [{start}, {stop}) holds no layer; every stage needs >= 1 layer")
            if start != expected_start:
                raise ValueError(
                    f"stages[{i}].layers starts at layer {start} but the previous stage ended at {expected_start};"
                    " stages must cover consecutive layers"
                )
            if st.device >= pp:
                raise ValueError(f"stages[{i}].device = {st.device} is outside 0..{pp - 1} (training.pp = {pp})")
            expected_start = stop
        if expected_start != self.model.num_layers:
            raise ValueError(
                f"stages end at layer {expected_start} but model.num_layers is {self.model.num_layers};"
                " every layer must be in exactly one stage"
            )
        if len(self.devices) != pp:
            raise ValueError(f"devices lists {len(self.devices)} devices but training.pp is {pp}")
        for i, dev in enumerate(self.devices):
            if dev.device != i:
                raise ValueError(f"devices[{i}].device is {dev.device}; devices must be listed in order 0..{pp - 1}")
        self._check_action_bounds()
        self._check_costs_shape()
        return self

    def _check_action_bounds(self) -> None:
        """Stage and micro-batch indices within the plan's own sizes (before anything indexes by them)."""
        num_stages, m = len(self.stages), self.training.num_microbatches
        num_actions = sum(len(dev.actions) for dev in self.devices)
        if num_actions < 2 * num_stages * m:  # before anything sized by stages x micro-batches is allocated
            raise ValueError(
                f"training.num_microbatches = {m}: {num_stages} stages x {m} micro-batches need at least"
                f" {2 * num_stages * m} actions (an F and a B, or an I and a W, each), the programs hold {num_actions};"
                " fix num_microbatches or re-plan"
            )
        for i, dev in enumerate(self.devices):
            for k, a in enumerate(dev.actions):
                if a.stage >= num_stages or a.mb >= m:
                    field, value, top = ("stage", a.stage, num_stages) if a.stage >= num_stages else ("mb", a.mb, m)
                    raise ValueError(
                        f"devices[{i}].actions[{k}] = '{a.stage}{a.op}{a.mb}': {field} {value} is outside"
                        f" 0..{top - 1} (the plan has {num_stages} stages and {m} micro-batches); fix or re-plan"
                    )

    def _check_costs_shape(self) -> None:
        num_stages, pp = len(self.stages), self.training.pp
        if [c.stage for c in self.costs.stages] != list(range(num_stages)):
            raise ValueError(f"costs.stages must list stages 0..{num_stages - 1} in order, one entry each")
        for name in ("static_bytes", "mem_limit_bytes"):
            if len(getattr(self.costs, name)) != pp:
                raise ValueError(
                    f"costs.{name} has {len(getattr(self.costs, name))} entries; give one per device ({pp})"
                )
