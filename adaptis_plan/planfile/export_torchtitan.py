"""torchtitan exports of a plan: the module names of every stage and a config module.

Data flow: plan (layout, layer kinds, `TrainingShape`) -> `torchtitan_fqns` (torchtitan's
`module_fqns_per_model_part`) and `torchtitan_config_module` (the source of a config module that
torchtitan loads with `--module NAME --config adaptis_pipeline`: a base config of the model with
the plan's training configuration put in, and the schedule CSV beside it). Pure functions over
plain data: no IO, no torchtitan. Imports only `core`, `errors`, `planfile.export` and
`schedules.targets`.

torchtitan renamed its batch fields after 0.3 (pytorch/torchtitan 73aed7f, "fold batch dim"):
`training.local_batch_size` / `global_batch_size` / `seq_len` and
`parallelism.pipeline_parallel_microbatch_size` became `training.num_tokens_per_microbatch_per_dp_rank`
/ `num_tokens_per_train_step` / `max_context_length` and `parallelism.num_pp_microbatches`. The
module is written for one field set (`TORCHTITAN_VERSIONS`), and at load it checks that the
installed torchtitan has every field it sets.

The module is code that torchtitan imports, and a plan file may come from anyone: no text from
the plan or the options goes into it as written. Exact values go in as `repr()` literals; the
docstring gets only printable text without backslashes or double quotes (`doc_text`), and the
base config must be a dotted module path and a function name (`torchtitan_base`).
"""

from __future__ import annotations

import keyword
import operator
import re
from collections.abc import Sequence

from adaptis_plan.core import Layout
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.export import TrainingShape, check_kinds, doc_text, one_recompute, shown

# The torchtitan main the "main" field set was read from (torchtitan/config/configs.py
# `TrainingConfig`, `ParallelismConfig`; torchtitan/trainer.py `Trainer.Config`).
TORCHTITAN_MAIN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
# field set -> (training fields for the batch, the pipeline's micro-batch field), in the order
# (per-forward batch, per-step batch, sequence length). 0.3: torchtitan 0.3.0 on PyPI.
TORCHTITAN_VERSIONS = {
    "0.3": (("local_batch_size", "global_batch_size", "seq_len"), "pipeline_parallel_microbatch_size"),
    "main": (
        ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "max_context_length"),
        "num_pp_microbatches",
    ),
}
_RELEASE_03 = re.compile(r"0\.3\.\d+")


def torchtitan_field_set(requested: str | None, installed: str | None) -> str:
    """The field set (`TORCHTITAN_VERSIONS` key) for `--torchtitan-version requested` (None: not
    given) and the installed torchtitan's version (None: not installed). An explicit choice wins;
    otherwise a 0.3.x release is "0.3", and without torchtitan installed the PyPI release, "0.3"
    (the module checks its fields when torchtitan loads it). Any other installed version is
    refused: a source checkout of main reports a stale version (0.2.2 at `TORCHTITAN_MAIN_COMMIT`)
    that cannot tell its fields."""
    if requested is not None:
        if requested not in TORCHTITAN_VERSIONS:
            raise InputError(
                f"--torchtitan-version = {shown(requested)}: this export knows {' and '.join(TORCHTITAN_VERSIONS)}"
                f" (main's fields as of pytorch/torchtitan {TORCHTITAN_MAIN_COMMIT[:7]}); pass one of them"
            )
        return requested
    if installed is None:
        return "0.3"
    if _RELEASE_03.fullmatch(installed):
        return "0.3"
    raise InputError(
        f"--format torchtitan: the installed torchtitan is {shown(installed)}, whose config fields this export does"
        f" not know; pass --torchtitan-version {' or '.join(TORCHTITAN_VERSIONS)} (main: pytorch/torchtitan at"
        f" {TORCHTITAN_MAIN_COMMIT[:7]} or later, after the batch fields were renamed)"
    )


def torchtitan_fqns(layout: Layout, layer_kinds: Sequence[str]) -> list[list[str]]:
    """torchtitan's `module_fqns_per_model_part`: per stage, the module names it holds.

    torchtitan 0.3's decoder models name the embedding `tok_embeddings`, the blocks
    `layers.{i}` and the head `norm` + `lm_head`; the i-th block (the layers between embedding
    and head, counted from 0) is `layers.{i}`, so decoder layer l is `layers.{l-1}`.
    """
    kinds = check_kinds("torchtitan", layout, layer_kinds)
    block_index: dict[int, int] = {}
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

Generated by `adaptis export --format torchtitan` for torchtitan {version_doc}. torchtitan loads
a config from a Python function; this one takes the base config {base_module}.{base_config} and
puts the plan's training configuration in: every parallel degree (tp {tp}, pp {pp}, cp {cp}, ep
{ep}, dp {dp} with ZeRO {zero}), the stages' modules, the stage-to-rank style, the schedule CSV
beside this file ({csv_name_doc}), the batch shape the CSV was planned for ({num_microbatches}
micro-batches of {micro_batch_size}, sequence length {seq_len}) and the activation checkpointing.
It runs on tp x pp x cp x dp = {world_size} ranks; with this file's folder on PYTHONPATH:

    PYTHONPATH=. torchrun --nproc-per-node {world_size} -m torchtitan.train --module {{this module}} --config adaptis_pipeline

(on several nodes, --nnodes x --nproc-per-node = {world_size}). Keep the base config the one of
the model that was planned (its layers must be the plan's).
"""

import dataclasses
import importlib
from pathlib import Path

TORCHTITAN_VERSION = {version!r}  # the config fields this module sets are torchtitan's at this version
BASE_MODULE = {base_module!r}
BASE_CONFIG = {base_config!r}
NUM_LAYERS = {num_layers}
PIPELINE = {{
    "pipeline_parallel_degree": {pp},
    "pipeline_parallel_schedule": {schedule!r},
    "pipeline_parallel_schedule_csv": str(Path(__file__).with_name({csv_name!r})),
    {microbatch_field!r}: {microbatch_value},
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
# {batch_doc}
TRAINING = {{
    {batch_field!r}: {batch_value},
    {step_field!r}: {step_value},
    {seq_field!r}: {seq_len},
    "mixed_precision_param": {mixed_precision!r},
    "disable_cuda_graphs": True,  # torchtitan does not run CUDA graphs with pipeline parallelism
}}
{recompute_comment}
ACTIVATION_CHECKPOINT = {recompute!r}


def _activation_checkpoint(mode):
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    return {{"none": None, "selective": SelectiveAC.Config(), "op": SelectiveAC.Config(), "full": FullAC.Config()}}[mode]


def _check_fields(config):
    """Every field this module sets exists in the installed torchtitan (torchtitan renamed its batch
    fields after 0.3); otherwise one clear error instead of a setting silently dropped."""
    missing = [
        f"{{section}}.{{key}}"
        for section, keys in (("parallelism", {{**PIPELINE, **PARALLELISM}}), ("training", TRAINING))
        for key in keys
        if key not in {{field.name for field in dataclasses.fields(getattr(config, section))}}
    ]
    if missing:
        raise ValueError(
            f"this config was exported for torchtitan {{TORCHTITAN_VERSION}}, and the installed torchtitan has no"
            f" {{', '.join(missing)}}: export it again with adaptis export --torchtitan-version for this torchtitan"
        )


def adaptis_pipeline():
    config = getattr(importlib.import_module(BASE_MODULE), BASE_CONFIG)()
    layers = len(config.model_spec.model.layers)
    if layers != NUM_LAYERS:
        raise ValueError(
            f"{{BASE_MODULE}}.{{BASE_CONFIG}} has {{layers}} layers, the plan {{NUM_LAYERS}}: set BASE_MODULE /"
            " BASE_CONFIG to the model that was planned (adaptis export --torchtitan-config MODULE:CONFIG)"
        )
    _check_fields(config)
    for key, value in {{**PIPELINE, **PARALLELISM}}.items():
        setattr(config.parallelism, key, value)
    for key, value in TRAINING.items():
        setattr(config.training, key, value)
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
_KEPT_COMMENT = (
    "\n# Under pipelining torch's stages keep the gathered parameters and fp32 unsharded gradients from the first"
    "\n# micro-batch to the last backward and reduce once after it, whatever the policy; the plan is priced so"
    "\n# (ZeRO-1's memory and traffic, the reduce-scatter after the last backward), and never resharding spares"
    "\n# the per-micro-batch gathers"
)
_TORCHTITAN_AC = {
    "none": "# activation checkpointing: none",
    "selective": "# activation checkpointing: torchtitan's selective AC (per-op: it recomputes all but the matmuls\n"
    "# and communication it saves), the closest to the plan's selective (the attention core recomputed)",
    "op": "# activation checkpointing: torchtitan's selective AC, per-op (it saves the matmuls and communication\n"
    "# its policy lists and recomputes the rest), as planned",
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
    if t.reduces_after_backward:  # gathered over the whole step anyway: torchtitan's own default under pipelining
        reshard = "never"
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
            f"--torchtitan-config = {shown(base)}: expected MODULE:CONFIG, a Python module name (dotted names"
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
    version: str = "0.3",
) -> str:
    """Python source of a torchtitan config function `adaptis_pipeline` (see the module docstring)
    with `version`'s field names (`TORCHTITAN_VERSIONS`).

    `base` is `MODULE:CONFIG` (see `torchtitan_base`). The batch:
    - 0.3: torchtitan takes local_batch_size / pipeline_parallel_microbatch_size micro-batches per
      step through the pipeline, so the local batch is the plan's micro-batches times their size
      and the global batch dp local batches (no gradient accumulation). Without pipeline
      parallelism the local batch is one micro-batch and the global batch dp x micro-batches of
      them (global / (local x dp) gradient-accumulation steps, one per micro-batch).
    - main: tokens per micro-batch per data-parallel rank (micro-batch size x sequence length),
      num_pp_microbatches the plan's micro-batches, and tokens per step dp x that x the
      micro-batch's tokens (without pipeline parallelism torchtitan takes the micro-batches as
      gradient-accumulation steps); the sequence length is max_context_length.
    Degrees: `torchtitan_parallelism`; activation checkpointing: `one_recompute` (torchtitan sets
    one policy for every block). `title` and `csv_name` may hold any text: the docstring shows them
    through `doc_text`, the code holds `csv_name` as a string literal; everything else in the code
    is a number or a fixed string.
    """
    if version not in TORCHTITAN_VERSIONS:
        raise InputError(f"torchtitan: version = {shown(version)}: use one of {', '.join(TORCHTITAN_VERSIONS)}")
    module, config = torchtitan_base(base)
    fqns = torchtitan_fqns(layout, layer_kinds)
    t = training
    num_layers = sum(1 for kind in layer_kinds if kind not in ("embedding", "head"))
    num_microbatches, micro_batch_size, seq_len, tp, dp, cp, ep, zero = (
        int(operator.index(n))
        for n in (t.num_microbatches, t.micro_batch_size, t.seq_len, t.tp, t.dp, t.cp, t.ep, t.zero)
    )
    if zero not in _TORCHTITAN_ZERO:
        raise InputError(f"torchtitan: zero = {shown(zero)}: use 0, 1, 2 or 3")
    if t.dtype not in _TORCHTITAN_DTYPE:
        raise InputError(
            f"torchtitan: dtype = {shown(t.dtype)}: torchtitan trains in bfloat16 or float32 (no fp16);"
            " re-plan with --dtype bf16"
        )
    why = t.unsharded_problem("torchtitan", keeps=True)
    if why is not None:
        raise InputError(f"torchtitan: {why}; re-plan with --target torchtitan, which prices them kept")
    par = torchtitan_parallelism(t)
    recompute, recompute_comment = _recompute(layout, layer_kinds, t.stage_recompute)
    csv_name = str(csv_name)
    pp = int(layout.num_devices)
    (batch_field, step_field, seq_field), microbatch_field = TORCHTITAN_VERSIONS[version]
    batch_value, step_value, microbatch_value, batch_doc = _batch(
        version, pp, dp, num_microbatches, micro_batch_size, seq_len
    )
    version_doc = (
        "0.3.x" if version == "0.3" else f"main (fields as of pytorch/torchtitan {TORCHTITAN_MAIN_COMMIT[:7]})"
    )
    return _TORCHTITAN_TEMPLATE.format(
        title=doc_text(str(title)),
        version=version,
        version_doc=version_doc,
        base_module=module,
        base_config=config,
        csv_name=csv_name,
        csv_name_doc=doc_text(csv_name),
        num_microbatches=num_microbatches,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        pp=pp,
        tp=tp,
        dp=dp,
        cp=cp,
        ep=ep,
        zero=zero,
        world_size=tp * pp * cp * dp,
        schedule=torchtitan_schedule_name(layout),
        num_layers=num_layers,
        fqns=fqns,
        microbatch_field=microbatch_field,
        microbatch_value=microbatch_value,
        zero_comment=_TORCHTITAN_ZERO[zero][2] + (_KEPT_COMMENT if t.reduces_after_backward else ""),
        replicate=par["data_parallel_replicate_degree"],
        shard=par["data_parallel_shard_degree"],
        reshard=par["fsdp_reshard_after_forward"],
        batch_doc=batch_doc,
        batch_field=batch_field,
        batch_value=batch_value,
        step_field=step_field,
        step_value=step_value,
        seq_field=seq_field,
        mixed_precision=_TORCHTITAN_DTYPE[t.dtype],
        recompute_comment=recompute_comment,
        recompute=recompute,
    )


def _recompute(layout: Layout, layer_kinds: Sequence[str], stage_recompute: Sequence[str]) -> tuple[str, str]:
    """The one activation-checkpointing policy the config sets (`one_recompute`), and its comment."""
    recompute, more = one_recompute(layout, layer_kinds, stage_recompute)
    recompute_comment = _TORCHTITAN_AC[recompute]
    if more:
        recompute_comment += (
            f"\n# torchtitan sets one policy for every block: {len(more)} stage(s) planned with less recomputation"
            " run this one (slower than planned, no more memory)"
        )
    return recompute, recompute_comment


def _batch(
    version: str, pp: int, dp: int, num_microbatches: int, micro_batch_size: int, seq_len: int
) -> tuple[int, int, int, str]:
    """The batch fields' values in `version`'s terms (see `torchtitan_config_module`): the batch, the step,
    the micro-batch field, and the comment on the batch."""
    if version == "0.3":
        local = micro_batch_size * (num_microbatches if pp > 1 else 1)
        batch_value, step_value, microbatch_value = local, dp * micro_batch_size * num_microbatches, micro_batch_size
        batch_doc = (
            "per data-parallel rank: micro-batches x micro-batch size; global: dp x that (one local batch per step)"
            if pp > 1
            else "per data-parallel rank: one micro-batch; global: dp x micro-batches of them (gradient accumulation)"
        )
    else:
        tokens = micro_batch_size * seq_len
        batch_value, step_value, microbatch_value = tokens, dp * num_microbatches * tokens, num_microbatches
        batch_doc = (
            "tokens per micro-batch per data-parallel rank (micro-batch size x sequence length); per step: dp x"
            " micro-batches x that"
        )
    return batch_value, step_value, microbatch_value, batch_doc


def _is_name(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text)
