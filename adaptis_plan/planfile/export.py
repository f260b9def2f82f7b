"""Exports of a plan's layout and programs to the formats other frameworks read.

Data flow: plan (layout + per-device programs) -> text / plain lists, written by the CLI
(`adaptis export --format torch-csv|megatron-layout|torchtitan`). Pure functions over plain
data: no IO, no torch, no Megatron. Imports only `core` and `errors`.

- `to_torch_csv`: torch.distributed.pipelining's `compute_only` schedule CSV, read by
  `_PipelineScheduleRuntime._load_csv`: one row per device (pipeline rank), one cell per
  action (`0F0`, `5I3`), in execution order. Programs hold plain F/B/I/W actions, so a
  DualPipeV plan is exported with its overlapped (F;B) pairs as two consecutive cells.
- `megatron_layout`: Megatron-LM's `--pipeline-model-parallel-layout` string.
- `torchtitan_fqns`: torchtitan's `module_fqns_per_model_part` (one list of module names per
  stage, in stage order).
"""

from __future__ import annotations

from collections.abc import Sequence

from adaptis_plan.core import OPS, Action, Layout, Programs
from adaptis_plan.errors import InputError

# Megatron's layer letters: E embedding, t transformer (any decoder block), m MTP, L loss (+ final norm and head).
_MEGATRON_TOKEN = {"embedding": "E", "head": "L", "mtp": "m"}
_RUN_MIN = 3  # write runs of at least this many equal letters as `t*n`


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

    The embedding is `tok_embeddings`, the head `norm` + `output`, and the i-th block (the
    layers between them, counted from 0) `layers.{i}`, so decoder layer l is `layers.{l-1}`.
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
                names += ["norm", "output"]
            else:
                names.append(f"layers.{block_index[layer]}")
        parts.append(names)
    return parts


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
