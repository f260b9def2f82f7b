"""Activation recomputation, per layer: how a layer's backward time and activation memory change
under "none", "selective", "op" or "full", and how a plan's stages map to a per-layer choice.

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
  Megatron's full recomputation by block (`--recompute-method block --recompute-num-layers N`: the
  first N blocks of each stage in full, the others none) is per layer: `block_method_modes`.
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

- op (torchtitan's per-op selective activation checkpointing, `activation_checkpoint.mode =
  "selective"`, `selective_ac_option = "op"`: pytorch/torchtitan at 9dec370ad,
  torchtitan/parallelisms/parallelize_llama.py, `_save_list` and `_custom_policy`; the same policy at
  613bfd0cf, 3996b634a and e7c0cae93, the commits our measured runs cite). torch's selective
  checkpoint wraps each decoder block: the forward keeps the block's input and the outputs of the ops
  in `_save_list` -- every odd-numbered `aten.mm` of the block (1st, 3rd, ...: "saves output of all
  compute ops, except every second mm"), the flash / memory-efficient SDPA kernels (output and
  log-sum-exp) and the tensor-parallel reduce-scatters -- and the backward reruns the rest of the
  block's forward before back-propagating it (`abs` / `max` are scalars for float8 scaling: nothing
  in bf16). We list the block's `aten.mm` calls in the order torchtitan's modules issue them
  (`_mm_calls`): our fused GEMMs split into the separate linears torchtitan runs (GQA's qkv into wq,
  wk, wv; a gated MLP's input into w1, w3), each routed expert's w1 (w3) w2 in turn, as a for-loop
  over experts runs them. For a Llama block the saved mms are wq, wv, w1 and w2, the recomputed ones
  wk, wo and w3. Kept (`act_bytes`): the block input x + the saved mm outputs (m x n of the rank's
  GEMM: a row-parallel GEMM's output is the whole partial sum before its reduce-scatter) + the flash
  output and log-sum-exp + the reduce-scatters' outputs (b*s*h*e / t each). I reruns F less the
  saved ops: the recomputed mms, every memory-bound op of F (norms, rotary, activations, residual
  adds), the cores not saved (cuDNN's and the math SDPA are not in `_save_list`, nor is the SSD scan)
  and F's collectives except the tensor-parallel reduce-scatters (the sequence-parallel all-gathers,
  ring attention's KV exchange and the expert all-to-alls run again). `act_w_bytes` stays G, as under
  full: the rerun rebuilds the weight GEMMs' inputs. Megatron cannot express this mode.

Published figures (Korthikanti et al. 2022, Table 4, one layer of their 22B GPT: F 7.7 ms,
B 11.9 ms): full recomputation +39% (27.2 ms), selective +7% (20.9 ms), selective with sequence
parallelism +4%. Ours for that layer: `tests/cost/test_recompute.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from adaptis_plan.cost.analytic import DTYPE_BYTES, UNFUSED_SAVED_BYTES_PER_SCORE, Kernel, LayerWork, OpWork
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
    if mode == "op":
        return _op_work(work, layer, model, training)
    core = tuple(k for k in work.f.kernels if k.kind == "attention")
    if not core:  # no attention core: nothing to recompute
        return dataclasses.replace(work, recompute="selective")
    act = max(work.act_bytes - lse_bytes(layer, training), work.act_w_bytes)
    return dataclasses.replace(work, recompute="selective", recompute_i=OpWork(kernels=core), act_bytes=act)


def _split_gemm(k: Kernel, widths: Sequence[float], e: int) -> list[Kernel]:
    """One launch of the GEMM `k` (shape (m, n, k) per launch) split along n in proportion to `widths`:
    the separate linears torchtitan runs where we fuse them."""
    m, n, kk = k.shape
    out = []
    for w in widths:
        n_i = n * w / sum(widths)
        out.append(Kernel(2.0 * m * n_i * kk, (m * kk + kk * n_i + m * n_i) * e, k.what, "gemm", 1, (m, n_i, kk)))
    return out


def _mm_calls(work: LayerWork, layer: LayerSpec, e: int) -> list[Kernel]:
    """The block's `aten.mm` calls (one launch each) in the order torchtitan's modules issue them."""
    gated = {"swiglu", "geglu"}
    gemms = [k for k in work.f.kernels if k.kind == "gemm"]
    out: list[Kernel] = []
    j = 0
    while j < len(gemms):
        k = gemms[j]
        one = dataclasses.replace(k, flops=k.flops / k.launches, io_bytes=k.io_bytes / k.launches, launches=1)
        if k.what == "qkv" and layer.attention is not None:
            a = layer.attention
            out += _split_gemm(one, (a.num_heads, a.num_kv_heads, a.num_kv_heads), e)
        elif k.what == "mlp_in" and layer.mlp is not None and layer.mlp.activation in gated:
            out += _split_gemm(one, (1, 1), e)
        elif k.what == "shared_in" and layer.moe is not None and layer.moe.activation in gated:
            out += _split_gemm(one, (1, 1), e)
        elif k.what == "expert_in" and j + 1 < len(gemms) and gemms[j + 1].what == "expert_out":
            down = gemms[j + 1]
            down1 = dataclasses.replace(down, flops=down.flops / down.launches,
                                        io_bytes=down.io_bytes / down.launches, launches=1)  # fmt: skip
            up = _split_gemm(one, (1, 1), e) if layer.moe is not None and layer.moe.activation in gated else [one]
            out += (up + [down1]) * k.launches
            j += 1
        else:
            out += [one] * k.launches
        j += 1
    return out


def _op_work(work: LayerWork, layer: LayerSpec, model: ModelSpec, training: TrainingConfig) -> LayerWork:
    """`work` under torchtitan's per-op selective checkpointing (module docstring, "op")."""
    e, t = DTYPE_BYTES[training.dtype], training.tp
    mms = _mm_calls(work, layer, e)
    saved_mm, rerun_mm = mms[0::2], mms[1::2]  # the 1st, 3rd, ... mm of the block are saved
    keep = input_bytes(model, training) + sum(k.shape[0] * k.shape[1] * e for k in saved_mm)
    flash = training.attention == "flash"
    rerun_cores = tuple(k for k in work.f.kernels if k.kind != "gemm" and not (flash and k.kind == "attention"))
    if flash and layer.attention is not None:
        a = layer.attention
        v_dim = a.num_heads * (a.v_head_dim if a.type == "mla" and a.v_head_dim else a.head_dim)
        tokens = float(training.micro_batch_size * training.seq_len) / training.cp
        keep += tokens * v_dim * e / t + lse_bytes(layer, training)
    scatters = [c for c in work.f.collectives if c.group == "tp" and c.kind == "reduce_scatter"]
    keep += sum(c.nbytes / t for c in scatters)
    rerun = OpWork(
        kernels=tuple(rerun_mm) + rerun_cores,
        mem_bytes=work.f.mem_bytes,
        collectives=tuple(c for c in work.f.collectives if c not in scatters),
        mem_launches=work.f.mem_launches,
    )
    return dataclasses.replace(work, recompute="op", recompute_i=rerun, act_bytes=keep)


def measured_recompute(
    plain: LayerWork, again: LayerWork, share: Seconds, f_s: Seconds, i_s: Seconds, act: float, act_w: float
) -> tuple[Seconds, float, float]:
    """A measured layer's (I seconds, act_bytes, act_w_bytes) under `again`'s mode.

    A profile measures the layer without recomputation: F (`f_s`), I (`i_s`) and the bytes.
    `plain` / `again` are the analytic works without and with the mode, `share` the analytic
    seconds the mode adds to I over the analytic F seconds on the same device (1 for full: all of
    F again). The measured I grows by `share` of the measured F; full keeps the analytic block
    input (at most the measured bytes), selective the measured bytes less the analytic log-sum-exp,
    op the measured bytes less what the analytic op stops keeping (at least its analytic kept bytes).
    """
    if again.recompute == "full":
        return i_s + share * f_s, min(again.act_bytes, act), act_w
    if again.recompute == "selective":
        return i_s + share * f_s, max(act - (plain.act_bytes - again.act_bytes), act_w), act_w
    if again.recompute == "op":
        return i_s + share * f_s, max(act - (plain.act_bytes - again.act_bytes), min(again.act_bytes, act)), act_w
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
    (full > op > selective > none): a stage runs one mode, and the stronger one only keeps fewer bytes."""
    check_modes(modes, len(kinds))
    out = list(modes)
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        mine = [modes[j] for j in range(lo, hi) if recomputes(kinds[j])]
        top = max(mine, key=_STRENGTH.__getitem__) if mine else "none"
        out[lo:hi] = [top] * (hi - lo)
    return out


def block_method_modes(bounds: Sequence[int], kinds: Sequence[str], num_layers: Sequence[int]) -> list[str]:
    """Per-layer modes of Megatron's full recomputation by block (`--recompute-granularity full
    --recompute-method block --recompute-num-layers N`): in each stage (Megatron's model chunk: a
    pipeline rank's, or with interleaving each virtual stage's) the first `num_layers[s]` decoder
    blocks recompute in full, each from its own input, and the others keep everything
    (NVIDIA/Megatron-LM at 767a8a81d, megatron/core/transformer/transformer_block.py
    `_checkpointed_forward`: `if l < self.config.recompute_num_layers: tensor_parallel.checkpoint(custom(l,
    l + 1), ...)`, l counting the chunk's layers). Memory and time follow per layer from `recompute_work`:
    N blocks keep their input and rerun their forward, the rest none. The plan file records one mode
    per stage, so such a list is for the cost table (`build_cost_table(..., recompute=...)`), not yet a
    plan's stages (`stage_recompute` refuses a stage that mixes modes)."""
    if len(num_layers) != len(bounds) - 1:
        raise ValueError(f"num_layers: {len(num_layers)} counts for {len(bounds) - 1} stages")
    out = ["none"] * len(kinds)
    for (lo, hi), n in zip(zip(bounds, bounds[1:], strict=False), num_layers, strict=True):
        if n < 0:
            raise ValueError(f"num_layers: {n} < 0")
        blocks = [j for j in range(lo, hi) if recomputes(kinds[j])]
        for j in blocks[:n]:
            out[j] = "full"
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
    "block_method_modes",
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
