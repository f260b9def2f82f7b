"""Training configuration (pydantic boundary model): what is being run, at which sizes.

Data flow: the CLI's options (or a plan file's `training`) -> the cost model, the planner and
the simulator. Imports only `spec.limits` (the physical-sense bounds) and `spec.config` (the
sections a planning request is made of, `TrainingConfig.of`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import Field, model_validator

from adaptis_plan.spec.base import StrictModel
from adaptis_plan.spec.config import Parallelism, RuntimeSettings
from adaptis_plan.spec.limits import (
    MAX_CP,
    MAX_DEVICE_MICROBATCHES,
    MAX_DP,
    MAX_EP,
    MAX_MICRO_BATCH_SIZE,
    MAX_MICROBATCHES,
    MAX_PP,
    MAX_SEQ_LEN,
    MAX_TP,
)

# Activation recomputation of the decoder blocks (the embedding and the head never recompute):
# "none", "selective" (the attention core), "op" (torchtitan's per-op selective checkpointing: every
# other matmul's and the attention kernel's outputs kept, the rest rerun), "full" (the whole block from
# its input), or "auto" (the planner chooses per stage among none, selective and full; a plan's
# `stages[].recompute` records the choice). Ordered by the activation memory they keep, most first.
RECOMPUTE_MODES = ("none", "selective", "op", "full")
RecomputeRequest = Literal["none", "selective", "op", "full", "auto"]


def keeping_applies(zero: int, pp: int, num_microbatches: int) -> bool:
    """Where pipeline stages that keep their sharded data-parallel state gathered over the step
    (`TrainingConfig.stage_keeps_unsharded`) hold and move other than ZeRO `zero` says: ZeRO >= 1 (something is
    sharded), pp > 1 (stages), more than one micro-batch (a step to keep it over)."""
    return zero >= 1 and pp > 1 and num_microbatches > 1


class TrainingConfig(StrictModel):
    """The step being planned. Stored in the plan file under `training`."""

    num_microbatches: int = Field(ge=1, le=MAX_MICROBATCHES, description="micro-batches per optimizer step")
    micro_batch_size: int = Field(1, ge=1, le=MAX_MICRO_BATCH_SIZE, description="sequences per micro-batch")
    seq_len: int = Field(4096, ge=1, le=MAX_SEQ_LEN, description="tokens per sequence")
    pp: int = Field(ge=1, le=MAX_PP, description="pipeline ranks (devices in the pipeline group)")
    tp: int = Field(1, ge=1, le=MAX_TP, description="tensor-parallel degree inside each pipeline rank")
    dp: int = Field(1, ge=1, le=MAX_DP, description="data-parallel degree (shards optimizer state when zero >= 1)")
    cp: int = Field(
        1, ge=1, le=MAX_CP, description="context-parallel degree: each rank holds seq_len / cp tokens of a sequence"
    )
    ep: int = Field(
        1,
        ge=1,
        le=MAX_EP,
        description="expert-parallel degree: MoE experts sharded over ep of the dp x cp ranks (divides dp x cp)",
    )
    zero: Literal[0, 1, 2, 3] = Field(1, description="ZeRO stage over the dp (x cp) group")
    attention: Literal["flash", "cudnn", "unfused"] = Field(
        "flash",
        description=(
            "attention core: flash (FlashAttention-2 class, fused, no s x s scores in memory), cudnn"
            " (cuDNN's fused flash attention, TransformerEngine's choice on Hopper: the same work, at the"
            " device's cudnn_attention_speedup) or unfused (Megatron-LM's pre-flash path: batched score GEMMs"
            " over the whole s x s, fused scale-mask-softmax, attention dropout)"
        ),
    )
    tp_comm_overlap: bool = Field(
        False,
        description=(
            "tensor-parallel all-gathers / reduce-scatters overlap the GEMMs next to them (Megatron-Core's"
            " --tp-comm-overlap, TransformerEngine userbuffers)"
        ),
    )
    dp_overlap: bool = Field(
        True,
        description=(
            "data-parallel gradient reduce-scatter overlaps the last micro-batch's backward and the parameter"
            " all-gather the next step's first forward (Megatron's --overlap-grad-reduce / --overlap-param-gather)"
        ),
    )
    stage_keeps_unsharded: bool = Field(
        False,
        description=(
            "the runtime's pipeline stages keep their sharded data-parallel parameters gathered and their gradients"
            " unsharded in fp32 from a step's first micro-batch to its last backward, then reduce them once"
            " (torch.distributed.pipelining with FSDP2, as torchtitan runs it: set by --target torch and"
            " torchtitan); with pp > 1, more than one micro-batch and ZeRO >= 1 a rank then holds and moves what"
            " ZeRO-1 does (`zero_in_effect`), its gradient reduction after its last backward"
        ),
    )
    dtype: Literal["bf16", "fp16", "fp32"] = Field("bf16", description="compute and weight dtype")
    recompute: RecomputeRequest = Field(
        "none",
        description=(
            "activation recomputation of every decoder block: none, selective (the attention core), op"
            " (torchtitan's per-op selective checkpointing: every other matmul's and the attention kernel's"
            " outputs kept, the rest rerun) or full (the whole block from its input); auto: the planner"
            " chooses per stage among none, selective and full. A plan's"
            " stages[].recompute records what each stage does"
        ),
    )

    @classmethod
    def of(
        cls,
        parallelism: Parallelism,
        seq_len: int,
        recompute: str,
        runtime: RuntimeSettings,
        stage_keeps_unsharded: bool = False,
    ) -> TrainingConfig:
        """The step of a planning request's parts (`spec.config`): its split, sequence length,
        recompute request and runtime settings, and what the target runtime's stages keep
        (`schedules.targets.Target.keeps_unsharded`). Raises pydantic's ValidationError (a ValueError)
        for a split these fields refuse."""
        return cls(
            **dataclasses.asdict(parallelism),
            seq_len=seq_len,
            recompute=recompute,
            stage_keeps_unsharded=stage_keeps_unsharded,
            **dataclasses.asdict(runtime),
        )

    @property
    def reduces_after_backward(self) -> bool:
        """The data-parallel parameters stay gathered and their gradients unsharded over the step's micro-batches,
        reduced once after the rank's last backward (`stage_keeps_unsharded` where `keeping_applies`). torch's
        pipeline stage turns FSDP2's resharding after backward and its gradient sync off for every micro-batch's
        backward and reduces in one action after all of them
        (torch/distributed/pipelining/stage.py: `backward_maybe_with_nosync`, `perform_reduce_grad`); FSDP2
        accumulates unsharded gradients in its reduce dtype, fp32 under bf16 training
        (`FSDPParam.to_accumulated_grad_if_needed`); torchtitan keeps parameters gathered after forward under
        pipelining by default (`reshard_after_forward = not pp_enabled`)."""
        return self.stage_keeps_unsharded and keeping_applies(self.zero, self.pp, self.num_microbatches)

    @property
    def zero_in_effect(self) -> int:
        """The ZeRO stage whose memory and traffic a rank has: `zero`, or 1 where the stages keep parameters gathered
        and gradients unsharded over the step (`reduces_after_backward`): whole weights and fp32 gradients, the
        optimizer state sharded, one reduce-scatter and one all-gather per step."""
        return 1 if self.reduces_after_backward else self.zero

    def runtime_settings(self) -> list[str]:
        """The runtime settings that differ from the defaults, as the reports name them ('attention cudnn',
        'TP comm overlap', 'no DP overlap'): what the costs assumed of the runtime beside the model and hardware."""
        out = [f"attention {self.attention}"] if self.attention != "flash" else []
        if self.tp_comm_overlap and self.tp > 1:
            out.append("TP comm overlap")
        if not self.dp_overlap and self.dp * self.cp > 1:
            out.append("no DP overlap")
        if self.reduces_after_backward and self.dp * self.cp > 1:
            out.append(f"ZeRO {self.zero} state kept unsharded over the micro-batches (torch's stages)")
        return out

    @model_validator(mode="after")
    def _check_size(self) -> TrainingConfig:
        if (self.dp * self.cp) % self.ep:
            raise ValueError(
                f"ep = {self.ep} does not divide dp x cp = {self.dp} x {self.cp}: experts are sharded over"
                " the data- and context-parallel ranks; use an ep that divides dp x cp"
            )
        if self.seq_len % self.cp:
            raise ValueError(
                f"cp = {self.cp} does not divide seq_len = {self.seq_len}: each context-parallel rank holds"
                " seq_len / cp tokens; use a cp that divides the sequence length"
            )
        if self.pp * self.num_microbatches > MAX_DEVICE_MICROBATCHES:
            raise ValueError(
                f"pp x num_microbatches = {self.pp} x {self.num_microbatches} = {self.pp * self.num_microbatches:,}:"
                f" more than {MAX_DEVICE_MICROBATCHES:,} (device, micro-batch) pairs per step; use fewer"
                " micro-batches (a larger micro-batch size) or fewer pipeline ranks"
            )
        return self
