"""Structural checks on per-device programs, plus the device x step text grid used in errors.

Data flow: `Layout` + `Programs` (from a builder, the search or a plan file) -> `check_programs`
-> ok or `ProgramError`. The simulator calls it before timing anything; plan IO may call it
directly. Imports only `core` and `errors` (no builder, no solver, no rich, no torch): it is
part of the independent judge.

What is checked (timing and cross-device deadlocks are the simulator's job):
one program per device; every action names an existing stage, an in-range micro-batch and
runs on its stage's device; every (stage, mb) has exactly one F and either exactly one B or
exactly one I plus one W; on the (single) device of a stage, I/B come after F and W after I.
"""

from __future__ import annotations

import itertools

import numpy as np

from adaptis_plan.core import OPS, Action, Layout, Programs
from adaptis_plan.errors import InputError

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
        stage, op, mb = a  # type: ignore[misc]
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


def check_programs(layout: Layout, programs: Programs, num_microbatches: int) -> None:
    """Raise ProgramError (an InputError) unless `programs` obey the action contract for `layout`.

    The message is one line naming the device, step index, action and the fix; the exception's
    `grid` shows the device x step grid with the offending step marked.
    """
    flatten_checked(layout, programs, num_microbatches)


def flatten_checked(
    layout: Layout, programs: Programs, num_microbatches: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`check_programs`, returning the `flatten` arrays so the simulator converts the programs once."""
    if not isinstance(programs, (list, tuple)) or len(programs) != layout.num_devices:
        n = len(programs) if isinstance(programs, (list, tuple)) else type(programs).__name__
        raise ProgramError(
            f"programs have {n} device lists but the layout has {layout.num_devices} devices; "
            "give one action list per device (an empty list for an idle device)"
        )
    flat = flatten(programs)
    _check(layout, programs, num_microbatches, flat)
    return flat


def _check(
    layout: Layout,
    programs: Programs,
    num_microbatches: int,
    flat: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    dev, step, stage, op, mb = flat
    num_stages, m = layout.num_stages, num_microbatches
    if m < 1:
        raise ProgramError(f"num_microbatches = {m}: must be at least 1; pass a positive micro-batch count")

    def at(i: int) -> tuple[int, int, str]:
        d, k = int(dev[i]), int(step[i])
        return d, k, _action_text(programs[d][k])

    bad = np.flatnonzero(op < 0)
    if bad.size:
        d, k, a = at(int(bad[0]))
        raise _fail(
            programs, f"device {d} step {k}: action {a} has op '{programs[d][k][1]}'; use one of F, B, I, W", d, k
        )
    bad = np.flatnonzero((stage < 0) | (stage >= num_stages))
    if bad.size:
        d, k, a = at(int(bad[0]))
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} names stage {int(stage[bad[0]])}, but the layout has stages "
            f"0..{num_stages - 1}; fix the stage id",
            d,
            k,
        )
    bad = np.flatnonzero((mb < 0) | (mb >= m))
    if bad.size:
        d, k, a = at(int(bad[0]))
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
        d, k, a = at(int(bad[0]))
        sd = int(stage_device[stage[bad[0]]])
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} belongs to stage {int(stage[bad[0]])}, which the layout places on "
            f"device {sd}; move {a} to device {sd}'s program",
            d,
            k,
        )

    # Duplicates: the second occurrence (in device-major, step order) is the offender.
    key = (stage * m + mb) * 4 + op
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if dup.size:
        firsts, seconds = order[dup], order[dup + 1]
        j = int(np.argmin(dev[seconds] * (step.max() + 1) + step[seconds]))
        d, k, a = at(int(seconds[j]))
        raise _fail(
            programs,
            f"device {d} step {k}: action {a} appears again (first at step {int(step[firsts[j]])}); remove the duplicate",
            d,
            k,
        )

    # Position of each (stage, mb, op) on its device's list, -1 when absent.
    pos = np.full(num_stages * m * 4, -1, dtype=np.int64)
    pos[key] = step
    pos = pos.reshape(num_stages, m, 4)
    has = pos >= 0
    hf, hb, hi, hw = (has[..., c] for c in (_F, _B, _I, _W))
    problems: list[tuple[int, int, int, str, int | None, int | None]] = []  # (stage, mb, rank, msg, dev, step)

    def add(mask: np.ndarray, rank: int, describe) -> None:  # noqa: ANN001
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
        s, b, _, msg, d, k = min(problems, key=lambda p: (p[0], p[1], p[2]))
        raise _fail(programs, msg, d, k)
