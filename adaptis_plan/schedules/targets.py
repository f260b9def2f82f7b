"""What each runtime can execute: the one set of capability rules used by the exporters (to refuse)
and by the search (to filter), so a plan made with `adaptis plan --target X` always exports to X.

Data flow: a layout's stage -> device map (and the head's vocabulary chunks) -> `problem` (None,
or one line saying what the runtime cannot run and what to do) / `placement_filter` (a predicate
for `search.search_plan(..., placement_ok=...)`). Imports only `core` and `errors`; below
`search/` and `planfile/`, which both use it.

The runtimes:
- `adaptis`: the bundled executor (`adaptis run`): any placement, split heads.
- `torch`: torch.distributed.pipelining's `_PipelineScheduleRuntime` loading our compute-only
  CSV (`export --format torch-csv`). It takes any stage -> rank map its CSV validator can infer
  (every stage on one rank), as long as every rank holds at least one stage (a rank's schedule
  is built around its first stage). Its last stage hands its output to `loss_fn` with the
  labels; no other stage sees the labels, so a head split into vocabulary chunks (each chunk
  scores its slice against the labels) cannot run there.
- `torchtitan`: torch's runtime as torchtitan drives it. torchtitan assigns stages to ranks
  itself (`_pipeline_module_split`): a loop (stage s on rank s % pp, the same number of stages
  on every rank) or, for the V schedules, a V with exactly 2 stages per rank. No split head.
- `megatron`: megatron-core's `--pipeline-model-parallel-layout`: virtual stage s runs on
  rank s % pp, the same number of stages on every rank (a loop), several only with pp > 1. No
  split head. Megatron runs
  its own schedule on that layout (`runtime_schedule`: 1F1B, interleaved with more than one
  stage per rank), not the plan's per-device orders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from adaptis_plan.errors import InputError

TARGETS = ("adaptis", "torch", "torchtitan", "megatron")

#: export format -> the runtime that reads it
FORMAT_TARGET = {
    "torch-csv": "torch",
    "torchtitan": "torchtitan",
    "megatron-layout": "megatron",
    "megatron-args": "megatron",
    "megatron-launch": "megatron",
}

_RUNTIME = {
    "adaptis": "the adaptis executor",
    "torch": "torch.distributed.pipelining's _PipelineScheduleRuntime",
    "torchtitan": "torchtitan",
    "megatron": "Megatron-LM",
}


def loop_map(num_stages: int, num_devices: int) -> tuple[int, ...]:
    """Stage s on device s % P (torch's and Megatron's "loop")."""
    return tuple(s % num_devices for s in range(num_stages))


def v_map(num_stages: int, num_devices: int) -> tuple[int, ...]:
    """Down the devices, back up, down again ... (torch's "v" style), for stage counts that are a multiple of P."""
    out = []
    for s in range(num_stages):
        r, k = divmod(s, num_devices)
        out.append(k if r % 2 == 0 else num_devices - 1 - k)
    return tuple(out)


@dataclass(frozen=True)
class Target:
    name: str

    @property
    def runtime(self) -> str:
        return _RUNTIME[self.name]

    @property
    def runs_split_head(self) -> bool:
        return self.name == "adaptis"

    @property
    def keeps_unsharded(self) -> bool:
        """Its pipeline stages keep sharded data-parallel parameters gathered and gradients unsharded over a
        step's micro-batches (torch's pipeline stage with FSDP2: `TrainingConfig.stage_keeps_unsharded`)."""
        return self.name in ("torch", "torchtitan")

    def placement_problem(self, stage_device: Sequence[int], num_devices: int) -> str | None:
        """Why this runtime cannot run stages placed as `stage_device` on `num_devices` devices (None: it can)."""
        sd = tuple(stage_device)
        n = len(sd)
        if self.name == "adaptis":
            return None
        empty = [d for d in range(num_devices) if d not in sd]
        if empty:
            return f"device {empty[0]} holds no stage, and {self.runtime} needs at least one stage on every rank"
        if self.name == "torch":
            return None
        even = n % num_devices == 0
        if self.name == "torchtitan":
            if even and sd == loop_map(n, num_devices):
                return None
            if n == 2 * num_devices and sd == v_map(n, num_devices):
                return None
            return (
                f"torchtitan places stages itself, in a loop (stage s on rank s % {num_devices}) or, for its V"
                f" schedules, a V of 2 stages per rank; this placement {list(sd)} is neither"
            )
        if num_devices == 1 and n > 1:
            return f"{n} stages on 1 pipeline rank: Megatron-LM runs virtual stages only with pp > 1 (arguments.py)"
        if even and sd == loop_map(n, num_devices):
            return None
        return (
            f"Megatron-LM places virtual stage s on rank s % {num_devices} with the same number of stages on every"
            f" rank; this placement {list(sd)} is not such a loop"
        )

    def placement_filter(self, num_devices: int) -> Callable[[tuple[int, ...]], bool]:
        """The search's `placement_ok`: True for the stage -> device maps this runtime can run."""
        return lambda stage_device: self.placement_problem(stage_device, num_devices) is None

    def head_problem(self, head_chunks: int) -> str | None:
        if head_chunks <= 1 or self.runs_split_head:
            return None
        return (
            f"the LM head is split into {head_chunks} vocabulary chunks, and {self.runtime} cannot run a split head"
            " (only its last stage sees the labels)"
        )

    def runtime_schedule(self, stages_per_device: int) -> str | None:
        """The classic schedule the runtime runs on the plan's layout whatever order the plan holds
        (None: it runs the plan's own per-device orders, from the exported CSV or the plan file).

        Megatron-LM runs its own 1F1B (interleaved with more than one stage per rank), so a plan for
        it carries that order and its prediction is what Megatron runs.
        """
        if self.name != "megatron":
            return None
        return "1F1B" if stages_per_device == 1 else "Interleaved1F1B"

    def problem(self, stage_device: Sequence[int], num_devices: int, head_chunks: int) -> str | None:
        return self.head_problem(head_chunks) or self.placement_problem(stage_device, num_devices)


def get_target(name: str) -> Target:
    key = name.lower()
    if key not in TARGETS:
        raise InputError(f"--target = {name!r}: unknown runtime; use one of {', '.join(TARGETS)}")
    return Target(key)


def check_exportable(fmt: str, stage_device: Sequence[int], num_devices: int, head_chunks: int) -> None:
    """Raise one clear InputError line when format `fmt` cannot express this plan (never a file that fails later)."""
    target = get_target(FORMAT_TARGET[fmt])
    why = target.problem(stage_device, num_devices, head_chunks)
    if why is not None:
        raise InputError(
            f"{fmt}: {why}; re-plan with `adaptis plan ... --target {target.name}` (or export torch-csv / run it with"
            " `adaptis run`)"
            if target.name != "torch"
            else f"{fmt}: {why}; re-plan with `adaptis plan ... --target torch`, or run it with `adaptis run`"
        )
