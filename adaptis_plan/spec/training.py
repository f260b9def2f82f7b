"""Training configuration (pydantic boundary model): what is being run, at which sizes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator

# Activation recomputation of the decoder blocks (the embedding and the head never recompute):
# "none", "selective" (the attention core), "full" (the whole block from its input), or "auto"
# (the planner chooses per stage; a plan's `stages[].recompute` records the choice).
RECOMPUTE_MODES = ("none", "selective", "full")
RecomputeRequest = Literal["none", "selective", "full", "auto"]


class TrainingConfig(BaseModel):
    """The step being planned. Stored in the plan file under `training`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_microbatches: PositiveInt = Field(description="micro-batches per optimizer step")
    micro_batch_size: PositiveInt = Field(1, description="sequences per micro-batch")
    seq_len: PositiveInt = Field(4096, description="tokens per sequence")
    pp: PositiveInt = Field(description="pipeline ranks (devices in the pipeline group)")
    tp: PositiveInt = Field(1, description="tensor-parallel degree inside each pipeline rank")
    dp: PositiveInt = Field(1, description="data-parallel degree (shards optimizer state when zero >= 1)")
    zero: Literal[0, 1, 2, 3] = Field(1, description="ZeRO stage over the dp group")
    dtype: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="compute and weight dtype")
    recompute: RecomputeRequest = Field(
        "none",
        description=(
            "activation recomputation of every decoder block: none, selective (the attention core) or full"
            " (the whole block from its input); auto: the planner chooses per stage. A plan's"
            " stages[].recompute records what each stage does"
        ),
    )

    @field_validator("recompute", mode="before")
    @classmethod
    def _boolean_recompute(cls, value: object) -> object:
        # plan files written before recomputation was a per-stage choice stored a flag: true = full
        if isinstance(value, bool):
            return "full" if value else "none"
        return value
