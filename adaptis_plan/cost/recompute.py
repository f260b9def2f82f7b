"""Activation recomputation, per layer: how a layer's backward time and activation memory change
under "none", "selective" or "full", and how a plan's stages map to a per-layer choice.

Data flow: the analytic `LayerWork` of a layer (no recomputation) + a mode -> `recompute_work`
-> `cost.table.build_cost_table(..., recompute=[mode per layer])` -> the `CostTable` that the
simulator, the search and the bound read. A plan file records one mode per stage:
`plan_layer_recompute` turns a plan's stages back into the per-layer list (so `simulate` rebuilds
the plan's own costs) and `stage_recompute` turns a per-layer list into the stages' modes.
Imports `cost.analytic` and the specs only: no solver, no torch, no rich/click. Never prints.

What each mode costs, per micro-batch of one decoder block (the embedding and the head never
recompute: the head's logits and the embedding's token ids are what their backward reads, and
rerunning the head would redo its largest GEMM). Notation as in `cost.analytic`; A = the
block's saved activations without recomputation (`act_bytes`), G = the inputs of its weight
GEMMs (`act_w_bytes`), x = the block's input, b*s*h*e / t (the sequence-parallel shard that
Megatron checkpoints; Korthikanti et al. 2022, Table 2: 2sbh at t = 1).

- none: F keeps A until I (or B); I frees A - G; W frees G.
- full (Megatron's full recomputation: checkpoint each block's input, rerun the block's forward
  right before its backward; Korthikanti et al. Sec. 4.3): F keeps x only. I reruns the whole
  forward (F's work again, tensor-parallel collectives included), then the input-gradient pass;
  the rerun materialises the activations again and I frees all but what W still needs: the
  weight GEMMs' inputs G, held from I's end until W. So `act_bytes` = x and `act_w_bytes` = G,
  which is larger: the end of I *allocates* G - x (the simulator's "I frees act - act_w" with a
  negative amount; `core.CostTable`). With B (I and W fused) nothing outlives it. The working
  set inside I (one block's activations while it is rerun and back-propagated, blocks one at a
  time) is not charged, like every other transient inside an action.
- selective (Korthikanti et al. Sec. 4.3: recompute the attention core -- QK^T, softmax, PV --
  whose activations are large and cheap to recompute): without flash attention the core saves
  5*a*s^2*b bytes per layer (Table 2), which selective recomputation drops, leaving 34*s*b*h.
  Our attention is flash attention, which never saves the s^2 scores: `cost.analytic` already
  keeps only q, k, v, the output and the fp32 log-sum-exp (32*s*b*h for a GPT block, Korthikanti's
  34 less the two dropout masks). Recomputing the core then drops only the log-sum-exp
  (4*b*s*heads / t): q, k and v are the recomputed region's inputs and the output is o_proj's
  input, both kept. I reruns the core's forward kernel first. So selective costs little and saves
  little (NVIDIA's Megatron Bridge guide says as much: with flash attention compare core_attn
  recomputation against none). It is a no-op on blocks without attention (Mamba, MLP-only).

Published figures (Korthikanti et al. 2022, Table 4, one layer of their 22B GPT: F 7.7 ms,
B 11.9 ms): full recomputation +39% (27.2 ms), selective +7% (20.9 ms), selective with sequence
parallelism +4%. Ours for that layer: `tests/cost/test_recompute.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from adaptis_plan.cost.analytic import DTYPE_BYTES, UNFUSED_SAVED_BYTES_PER_SCORE, LayerWork, OpWork
from adaptis_plan.spec.model import LayerSpec, ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.training import RECOMPUTE_MODES, TrainingConfig

if TYPE_CHECKING:
    from typing import TypeVar

    import numpy as np

    Seconds = TypeVar("Seconds", float, np.ndarray)  # one device's seconds, or every device's

# stronger recomputation keeps fewer bytes at every point of the step
_STRENGTH = {mode: n for n, mode in enumerate(RECOMPUTE_MODES)}
_NEVER = ("embedding", "head")
_FP32 = 4


def recomputes(kind: str) -> bool:
    """Whether a layer of this kind can recompute (decoder blocks; not the embedding or the head)."""
    return kind not in _NEVER


def check_modes(modes: Sequence[str], num_layers: int, what: str = "recompute") -> None:
    """Raise ValueError unless `modes` has one known mode per layer (a caller's bug, not a user's)."""
    if len(modes) != num_layers:
        raise ValueError(f"{what}: {len(modes)} modes for {num_layers} layers")
    bad = sorted(set(modes) - set(RECOMPUTE_MODES))
    if bad:
        raise ValueError(f"{what}: unknown mode {bad[0]!r}; use one of {', '.join(RECOMPUTE_MODES)}")


def uniform_modes(layers: Sequence[LayerSpec], training: TrainingConfig) -> list[str]:
    """`training.recompute` for every layer ("auto" has no uniform meaning: the planner's choice
    is per stage, so a cost table for it needs an explicit per-layer list)."""
    if training.recompute not in RECOMPUTE_MODES:
        raise ValueError(
            f"training.recompute = {training.recompute!r} is chosen per stage; pass the per-layer list"
            " (cost.recompute.plan_layer_recompute for a plan)"
        )
    return [training.recompute] * len(layers)


def input_bytes(model: ModelSpec, training: TrainingConfig) -> float:
    """A block's input per micro-batch on one tensor- and context-parallel rank: b*s*h*e / (t*cp)."""
    e = DTYPE_BYTES[training.dtype]
    tokens = float(training.micro_batch_size * training.seq_len) / training.cp
    return tokens * model.hidden_size * e / training.tp


def lse_bytes(layer: LayerSpec, training: TrainingConfig) -> float:
    """What selective recomputation stops saving per micro-batch and rank: the flash attention core's
    fp32 log-sum-exp, or the unfused core's scores (`cost.analytic.selective_bytes`)."""
    if layer.attention is None:
        return 0.0
    if training.attention == "unfused":
        a = layer.attention
        b, s, cp, t = training.micro_batch_size, training.seq_len, training.cp, training.tp
        return b * a.num_heads / t * (s / cp) * s * UNFUSED_SAVED_BYTES_PER_SCORE
    tokens = float(training.micro_batch_size * training.seq_len) / training.cp
    return tokens * layer.attention.num_heads * _FP32 / training.tp


def recompute_work(
    work: LayerWork, layer: LayerSpec, model: ModelSpec, training: TrainingConfig, mode: str
) -> LayerWork:
    """`work` (no recomputation, from `cost.analytic.layer_work`) under `mode` (module docstring)."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"recompute mode {mode!r}; use one of {', '.join(RECOMPUTE_MODES)}")
    if mode == "none" or not recomputes(layer.kind):
        return work
    if mode == "full":
        return dataclasses.replace(
            work,
            recompute="full",
            recompute_i=work.f,
            act_bytes=input_bytes(model, training),
            act_w_bytes=work.act_w_bytes,
        )
    core = tuple(k for k in work.f.kernels if k.kind == "attention")
    if not core:  # no attention core: nothing to recompute
        return dataclasses.replace(work, recompute="selective")
    act = max(work.act_bytes - lse_bytes(layer, training), work.act_w_bytes)
    return dataclasses.replace(work, recompute="selective", recompute_i=OpWork(kernels=core), act_bytes=act)


def measured_recompute(
    plain: LayerWork, again: LayerWork, share: Seconds, f_s: Seconds, i_s: Seconds, act: float, act_w: float
) -> tuple[Seconds, float, float]:
    """A measured layer's (I seconds, act_bytes, act_w_bytes) under `again`'s mode.

    A profile measures the layer without recomputation: F (`f_s`), I (`i_s`) and the bytes.
    `plain` / `again` are the analytic works without and with the mode, `share` the analytic
    seconds the mode adds to I over the analytic F seconds on the same device (1 for full: all of
    F again). The measured I grows by `share` of the measured F; full keeps the analytic block
    input (at most the measured bytes), selective the measured bytes less the analytic log-sum-exp.
    """
    if again.recompute == "full":
        return i_s + share * f_s, min(again.act_bytes, act), act_w
    if again.recompute == "selective":
        return i_s + share * f_s, max(act - (plain.act_bytes - again.act_bytes), act_w), act_w
    return i_s, act, act_w


# ----------------------------------------------------------------------------- plans <-> layers
def stage_recompute(bounds: Sequence[int], modes: Sequence[str], kinds: Sequence[str]) -> list[str]:
    """One mode per stage (stage s holds layers [bounds[s], bounds[s+1])): the mode of its decoder
    blocks; "none" for a stage of only the embedding and / or the head. Raises ValueError when a
    stage's decoder blocks disagree (`strongest_per_stage` first makes them agree)."""
    check_modes(modes, len(kinds))
    out = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        found = {modes[j] for j in range(lo, hi) if recomputes(kinds[j])}
        if len(found) > 1:
            raise ValueError(f"layers [{lo}, {hi}) mix recompute modes {sorted(found)}; one stage runs one mode")
        out.append(found.pop() if found else "none")
    return out


def strongest_per_stage(bounds: Sequence[int], modes: Sequence[str], kinds: Sequence[str]) -> list[str]:
    """Per-layer modes where every stage's decoder blocks take the strongest mode among them
    (full > selective > none): a stage runs one mode, and the stronger one only keeps fewer bytes."""
    check_modes(modes, len(kinds))
    out = list(modes)
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        mine = [modes[j] for j in range(lo, hi) if recomputes(kinds[j])]
        top = max(mine, key=_STRENGTH.__getitem__) if mine else "none"
        out[lo:hi] = [top] * (hi - lo)
    return out


def layer_modes(bounds: Sequence[int], stage_modes: Sequence[str]) -> list[str]:
    """Per-layer modes from one mode per stage."""
    out: list[str] = []
    for (lo, hi), mode in zip(zip(bounds, bounds[1:], strict=False), stage_modes, strict=True):
        out += [mode] * (hi - lo)
    return out


def plan_layer_recompute(plan: PlanFile) -> list[str]:
    """The per-layer recompute list of a plan file: every layer takes its stage's `recompute`.

    That is what `build_cost_table(..., recompute=...)` needs to rebuild the plan's own costs.
    """
    bounds = [s.layers[0] for s in plan.stages] + [plan.stages[-1].layers[1]]
    return layer_modes(bounds, [s.recompute for s in plan.stages])


__all__ = [
    "check_modes",
    "input_bytes",
    "layer_modes",
    "lse_bytes",
    "measured_recompute",
    "plan_layer_recompute",
    "recompute_work",
    "recomputes",
    "stage_recompute",
    "strongest_per_stage",
    "uniform_modes",
]
