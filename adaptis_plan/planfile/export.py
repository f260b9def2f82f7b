"""Exports of a plan's layout and programs to the formats other frameworks read: the shared part.

Data flow: plan (layout + per-device programs) -> text / plain lists, written by the CLI
(`adaptis export --format torch-csv|megatron-layout|megatron-args|megatron-launch|torchtitan`).
Pure functions over plain data: no IO, no torch, no Megatron, no torchtitan. Imports only `core`,
`errors`, `text` and `schedules.targets`.

- `to_torch_csv`: torch.distributed.pipelining's `compute_only` schedule CSV, read by
  `_PipelineScheduleRuntime._load_csv`: one row per device (pipeline rank), one cell per
  action (`0F0`, `5I3`), in execution order. Programs hold plain F/B/I/W actions, so a
  DualPipeV plan is exported with its overlapped (F;B) pairs as two consecutive cells.
- `megatron_layout`: Megatron-LM's `--pipeline-model-parallel-layout` string.
- `TrainingShape`, `one_recompute`: a plan's training configuration as the exporters read it.
- `planfile.export_megatron`: Megatron-LM's arguments (`megatron-args`) and a launch script
  (`megatron-launch`).
- `planfile.export_torchtitan`: torchtitan's module names per stage and a config module.

What each runtime can run at all (placements, split heads) is checked before these are called,
by `schedules.targets`; these functions only write what passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adaptis_plan.core import OPS, Action, Layout, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.spec.training import keeping_applies
from adaptis_plan.text import printable

# Megatron's layer letters: E embedding, t transformer (any decoder block), m MTP, L loss (+ final norm and head).
_MEGATRON_TOKEN = {"embedding": "E", "head": "L", "mtp": "m"}
_RUN_MIN = 3  # write runs of at least this many equal letters as `t*n`
_DOC_TEXT_MAX = 200  # characters of plan text (names, strategy) the torchtitan module's docstring shows
_SHOWN_MAX = 60  # characters of a bad option value an error message shows

_RECOMPUTE_ORDER = ("none", "selective", "op", "full")  # by activation memory kept, most first


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
    dp_overlap: bool = True  # gradient reduce / parameter gather overlapped (`TrainingConfig.dp_overlap`)
    tp_comm_overlap: bool = False  # TP collectives overlap their GEMMs (`TrainingConfig.tp_comm_overlap`)
    pp: int = 1
    stage_keeps_unsharded: bool = False  # priced as torch's pipeline stages run FSDP2 (`TrainingConfig`'s field)

    @property
    def reduces_after_backward(self) -> bool:
        """`TrainingConfig.reduces_after_backward` of the plan: data-parallel state kept unsharded over the step."""
        return self.stage_keeps_unsharded and keeping_applies(self.zero, self.pp, self.num_microbatches)

    def unsharded_problem(self, runtime: str, keeps: bool) -> str | None:
        """Why `runtime`, whose pipeline stages keep sharded data-parallel state unsharded over a step (`keeps`) or
        not, does not run this plan as it was priced (None: it does): where sharding over data-parallel ranks
        applies (ZeRO >= 1, dp x cp > 1, pp > 1, more than one micro-batch), the two keep different memory and move
        different traffic."""
        applies = keeping_applies(self.zero, self.pp, self.num_microbatches) and self.dp * self.cp > 1
        if not applies or self.stage_keeps_unsharded == keeps:
            return None
        if keeps:
            return (
                f"{runtime}'s pipeline stages keep FSDP parameters gathered and gradients unsharded (fp32) over a"
                f" step's micro-batches, and this plan (ZeRO {self.zero}, dp {self.dp}, pp {self.pp}) was priced"
                " with them sharded"
            )
        return (
            f"this plan was priced for pipeline stages that keep parameters gathered and gradients unsharded over a"
            f" step's micro-batches (torch's with FSDP2), and {runtime} shards them as ZeRO {self.zero}"
        )

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
            raise InputError(f"stages[{stage}].recompute = {shown(mode)}: use one of {', '.join(_RECOMPUTE_ORDER)}")
    with_blocks = [
        s
        for s in range(layout.num_stages)
        if any(kinds[layer] not in ("embedding", "head") for layer in layout.layers(s))
    ]
    chosen = max((modes[s] for s in with_blocks), key=_RECOMPUTE_ORDER.index, default="none")
    return chosen, [s for s in with_blocks if modes[s] != chosen]


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
    kinds = check_kinds("megatron-layout", layout, layer_kinds)
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


def stage_modes(stage_recompute: Sequence[str], stages: Sequence[int]) -> str:
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


def doc_text(text: str) -> str:
    """`text` as the generated docstring shows it: printable characters but a backslash or a double quote
    (any other becomes `?`, so nothing can end the docstring or start an escape), at most `_DOC_TEXT_MAX`."""
    if len(text) > _DOC_TEXT_MAX:
        text = text[: _DOC_TEXT_MAX - 3] + "..."
    return printable(text).replace("\\", "?").replace('"', "?")


def shown(value: object) -> str:
    """A value as an error message shows it: its repr (one line), at most `_SHOWN_MAX` characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def check_kinds(fmt: str, layout: Layout, layer_kinds: Sequence[str]) -> list[str]:
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
