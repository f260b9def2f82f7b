"""Program semantics: the one place that knows what a plan's per-device programs mean.

Data flow: `Layout` + `CostTable` + `Programs` (from a builder, the search or a plan file) ->
here -> the simulator (`judge.simulate`), the executor's lowering (`executor.lowering`), the
list scheduler and the CP-SAT order model (`search/`). Imports only `core` and `errors`: no
builder, no solver, no rich, no torch. It is part of the independent judge.

It owns three things, each once:

1. **Stage costs** (`stage_costs`): what one action of a stage costs on the stage's device --
   F / I / W / B seconds (the stage's layer sums, each op paying the runtime's per-action
   overhead once; a W that runs right after its own I on the device costs `w_hot`, its stash
   still in cache, any other W `w`), activation bytes it holds (`act`, of which `act_w` W still needs after I),
   the static bytes per device, and the P2P time across each stage boundary (the activation
   forward, the gradient backward; zero when both stages share a device).
2. **The action contract** (`check_programs`): one program per device; every action names an
   existing stage, an in-range micro-batch and runs on its stage's device; every (stage, mb)
   has exactly one F and either exactly one B or exactly one I plus one W; on the (single)
   device of a stage, I/B come after F and W after I. Errors are one line naming the device,
   step, action and fix, with the torch-style device x step grid (`format_grid`) marking it.
3. **Dependency replay** (`replay`): each device runs its program strictly in list order, one
   action at a time, as soon as possible. F(s, mb) waits for F(s-1, mb)'s activation; I/B(s, mb)
   for the gradient of I/B(s+1, mb) (s < last); F before I/B and I before W hold by the
   contract (same device, earlier in its list). Sends are asynchronous. With link occupancy,
   transfers on one directed device pair are serialized FIFO (one message at a time holds the
   link for bytes / bandwidth and arrives one latency later); without, every message arrives
   its P2P time after its producer ends. The replay returns start / end of every action and one
   global execution order that respects every device's order and every dependency (the
   executor numbers its transfers by it). Programs that can never finish raise `DeadlockError`
   naming the circular wait, with the stuck steps marked on the grid.

Implementation: actions are converted once into flat int / float lists; a worklist of devices
advances each device as far as its inputs allow and parks it on the one input it waits for,
so a replay is O(actions).
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

from adaptis_plan.core import OPS, Action, CostTable, Layout, Programs
from adaptis_plan.errors import DeadlockError, InputError

_OP_CODE = {op: i for i, op in enumerate(OPS)}  # F=0, B=1, I=2, W=3
_F, _B, _I, _W = (_OP_CODE[o] for o in ("F", "B", "I", "W"))

# Error grids of long programs show this many steps around each marked step.
_ERROR_WINDOW = 6


class ProgramError(InputError):
    """Programs that break the action contract.

    `device` / `step` locate the offending action (None when the problem is an absent
    action); `grid` is the device x step text grid with that step marked `<-- ERROR`.
    """

    def __init__(self, message: str, grid: str = "", device: int | None = None, step: int | None = None) -> None:
        super().__init__(message)
        self.grid = grid
        self.device = device
        self.step = step


def format_grid(
    programs: Programs,
    mark: dict[int, set[int]] | None = None,
    window: int | None = None,
) -> str:
    """Device x step text grid: one column per device, one row per step, actions as `2F0`.

    Rows holding a step in `mark` (device -> step indices) get `<-- ERROR device d` and the
    marked cell is wrapped in `[...]`. With `window`, only rows within `window` steps of a
    marked step are shown (elided runs become `...`), which keeps errors on long programs short.
    """
    mark = mark or {}
    num_steps = max((len(p) for p in programs), default=0)
    num_rows = max([num_steps] + [k + 1 for steps in mark.values() for k in steps])
    cells = [[""] * len(programs) for _ in range(num_rows)]
    for d, prog in enumerate(programs):
        for k, a in enumerate(prog):
            cells[k][d] = _action_text(a)
    for d, steps in mark.items():
        for k in steps:
            if 0 <= d < len(programs):
                cells[k][d] = f"[{cells[k][d] or '-'}]"
    width = max([len(c) for row in cells for c in row] + [len(f"device {len(programs) - 1}")])
    step_w = len(f"step {max(num_rows - 1, 0)}")
    header = " " * step_w + "  " + "  ".join(f"device {d}".ljust(width) for d in range(len(programs)))
    show = set(range(num_rows))
    if window is not None and mark:
        marked_rows = {k for steps in mark.values() for k in steps}
        show = {k for k in range(num_rows) if any(abs(k - m) <= window for m in marked_rows)}
    lines = [header.rstrip()]
    elided = False
    for k in range(num_rows):
        if k not in show:
            if not elided:
                lines.append("...")
            elided = True
            continue
        elided = False
        row = f"step {k}".ljust(step_w) + "  " + "  ".join(c.ljust(width) for c in cells[k])
        marked = [d for d, steps in sorted(mark.items()) if k in steps]
        if marked:
            row = row.rstrip() + "  <-- ERROR " + ", ".join(f"device {d}" for d in marked)
        lines.append(row.rstrip())
    return "\n".join(lines)


def _action_text(a: object) -> str:
    try:
        stage, op, mb = cast(tuple[object, object, object], a)
        return f"{stage}{op}{mb}"
    except (TypeError, ValueError):
        return repr(a)


def _fail(programs: Programs, message: str, device: int | None = None, step: int | None = None) -> ProgramError:
    mark = {device: {step}} if device is not None and step is not None else None
    return ProgramError(message, format_grid(programs, mark, window=_ERROR_WINDOW), device, step)


def flatten(programs: Programs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All actions as parallel int arrays (device, step, stage, op code, mb), in device-major order.

    Op codes index `core.OPS` (F=0, B=1, I=2, W=3); an unknown op gets -1. Raises ProgramError
    when an entry is not a (stage, op, mb) triple of ints.
    """
    devs, steps, stages, ops, mbs = [], [], [], [], []
    for d, prog in enumerate(programs):
        n = len(prog)
        if n == 0:
            continue
        if not set(map(type, prog)) <= {Action}:
            for k, a in enumerate(prog):
                if not (isinstance(a, tuple) and len(a) == 3):
                    raise _fail(
                        programs,
                        f"device {d} step {k}: {a!r} is not an action; write actions as Action(stage, op, mb)",
                        d,
                        k,
                    )
        s_col, o_col, m_col = zip(*prog, strict=True)
        s_arr = np.asarray(s_col)
        m_arr = np.asarray(m_col)
        for col, arr, what in ((0, s_arr, "stage"), (2, m_arr, "micro-batch")):
            if arr.dtype.kind not in "iu":
                k = next(k for k, a in enumerate(prog) if not isinstance(a[col], (int, np.integer)))
                raise _fail(
                    programs,
                    f"device {d} step {k}: action {prog[k]!r} has {what} {prog[k][col]!r}; use a non-negative integer",
                    d,
                    k,
                )
        devs.append(np.full(n, d, dtype=np.int64))
        steps.append(np.arange(n, dtype=np.int64))
        stages.append(s_arr.astype(np.int64))
        ops.append(np.fromiter(map(_OP_CODE.get, o_col, itertools.repeat(-1)), dtype=np.int64, count=n))
        mbs.append(m_arr.astype(np.int64))
    if not devs:
        e = np.zeros(0, dtype=np.int64)
        return e, e, e, e, e
    return tuple(np.concatenate(x) for x in (devs, steps, stages, ops, mbs))  # type: ignore[return-value]


class Flat(NamedTuple):
    """All actions as parallel int arrays in device-major, program order; `op` indexes `core.OPS`."""

    device: np.ndarray
    step: np.ndarray
    stage: np.ndarray
    op: np.ndarray
    mb: np.ndarray


def check_programs(layout: Layout, programs: Programs, num_microbatches: int, *, backward: str | None = None) -> Flat:
    """The flat actions of `programs`; raise ProgramError (an InputError) unless they obey the
    action contract for `layout`.

    `backward` "split" additionally requires every backward to be I + W, "fused" every one to be
    B (what a model that times one kind only, like the CP-SAT order model, can take). The
    message is one line naming the device, step index, action and the fix; the exception's
    `grid` shows the device x step grid with the offending step marked.
    """
    if not isinstance(programs, (list, tuple)) or len(programs) != layout.num_devices:
        n = len(programs) if isinstance(programs, (list, tuple)) else type(programs).__name__
        raise ProgramError(
            f"programs have {n} device lists but the layout has {layout.num_devices} devices; "
            "give one action list per device (an empty list for an idle device)"
        )
    flat = Flat(*flatten(programs))
    _check(layout, programs, num_microbatches, flat)
    if backward is not None:
        if backward not in ("split", "fused"):
            raise ValueError(f"backward = {backward!r}: use 'split', 'fused' or None")
        wrong = np.flatnonzero(flat.op == (_B if backward == "split" else _I))
        if wrong.size:
            d, k = int(flat.device[wrong[0]]), int(flat.step[wrong[0]])
            a = _action_text(programs[d][k])
            want = "I and W" if backward == "split" else "B"
            raise _fail(programs, f"device {d} step {k}: {a}: every backward here must be {want}", d, k)
    return flat


def _check(
    layout: Layout,
    programs: Programs,
    num_microbatches: int,
    flat: Flat,
) -> None:
    """The action contract on the flattened programs, first violation raised: every field in range and
    on its stage's device, no action twice, every (stage, micro-batch) complete and in order."""
    _check_fields(layout, programs, num_microbatches, flat)
    key = _check_unique(programs, num_microbatches, flat)
    _check_pairs(layout, programs, num_microbatches, flat, key)


def _at(programs: Programs, flat: Flat, i: int) -> tuple[int, int, str]:
    """Device, step and text of the flattened action `i`."""
    d, k = int(flat[0][i]), int(flat[1][i])
    return d, k, _action_text(programs[d][k])


def _check_fields(layout: Layout, programs: Programs, num_microbatches: int, flat: Flat) -> None:
    """Each action's op, stage and micro-batch in range, and its stage on its device."""
    dev, _, stage, op, mb = flat
    num_stages, m = layout.num_stages, num_microbatches
    if m < 1:
        raise ProgramError(f"num_microbatches = {m}: must be at least 1; pass a positive micro-batch count")

    bad = np.flatnonzero(op < 0)
    if bad.size:
        d, k, a = _at(programs, flat, int(bad[0]))
        raise _fail(
            programs, f"device {d} step {k}: action {a} has op '{programs[d][k][1]}'; use one of F, B, I, W", d, k
        )
    bad = np.flatnonzero((stage < 0) | (stage >= num_stages))
    if bad.size:
        d, k, a = _at(programs, flat, int(bad[0]))
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} names stage {int(stage[bad[0]])}, but the layout has stages "
            f"0..{num_stages - 1}; fix the stage id",
            d,
            k,
        )
    bad = np.flatnonzero((mb < 0) | (mb >= m))
    if bad.size:
        d, k, a = _at(programs, flat, int(bad[0]))
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} names micro-batch {int(mb[bad[0]])}, outside 0..{m - 1}; "
            "fix the action or the micro-batch count",
            d,
            k,
        )
    stage_device = np.asarray(layout.stage_device, dtype=np.int64)
    bad = np.flatnonzero(stage_device[stage] != dev)
    if bad.size:
        d, k, a = _at(programs, flat, int(bad[0]))
        sd = int(stage_device[stage[bad[0]]])
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} belongs to stage {int(stage[bad[0]])}, which the layout places on "
            f"device {sd}; move {a} to device {sd}'s program",
            d,
            k,
        )


def _check_unique(programs: Programs, num_microbatches: int, flat: Flat) -> np.ndarray:
    """No action twice; returns each action's key ((stage x M + mb) x 4 + op)."""
    dev, step, stage, op, mb = flat
    m = num_microbatches
    # Duplicates: the second occurrence (in device-major, step order) is the offender.
    key = (stage * m + mb) * 4 + op
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if dup.size:
        firsts, seconds = order[dup], order[dup + 1]
        j = int(np.argmin(dev[seconds] * (step.max() + 1) + step[seconds]))
        d, k, a = _at(programs, flat, int(seconds[j]))
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} appears again (first at step {int(step[firsts[j]])}); remove the duplicate",
            d,
            k,
        )
    return key


def _check_pairs(layout: Layout, programs: Programs, num_microbatches: int, flat: Flat, key: np.ndarray) -> None:
    """Every (stage, micro-batch) has its forward and one backward (B, or I with W), in order; the
    problem of the lowest (stage, micro-batch) raised, the earliest rule first."""
    step = flat[1]
    num_stages, m = layout.num_stages, num_microbatches
    stage_device = np.asarray(layout.stage_device, dtype=np.int64)
    # position of each (stage, mb, op) on its device's list, -1 when absent.
    pos: np.ndarray = np.full(num_stages * m * 4, -1, dtype=np.int64)
    pos[key] = step
    pos = pos.reshape(num_stages, m, 4)
    has = pos >= 0
    hf, hb, hi, hw = (has[..., c] for c in (_F, _B, _I, _W))
    problems: list[tuple[int, int, int, str, int | None, int | None]] = []  # (stage, mb, rank, msg, dev, step)

    def add(mask: np.ndarray, rank: int, describe: Callable[[int, int], tuple[str, int | None]]) -> None:
        for s, b in np.argwhere(mask)[:1]:
            msg, k = describe(int(s), int(b))
            problems.append((int(s), int(b), rank, msg, int(stage_device[s]), k))

    def nothing(s: int, b: int) -> tuple[str, None]:
        d = int(stage_device[s])
        return (
            f"device {d}: stage {s} micro-batch {b} has no actions; add {s}F{b} and {s}B{b} "
            f"(or {s}I{b} and {s}W{b}) to device {d}'s program",
            None,
        )

    def no_f(s: int, b: int) -> tuple[str, int]:
        d, c = int(stage_device[s]), (_B if hb[s, b] else _I if hi[s, b] else _W)
        k = int(pos[s, b, c])
        return (
            f"device {d} step {k}: {s}{OPS[c]}{b} has no forward {s}F{b}; add {s}F{b} to device {d}'s program before step {k}",
            k,
        )

    def mixed(s: int, b: int) -> tuple[str, int]:
        d, c = int(stage_device[s]), (_I if hi[s, b] else _W)
        k = int(pos[s, b, c])
        return (
            f"device {d} step {k}: {s}{OPS[c]}{b} and {s}B{b} (step {int(pos[s, b, _B])}) are both present; "
            f"use either one {s}B{b} or one {s}I{b} plus one {s}W{b}",
            k,
        )

    def no_backward(s: int, b: int) -> tuple[str, int]:
        d, k = int(stage_device[s]), int(pos[s, b, _F])
        return (
            f"device {d} step {k}: {s}F{b} is never backpropagated; add {s}B{b} (or {s}I{b} and {s}W{b}) after step {k}",
            k,
        )

    def half_split(s: int, b: int) -> tuple[str, int]:
        d = int(stage_device[s])
        if hi[s, b]:
            k = int(pos[s, b, _I])
            return (
                f"device {d} step {k}: {s}I{b} has no matching {s}W{b}; add {s}W{b} after step {k} "
                f"(or replace {s}I{b} by {s}B{b})",
                k,
            )
        k = int(pos[s, b, _W])
        return (
            f"device {d} step {k}: {s}W{b} has no matching {s}I{b}; add {s}I{b} before step {k} "
            f"(or replace {s}W{b} by {s}B{b})",
            k,
        )

    def backward_first(s: int, b: int) -> tuple[str, int]:
        d = int(stage_device[s])
        c = _B if hb[s, b] else _I
        k = int(pos[s, b, c])
        return (
            f"device {d} step {k}: {s}{OPS[c]}{b} runs before its forward {s}F{b} (step {int(pos[s, b, _F])}); "
            f"move {s}F{b} before step {k}",
            k,
        )

    def w_first(s: int, b: int) -> tuple[str, int]:
        d, k = int(stage_device[s]), int(pos[s, b, _W])
        return (
            f"device {d} step {k}: {s}W{b} runs before {s}I{b} (step {int(pos[s, b, _I])}); "
            f"move {s}W{b} after step {int(pos[s, b, _I])}",
            k,
        )

    any_bw = hb | hi | hw
    add(~hf & ~any_bw, 0, nothing)
    add(~hf & any_bw, 1, no_f)
    add(hb & (hi | hw), 2, mixed)
    add(hf & ~any_bw, 3, no_backward)
    add(~hb & (hi ^ hw), 4, half_split)
    add(hf & ((hb & (pos[..., _B] < pos[..., _F])) | (hi & (pos[..., _I] < pos[..., _F]))), 5, backward_first)
    add(hi & hw & (pos[..., _W] < pos[..., _I]), 6, w_first)
    if problems:
        s, b, _, msg, at_device, at_step = min(problems, key=lambda p: (p[0], p[1], p[2]))
        raise _fail(programs, msg, at_device, at_step)


# ----------------------------------------------------------------------------- stage costs
@dataclass(frozen=True)
class StageCosts:
    """What the actions of each stage cost on the stage's device (module docstring, 1).

    Seconds per stage `f`, `i`, `w`, `b` (each with the runtime's per-action overhead once, and
    F, I and B with the host time of each cross-device message they send or receive), and
    `w_hot`: a W that runs right after its own I on the device (`CostTable.w_hot_s`);
    bytes per stage `act` (allocated by F) and `act_w` (the part W still needs after I);
    `static` bytes per device (weights, gradients, optimizer state of its stages). P2P seconds
    per stage boundary: `p2p_act[s]` carries stage s-1's activation to stage s, `p2p_grad[s]`
    stage s's input gradient back to s-1 (entry 0 of both is 0), and `occ_act[s]` /
    `occ_grad[s]` how long each holds its link (the P2P time less the link's latency).
    """

    f: np.ndarray
    i: np.ndarray
    w: np.ndarray
    b: np.ndarray
    act: np.ndarray
    act_w: np.ndarray
    static: np.ndarray
    p2p_act: np.ndarray
    p2p_grad: np.ndarray
    occ_act: np.ndarray
    occ_grad: np.ndarray
    w_hot: np.ndarray | None = None  # None: every W costs `w`

    def durations(self) -> np.ndarray:
        """[num_stages, 4] seconds per op, columns in `core.OPS` order (F, B, I, W)."""
        out = np.empty((len(self.f), len(OPS)))
        out[:, _F], out[:, _B], out[:, _I], out[:, _W] = self.f, self.b, self.i, self.w
        return out


#: per live cost table (by id, with a weak reference that drops the entry when the table goes): the
#: `StageCosts` of each layout asked of it. The search asks the same (layout, table) again and again (each
#: list-scheduling policy, each simulation of a candidate): nine calls in ten repeat one before them.
_STAGE_COSTS: dict[int, tuple[weakref.ref[CostTable], dict[Layout, StageCosts]]] = {}


def stage_costs(layout: Layout, costs: CostTable) -> StageCosts:
    """The `StageCosts` of `layout` on `costs` (raises InputError when the table does not cover it).

    Computed once per (layout, table) while the table lives; the arrays are read-only (callers share them)."""
    key = id(costs)
    entry = _STAGE_COSTS.get(key)
    if entry is None or entry[0]() is not costs:
        entry = _STAGE_COSTS[key] = (weakref.ref(costs, functools.partial(_forget, key)), {})
    known = entry[1].get(layout)
    if known is None:
        known = entry[1][layout] = _stage_costs(layout, costs)
    return known


def _forget(key: int, _: object) -> None:
    _STAGE_COSTS.pop(key, None)


def _stage_costs(layout: Layout, costs: CostTable) -> StageCosts:
    _check_costs(layout, costs)
    n = layout.num_stages
    f, i, w, b, act, act_w, w_hot = (np.zeros(n) for _ in range(7))
    static = np.zeros(layout.num_devices)
    for s, d in enumerate(layout.stage_device):
        lo, hi = layout.bounds[s], layout.bounds[s + 1]
        t = costs.stage_op_seconds(d, lo, hi)
        f[s], i[s], w[s], b[s], w_hot[s] = t["F"], t["I"], t["W"], t["B"], t["W hot"]
        act[s] = float(np.sum(costs.act_bytes[lo:hi]))
        act_w[s] = float(np.sum(costs.act_w_bytes[lo:hi]))
        static[d] += float(np.sum(costs.static_bytes[lo:hi]))
    p2p_act, p2p_grad, occ_act, occ_grad = (np.zeros(n) for _ in range(4))
    for s in range(1, n):
        a, c = layout.stage_device[s - 1], layout.stage_device[s]
        nbytes = float(costs.out_bytes[layout.bounds[s] - 1])
        p2p_act[s] = costs.p2p_s(a, c, nbytes)
        p2p_grad[s] = costs.p2p_s(c, a, nbytes)
        if a != c:
            # a message holds its link for bytes / bandwidth; the latency is flight time, not occupancy
            occ_act[s] = max(p2p_act[s] - float(costs.link_latency_s[a, c]), 0.0)
            occ_grad[s] = max(p2p_grad[s] - float(costs.link_latency_s[c, a]), 0.0)
            # each end's host time: stage s-1's F sends and its I / B receives; stage s's F
            # receives and its I / B sends
            host = costs.transfer_host_seconds(nbytes)
            for arr in (f, i, b):
                arr[s - 1] += host
                arr[s] += host
    hot = w_hot if costs.w_hot_s is not None else None
    arrays = (f, i, w, b, act, act_w, static, p2p_act, p2p_grad, occ_act, occ_grad)
    for arr in (*arrays, w_hot):
        arr.flags.writeable = False
    return StageCosts(*arrays, hot)


def _check_costs(layout: Layout, costs: CostTable) -> None:
    if costs.num_layers != layout.num_layers:
        raise InputError(
            f"cost table: num_layers = {costs.num_layers}, but the layout covers {layout.num_layers} layers; "
            "use the cost table of the same model"
        )
    if costs.num_devices < layout.num_devices:
        raise InputError(
            f"cost table: num_devices = {costs.num_devices}, but the layout uses {layout.num_devices} devices; "
            "profile at least as many devices as the pipeline has"
        )


# ----------------------------------------------------------------------------- replay
@dataclass(frozen=True)
class Replay:
    """The outcome of `replay`: per device, the (start, end) of each program step, and when each
    step's outgoing off-device transfer took its link (-1.0 when it sends nothing off-device);
    `order` lists every action as (device, step) in one global execution order."""

    flat: Flat
    starts: list[list[float]]
    ends: list[list[float]]
    xfer_starts: list[list[float]]
    order: list[tuple[int, int]]


def replay(
    layout: Layout,
    programs: Programs,
    num_microbatches: int,
    durations: np.ndarray | None = None,
    p2p: tuple[np.ndarray, np.ndarray] | None = None,
    occupancy: tuple[np.ndarray, np.ndarray] | None = None,
    *,
    flat: Flat | None = None,
    w_hot: np.ndarray | None = None,
    action_durations: np.ndarray | None = None,
) -> Replay:
    """Run `programs` as soon as possible (module docstring, 3).

    `durations` [num_stages, 4] seconds per op (columns in `core.OPS` order; None: all zero, the
    order only), `p2p` = (activation, gradient) seconds per boundary as in `StageCosts` (None:
    zero), `occupancy` the same shape for the link-holding time (None: links never queue),
    `w_hot` seconds per stage of a W that runs right after its own I on the device (None: the
    `durations` W). `action_durations`: seconds of every action, device by device in program order,
    instead of all of these (a measured run's own spans, replayed on the plan's dependencies).
    Pass `flat` when `check_programs` already ran; otherwise it runs here. Raises ProgramError
    on a contract violation and DeadlockError when the programs can never finish.

    One piece on purpose: it is the judge's inner loop, run for every candidate the search
    simulates, over arrays it builds once and indexes on every action.
    """
    if flat is None:
        flat = check_programs(layout, programs, num_microbatches)
    dev_a, _, stage_a, op_a, mb_a = flat
    num_devices, num_stages, m = layout.num_devices, layout.num_stages, num_microbatches
    last = num_stages - 1
    sm = num_stages * m
    zero = np.zeros(num_stages)
    act_p2p, grad_p2p = p2p if p2p is not None else (zero, zero)
    act_occ, grad_occ = occupancy if occupancy is not None else (zero, zero)

    # `ready` index space: [0, sm) activation of (stage, mb) arrived at the stage; [sm, 2 sm)
    # gradient of (stage, mb) arrived at the stage.
    stage_device = np.asarray(layout.stage_device, dtype=np.int64)
    is_f = op_a == _F
    is_bwd = (op_a == _I) | (op_a == _B)
    if action_durations is not None:
        dur = np.asarray(action_durations, dtype=float)
        if dur.shape != op_a.shape:
            raise ValueError(f"action_durations has {dur.size} entries for {len(op_a)} actions")
    else:
        dur = np.zeros(len(op_a)) if durations is None else np.asarray(durations, dtype=float)[stage_a, op_a]
        if w_hot is not None and len(op_a) > 1:
            hot = np.zeros(len(op_a), dtype=bool)
            hot[1:] = (
                (op_a[1:] == _W) & (op_a[:-1] == _I) & (dev_a[1:] == dev_a[:-1])
                & (stage_a[1:] == stage_a[:-1]) & (mb_a[1:] == mb_a[:-1])
            )  # fmt: skip
            dur[hot] = np.asarray(w_hot, dtype=float)[stage_a[hot]]
    wait = np.full(dur.shape, -1, dtype=np.int64)
    wf = is_f & (stage_a > 0)
    wait[wf] = stage_a[wf] * m + mb_a[wf]
    wb = is_bwd & (stage_a < last)
    wait[wb] = sm + stage_a[wb] * m + mb_a[wb]
    out = np.full(dur.shape, -1, dtype=np.int64)
    odev = np.full(dur.shape, -1, dtype=np.int64)
    pdur = np.zeros(dur.shape)
    occ = np.zeros(dur.shape)
    of = is_f & (stage_a < last)
    nxt = np.minimum(stage_a[of] + 1, last)
    out[of] = (stage_a[of] + 1) * m + mb_a[of]
    odev[of] = stage_device[nxt]
    pdur[of] = act_p2p[nxt]
    occ[of] = act_occ[nxt]
    ob = is_bwd & (stage_a > 0)
    out[ob] = sm + (stage_a[ob] - 1) * m + mb_a[ob]
    odev[ob] = stage_device[np.maximum(stage_a[ob] - 1, 0)]
    pdur[ob] = grad_p2p[stage_a[ob]]
    occ[ob] = grad_occ[stage_a[ob]]

    lengths = [len(p) for p in programs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def split(arr: np.ndarray) -> list[list]:
        lst = arr.tolist()
        return [lst[offsets[d] : offsets[d + 1]] for d in range(num_devices)]

    wait_l, dur_l, out_l, odev_l, pdur_l, occ_l = (split(x) for x in (wait, dur, out, odev, pdur, occ))
    starts_l = [[0.0] * n for n in lengths]
    ends_l = [[0.0] * n for n in lengths]
    xfer_l = [[-1.0] * n for n in lengths]
    order: list[tuple[int, int]] = []

    ready = [-1.0] * (2 * sm)
    waiter = [-1] * (2 * sm)
    link_free = [[0.0] * num_devices for _ in range(num_devices)]
    ptr = [0] * num_devices
    clock = [0.0] * num_devices
    work = list(range(num_devices - 1, -1, -1))
    while work:
        d = work.pop()
        k0 = k = ptr[d]
        t_dev, n = clock[d], lengths[d]
        wait_d, dur_d, out_d, odev_d, pdur_d, occ_d = wait_l[d], dur_l[d], out_l[d], odev_l[d], pdur_l[d], occ_l[d]
        st_d, en_d, xf_d, lf_d = starts_l[d], ends_l[d], xfer_l[d], link_free[d]
        while k < n:
            w = wait_d[k]
            t = t_dev
            if w >= 0:
                r = ready[w]
                if r < 0.0:
                    waiter[w] = d
                    break
                if r > t:
                    t = r
            t_dev = t + dur_d[k]
            st_d[k] = t
            en_d[k] = t_dev
            o = out_d[k]
            if o >= 0:
                dd = odev_d[k]
                if dd == d:
                    ready[o] = t_dev
                else:
                    x0 = lf_d[dd]
                    if t_dev > x0:
                        x0 = t_dev
                    lf_d[dd] = x0 + occ_d[k]
                    xf_d[k] = x0
                    ready[o] = x0 + pdur_d[k]
                wk = waiter[o]
                if wk >= 0:
                    work.append(wk)
            k += 1
        order.extend(zip(itertools.repeat(d, k - k0), range(k0, k), strict=True))
        ptr[d], clock[d] = k, t_dev

    if any(ptr[d] < lengths[d] for d in range(num_devices)):
        _raise_deadlock(layout, programs, ptr, lengths)
    return Replay(flat, starts_l, ends_l, xfer_l, order)


def _raise_deadlock(layout: Layout, programs: Programs, ptr: list[int], lengths: list[int]) -> None:
    """Every unfinished device is parked on an input whose producer sits on an unfinished device,
    so following "waits for" from any stuck device must close a cycle; report it."""
    where: dict[tuple[int, str, int], tuple[int, int]] = {}
    for d, prog in enumerate(programs):
        for k, a in enumerate(prog):
            where[(a[0], a[1], a[2])] = (d, k)
    stuck = [d for d in range(layout.num_devices) if ptr[d] < lengths[d]]

    def producer(d: int) -> tuple[Action, int, int]:
        stage, op, mb = programs[d][ptr[d]]
        if op == "F":
            dep = Action(stage - 1, "F", mb)
        else:
            dep = Action(stage + 1, "B", mb) if (stage + 1, "B", mb) in where else Action(stage + 1, "I", mb)
        dd, kk = where[tuple(dep)]  # type: ignore[index]
        return dep, dd, kk

    first = stuck[0]
    dep, dd, kk = producer(first)
    head = f"device {first} waits at step {ptr[first]} for {dep}, which never runs: "
    if dd == first:
        msg = (
            head + f"it comes later in device {first}'s own program (step {kk}); "
            f"move {dep} before step {ptr[first]} of device {first}"
        )
    else:
        chain, seen, d = [first], {first}, dd
        while d not in seen:
            chain.append(d)
            seen.add(d)
            d = producer(d)[1]
        cycle = chain[chain.index(d) :] + [d]
        nxt_dep, _, _ = producer(dd)
        msg = (
            head + f"device {dd} is stuck at step {ptr[dd]} on {programs[dd][ptr[dd]]} waiting for {nxt_dep} "
            f"(circular wait {' -> '.join(f'device {x}' for x in cycle)}); reorder the programs, "
            f"e.g. move {dep} (device {dd} step {kk}) before step {ptr[dd]} of device {dd}"
        )
    grid = format_grid(programs, {d: {ptr[d]} for d in stuck}, window=_ERROR_WINDOW)
    raise DeadlockError(msg, grid)
