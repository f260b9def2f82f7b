"""Lowering: add the sends and receives to a plan's per-device programs (pure Python, no torch).

Data flow: plan file -> `plan_layout` / `plan_programs` -> `lower` -> the runtime of every rank.
Imports only `core` and `judge.semantics`; the launcher runs it before starting any process so
that a plan the runtime cannot finish is refused up front, and every rank runs it again to
learn its own communication order (same input, same deterministic output on every rank).

What it computes:
- the action contract and one global execution `order` of all actions that respects every
  device's program order and every dependency: both are `judge.semantics`' (`check_programs`,
  `replay`, the same checks and the same deadlock report as the simulator's);
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
from adaptis_plan.judge.semantics import replay

#: how a rank posts its transfers (`runtime.P2P`): "peer" and "ahead" (gloo), "global" (NCCL); the
#: worker's "auto" picks "ahead" on CPU, "global" on CUDA
P2P_ORDERS = ("peer", "ahead", "global")


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


def lower(layout: Layout, programs: Programs, num_microbatches: int) -> Lowered:
    """Check, order globally, and list the transfers (see the module docstring)."""
    run = replay(layout, programs, num_microbatches)
    order = [(d, programs[d][k]) for d, k in run.order]
    last = layout.num_stages - 1
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
