"""The plan file (pydantic boundary model): the one artifact `plan` writes and `simulate`,
`export` and `run` read.

Core fields are a contract (DESIGN.md "The plan file"). Structural checks that need only the
file itself live here (stages cover every layer once, in order, non-empty; devices in range);
order checks (every (stage, mb) has its F and B or I + W on the right device) are done by
`adaptis_plan.judge.semantics` when the plan is read. Imports only `spec.training`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, model_validator

from adaptis_plan.spec.training import TrainingConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanModelRef(_Strict):
    name: str
    fingerprint: str = Field(description="sha256 of the normalized model spec")
    num_layers: int = Field(ge=2, description="layers as planned (with the head's vocabulary chunks)")
    head_chunks: int = Field(1, ge=1, description="the LM head is split into this many vocabulary chunks")


class PlanHardwareRef(_Strict):
    name: str
    fingerprint: str


Recompute = Literal["none", "selective", "full"]


class PlanStage(_Strict):
    stage: NonNegativeInt
    device: NonNegativeInt
    layers: tuple[NonNegativeInt, NonNegativeInt] = Field(description="half-open [start, stop) layer indices")
    recompute: Recompute = Field(
        "none",
        description=(
            "activation recomputation of the stage's decoder blocks: none (keep every activation until the"
            " backward), selective (keep all but the attention core's, recomputed in the backward) or full"
            " (keep only each block's input; the backward reruns the block's forward first)"
        ),
    )


class PlanAction(_Strict):
    op: Literal["F", "B", "I", "W"]
    stage: NonNegativeInt
    mb: NonNegativeInt
    start_s: NonNegativeFloat = 0.0
    end_s: NonNegativeFloat = 0.0


class PlanDevice(_Strict):
    device: NonNegativeInt
    actions: list[PlanAction]


class Predicted(_Strict):
    step_time_s: NonNegativeFloat
    bubble_ratio: float = Field(0.0, ge=0, le=1, description="mean over devices")
    bubble_ratio_per_device: list[float]
    peak_memory_bytes: list[float]
    lower_bound_s: NonNegativeFloat = 0.0


class PlanFile(_Strict):
    schema_version: Literal[1] = 1
    strategy: str
    model: PlanModelRef
    hardware: PlanHardwareRef
    training: TrainingConfig
    stages: list[PlanStage] = Field(min_length=1)
    devices: list[PlanDevice] = Field(min_length=1)
    predicted: Predicted
    search: dict[str, Any] | None = Field(None, description="how the plan was found: phases, solver status, bounds")
    created_by: str | None = None

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
