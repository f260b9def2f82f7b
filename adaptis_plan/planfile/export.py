"""Exports of a plan's layout and programs to the formats other frameworks read.

Data flow: plan (layout + per-device programs) -> text / plain lists, written by the CLI
(`adaptis export --format torch-csv|megatron-layout|megatron-args|torchtitan`). Pure functions
over plain data: no IO, no torch, no Megatron, no torchtitan. Imports only `core`, `errors`,
`text` and `schedules.targets`.

- `to_torch_csv`: torch.distributed.pipelining's `compute_only` schedule CSV, read by
  `_PipelineScheduleRuntime._load_csv`: one row per device (pipeline rank), one cell per
  action (`0F0`, `5I3`), in execution order. Programs hold plain F/B/I/W actions, so a
  DualPipeV plan is exported with its overlapped (F;B) pairs as two consecutive cells.
- `megatron_layout`: Megatron-LM's `--pipeline-model-parallel-layout` string.
- `megatron_args`: Megatron-LM's command-line arguments for the whole training configuration
  (parallel degrees, batch, sequence, precision, ZeRO, recomputation and the layout), one per
  line ending in ` \\`, then `#` lines for what Megatron cannot express as planned.
- `torchtitan_fqns`: torchtitan's `module_fqns_per_model_part` (one list of module names per
  stage, in stage order), with torchtitan 0.3's module names.
- `torchtitan_config_module`: a torchtitan 0.3 config module (its configs are Python functions
  that return the trainer's config, loaded with `--module NAME --config adaptis_pipeline`): a
  base config of the model with the plan's training configuration put in (every parallel
  degree, the batch, the sequence length, the activation checkpointing) and the CSV beside it.
  The module is code that torchtitan imports, and a plan file may come from anyone: no text from
  the plan or the options goes into it as written. Exact values go in as `repr()` literals; the
  docstring gets only printable text without backslashes or double quotes (`_doc_text`), and the
  base config must be a dotted module path and a function name (`torchtitan_base`).

What each runtime can run at all (placements, split heads) is checked before these are called,
by `schedules.targets`; these functions only write what passed.
"""

from __future__ import annotations

import keyword
import operator
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from adaptis_plan.core import OPS, Action, Layout, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.text import printable

# Megatron's layer letters: E embedding, t transformer (any decoder block), m MTP, L loss (+ final norm and head).
_MEGATRON_TOKEN = {"embedding": "E", "head": "L", "mtp": "m"}
_RUN_MIN = 3  # write runs of at least this many equal letters as `t*n`
_DOC_TEXT_MAX = 200  # characters of plan text (names, strategy) the torchtitan module's docstring shows
_SHOWN_MAX = 60  # characters of a bad option value an error message shows

# Megatron's flag names and rules below are read from NVIDIA/Megatron-LM d98e8a64ddf3
# (megatron/training/arguments.py; the recompute and hybrid flags are generated there from
# megatron/core/transformer/transformer_config.py and megatron/training/config/).
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
_RECOMPUTE_ORDER = ("none", "selective", "full")  # by activation memory kept, most first


@dataclass(frozen=True)
class TrainingShape:
    """A plan's `training` block and per-stage recomputation, as plain data for the exports.

    `stage_recompute[s]` is stage s's mode (none / selective / full); empty means none everywhere.
    """

    num_microbatches: int
    micro_batch_size: int = 1
    seq_len: int = 4096
    tp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 1
    dtype: str = "bf16"
    stage_recompute: tuple[str, ...] = ()
    attention: str = "flash"  # the attention core planned (`TrainingConfig.attention`)

    @property
    def global_batch_size(self) -> int:
        """Sequences per optimizer step over the whole cluster: dp x micro-batch size x micro-batches."""
        return self.dp * self.micro_batch_size * self.num_microbatches


def one_recompute(layout: Layout, layer_kinds: Sequence[str], stage_recompute: Sequence[str]) -> tuple[str, list[int]]:
    """The one recomputation mode a framework that sets it for every block can use, and the stages
    that then recompute more than planned.

    Megatron and torchtitan apply one mode to every decoder block. The mode is the one of the
    stages (holding decoder blocks) that keeps the least activation memory, so no stage keeps more
    than planned: stages planned with less recomputation run slower than planned, never out of
    memory. Stages without decoder blocks (the embedding or the head alone) never recompute.
    """
    kinds = [str(kind) for kind in layer_kinds]
    modes = list(stage_recompute) or ["none"] * layout.num_stages
    if len(modes) != layout.num_stages:
        raise InputError(
            f"stage_recompute has {len(modes)} entries: the layout has {layout.num_stages} stages; pass one per stage"
        )
    for stage, mode in enumerate(modes):
        if mode not in _RECOMPUTE_ORDER:
            raise InputError(f"stages[{stage}].recompute = {_shown(mode)}: use one of {', '.join(_RECOMPUTE_ORDER)}")
    with_blocks = [
        s
        for s in range(layout.num_stages)
        if any(kinds[layer] not in ("embedding", "head") for layer in layout.layers(s))
    ]
    chosen = max((modes[s] for s in with_blocks), key=_RECOMPUTE_ORDER.index, default="none")
    return chosen, [s for s in with_blocks if modes[s] != chosen]


def megatron_hybrid_pattern(layout: Layout, layer_kinds: Sequence[str]) -> str:
    """Megatron's `--hybrid-layer-pattern` for a hybrid (Mamba) model: per stage, its mixers'
    letters (`_HYBRID_SYMBOLS`), stages separated by `|`. Megatron puts the embedding on the first
    segment and the loss on the last, so they have no letter; a stage holding only one of them is
    an empty segment. The placement rules are the layout's (`megatron_layout` checks them).
    """
    kinds = _check_kinds("megatron-args", layout, layer_kinds)
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


def megatron_args(
    layout: Layout,
    layer_kinds: Sequence[str],
    training: TrainingShape,
    *,
    num_experts: Sequence[int] = (),
    title: str = "the plan",
) -> str:
    """Megatron-LM's command-line arguments for the plan: one argument per line ending in ` \\`,
    values quoted for the shell, then `#` lines (the source of the flag names, the world size,
    and every setting Megatron runs differently from the plan). Pasted at the end of a command
    (`torchrun ... pretrain_gpt.py MODEL-ARGS \\`), the first `#` line ends it; a `#` line among
    the arguments would end it early, hence comments last. Deterministic.

    Mapping (flag names and rules from `MEGATRON_SOURCE`):
    - degrees: `--tensor-model-parallel-size` (with `--sequence-parallel` when tp > 1),
      `--pipeline-model-parallel-size`, `--context-parallel-size`, `--expert-model-parallel-size`;
      Megatron derives its data-parallel size as world / (tp x pp x cp).
    - batch: `--micro-batch-size`, `--global-batch-size` = dp x micro-batch size x micro-batches
      (Megatron then runs global / (micro x dp) micro-batches per step), `--seq-length`.
    - layout: `--pipeline-model-parallel-layout` (`megatron_layout`) and `--num-layers`; virtual
      stages come from the layout, since arguments.py allows at most one of the layout,
      `--num-virtual-stages-per-pipeline-rank` and `--num-layers-per-virtual-pipeline-stage`.
      A hybrid (Mamba) model takes `--hybrid-layer-pattern` with `|` stage separators instead
      (arguments.py rejects the layout flag for it).
    - precision: `--bf16` / `--fp16`; fp32 is Megatron's default (no flag).
    - ZeRO (megatron/core/distributed/fsdp/src/README.md: `optim` ~ ZeRO-1, `optim_grads` ~
      ZeRO-2, `optim_grads_params` ~ ZeRO-3): zero 1 is `--use-distributed-optimizer`; zero 2 and 3
      add Megatron-FSDP (`--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads` or
      `optim_grads_params`), which arguments.py runs with the distributed optimizer and only with
      `--ckpt-format fsdp_dtensor`.
    - recomputation (`one_recompute`): full is `--recompute-granularity full --recompute-method
      uniform --recompute-num-layers 1` (each block rerun from its own input, as planned);
      selective is `--recompute-granularity selective` (Megatron's default module is the attention
      core, `core_attn`, the plan's selective).
    - attention (TransformerConfig.attention_backend, `AttnBackend`): cudnn is `--attention-backend fused`
      (TransformerEngine's cuDNN FusedAttention), unfused is `--attention-backend unfused`; flash leaves
      Megatron's default, auto (TransformerEngine chooses, which needs no flash-attn install; a `#`
      line says so).

    `num_experts` holds the routed-expert count of every MoE layer. Megatron takes
    `--expert-model-parallel-size` > 1 only with experts to shard (arguments.py), so a model
    without MoE layers gets ep 1 and a `#` line (ep changes nothing there).

    Refuses (InputError, one line) what Megatron cannot run: placements `megatron_layout` refuses,
    virtual stages with pp = 1 (arguments.py: interleaving needs pp > 1), MTP layers in a hybrid
    model, cp > 1 with a sequence length that is not a multiple of 2 x cp, an expert count that ep
    does not divide.
    """
    kinds = _check_kinds("megatron-args", layout, layer_kinds)
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
    ep = t.ep if experts else 1
    bad = [n for n in experts if n % t.ep]
    if bad:
        raise InputError(
            f"megatron-args: ep = {t.ep} does not divide the MoE layers' {bad[0]} experts: Megatron shards whole"
            " experts over the expert-parallel ranks (arguments.py); re-plan with an ep that divides the expert count"
        )
    mode, more = one_recompute(layout, kinds, t.stage_recompute)

    notes = [
        f"Megatron-LM arguments for {_doc_text(str(title))} (adaptis export --format megatron-args)",
        f"flag names and rules: {MEGATRON_SOURCE}",
        f"world size = tp {t.tp} x pp {pp} x cp {t.cp} x dp {t.dp} = {t.tp * pp * t.cp * t.dp} GPUs"
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
    args: list[tuple[str, object]] = [("--tensor-model-parallel-size", t.tp)]
    if t.tp > 1:
        args.append(("--sequence-parallel", None))
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
    backend = {"cudnn": "fused", "unfused": "unfused"}.get(t.attention)
    if backend is not None:
        args.append(("--attention-backend", backend))
    else:
        notes.append(
            "attention: planned as flash (FlashAttention-2 class); Megatron's default backend, auto, lets"
            " TransformerEngine choose (cuDNN's fused attention on Hopper: faster than planned there)"
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
    if mode == "full":
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    elif mode == "selective":
        args.append(("--recompute-granularity", "selective"))
    if more:
        notes.append(
            f"recompute: Megatron sets one mode for every block, so every stage recomputes {mode}; planned with"
            f" less: {_stage_modes(t.stage_recompute, more)} (they run slower than planned, in no more memory)"
        )
    lines = [f"{flag} \\" if value is None else f"{flag} {shlex.quote(str(value))} \\" for flag, value in args]
    lines += [f"# {note}" for note in notes]  # after: the first one ends the command the lines continue
    return "\n".join(lines) + "\n"


def to_torch_csv(programs: Programs) -> str:
    """torch's compute-only CSV: row d = device d's actions in order, e.g. `0F0,0F1,0B0,0B1`."""
    rows = []
    for device, program in enumerate(programs):
        cells = []
        for action in program:
            stage, op, mb = action
            if op not in OPS:
                raise InputError(
                    f"torch-csv: device {device} action = {tuple(action)}: op must be one of {', '.join(OPS)};"
                    " fix the plan's programs"
                )
            cells.append(str(Action(stage, op, mb)))
        rows.append(",".join(cells))
    return "\n".join(rows) + "\n"


def megatron_layout(layout: Layout, layer_kinds: Sequence[str]) -> str:
    """The `--pipeline-model-parallel-layout` string: stages in order, separated by `|`.

    Megatron places virtual stage s on pipeline rank s % pp, so the plan must use the loop
    placement with the same number of stages on every device (pp = num_devices, vpp =
    stages per device). Every block kind (dense, MoE, Mamba, ...) is a `t`; the embedding is
    `E`, the head (final norm + LM head + loss) `L`, an `mtp` layer `m`. Runs of 3 or more
    equal letters are written `t*n`, which Megatron unrolls.
    """
    kinds = _check_kinds("megatron-layout", layout, layer_kinds)
    pp = layout.num_devices
    for stage, device in enumerate(layout.stage_device):
        if device != stage % pp:
            raise InputError(
                f"megatron-layout: needs a loop placement (stage s on device s % pp); this plan places stage {stage}"
                f" on device {device}; export torch-csv instead"
            )
    if layout.num_stages % pp:
        raise InputError(
            f"megatron-layout: needs the same number of stages on every device (pp = {pp}); this plan has"
            f" {layout.num_stages} stages; export torch-csv instead"
        )
    if kinds[0] != "embedding" or kinds[-1] != "head":
        raise InputError(
            f"megatron-layout: layer kinds start with {kinds[0]!r} and end with {kinds[-1]!r}: Megatron needs the"
            " embedding first and the head last; export torch-csv instead"
        )
    stages = []
    for stage in range(layout.num_stages):
        letters = [_MEGATRON_TOKEN.get(kinds[layer], "t") for layer in layout.layers(stage)]
        stages.append(_compress(letters))
    return "|".join(stages)


def torchtitan_fqns(layout: Layout, layer_kinds: Sequence[str]) -> list[list[str]]:
    """torchtitan's `module_fqns_per_model_part`: per stage, the module names it holds.

    torchtitan 0.3's decoder models name the embedding `tok_embeddings`, the blocks
    `layers.{i}` and the head `norm` + `lm_head`; the i-th block (the layers between embedding
    and head, counted from 0) is `layers.{i}`, so decoder layer l is `layers.{l-1}`.
    """
    kinds = _check_kinds("torchtitan", layout, layer_kinds)
    block_index = {}
    for layer, kind in enumerate(kinds):
        if kind not in ("embedding", "head"):
            block_index[layer] = len(block_index)
    parts: list[list[str]] = []
    for stage in range(layout.num_stages):
        names: list[str] = []
        for layer in layout.layers(stage):
            if kinds[layer] == "embedding":
                names.append("tok_embeddings")
            elif kinds[layer] == "head":
                names += ["norm", "lm_head"]
            else:
                names.append(f"layers.{block_index[layer]}")
        parts.append(names)
    return parts


def torchtitan_schedule_name(layout: Layout) -> str:
    """The `pipeline_parallel_schedule` torchtitan needs to put each stage on the plan's rank.

    With a schedule CSV torchtitan always runs `_PipelineScheduleRuntime`, but it assigns stages
    to ranks by this name: a V for `ZBVZeroBubble` (and `DualPipeV`), a loop otherwise, so a loop
    plan names `PipelineScheduleMulti` (the CSV-capable multi-stage runtime) and a V plan
    `ZBVZeroBubble`.
    """
    from adaptis_plan.schedules.targets import loop_map

    if layout.stage_device == loop_map(layout.num_stages, layout.num_devices):
        return "PipelineScheduleMulti"
    return "ZBVZeroBubble"


_TORCHTITAN_TEMPLATE = '''"""torchtitan config: {title}.

Generated by `adaptis export --format torchtitan`. torchtitan 0.3 loads a config from a Python
function; this one takes the base config {base_module}.{base_config} and puts the plan's
training configuration in: every parallel degree (tp {tp}, pp {pp}, cp {cp}, ep {ep}, dp {dp} with
ZeRO {zero}), the stages' modules, the stage-to-rank style, the schedule CSV beside this file
({csv_name_doc}), the batch shape the CSV was planned for ({num_microbatches} micro-batches of
{micro_batch_size}, sequence length {seq_len}) and the activation checkpointing. It runs on
tp x pp x cp x dp = {world_size} ranks; with this file's folder on PYTHONPATH:

    PYTHONPATH=. torchrun --nproc-per-node {world_size} -m torchtitan.train --module {{this module}} --config adaptis_pipeline

(on several nodes, --nnodes x --nproc-per-node = {world_size}). Keep the base config the one of
the model that was planned (its layers must be the plan's).
"""

import importlib
from pathlib import Path

BASE_MODULE = {base_module!r}
BASE_CONFIG = {base_config!r}
NUM_LAYERS = {num_layers}
PIPELINE = {{
    "pipeline_parallel_degree": {pp},
    "pipeline_parallel_schedule": {schedule!r},
    "pipeline_parallel_schedule_csv": str(Path(__file__).with_name({csv_name!r})),
    "pipeline_parallel_microbatch_size": {micro_batch_size},
    "module_fqns_per_model_part": {fqns!r},
}}
{zero_comment}
PARALLELISM = {{
    "tensor_parallel_degree": {tp},
    "context_parallel_degree": {cp},
    "expert_parallel_degree": {ep},
    "data_parallel_replicate_degree": {replicate},
    "data_parallel_shard_degree": {shard},
    "fsdp_reshard_after_forward": {reshard!r},
}}
LOCAL_BATCH_SIZE = {local_batch_size}  # per data-parallel rank: micro-batches x micro-batch size
GLOBAL_BATCH_SIZE = {global_batch_size}  # dp x LOCAL_BATCH_SIZE: one local batch per rank per step
SEQ_LEN = {seq_len}
MIXED_PRECISION_PARAM = {mixed_precision!r}
{recompute_comment}
ACTIVATION_CHECKPOINT = {recompute!r}


def _activation_checkpoint(mode):
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    return {{"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}}[mode]


def adaptis_pipeline():
    config = getattr(importlib.import_module(BASE_MODULE), BASE_CONFIG)()
    layers = len(config.model_spec.model.layers)
    if layers != NUM_LAYERS:
        raise ValueError(
            f"{{BASE_MODULE}}.{{BASE_CONFIG}} has {{layers}} layers, the plan {{NUM_LAYERS}}: set BASE_MODULE /"
            " BASE_CONFIG to the model that was planned (adaptis export --torchtitan-config MODULE:CONFIG)"
        )
    for key, value in {{**PIPELINE, **PARALLELISM}}.items():
        setattr(config.parallelism, key, value)
    config.training.local_batch_size = LOCAL_BATCH_SIZE
    config.training.global_batch_size = GLOBAL_BATCH_SIZE
    config.training.seq_len = SEQ_LEN
    config.training.mixed_precision_param = MIXED_PRECISION_PARAM
    config.training.disable_cuda_graphs = True  # torchtitan does not run CUDA graphs with pipeline parallelism
    config.activation_checkpoint = _activation_checkpoint(ACTIVATION_CHECKPOINT)
    return config
'''

# ZeRO stage -> (replicate, shard) degrees as multiples of dp, FSDP's reshard policy, and the comment
# the module shows. torchtitan has no ZeRO-1/2 optimizer: its data parallelism is DDP (replicate)
# or FSDP2 (shard), torchtitan/config/configs.py `ParallelismConfig`. FSDP2 without resharding after
# the forward keeps each parameter gathered from its forward to its backward, as ZeRO-2 keeps
# parameters whole, and shards gradients and optimizer state: memory no more than ZeRO 1/2 plan,
# and its all-gather + reduce-scatter move what ZeRO-1/2's reduce-scatter + all-gather move.
_TORCHTITAN_ZERO = {
    0: (True, "never", "# ZeRO 0: DDP, every data-parallel rank holds the whole model and optimizer state"),
    1: (
        False,
        "never",
        "# ZeRO 1: torchtitan has no ZeRO-1; FSDP2 that keeps parameters gathered from forward to backward"
        "\n# (fsdp_reshard_after_forward never) shards optimizer state as planned and gradients too",
    ),
    2: (
        False,
        "never",
        "# ZeRO 2: FSDP2 that keeps parameters gathered from forward to backward (fsdp_reshard_after_forward"
        "\n# never): gradients and optimizer state sharded, parameters whole while used, as ZeRO-2",
    ),
    3: (False, "always", "# ZeRO 3: FSDP2 that reshards parameters after every forward, as ZeRO-3"),
}
_TORCHTITAN_AC = {
    "none": "# activation checkpointing: none",
    "selective": "# activation checkpointing: torchtitan's selective AC (per-op: it recomputes all but the matmuls\n"
    "# and communication it saves), the closest to the plan's selective (the attention core recomputed)",
    "full": "# activation checkpointing: full, every block rerun from its input in the backward, as planned",
}
_TORCHTITAN_DTYPE = {"bf16": "bfloat16", "fp32": "float32"}


def torchtitan_parallelism(training: TrainingShape) -> dict[str, object]:
    """torchtitan 0.3's `parallelism` degrees (and FSDP's reshard policy) for the plan, with
    `dp` split into replicate / shard by ZeRO stage (`_TORCHTITAN_ZERO`).

    Refuses (InputError) what torchtitan cannot lay out: its expert mesh borrows ranks from the
    sharded data-parallel, context- and tensor-parallel ones (ep must divide dp_shard x cp x tp,
    `ParallelismConfig.expert_parallel_degree`), so ZeRO 0 (no sharding) with ep > 1 needs
    ep | cp x tp.
    """
    t = training
    replicate, reshard, _ = _TORCHTITAN_ZERO[int(t.zero)]
    rep, shard = (t.dp, 1) if replicate else (1, t.dp)
    if (shard * t.cp * t.tp) % t.ep:
        raise InputError(
            f"torchtitan: ep = {t.ep} must divide data-parallel shard x cp x tp = {shard} x {t.cp} x {t.tp}"
            " (torchtitan borrows expert ranks from FSDP, CP and TP, and ZeRO 0 runs data parallelism as DDP);"
            " re-plan with --zero 1 or more"
        )
    return {
        "tensor_parallel_degree": t.tp,
        "context_parallel_degree": t.cp,
        "expert_parallel_degree": t.ep,
        "data_parallel_replicate_degree": rep,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
    }


def torchtitan_base(base: str) -> tuple[str, str]:
    """`--torchtitan-config MODULE:CONFIG` as (the module to import, the config function's name).

    MODULE is a torchtitan model (`llama3`, read as `torchtitan.models.llama3.config_registry`)
    or a dotted module path; CONFIG a function of that module. Both go into the generated module
    as code-level names, so anything but Python names is refused.
    """
    module, sep, config = str(base).partition(":")
    if not sep or not all(_is_name(part) for part in module.split(".")) or not _is_name(config):
        raise InputError(
            f"--torchtitan-config = {_shown(base)}: expected MODULE:CONFIG, a Python module name (dotted names"
            " allowed) and a function name, e.g. llama3:llama3_8b (a torchtitan model module and a function of"
            " its config_registry)"
        )
    if "." not in module:
        module = f"torchtitan.models.{module}.config_registry"
    return module, config


def torchtitan_config_module(
    layout: Layout,
    layer_kinds: Sequence[str],
    *,
    csv_name: str,
    base: str,
    training: TrainingShape,
    title: str,
) -> str:
    """Python source of a torchtitan 0.3 config function `adaptis_pipeline` (see the module docstring).

    `base` is `MODULE:CONFIG` (see `torchtitan_base`). torchtitan takes
    local_batch_size / microbatch_size micro-batches per step, so the local batch is the plan's
    micro-batches times their size, and the global batch dp local batches (no gradient
    accumulation). Degrees: `torchtitan_parallelism`; activation checkpointing: `one_recompute`
    (torchtitan sets one policy for every block). `title` and `csv_name` may hold any text: the
    docstring shows them through `_doc_text`, the code holds `csv_name` as a string literal;
    everything else in the code is a number or a fixed string.
    """
    module, config = torchtitan_base(base)
    fqns = torchtitan_fqns(layout, layer_kinds)
    t = training
    num_layers = sum(1 for kind in layer_kinds if kind not in ("embedding", "head"))
    num_microbatches, micro_batch_size, seq_len, tp, dp, cp, ep, zero = (
        int(operator.index(n))
        for n in (t.num_microbatches, t.micro_batch_size, t.seq_len, t.tp, t.dp, t.cp, t.ep, t.zero)
    )
    if zero not in _TORCHTITAN_ZERO:
        raise InputError(f"torchtitan: zero = {_shown(zero)}: use 0, 1, 2 or 3")
    if t.dtype not in _TORCHTITAN_DTYPE:
        raise InputError(
            f"torchtitan: dtype = {_shown(t.dtype)}: torchtitan trains in bfloat16 or float32 (no fp16);"
            " re-plan with --dtype bf16"
        )
    par = torchtitan_parallelism(t)
    recompute, more = one_recompute(layout, layer_kinds, t.stage_recompute)
    recompute_comment = _TORCHTITAN_AC[recompute]
    if more:
        recompute_comment += (
            f"\n# torchtitan sets one policy for every block: {len(more)} stage(s) planned with less recomputation"
            " run this one (slower than planned, no more memory)"
        )
    csv_name = str(csv_name)
    local_batch_size = num_microbatches * micro_batch_size
    return _TORCHTITAN_TEMPLATE.format(
        title=_doc_text(str(title)),
        base_module=module,
        base_config=config,
        csv_name=csv_name,
        csv_name_doc=_doc_text(csv_name),
        num_microbatches=num_microbatches,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        pp=int(layout.num_devices),
        tp=tp,
        dp=dp,
        cp=cp,
        ep=ep,
        zero=zero,
        world_size=tp * int(layout.num_devices) * cp * dp,
        schedule=torchtitan_schedule_name(layout),
        num_layers=num_layers,
        fqns=fqns,
        zero_comment=_TORCHTITAN_ZERO[zero][2],
        replicate=par["data_parallel_replicate_degree"],
        shard=par["data_parallel_shard_degree"],
        reshard=par["fsdp_reshard_after_forward"],
        local_batch_size=local_batch_size,
        global_batch_size=dp * local_batch_size,
        mixed_precision=_TORCHTITAN_DTYPE[t.dtype],
        recompute_comment=recompute_comment,
        recompute=recompute,
    )


def _stage_modes(stage_recompute: Sequence[str], stages: Sequence[int]) -> str:
    """`stages` grouped by their planned mode, as runs: `none: stages 0, 3-10; selective: stage 2`."""
    parts = []
    for mode in _RECOMPUTE_ORDER:
        picked = [s for s in stages if stage_recompute[s] == mode]
        if not picked:
            continue
        runs: list[str] = []
        start = prev = picked[0]
        for s in [*picked[1:], None]:
            if s is not None and s == prev + 1:
                prev = s
                continue
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            if s is not None:
                start = prev = s
        parts.append(f"{mode}: stage{'s' if len(picked) > 1 else ''} {', '.join(runs)}")
    return "; ".join(parts)


def _is_name(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)


def _doc_text(text: str) -> str:
    """`text` as the generated docstring shows it: printable characters but a backslash or a double quote
    (any other becomes `?`, so nothing can end the docstring or start an escape), at most `_DOC_TEXT_MAX`."""
    if len(text) > _DOC_TEXT_MAX:
        text = text[: _DOC_TEXT_MAX - 3] + "..."
    return printable(text).replace("\\", "?").replace('"', "?")


def _shown(value: object) -> str:
    """A value as an error message shows it: its repr (one line), at most `_SHOWN_MAX` characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def _check_kinds(fmt: str, layout: Layout, layer_kinds: Sequence[str]) -> list[str]:
    kinds = [str(kind) for kind in layer_kinds]
    if len(kinds) != layout.num_layers:
        raise InputError(
            f"{fmt}: layer_kinds has {len(kinds)} entries: the layout covers {layout.num_layers} layers; pass one"
            " kind per layer of the plan's model"
        )
    return kinds


def _compress(letters: list[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(letters):
        j = i
        while j < len(letters) and letters[j] == letters[i]:
            j += 1
        run = j - i
        out.append(f"{letters[i]}*{run}" if run >= _RUN_MIN else letters[i] * run)
        i = j
    return "".join(out)
