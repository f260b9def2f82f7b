"""Lowering: add the sends and receives to a plan's per-device programs (pure Python, no torch).

Data flow: plan file -> `plan_layout` / `plan_programs` -> `lower` -> the runtime of every rank.
Imports only `core` and `errors`; the launcher runs it before starting any process so that a
plan the runtime cannot finish is refused up front, and every rank runs it again to learn its
own communication order (same input, same deterministic output on every rank).

What it computes:
- a check that the programs are executable: every (stage, mb) has one F and either one B or
  one I and one W, each on the stage's device;
- `order`: one global sequence of all actions that respects every device's program order and
  every dependency (F(s, m) after F(s-1, m); I/B(s, m) after F(s, m) and after I/B(s+1, m);
  W(s, m) after I(s, m)). It is found by stepping the devices round-robin, each running its
  next action when its dependencies are done; no progress before the end means the orders can
  never finish (a `DeadlockError` with the stuck actions marked);
- `transfers`: the cross-device messages, numbered in that global order. An activation
  ("act", s, m) goes from stage s's device to stage s+1's after F(s, m); a gradient
  ("grad", s, m) goes from stage s's device to stage s-1's after I/B(s, m). Adjacent stages on
  one device hand over locally and need no transfer. Each transfer has a tag unique within a
  step per (stage, mb, direction). What a transfer carries (shape, dtype: [b, s, h] in the
  model dtype, or [b, s, h + 2] float32 after a non-final head chunk) is the runtime's concern
  (`layers.boundary_spec`); both directions across one stage boundary carry the same shape.

Why the global order matters is explained in `runtime.py` (it is what makes the point-to-point
traffic deadlock-free on gloo and NCCL alike).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from adaptis_plan.core import Action, Layout, Programs
from adaptis_plan.errors import DeadlockError, InputError


@dataclass(frozen=True)
class Transfer:
    """One message between two devices. `stage` is the producing stage."""

    kind: str  # "act" (output of `stage`, to stage + 1) or "grad" (input gradient of `stage`, to stage - 1)
    stage: int
    mb: int
    src: int
    dst: int
    tag: int
    seq: int  # position in the global transfer order

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.kind, self.stage, self.mb)


@dataclass(frozen=True)
class Lowered:
    layout: Layout
    programs: Programs
    num_microbatches: int
    order: list[tuple[int, Action]]
    transfers: list[Transfer]
    _by_key: dict[tuple[str, int, int], Transfer] = field(repr=False, default_factory=dict)

    def transfer(self, kind: str, stage: int, mb: int) -> Transfer | None:
        """The transfer carrying ("act"|"grad", stage, mb), or None for a local handoff."""
        return self._by_key.get((kind, stage, mb))

    def rank_queue(self, device: int) -> list[Transfer]:
        """All of this device's transfers (sends and receives, any peer) in global order."""
        return [t for t in self.transfers if device in (t.src, t.dst)]

    def peer_queues(self, device: int) -> dict[int, list[Transfer]]:
        """This device's transfers grouped by peer, each list in global order."""
        queues: dict[int, list[Transfer]] = defaultdict(list)
        for t in self.transfers:
            if t.src == device:
                queues[t.dst].append(t)
            elif t.dst == device:
                queues[t.src].append(t)
        return dict(queues)


def transfer_tag(kind: str, stage: int, mb: int, num_microbatches: int) -> int:
    return 2 * (stage * num_microbatches + mb) + (0 if kind == "act" else 1)


def check_executable(layout: Layout, programs: Programs, num_microbatches: int) -> None:
    """Every (stage, mb) has F and B, or F, I and W, once each, on the stage's device."""
    if len(programs) != layout.num_devices:
        raise InputError(f"devices: the plan lists {len(programs)} programs for {layout.num_devices} devices")
    seen: dict[tuple[int, str, int], int] = {}
    for d, prog in enumerate(programs):
        for i, a in enumerate(prog):
            if not 0 <= a.stage < layout.num_stages:
                raise InputError(
                    f"devices[{d}].actions[{i}] = {a}: stage {a.stage} does not exist (0..{layout.num_stages - 1})"
                )
            if not 0 <= a.mb < num_microbatches:
                raise InputError(
                    f"devices[{d}].actions[{i}] = {a}: micro-batch {a.mb} is outside 0..{num_microbatches - 1}"
                )
            if layout.stage_device[a.stage] != d:
                raise InputError(
                    f"devices[{d}].actions[{i}] = {a}: stage {a.stage} is placed on device"
                    f" {layout.stage_device[a.stage]}, not {d}; move the action to that device's list"
                )
            k = (a.stage, a.op, a.mb)
            if k in seen:
                raise InputError(f"devices[{d}].actions[{i}] = {a}: duplicate action; each action runs once per step")
            seen[k] = d
    for s in range(layout.num_stages):
        for m in range(num_microbatches):
            has = {op for op in "FBIW" if (s, op, m) in seen}
            name = f"stage {s}, micro-batch {m}"
            if "F" not in has:
                raise InputError(f"devices[{layout.stage_device[s]}]: {name} has no F action ({s}F{m}); add it")
            if "B" in has and has & {"I", "W"}:
                raise InputError(f"devices[{layout.stage_device[s]}]: {name} has both B and I/W; keep one of the two")
            if "B" not in has and has & {"I", "W"} != {"I", "W"}:
                raise InputError(
                    f"devices[{layout.stage_device[s]}]: {name} needs either {s}B{m} or both {s}I{m} and {s}W{m}"
                )


def _ready(a: Action, done: set[tuple[int, str, int]], last: int) -> bool:
    s, op, m = a
    if op == "F":
        return s == 0 or (s - 1, "F", m) in done
    if op in ("I", "B"):
        if (s, "F", m) not in done:
            return False
        return s == last or (s + 1, "I", m) in done or (s + 1, "B", m) in done
    return (s, "I", m) in done


def _stuck_grid(programs: Programs, ptr: list[int]) -> str:
    lines = []
    for d, prog in enumerate(programs):
        cells = [f"[{a}]" if i == ptr[d] else str(a) for i, a in enumerate(prog)]
        lines.append(f"device {d}: " + " ".join(cells))
    return "\n".join(lines)


def lower(layout: Layout, programs: Programs, num_microbatches: int) -> Lowered:
    """Check, order globally, and list the transfers (see the module docstring)."""
    check_executable(layout, programs, num_microbatches)
    last = layout.num_stages - 1
    ptr = [0] * len(programs)
    done: set[tuple[int, str, int]] = set()
    order: list[tuple[int, Action]] = []
    total = sum(len(p) for p in programs)
    while len(order) < total:
        progressed = False
        for d, prog in enumerate(programs):
            if ptr[d] < len(prog) and _ready(prog[ptr[d]], done, last):
                a = prog[ptr[d]]
                done.add(tuple(a))
                order.append((d, a))
                ptr[d] += 1
                progressed = True
        if not progressed:
            stuck = ", ".join(
                f"device {d} at {programs[d][ptr[d]]}" for d in range(len(programs)) if ptr[d] < len(programs[d])
            )
            grid = _stuck_grid(programs, ptr)
            raise DeadlockError(
                f"devices: the action orders can never finish ({stuck} wait on each other); re-plan or reorder", grid
            )
    transfers: list[Transfer] = []
    dev = layout.stage_device
    for d, a in order:
        if a.op == "F" and a.stage < last and dev[a.stage + 1] != d:
            kind, dst = "act", dev[a.stage + 1]
        elif a.op in ("I", "B") and a.stage > 0 and dev[a.stage - 1] != d:
            kind, dst = "grad", dev[a.stage - 1]
        else:
            continue
        tag = transfer_tag(kind, a.stage, a.mb, num_microbatches)
        transfers.append(Transfer(kind, a.stage, a.mb, d, dst, tag, len(transfers)))
    by_key = {t.key: t for t in transfers}
    return Lowered(layout, programs, num_microbatches, order, transfers, by_key)
