"""The rolling horizon of the order search: small CP-SAT window models over a long program, for
any size (`improve_order_windows`), and the double justification that moves actions into gaps far
from them (`_justify`).

Data flow: `Layout` + `CostTable` + micro-batch count + `Programs` -> `SolveResult` whose payload
is the improved `Programs`, with `WindowStats`. Every window is judged by re-timing the whole step
under the order model's semantics (`order_instance._Scaled`); the simulator judges the plan.
Imports `core`, `order_instance`, `cpsat_order` (its solver setting), `search.result` and
ortools; never the simulator or a schedule builder.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from adaptis_plan.core import Action, CostTable, Layout, Programs
from adaptis_plan.search._cpsat import clock_stopped, new_solver
from adaptis_plan.search.cpsat_order import _LINEARIZATION_LEVEL
from adaptis_plan.search.order_instance import (
    _OP_RANK,
    Key,
    Number,
    _backward,
    _complete,
    _device_bound,
    _programs_from_starts,
    _Scaled,
)
from adaptis_plan.search.result import SolveResult


def _by_start(timed: dict[Key, tuple[Number, Number]]) -> Callable[[Key], tuple[Number, Number, int, int, int]]:
    """Sort key: start, end, op rank, stage, micro-batch."""
    return lambda k: (timed[k][0], timed[k][1], _OP_RANK[k[1]], k[0], k[2])


def _key(a: Action) -> Key:
    return (a.stage, a.op, a.mb)


def _successors(sc: _Scaled, key: Key) -> list[tuple[Key, Number]]:
    """The actions that depend on `key` (not counting the device order), with the delay between them."""
    s, op, m = key
    bwd = _backward(sc.split_backward)
    last = sc.layout.num_stages - 1
    if op == "F":
        out: list[tuple[Key, Number]] = [((s, bwd, m), 0)]
        if s < last:
            out.append(((s + 1, "F", m), sc.delay_act[s + 1]))
        return out
    if op == bwd:
        out = [((s, "W", m), 0)] if sc.split_backward else []
        if s > 0:
            out.append(((s - 1, bwd, m), sc.delay_grad[s]))
        return out
    return []


def _predecessors(sc: _Scaled, key: Key) -> list[tuple[Key, Number]]:
    s, op, m = key
    bwd = _backward(sc.split_backward)
    if op == "F":
        return [((s - 1, "F", m), sc.delay_act[s])] if s > 0 else []
    if op == bwd:
        out: list[tuple[Key, Number]] = [((s, "F", m), 0)]
        if s + 1 < sc.layout.num_stages:
            out.append(((s + 1, bwd, m), sc.delay_grad[s + 1]))
        return out
    return [((s, "I", m), 0)]


class WindowModel:
    """One rolling-horizon subproblem: reorder the actions of a window of the current schedule.

    Everything before the window keeps its order and times; everything after keeps its order
    per device, and its effect on the step is the longest path through it from each window
    action (`tail`), which is exact for as-soon-as-possible timing with that order fixed. So the
    objective, max over window actions of end + tail (and per device, the window's last end +
    the device's first later action's path), is the step time the new window order gives.
    Memory: spans that start before the window are fixed there; spans still open after the
    window are held to the horizon (what the device holds at the window's end stays held).
    """

    def __init__(
        self,
        sc: _Scaled,
        programs: Programs,
        timed: dict[Key, tuple[Number, Number]],
        window: dict[int, tuple[int, int]],
        tail: dict[Key, Number],
        horizon: int,
        where: dict[Key, tuple[int, int]],
    ) -> None:
        self.sc = sc
        self.programs = programs
        self.window = window
        self.model = cp_model.CpModel()
        self.start: dict[Key, cp_model.IntVar] = {}
        self.keys_on: dict[int, list[Key]] = {}
        self.horizon = horizon
        for d, (lo, hi) in window.items():
            self.keys_on[d] = [_key(a) for a in programs[d][lo:hi]]
        # a list in device and program order for every loop that builds the model (a set's order
        # follows string hashing, which differs per process: the model, hence the answer, would too)
        self.ordered: list[Key] = [k for keys in self.keys_on.values() for k in keys]
        self.inside: set[Key] = set(self.ordered)
        # an action outside the window is "before" it when it precedes the window on its device
        # (devices without window actions: when it starts before the window does)
        first = min(timed[k][0] for k in self.ordered) if self.ordered else 0

        def is_before(key: Key) -> bool:
            d, i = where[key]
            if d in window:
                return i < window[d][0]
            return timed[key][0] < first

        self.is_before = is_before
        self.objective = self.model.new_int_var(0, horizon, "step")
        self._add_actions(timed)
        self._add_precedences(timed)
        self._add_no_overlap()
        self._add_mb_order(timed)
        self._add_memory(timed)
        self._add_objective(timed, tail)

    def _end(self, key: Key) -> cp_model.LinearExpr:
        return self.start[key] + int(self.sc.dur[key[0]][key[1]])

    def _add_actions(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        # a window action starts after its device's last earlier action
        for d, keys in self.keys_on.items():
            lo = self.window[d][0]
            ready = int(timed[_key(self.programs[d][lo - 1])][1]) if lo > 0 else 0
            for key in keys:
                size = int(self.sc.dur[key[0]][key[1]])
                self.start[key] = self.model.new_int_var(ready, max(ready, self.horizon - size), f"s_{key}")

    def _add_precedences(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        # dependencies from fixed earlier actions are constants, among window actions constraints
        for key in self.ordered:
            for pred, lag in _predecessors(self.sc, key):
                if pred in self.inside:
                    self.model.add(self.start[key] >= self._end(pred) + int(lag))
                elif pred in timed and self.is_before(pred):
                    self.model.add(self.start[key] >= int(timed[pred][1] + lag))

    def _add_no_overlap(self) -> None:
        for keys in self.keys_on.values():
            self.model.add_no_overlap(
                [
                    self.model.new_fixed_size_interval_var(self.start[k], int(self.sc.dur[k[0]][k[1]]), f"i_{k}")
                    for k in keys
                ]
            )

    def _add_mb_order(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        # the micro-batches of one (stage, op) keep their order, as in the full model
        groups: dict[tuple[int, str], list[Key]] = {}
        for key in self.ordered:
            groups.setdefault((key[0], key[1]), []).append(key)
        for keys in groups.values():
            keys.sort(key=lambda k: k[2])
            for a, b in zip(keys, keys[1:], strict=False):
                self.model.add(self.start[b] >= self._end(a))

    def _add_memory(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        sc = self.sc
        bwd = _backward(sc.split_backward)
        top = self.horizon + 1
        for d, keys in self.keys_on.items():
            cap = sc.binding_capacity(d)
            if cap is None or not keys:
                continue
            window_start = min(int(timed[k][0]) for k in keys)
            intervals, demands = [], []
            for s in sc.layout.stages_of(d):
                parts = [(bwd, sc.act[s] - sc.act_w[s])] + ([("W", sc.act_w[s])] if sc.split_backward else [])
                for m in range(sc.num_microbatches):
                    f_key = (s, "F", m)
                    for op, demand in parts:
                        rel = (s, op, m)
                        if demand <= 0:
                            continue
                        f_in, r_in = f_key in self.inside, rel in self.inside
                        f_before, r_before = not f_in and self.is_before(f_key), not r_in and self.is_before(rel)
                        if f_before and r_before:
                            if timed[rel][1] <= window_start:
                                continue
                            iv = self.model.new_interval_var(
                                int(timed[f_key][0]), int(timed[rel][1] - timed[f_key][0]), int(timed[rel][1]), ""
                            )
                        elif f_before and r_in:
                            start = int(timed[f_key][0])
                            size = self.model.new_int_var(0, top, "")
                            iv = self.model.new_interval_var(start, size, self._end(rel), "")
                        elif f_before:
                            iv = self.model.new_interval_var(int(timed[f_key][0]), top - int(timed[f_key][0]), top, "")
                        elif f_in and r_in:
                            size = self.model.new_int_var(0, top, "")
                            iv = self.model.new_interval_var(self.start[f_key], size, self._end(rel), "")
                        elif f_in:
                            size = self.model.new_int_var(0, top, "")
                            iv = self.model.new_interval_var(self.start[f_key], size, top, "")
                        else:
                            continue
                        intervals.append(iv)
                        demands.append(int(demand))
            if intervals:
                self.model.add_cumulative(intervals, demands, cap)

    def _add_objective(self, timed: dict[Key, tuple[Number, Number]], tail: dict[Key, Number]) -> None:
        # step = max over window actions of end + the longest path after it through the fixed rest
        for key in self.ordered:
            later = [
                lag + self.sc.dur[nxt[0]][nxt[1]] + tail[nxt]
                for nxt, lag in _successors(self.sc, key)
                if nxt not in self.inside and nxt in tail and not self.is_before(nxt)
            ]
            self.model.add(self.objective >= self._end(key) + int(max(later, default=0)))
        for d, keys in self.keys_on.items():
            hi = self.window[d][1]
            if not keys or hi >= len(self.programs[d]):
                continue
            nxt = _key(self.programs[d][hi])
            path = int(self.sc.dur[nxt[0]][nxt[1]] + tail[nxt])
            for key in keys:
                self.model.add(self.objective >= self._end(key) + path)
        self.model.minimize(self.objective)

    def add_hint(self, timed: dict[Key, tuple[Number, Number]]) -> None:
        for key, var in self.start.items():
            self.model.add_hint(var, int(timed[key][0]))

    def solve(
        self, time_limit_s: float, seed: int, deterministic_time: float
    ) -> tuple[cp_model.CpSolverStatus, dict[Key, int] | None, float, bool]:
        """(status, window starts or None, deterministic time spent, clock stopped)."""
        solver = new_solver(time_limit_s, 1, seed, deterministic_time)
        solver.parameters.presolve_probing_deterministic_time_limit = 0.05
        solver.parameters.linearization_level = _LINEARIZATION_LEVEL
        status = solver.solve(self.model)
        stopped = clock_stopped(solver, status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return status, None, solver.deterministic_time, stopped
        starts = {key: int(solver.value(var)) for key, var in self.start.items()}
        return status, starts, solver.deterministic_time, stopped


def _tails(sc: _Scaled, programs: Programs, timed: dict[Key, tuple[Number, Number]]) -> dict[Key, Number]:
    """Per action, the longest path after it to the end of the step (durations and delays of the
    actions it leads to, through dependencies and its device's order), for the fixed order."""
    next_on_device: dict[Key, Key] = {}
    for program in programs:
        for a, b in zip(program, program[1:], strict=False):
            next_on_device[_key(a)] = _key(b)
    tail: dict[Key, Number] = {}
    for key in sorted(timed, key=lambda k: (timed[k][0], timed[k][1]), reverse=True):
        best: Number = 0
        succ = _successors(sc, key)
        nd = next_on_device.get(key)
        if nd is not None:
            succ = [*succ, (nd, 0)]
        for nxt, lag in succ:
            if nxt in tail:
                best = max(best, lag + sc.dur[nxt[0]][nxt[1]] + tail[nxt])
        tail[key] = best
    return tail


def _justify(sc: _Scaled, programs: Programs, timed: dict[Key, tuple[Number, Number]]) -> Programs:
    """Double justification of a timed order (the forward-backward improvement of project
    scheduling): the order of the two passes below, read off as programs.

    Right pass: every action, latest-ending first, as late as its successors (already placed)
    and its device allow, into the latest gap of its device that holds it, with the step's end
    as the horizon. Left pass: every action, earliest right-justified start first, as early as
    its predecessors and its device allow, into the earliest gap. Precedences are the model's
    (`_successors` / `_predecessors`, with their P2P delays) plus its micro-batch order per
    (stage, op). Neither pass lengthens the step: an action's old slot is still free when it
    is placed (everything placed before it moved away from it), so it lands at least as well.
    What changes is the order: an action jumps into a gap another one left, which no window of
    consecutive actions can do. Memory is not modelled here; the caller re-times and checks."""
    keys = list(timed)
    index = {k: n for n, k in enumerate(keys)}
    m = sc.num_microbatches
    dur = [sc.dur[k[0]][k[1]] for k in keys]
    dev = [sc.layout.stage_device[k[0]] for k in keys]
    succ: list[list[tuple[int, Number]]] = [[] for _ in keys]
    pred: list[list[tuple[int, Number]]] = [[] for _ in keys]
    for n, k in enumerate(keys):
        for other, lag in _successors(sc, k):
            succ[n].append((index[other], lag))
        for other, lag in _predecessors(sc, k):
            pred[n].append((index[other], lag))
        if k[2] + 1 < m:  # micro-batch order per (stage, op)
            nxt = index[(k[0], k[1], k[2] + 1)]
            succ[n].append((nxt, 0))
            pred[nxt].append((n, 0))
    # precedence rank for ties at equal times (zero-length actions): F down, I / B up, W last
    stages = sc.layout.num_stages
    rank = [(k[0] if k[1] == "F" else 2 * stages - k[0] if k[1] != "W" else 3 * stages, k[2]) for k in keys]
    horizon = max(e for _, e in timed.values())
    devices = sc.layout.num_devices

    def place(order: list[int], late: bool) -> list[Number]:
        starts: list[Number] = [0] * len(keys)
        busy: list[list[tuple[Number, Number]]] = [[] for _ in range(devices)]  # sorted (start, end)
        for n in order:
            p, slots = dur[n], busy[dev[n]]
            if late:
                t = min([horizon] + [starts[v] - lag for v, lag in succ[n]]) - p  # latest start
                j = bisect.bisect_right(slots, (t + p, math.inf))
                while j > 0 and slots[j - 1][1] > t:  # overlaps an earlier-placed action: go before it
                    t = min(t, slots[j - 1][0] - p)
                    j -= 1
            else:
                t = max([0] + [starts[u] + dur[u] + lag for u, lag in pred[n]])  # earliest start
                j = bisect.bisect_left(slots, (t, -math.inf))
                if j > 0 and slots[j - 1][1] > t:
                    j -= 1
                while j < len(slots) and slots[j][0] < t + p:  # overlaps a later-placed action: go after it
                    t = max(t, slots[j][1])
                    j += 1
            starts[n] = t
            bisect.insort(slots, (t, t + p))
        return starts

    ends = [timed[k][1] for k in keys]
    right = place(sorted(range(len(keys)), key=lambda n: (-ends[n], -rank[n][0], -rank[n][1])), late=True)
    left = place(sorted(range(len(keys)), key=lambda n: (right[n], rank[n])), late=False)
    return _programs_from_starts(sc, {k: left[n] for n, k in enumerate(keys)})


@dataclass(frozen=True)
class WindowStats:
    """What a rolling-horizon pass did: windows solved, windows whose new order was kept."""

    windows: int
    improved: int
    justified: int = 0  # double justifications that shortened the step


#: Deterministic time charged per window for each action of the whole programs: around every
#: window the programs are re-ordered, re-timed and their tails recomputed, about 3.5 us of wall
#: time per action on one core, where a unit of the solver's deterministic time is about 1 s.
#: Without it a 200k-action program (PP 64, 512 micro-batches) spent a long limit's window work
#: on re-timing alone and met the wall-clock abort (55.6 s at --time-limit 60).
RETIME_DTIME_PER_ACTION = 4e-6
#: Deterministic time charged per action for a double justification (`_justify`: two placement
#: passes with gap search, then the re-timing), about 5 x a re-timing's wall time.
_JUSTIFY_DTIME_PER_ACTION = 2e-5


def _shorter(sc: _Scaled, programs: Programs, best: Number) -> tuple[dict[Key, tuple[Number, Number]], Number] | None:
    """(timing, makespan) of `programs` under the model when they keep its micro-batch order and
    memory and end before `best`; else None."""
    timed = sc.time_programs(programs)
    if timed is None or not sc.hint_feasible(timed):
        return None
    makespan = max(e for _, e in timed.values())
    return (timed, makespan) if makespan < best else None


def _window_positions(total: int, size: int) -> list[int]:
    """First-action positions of the windows of `size` actions that cover `total` by half a
    window's steps, alternately from both ends inwards (the fill and the drain hold the bubbles)."""
    step = max(1, size // 2)
    starts_fwd = list(range(0, max(total - size, 0) + 1, step))
    if starts_fwd[-1] != max(total - size, 0):
        starts_fwd.append(max(total - size, 0))
    positions = [x for pair in itertools.zip_longest(starts_fwd, reversed(starts_fwd)) for x in pair if x is not None]
    return list(dict.fromkeys(positions))[: len(starts_fwd)]


def improve_order_windows(
    layout: Layout,
    costs: CostTable,
    num_microbatches: int,
    programs: Programs,
    *,
    split_backward: bool = True,
    mem_limit_bytes: Sequence[float] | None = None,
    window_actions: int = 1500,
    deterministic_time: float = 2.0,
    window_deterministic_time: float = 0.25,
    time_limit_s: float = 60.0,
    seed: int = 0,
) -> tuple[SolveResult[Programs], WindowStats]:
    """Improve a long program window by window (rolling horizon), where one model is too big.

    Windows of `window_actions` consecutive actions (by start time) slide over the step by
    half a window (from both ends of the step inwards: the fill and the drain hold the bubbles); each is solved by `WindowModel` with `window_deterministic_time` of work and
    kept when the re-timed whole step gets shorter and still fits memory (both under this
    module's model semantics). Programs already at the device bound come back at once as
    OPTIMAL. A pass that keeps no window doubles each window's length and work for the next
    pass (small windows make the quick local moves; longer ones the moves small ones cannot
    see: on nemotron-h-s 2K, V x4, 10 units of work reach the device bound this way, 684.98,
    where fixed 60-action windows stop at 695.52). Before the windows grow, a pass that kept
    nothing tries a double justification (`_justify`), which moves actions into gaps far from
    them; when it shortens the step, the windows start over at their first size (on the paper's
    nemotron-h-s 4K, author's costs, the product's windows stopped at 687.14, 2.2% above the
    lower bound; with it, 685.32, 1.9%; on nemotron-h-m 4K the new start led the windows to a
    worse end, 1540.24 -> 1549.12: it is a restart, not a guaranteed gain). The
    search ends when the next pass could not afford even one window of it, or with the total
    `deterministic_time` (counted in the solver's own work units, so the same programs always
    give the same result) or the wall-clock abort `time_limit_s`, or once the order meets the
    device bound. Status OPTIMAL when it does, else FEASIBLE, with the best programs; the bound
    is the device bound (it holds without solving); None payload when the
    programs do not fit this model (wrong backward kind, deadlock, memory).

    One loop on purpose: a window kept, a justification kept and a pass that kept nothing each
    change the same state together (the programs and their timing, the work spent, the window size
    and position), which split functions would have to hand back and forth whole.
    """
    t0 = time.perf_counter()
    sc = _Scaled.build(layout, costs, num_microbatches, split_backward, mem_limit_bytes)
    stats = WindowStats(0, 0)
    if not _complete(layout, programs, num_microbatches, split_backward):
        return SolveResult("MODEL_INVALID", None, None, time.perf_counter() - t0, None), stats
    current = [list(p) for p in programs]
    timed = sc.time_programs(current)
    if timed is not None:
        sc = sc.fitted_to(timed, costs, mem_limit_bytes)
    if timed is None or not sc.hint_feasible(timed):
        return SolveResult("MODEL_INVALID", None, None, time.perf_counter() - t0, None), stats
    best = max(e for _, e in timed.values())
    hint_objective = best * sc.unit_s
    bound = min(_device_bound(sc), best)
    if best <= bound:  # already at the bound no order of these stages can beat: nothing to improve
        return (
            SolveResult(
                "OPTIMAL", best * sc.unit_s, bound * sc.unit_s, time.perf_counter() - t0, current, best * sc.unit_s
            ),
            stats,
        )
    total = sum(len(p) for p in current)
    size = max(8, min(window_actions, total))
    positions = _window_positions(total, size)
    first_size, first_window_dtime = size, window_deterministic_time
    spent, kept_in_pass, windows, kept, justified = 0.0, 0, 0, 0, 0
    stopped = False
    at = 0
    order: list[Key] = []
    tail: dict[Key, Number] = {}
    where: dict[Key, tuple[int, int]] = {}
    stale = True  # the order by start time, tails and positions follow `current`; rebuilt after a kept window
    while spent + 1e-9 < deterministic_time:
        left_s = time_limit_s - (time.perf_counter() - t0)
        if left_s <= 0:
            stopped = True
            break
        if stale:
            order = sorted(timed, key=_by_start(timed))
            tail = _tails(sc, current, timed)
            where = {_key(a): (d, i) for d, program in enumerate(current) for i, a in enumerate(program)}
            stale = False
        pos = positions[at]
        window: dict[int, tuple[int, int]] = {}
        for key in order[pos : pos + size]:
            d, i = where[key]
            lo, hi = window.get(d, (i, i + 1))
            window[d] = (min(lo, i), max(hi, i + 1))
        model = WindowModel(sc, current, timed, window, tail, int(best), where)
        model.add_hint(timed)
        status, starts, used, stopped = model.solve(
            left_s, seed, min(window_deterministic_time, deterministic_time - spent)
        )
        # each window is charged at least a quarter of its budget (building it costs work too)
        # and the re-timing of the whole programs around it, which grows with their length
        spent += max(used, window_deterministic_time / 4) + total * RETIME_DTIME_PER_ACTION
        windows += 1
        if starts is not None:
            trial = list(current)
            changed = False
            for d, (lo, hi) in window.items():
                part = sorted(
                    current[d][lo:hi],
                    key=lambda a: (starts[_key(a)], _OP_RANK[a.op], a.stage if a.op == "F" else -a.stage, a.mb),
                )
                if part != current[d][lo:hi]:
                    trial[d] = current[d][:lo] + part + current[d][hi:]
                    changed = True
            better = _shorter(sc, trial, best) if changed else None
            if better is not None:
                current, (timed, best), stale = trial, better, True
                kept += 1
                kept_in_pass += 1
        if stopped or best <= bound:
            break
        at += 1
        if at >= len(positions):
            cost = total * _JUSTIFY_DTIME_PER_ACTION  # in work units, and about as many seconds at most
            if not kept_in_pass and spent + cost <= deterministic_time:
                if time.perf_counter() - t0 + cost >= time_limit_s:  # the wall-clock abort, said as such
                    stopped = True
                    break
                # nothing kept this pass: first a double justification, whose moves no window
                # holds; when it shortens the step, the windows start over from their first size
                spent += cost
                trial = _justify(sc, current, timed)
                better = _shorter(sc, trial, best)
                if better is not None:
                    current, (timed, best), stale = trial, better, True
                    justified += 1
                    size, window_deterministic_time = first_size, first_window_dtime
                    positions = _window_positions(total, size)
                    at = 0
                    if best <= bound:
                        break
                    continue
            if not kept_in_pass:
                # nothing kept this pass: windows twice as long (a move that spans more actions),
                # each searched twice as hard, while the budget lasts
                window_deterministic_time *= 2
                if window_deterministic_time > deterministic_time - spent:
                    break
                if size < total:
                    size = min(total, 2 * size)
                    positions = _window_positions(total, size)
            at, kept_in_pass = 0, 0
    result = SolveResult(
        status="OPTIMAL" if best <= bound else "FEASIBLE",
        objective=best * sc.unit_s,
        bound=bound * sc.unit_s,
        wall_s=time.perf_counter() - t0,
        payload=current,
        hint_objective=hint_objective,
        clock_stopped=stopped,
    )
    return result, WindowStats(windows, kept, justified)
