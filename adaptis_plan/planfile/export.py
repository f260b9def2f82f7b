"""Exports of a plan's layout and programs to the formats other frameworks read.

Data flow: plan (layout + per-device programs) -> text / plain lists, written by the CLI
(`adaptis export --format torch-csv|megatron-layout|torchtitan`). Pure functions over plain
data: no IO, no torch, no Megatron, no torchtitan. Imports only `core`, `errors`, `text` and
`schedules.targets`.

- `to_torch_csv`: torch.distributed.pipelining's `compute_only` schedule CSV, read by
  `_PipelineScheduleRuntime._load_csv`: one row per device (pipeline rank), one cell per
  action (`0F0`, `5I3`), in execution order. Programs hold plain F/B/I/W actions, so a
  DualPipeV plan is exported with its overlapped (F;B) pairs as two consecutive cells.
- `megatron_layout`: Megatron-LM's `--pipeline-model-parallel-layout` string.
- `torchtitan_fqns`: torchtitan's `module_fqns_per_model_part` (one list of module names per
  stage, in stage order), with torchtitan 0.3's module names.
- `torchtitan_config_module`: a torchtitan 0.3 config module (its configs are Python functions
  that return the trainer's config, loaded with `--module NAME --config adaptis_pipeline`): a
  base config of the model with the plan's pipeline settings put in, and the CSV beside it.
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
from collections.abc import Sequence

from adaptis_plan.core import OPS, Action, Layout, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.text import printable

# Megatron's layer letters: E embedding, t transformer (any decoder block), m MTP, L loss (+ final norm and head).
_MEGATRON_TOKEN = {"embedding": "E", "head": "L", "mtp": "m"}
_RUN_MIN = 3  # write runs of at least this many equal letters as `t*n`
_DOC_TEXT_MAX = 200  # characters of plan text (names, strategy) the torchtitan module's docstring shows
_SHOWN_MAX = 60  # characters of a bad option value an error message shows


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
pipeline in: the stages' modules, the stage-to-rank style, the schedule CSV beside this file
({csv_name_doc}) and the batch shape the CSV was planned for ({num_microbatches} micro-batches of
{micro_batch_size}, sequence length {seq_len}). Run it with this file's folder on PYTHONPATH:

    PYTHONPATH=. torchrun --nproc-per-node {pp} -m torchtitan.train --module {{this module}} --config adaptis_pipeline

Keep the base config the one of the model that was planned (its layers must be the plan's).
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
LOCAL_BATCH_SIZE = {local_batch_size}
SEQ_LEN = {seq_len}


def adaptis_pipeline():
    config = getattr(importlib.import_module(BASE_MODULE), BASE_CONFIG)()
    layers = len(config.model_spec.model.layers)
    if layers != NUM_LAYERS:
        raise ValueError(
            f"{{BASE_MODULE}}.{{BASE_CONFIG}} has {{layers}} layers, the plan {{NUM_LAYERS}}: set BASE_MODULE /"
            " BASE_CONFIG to the model that was planned (adaptis export --torchtitan-config MODULE:CONFIG)"
        )
    for key, value in PIPELINE.items():
        setattr(config.parallelism, key, value)
    config.training.local_batch_size = LOCAL_BATCH_SIZE
    config.training.seq_len = SEQ_LEN
    config.training.disable_cuda_graphs = True  # torchtitan does not run CUDA graphs with pipeline parallelism
    return config
'''


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
    num_microbatches: int,
    micro_batch_size: int,
    seq_len: int,
    title: str,
) -> str:
    """Python source of a torchtitan 0.3 config function `adaptis_pipeline` (see the module docstring).

    `base` is `MODULE:CONFIG` (see `torchtitan_base`). torchtitan takes
    local_batch_size / microbatch_size micro-batches per step, so the local batch is the plan's
    micro-batches times their size. `title` and `csv_name` may hold any text: the docstring
    shows them through `_doc_text`, the code holds `csv_name` as a string literal.
    """
    module, config = torchtitan_base(base)
    fqns = torchtitan_fqns(layout, layer_kinds)
    num_layers = sum(1 for kind in layer_kinds if kind not in ("embedding", "head"))
    num_microbatches, micro_batch_size, seq_len = (
        int(operator.index(n)) for n in (num_microbatches, micro_batch_size, seq_len)
    )
    csv_name = str(csv_name)
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
        schedule=torchtitan_schedule_name(layout),
        num_layers=num_layers,
        fqns=fqns,
        local_batch_size=num_microbatches * micro_batch_size,
    )


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
