"""Megatron-LM exports of a plan: its command-line arguments and a launch script.

Data flow: plan (layout, layer kinds, `TrainingShape`) -> `megatron_run` (the arguments, the
environment and the notes, as plain data) -> text: `megatron_args` (the arguments, one per line)
or `megatron_launch` (a bash script: environment, `torchrun`, the training script, the
arguments). Pure functions over plain data: no IO, no Megatron. Imports only `core`, `errors`
and `planfile.export`.

What is predicted is what is exported: every runtime setting the plan was priced with is a flag
(or an environment variable), and a setting Megatron cannot run as planned is refused in one line
(InputError) rather than written as something else.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from adaptis_plan.core import Layout
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.export import (
    TrainingShape,
    check_kinds,
    doc_text,
    megatron_layout,
    one_recompute,
    stage_modes,
)

# Megatron's flag names and rules below are read from NVIDIA/Megatron-LM d98e8a64ddf3
# (megatron/training/arguments.py; the recompute, hybrid, sequence-parallel and TP-overlap flags
# are generated there from megatron/core/transformer/transformer_config.py,
# megatron/core/model_parallel_config.py and megatron/training/config/).
MEGATRON_SOURCE = "NVIDIA/Megatron-LM d98e8a6, megatron/training/arguments.py"
# Megatron's hybrid (Mamba) models take their stages from `|` in --hybrid-layer-pattern, whose
# letters are layers of one mixer each (megatron/core/models/hybrid/hybrid_layer_allocation.py,
# `Symbols`): M Mamba, * attention, - MLP, E MoE. Our kinds that hold two mixers are two letters.
_HYBRID_SYMBOLS = {
    "mamba": "M",
    "attention": "*",
    "mlp": "-",
    "moe_mlp": "E",
    "mamba_mlp": "M-",
    "mamba_moe": "ME",
    "decoder": "*-",
    "moe": "*E",
}
_HYBRID_ONLY = frozenset({"mamba", "mamba_mlp", "mamba_moe", "attention", "mlp", "moe_mlp"})
# The planned attention core -> TransformerConfig.attention_backend (`AttnBackend`): flash is
# TransformerEngine's FlashAttention backend (flash-attn), cudnn its cuDNN FusedAttention.
_ATTENTION_BACKEND = {"flash": "flash", "cudnn": "fused", "unfused": "unfused"}
# The training script of each model family at d98e8a6 (pretrain_mamba.py is a deprecated wrapper
# that runs pretrain_hybrid.py).
GPT_SCRIPT = "pretrain_gpt.py"
HYBRID_SCRIPT = "pretrain_hybrid.py"
# What arguments.py's validate_args asserts on CUDA_DEVICE_MAX_CONNECTIONS on Hopper and earlier
# (get_device_arch_version() < 10): "1" with tensor or context parallelism unless an FSDP is used
# (then it only warns); never "1" with Megatron-FSDP (asserted on every architecture).
CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"


@dataclass(frozen=True)
class MegatronRun:
    """What Megatron-LM needs to run a plan: `args` as (flag, value or None for a switch), `env`
    as (variable, value or None for unset), `script` (the training script), `notes` (one line each)."""

    args: tuple[tuple[str, object], ...]
    env: tuple[tuple[str, str | None], ...]
    script: str
    notes: tuple[str, ...]
    world_size: int


def megatron_hybrid_pattern(layout: Layout, layer_kinds: Sequence[str]) -> str:
    """Megatron's `--hybrid-layer-pattern` for a hybrid (Mamba) model: per stage, its mixers'
    letters (`_HYBRID_SYMBOLS`), stages separated by `|`. Megatron puts the embedding on the first
    segment and the loss on the last, so they have no letter; a stage holding only one of them is
    an empty segment. The placement rules are the layout's (`megatron_layout` checks them).
    """
    kinds = check_kinds("megatron-args", layout, layer_kinds)
    megatron_layout(layout, kinds)  # the same placement and embedding/head rules
    segments = []
    for stage in range(layout.num_stages):
        letters = []
        for layer in layout.layers(stage):
            kind = kinds[layer]
            if kind in ("embedding", "head"):
                continue
            if kind not in _HYBRID_SYMBOLS:
                raise InputError(
                    f"megatron-args: layer {layer} has kind {kind!r}, which Megatron's hybrid layer pattern cannot"
                    f" express (it has {', '.join(sorted(_HYBRID_SYMBOLS))}); export torch-csv instead"
                )
            letters.append(_HYBRID_SYMBOLS[kind])
        segments.append("".join(letters))
    return "|".join(segments)


def megatron_run(
    layout: Layout,
    layer_kinds: Sequence[str],
    training: TrainingShape,
    *,
    num_experts: Sequence[int] = (),
    title: str = "the plan",
) -> MegatronRun:
    """Megatron-LM's arguments and environment for the plan (flag names and rules from `MEGATRON_SOURCE`).

    Mapping:
    - degrees: `--tensor-model-parallel-size` with `--sequence-parallel` when tp > 1 (the cost
      model prices tensor parallelism as Megatron's with sequence parallelism: activations and
      stage outputs 1/tp, all-gather + reduce-scatter per block), `--pipeline-model-parallel-size`,
      `--context-parallel-size`, `--expert-model-parallel-size`; Megatron derives its
      data-parallel size as world / (tp x pp x cp).
    - batch: `--micro-batch-size`, `--global-batch-size` = dp x micro-batch size x micro-batches
      (Megatron then runs global / (micro x dp) micro-batches per step), `--seq-length`.
    - layout: `--pipeline-model-parallel-layout` (`megatron_layout`) and `--num-layers`; virtual
      stages come from the layout, since arguments.py allows at most one of the layout,
      `--num-virtual-stages-per-pipeline-rank` and `--num-layers-per-virtual-pipeline-stage`.
      A hybrid (Mamba) model takes `--hybrid-layer-pattern` with `|` stage separators instead
      (arguments.py rejects the layout flag for it) and runs `pretrain_hybrid.py`.
    - precision: `--bf16` / `--fp16`; fp32 is Megatron's default (no flag).
    - ZeRO (megatron/core/distributed/fsdp/src/README.md: `optim` ~ ZeRO-1, `optim_grads` ~
      ZeRO-2, `optim_grads_params` ~ ZeRO-3): zero 1 is `--use-distributed-optimizer`; zero 2 and 3
      add Megatron-FSDP (`--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads` or
      `optim_grads_params`), which arguments.py runs with the distributed optimizer and only with
      `--ckpt-format fsdp_dtensor`.
    - overlap (`TrainingConfig.dp_overlap`, priced by `judge.training_step`): with dp x cp > 1,
      `--overlap-grad-reduce`, and with ZeRO >= 1 (a parameter all-gather to hide)
      `--overlap-param-gather`; without dp_overlap neither (Megatron's default).
      `TrainingConfig.tp_comm_overlap` with tp > 1 is `--tp-comm-overlap`.
    - recomputation: full is `--recompute-granularity full --recompute-method uniform
      --recompute-num-layers 1` (each block rerun from its own input, as planned); selective is
      `--recompute-granularity selective` (Megatron's default module is the attention core,
      `core_attn`, the plan's selective). Megatron sets one mode for every block: a plan whose
      stages with blocks differ is refused, naming them.
    - attention (TransformerConfig.attention_backend, `AttnBackend`): flash is `flash`
      (TransformerEngine's FlashAttention, needs flash-attn installed), cudnn `fused`
      (TransformerEngine's cuDNN FusedAttention), unfused `unfused`.
    - environment: `CUDA_DEVICE_MAX_CONNECTIONS` (see `CONNECTIONS`).

    `num_experts` holds the routed-expert count of every MoE layer. Megatron takes
    `--expert-model-parallel-size` > 1 only with experts to shard (arguments.py), so a model
    without MoE layers gets ep 1 and a note (ep changes nothing there).

    Refuses (InputError, one line) what Megatron cannot run as planned: placements
    `megatron_layout` refuses, virtual stages with pp = 1 (arguments.py: interleaving needs
    pp > 1), MTP layers in a hybrid model, cp > 1 with a sequence length that is not a multiple
    of 2 x cp, an expert count that ep does not divide, a per-stage recomputation mix.
    """
    kinds = check_kinds("megatron-args", layout, layer_kinds)
    t = training
    pp = int(layout.num_devices)
    vpp = layout.num_stages // pp if layout.num_stages % pp == 0 else 0
    hybrid = any(kind in _HYBRID_ONLY for kind in kinds)
    num_mtp = sum(kind == "mtp" for kind in kinds)
    if hybrid and num_mtp:
        raise InputError(
            "megatron-args: a hybrid (Mamba) model with mtp layers: Megatron gives their pattern after `/` in"
            " --hybrid-layer-pattern, which this export does not write; export megatron-layout or torch-csv instead"
        )
    stage_text = megatron_hybrid_pattern(layout, kinds) if hybrid else megatron_layout(layout, kinds)
    mode = _check_runnable(layout, kinds, t, num_experts)
    world = t.tp * pp * t.cp * t.dp
    ep = t.ep if num_experts else 1
    flags, flag_notes = _flags(t, kinds, pp, stage_text, hybrid, num_mtp, ep, mode)
    env = megatron_env(t)
    env_notes = [
        f"environment: {name}={value}" if value is not None else f"environment: {name} unset (or > 1)"
        for name, value in env
    ]
    notes = [*_notes(t, str(title), pp, vpp, world, ep, hybrid), *flag_notes, *env_notes]
    return MegatronRun(
        args=tuple(flags),
        env=env,
        script=HYBRID_SCRIPT if hybrid else GPT_SCRIPT,
        notes=tuple(notes),
        world_size=world,
    )


def _check_runnable(layout: Layout, kinds: Sequence[str], t: TrainingShape, num_experts: Sequence[int]) -> str:
    """Refuse what Megatron cannot run as planned (past the placement and the hybrid pattern); returns
    the one recomputation mode every block gets."""
    pp = int(layout.num_devices)
    if pp == 1 and layout.num_stages > 1:
        raise InputError(
            f"megatron-args: {layout.num_stages} stages on 1 pipeline rank: Megatron runs virtual stages only with"
            " pp > 1 (arguments.py); re-plan with --stages-per-device 1 or more pipeline ranks"
        )
    if t.cp > 1 and t.seq_len % (2 * t.cp):
        raise InputError(
            f"megatron-args: seq_len = {t.seq_len} with cp = {t.cp}: Megatron needs a sequence length that is a"
            f" multiple of 2 x cp = {2 * t.cp} (arguments.py); re-plan with such a --seq-len or another cp"
        )
    experts = sorted({int(n) for n in num_experts})
    bad = [n for n in experts if n % t.ep]
    if bad:
        raise InputError(
            f"megatron-args: ep = {t.ep} does not divide the MoE layers' {bad[0]} experts: Megatron shards whole"
            " experts over the expert-parallel ranks (arguments.py); re-plan with an ep that divides the expert count"
        )
    if t.attention not in _ATTENTION_BACKEND:
        raise InputError(f"megatron-args: attention = {t.attention!r}: use one of {', '.join(_ATTENTION_BACKEND)}")
    why = t.unsharded_problem("Megatron-LM", keeps=False)
    if why is not None:
        raise InputError(f"megatron-args: {why}; re-plan with --target megatron")
    mode, more = one_recompute(layout, kinds, t.stage_recompute)
    if more:
        raise InputError(
            "megatron-args: Megatron sets one recomputation mode for every block, and this plan's stages differ"
            f" ({stage_modes(t.stage_recompute, [*more, *_stages_in(layout, kinds, mode, t.stage_recompute)])});"
            " re-plan with --recompute none, selective or full"
        )
    if mode == "op":
        raise InputError(
            "megatron-args: recompute = 'op' (torchtitan's per-op selective checkpointing) has no Megatron-LM"
            " flag: Megatron recomputes the attention core (selective) or whole blocks (full); re-plan with"
            " --recompute none, selective or full"
        )
    return mode


def _notes(t: TrainingShape, title: str, pp: int, vpp: int, world: int, ep: int, hybrid: bool) -> list[str]:
    """What the arguments' header says first: the source, the world size, the schedule Megatron runs,
    and the layout's consequences."""
    notes = [
        f"Megatron-LM arguments for {doc_text(title)} (adaptis export --format megatron-args)",
        f"flag names and rules: {MEGATRON_SOURCE}",
        f"world size = tp {t.tp} x pp {pp} x cp {t.cp} x dp {t.dp} = {world} GPUs"
        f" (Megatron derives its data-parallel size {t.dp} from it)",
        "schedule: Megatron runs its own "
        + ("1F1B" if vpp == 1 else f"interleaved 1F1B ({vpp} virtual stages per rank)")
        + " on this layout; a plan with another per-device order (adaptive, zero-bubble) runs as that"
        " (plan with --target megatron to predict what Megatron runs)",
    ]
    if vpp > 1:
        notes.append(
            f"virtual stages: {vpp} per rank, set by the layout (arguments.py allows one of the layout,"
            " --num-virtual-stages-per-pipeline-rank and --num-layers-per-virtual-pipeline-stage)"
        )
    if ep != t.ep:
        notes.append(
            f"experts: ep = {t.ep} in the plan, but the model has no MoE layer and Megatron takes ep > 1 only with"
            " experts to shard, so ep is 1 (nothing else changes)"
        )
    if hybrid:
        notes.append(
            "hybrid (Mamba) model: stages are the `|` segments of --hybrid-layer-pattern (arguments.py rejects"
            " --pipeline-model-parallel-layout for it); the embedding is on the first segment, the loss on the last"
        )
    return notes


def _flags(
    t: TrainingShape, kinds: Sequence[str], pp: int, stage_text: str, hybrid: bool, num_mtp: int, ep: int, mode: str
) -> tuple[list[tuple[str, object]], list[str]]:
    """Megatron-LM's flags for the plan, in the order the script writes them, and the notes they need."""
    notes: list[str] = []
    args: list[tuple[str, object]] = [("--tensor-model-parallel-size", t.tp)]
    if t.tp > 1:
        args.append(("--sequence-parallel", None))
        if t.tp_comm_overlap:
            args.append(("--tp-comm-overlap", None))
    args.append(("--pipeline-model-parallel-size", pp))
    if hybrid:
        args.append(("--hybrid-layer-pattern", stage_text))
    else:
        args.append(("--pipeline-model-parallel-layout", stage_text))
        args.append(("--num-layers", sum(kind not in ("embedding", "head", "mtp") for kind in kinds)))
        if num_mtp:
            args.append(("--mtp-num-layers", num_mtp))
    args += [
        ("--context-parallel-size", t.cp),
        ("--expert-model-parallel-size", ep),
        ("--micro-batch-size", t.micro_batch_size),
        ("--global-batch-size", t.global_batch_size),
        ("--seq-length", t.seq_len),
    ]
    if t.dtype in ("bf16", "fp16"):
        args.append((f"--{t.dtype}", None))
    else:
        notes.append(f"precision: {t.dtype} is Megatron's default (no --bf16 / --fp16)")
    args.append(("--attention-backend", _ATTENTION_BACKEND[t.attention]))
    if t.attention == "flash":
        notes.append(
            "attention: planned as flash (FlashAttention-2 class): --attention-backend flash needs flash-attn"
            " installed; auto lets TransformerEngine choose (cuDNN's fused attention on Hopper: faster than planned)"
        )
    if t.zero >= 1:
        args.append(("--use-distributed-optimizer", None))
    if t.zero >= 2:
        strategy = "optim_grads" if t.zero == 2 else "optim_grads_params"
        args += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", strategy),
            ("--ckpt-format", "fsdp_dtensor"),
        ]
        notes.append(
            f"ZeRO {t.zero}: Megatron has no DeepSpeed ZeRO stages; its sharded data parallelism is Megatron-FSDP,"
            f" strategy {strategy} (ZeRO-{t.zero} per megatron/core/distributed/fsdp/src/README.md), which"
            " arguments.py runs with the distributed optimizer and only with --ckpt-format fsdp_dtensor"
        )
    elif t.zero == 1:
        notes.append("ZeRO 1: Megatron's distributed optimizer (optimizer state sharded over data-parallel ranks)")
    if t.dp_overlap and t.dp * t.cp > 1:
        args.append(("--overlap-grad-reduce", None))
        if t.zero >= 1:
            args.append(("--overlap-param-gather", None))
    if mode == "full":
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    elif mode == "selective":
        args.append(("--recompute-granularity", "selective"))
    return args, notes


def megatron_env(training: TrainingShape) -> tuple[tuple[str, str | None], ...]:
    """The environment arguments.py's validate_args asserts on for this plan (`CONNECTIONS`):
    unset with Megatron-FSDP (ZeRO 2/3), "1" with tp or cp > 1 otherwise, nothing else."""
    t = training
    if t.zero >= 2:
        return ((CONNECTIONS, None),)
    if t.tp > 1 or t.cp > 1:
        return ((CONNECTIONS, "1"),)
    return ()


def megatron_args(
    layout: Layout,
    layer_kinds: Sequence[str],
    training: TrainingShape,
    *,
    num_experts: Sequence[int] = (),
    title: str = "the plan",
) -> str:
    """Megatron-LM's command-line arguments for the plan (`megatron_run`): one argument per line
    ending in ` \\`, values quoted for the shell, then `#` lines (the source of the flag names, the
    world size, the environment, and every note). Pasted at the end of a command (`torchrun ...
    pretrain_gpt.py MODEL-ARGS \\`), the first `#` line ends it; a `#` line among the arguments
    would end it early, hence comments last. Deterministic."""
    run = megatron_run(layout, layer_kinds, training, num_experts=num_experts, title=title)
    lines = _arg_lines(run.args)
    lines += [f"# {note}" for note in run.notes]  # after: the first one ends the command the lines continue
    return "\n".join(lines) + "\n"


def megatron_launch(
    layout: Layout,
    layer_kinds: Sequence[str],
    training: TrainingShape,
    *,
    devices_per_node: int,
    num_experts: Sequence[int] = (),
    title: str = "the plan",
) -> str:
    """A bash script that launches the plan on Megatron-LM: `set -euo pipefail`, the environment
    (`megatron_env`), then one `torchrun` command over `--nnodes` nodes of `--nproc-per-node`
    GPUs (the hardware's devices per node; one node of world-size GPUs when the plan is smaller),
    with the rendezvous left to the caller (`${MASTER_ADDR}`, `${MASTER_PORT}`, `${NODE_RANK}`),
    the training script from `${MEGATRON_LM}` (default: the working directory), the plan's
    arguments, and the caller's own (data, tokenizer, model size, optimizer) from `"$@"`.

    Refuses (InputError) a world size that is not whole nodes of `devices_per_node`.
    """
    run = megatron_run(layout, layer_kinds, training, num_experts=num_experts, title=title)
    per_node = int(devices_per_node)
    world = run.world_size
    if per_node < 1:
        raise InputError(f"megatron-launch: devices_per_node = {per_node}: the hardware needs 1 or more per node")
    nproc, nnodes = (world, 1) if world <= per_node else (per_node, world // per_node)
    if nproc * nnodes != world:
        raise InputError(
            f"megatron-launch: world size {world} is not whole nodes of {per_node} GPUs: torchrun starts the same"
            " number of processes on every node; re-plan with a tp x pp x cp x dp that is a multiple of"
            f" {per_node}, or use megatron-args with your own launcher"
        )
    env_lines = [
        f"export {name}={shlex.quote(value)}" if value is not None else f"unset {name}" for name, value in run.env
    ]
    head = [
        "#!/usr/bin/env bash",
        f"# Launch {doc_text(str(title))} on Megatron-LM (adaptis export --format megatron-launch).",
        f"# {nnodes} node(s) x {nproc} GPUs = world size {world}. Run it on every node with MASTER_ADDR,",
        "# MASTER_PORT and NODE_RANK set, from a Megatron-LM checkout (or with MEGATRON_LM pointing at one).",
        "# Arguments after the script's name (data, tokenizer, model size, optimizer, logging) are passed on.",
        *[f"# {note}" for note in run.notes[1:]],
        "set -euo pipefail",
        "",
        *env_lines,
        'MEGATRON_LM="${MEGATRON_LM:-.}"',
        "",
        "torchrun \\",
        f"    --nnodes {nnodes} \\",
        f"    --nproc-per-node {nproc} \\",
        '    --node-rank "${NODE_RANK}" \\',
        '    --master-addr "${MASTER_ADDR}" \\',
        '    --master-port "${MASTER_PORT}" \\',
        f'    "${{MEGATRON_LM}}/{run.script}" \\',
        *[f"    {line}" for line in _arg_lines(run.args)],
        '    "$@"',
    ]
    return "\n".join(head) + "\n"


def _arg_lines(args: Sequence[tuple[str, object]]) -> list[str]:
    return [f"{flag} \\" if value is None else f"{flag} {shlex.quote(str(value))} \\" for flag, value in args]


def _stages_in(layout: Layout, kinds: Sequence[str], mode: str, stage_recompute: Sequence[str]) -> list[int]:
    """The stages holding decoder blocks whose mode is `mode` (the ones `one_recompute` chose)."""
    modes = list(stage_recompute) or ["none"] * layout.num_stages
    return [
        s
        for s in range(layout.num_stages)
        if modes[s] == mode and any(kinds[layer] not in ("embedding", "head") for layer in layout.layers(s))
    ]
