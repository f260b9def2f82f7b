"""The plan file (pydantic boundary model): the one artifact `plan` writes and `simulate`,
`export` and `run` read.

Core fields are a contract (DESIGN.md "The plan file"). Structural checks that need only the
file itself live here (stages cover every layer once, in order, non-empty; devices in range);
order checks (every (stage, mb) has its F and B or I + W on the right device) are done by
`adaptis_plan.judge.semantics` when the plan is read. Every count and index has a
physical-sense bound here (`spec.limits`), so the semantics, which checks indices against the
plan's own sizes, never meets a number it cannot hold. Simulated times and
memory are only required to be finite: they are outputs, whatever the inputs' sizes. Imports
only `spec.training` and `spec.limits`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adaptis_plan.spec.limits import MAX_HEAD_CHUNKS, MAX_LAYERS, MAX_MICROBATCHES, MAX_PP
from adaptis_plan.spec.training import TrainingConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class PlanModelRef(_Strict):
    """Which model the plan is for."""

    name: str = Field(description="the model's name (a built-in name is found again by `simulate` / `run`)")
    fingerprint: str = Field(description="sha256 of the normalized model spec")
    num_layers: int = Field(ge=2, le=MAX_LAYERS, description="layers as planned (with the head's vocabulary chunks)")
    head_chunks: int = Field(
        1, ge=1, le=MAX_HEAD_CHUNKS, description="the LM head is split into this many vocabulary chunks"
    )


class PlanHardwareRef(_Strict):
    """Which hardware profile the plan is for."""

    name: str = Field(description="the profile's name (a built-in name is found again by `simulate`)")
    fingerprint: str = Field(description="sha256 of the profile's numbers (name and description excluded)")


Recompute = Literal["none", "selective", "full"]


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
            " backward), selective (keep all but the attention core's, recomputed in the backward) or full"
            " (keep only each block's input; the backward reruns the block's forward first)"
        ),
    )


class PlanAction(_Strict):
    """One step of a device's program, written `{stage}{op}{mb}` (torch's notation)."""

    op: Literal["F", "B", "I", "W"] = Field(
        description="F forward, B full backward, I backward for inputs, W backward for weights"
    )
    stage: int = Field(ge=0, lt=MAX_LAYERS, description="the stage it runs (on this device)")
    mb: int = Field(ge=0, lt=MAX_MICROBATCHES, description="the micro-batch it runs")
    start_s: float = Field(0.0, ge=0, description="simulated start, seconds from the step's start")
    end_s: float = Field(0.0, ge=0, description="simulated end, seconds from the step's start")


class PlanDevice(_Strict):
    """One pipeline rank's program."""

    device: int = Field(ge=0, lt=MAX_PP, description="the pipeline rank, from 0")
    actions: list[PlanAction] = Field(description="the device's program in execution order")


class Predicted(_Strict):
    """The simulator's verdict on the plan when it was made (`simulate` recomputes it, never trusts it)."""

    step_time_s: float = Field(ge=0, description="the latest end_s: one step's predicted time")
    bubble_ratio: float = Field(0.0, ge=0, le=1, description="mean over devices")
    bubble_ratio_per_device: list[float] = Field(description="idle share of the step per device (0..1)")
    peak_memory_bytes: list[float] = Field(description="peak memory per device, bytes")
    lower_bound_s: float = Field(0.0, ge=0, description="a lower bound on any plan's step time")


class PlanFile(_Strict):
    schema_version: Literal[1] = Field(1, description="version of this file format")
    strategy: str = Field(description="how the plan was made: adaptive, or a classic schedule's name")
    model: PlanModelRef = Field(description="the model the plan is for")
    hardware: PlanHardwareRef = Field(description="the hardware profile the plan is for")
    training: TrainingConfig = Field(description="the step planned: micro-batches, sizes, pp, tp")
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
        return self
