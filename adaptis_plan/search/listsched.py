"""Adaptive list scheduler: builds per-device F / I / W (or F / B) orders for any layout.

Data flow: layout + cost table + policy -> `Programs` (+ its own makespan estimate, used only
to rank candidates; the simulator judges the survivors). Pure Python on flat lists; no solver.
Imports `core` and `judge.semantics` (stage costs) only.

The scheduler replays the pipeline in time. Whenever a device becomes free it picks, among
the actions whose inputs have arrived:
1. a backward for inputs (I, or B when backward is not split): it frees memory and lies on
   the critical path (oldest micro-batch first, later stage first);
2. else a forward F, if the device's memory (and the policy's in-flight cap) allows it
   (oldest micro-batch first; `f_order` breaks ties between the device's stages);
3. else a pending W, which therefore fills the bubbles (zero-bubble style). With a
   `w_lookahead` policy a W starts only if it ends before the next known input of a critical
   action arrives (the zero-bubble paper's rule): otherwise that action would wait up to a
   whole W. A W always runs when a forward is held back by memory (it frees memory);
otherwise it idles until the next arrival it knows of, or until a neighbour wakes it.

Policy variations on that rule, each the best somewhere (the generator tries a portfolio):
`alternate` prefers a ready forward right after a backward (the 1F1B rhythm) instead of
always the backward; `f_yield` keeps the device free for a more urgent action (a backward, or
a forward ranked first) whose input lands within that fraction of the forward's duration, in
the warm-up only with `yield_warmup_only` (the zero-bubble heuristic's "no extra forward that
delays the first backward"); `eager_w` runs each backward's W right after it while forwards
remain (the handcrafted ZB-V rhythm F, I, W, which keeps memory flat at the limit), and defers
W's in the cool-down; `reserve_oldest` keeps room for the oldest micro-batch's next chunk
right now, not only after older micro-batches release theirs.

Memory, per device and across every stage the device holds. A forward is admitted only if
the device stays in a *safe* state: taking micro-batches in order, each one's remaining
forwards on this device must fit once every older micro-batch has released what it holds
(older micro-batches never wait for younger ones, so they do release it). On one stage per
device this is just "the activation fits"; on a V or interleaved placement it keeps the
forwards of younger micro-batches from eating the room an older one still needs for its
later chunk, which is what deadlocked or overflowed a plain "fits now" rule. The warm-up
depth of each device thus follows from its own memory; `inflight_cap` can bound it further.
A device on which not even one micro-batch fits lets the oldest run anyway (the simulator
then reports the overflow) so the scheduler always finishes.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adaptis_plan.core import Action, CostTable, Layout, Programs
from adaptis_plan.judge.semantics import stage_costs
from adaptis_plan.judge.simulate import MEM_SLACK

#: `w_lookahead` values: no lookahead, wait for known gradient arrivals, or for any known input.
W_LOOKAHEAD = ("none", "backward", "all")
#: `f_order` values: which of a device's stages runs its forward first, among ready forwards.
F_ORDERS = ("mb-depth", "mb-breadth", "stage-depth")

_EPS = MEM_SLACK  # the oldest micro-batch's rounding room, the judge's own slack


@dataclass(frozen=True)
class ListPolicy:
    """How the list scheduler chooses (module docstring).

    `split_backward`: I + W instead of B. `f_order`: among ready forwards, "mb-depth" = oldest
    micro-batch first, then the later stage; "mb-breadth" = oldest first, then the earlier stage;
    "stage-depth" = the later stage first (finish the chunks of one micro-batch before starting
    new ones). `w_lookahead`: see `W_LOOKAHEAD`. `f_yield`, `yield_warmup_only`, `alternate`,
    `eager_w`, `reserve_oldest`: see the module docstring. `inflight_cap` per device bounds
    forwards in flight (F done, I/B not yet); None = memory only. `mem_limit_bytes` per device
    overrides the cost table's limits. `label` names the policy in reports (default: `name`).
    """

    split_backward: bool = True
    f_order: str = "mb-depth"
    w_lookahead: str = "none"
    f_yield: float = 0.0
    alternate: bool = False
    yield_warmup_only: bool = False
    reserve_oldest: bool = False
    eager_w: bool = False
    inflight_cap: tuple[int, ...] | None = None
    mem_limit_bytes: tuple[float, ...] | None = None
    label: str = ""

    @property
    def name(self) -> str:
        """`label`, or a short description of the fields that differ from the plain greedy rule."""
        if self.label:
            return self.label
        parts = ["I/W" if self.split_backward else "B"]
        if self.f_order != "mb-depth":
            parts.append(self.f_order)
        if self.alternate:
            parts.append("alternate")
        if self.w_lookahead != "none":
            parts.append(f"W-lookahead {self.w_lookahead}")
        if self.f_yield:
            parts.append(f"yield {self.f_yield:g}" + (" warm-up" if self.yield_warmup_only else ""))
        if self.reserve_oldest:
            parts.append("reserve")
        if self.eager_w:
            parts.append("eager W")
        if self.inflight_cap is not None:
            parts.append("capped")
        return " ".join(parts)

    def __post_init__(self) -> None:
        if self.w_lookahead not in W_LOOKAHEAD:
            raise ValueError(f"w_lookahead = {self.w_lookahead!r}: use one of {W_LOOKAHEAD}")
        if self.f_order not in F_ORDERS:
            raise ValueError(f"f_order = {self.f_order!r}: use one of {F_ORDERS}")


@dataclass(frozen=True)
class Priority:
    """Ranks that replace the rule "backward first, then forward" (`list_schedule(priority=...)`).

    Among a device's ready actions (forwards still pass the memory admission), the one with the
    highest score runs: `f[s]` or `b[s]` (the I, or B when backward is not split, of stage s) minus
    `mb_weight` x its micro-batch. W's still only fill time no forward or backward can use.
    `critical_path_priority` gives each action its stage's remaining critical path, which keeps
    every device fed on irregular placements where a device holds many stages (a micro-batch then
    crosses it again and again, and the backward-first rule starves the devices further down)."""

    f: tuple[float, ...]
    b: tuple[float, ...]
    mb_weight: float

    def perturbed(self, f_delta: Sequence[float], b_delta: Sequence[float]) -> Priority:
        return Priority(
            tuple(x + d for x, d in zip(self.f, f_delta, strict=True)),
            tuple(x + d for x, d in zip(self.b, b_delta, strict=True)),
            self.mb_weight,
        )


def critical_path_priority(layout: Layout, costs: CostTable, split_backward: bool, mb_weight: float) -> Priority:
    """Each stage's upward rank: the longest work and transfer path from its F (or its I / B) to
    the end of its micro-batch's backward at stage 0; `mb_weight` in units of the mean stage
    forward (older micro-batches first, by that much per micro-batch)."""
    st = stage_costs(layout, costs)
    n = layout.num_stages
    back = (st.i if split_backward else st.b).tolist()
    f, p2p_act, p2p_grad = st.f.tolist(), st.p2p_act.tolist(), st.p2p_grad.tolist()
    b_rank = [0.0] * n
    for s in range(n):
        b_rank[s] = back[s] + (b_rank[s - 1] + p2p_grad[s] if s > 0 else 0.0)
    f_rank = [0.0] * n
    for s in reversed(range(n)):
        f_rank[s] = f[s] + (f_rank[s + 1] + p2p_act[s + 1] if s + 1 < n else b_rank[n - 1])
    unit = sum(f) / n if n else 0.0
    return Priority(tuple(f_rank), tuple(b_rank), mb_weight * unit)


def list_schedule(
    layout: Layout,
    costs: CostTable,
    num_microbatches: int,
    policy: ListPolicy = ListPolicy(),
    *,
    priority: Priority | None = None,
) -> tuple[Programs, float]:
    """Per-device orders and the scheduler's own makespan estimate (links never queue here);
    `priority` (one rank per stage of `layout`) replaces the backward-first rule (`Priority`).

    One piece on purpose: it is the search's innermost loop, run for every candidate, and each
    action reads and updates some twenty per-device lists held as locals; split into functions they
    would be passed or reached through attributes on every action."""
    if priority is not None and not (len(priority.f) == len(priority.b) == layout.num_stages):
        raise ValueError(f"priority has {len(priority.f)} / {len(priority.b)} ranks for {layout.num_stages} stages")
    st = stage_costs(layout, costs)
    num_stages, num_devices, m_total = layout.num_stages, layout.num_devices, num_microbatches
    last = num_stages - 1
    split = policy.split_backward
    inf = math.inf
    f_dur = st.f.tolist()
    b_dur = (st.i if split else st.b).tolist()
    w_dur = st.w.tolist()
    act = st.act.tolist()
    act_w = st.act_w.tolist() if split else [0.0] * num_stages
    act_i = [a - w for a, w in zip(act, act_w, strict=True)]  # what I frees (B frees all of act)
    p2p_act = st.p2p_act.tolist()
    p2p_grad = st.p2p_grad.tolist()
    stage_device = layout.stage_device
    dev_stages = [layout.stages_of(d) for d in range(num_devices)]
    limits = policy.mem_limit_bytes or tuple(float(x) for x in costs.mem_limit_bytes[:num_devices])
    limit = [float(limits[d]) for d in range(num_devices)]
    static = [float(st.static[d]) for d in range(num_devices)]
    act_cap = [limit[d] - static[d] for d in range(num_devices)]
    per_mb = [sum(act[s] for s in dev_stages[d]) for d in range(num_devices)]
    # memory binds only where all micro-batches' activations at once would not fit
    binding = [math.isfinite(act_cap[d]) and act_cap[d] < m_total * per_mb[d] - _EPS for d in range(num_devices)]
    fits_one = [per_mb[d] <= act_cap[d] + _EPS for d in range(num_devices)]
    multi = [len(dev_stages[d]) > 1 for d in range(num_devices)]
    cap = list(policy.inflight_cap) if policy.inflight_cap is not None else [m_total * num_stages] * num_devices
    lookahead = policy.w_lookahead
    f_yield = policy.f_yield
    alternate = policy.alternate
    yield_always = not policy.yield_warmup_only
    reserve_oldest = policy.reserve_oldest
    eager_w = policy.eager_w and split
    last_op = [""] * num_devices  # the device's last action's op class: F, B (I or B) or W
    last_fb = [""] * num_devices  # its last forward or backward
    f_order = policy.f_order
    mbw = priority.mb_weight if priority is not None else 0.0

    f_end = [[inf] * m_total for _ in range(num_stages)]
    b_end = [[inf] * m_total for _ in range(num_stages)]  # I, or B when not split
    next_f = [0] * num_stages
    next_b = [0] * num_stages
    pending_w: list[list[tuple[int, int]]] = [[] for _ in range(num_devices)]  # heaps of (mb, stage)
    mem = [0.0] * num_devices
    held = [[0.0] * m_total for _ in range(num_devices)]  # activation bytes per mb on the device
    need = [[per_mb[d]] * m_total for d in range(num_devices)]  # forward bytes still to allocate
    held_done = [0.0] * num_devices  # held by micro-batches with every forward done on the device
    # the largest need of a micro-batch with at least one forward done on the device
    partial_need_max = [per_mb[d] - min((act[s] for s in dev_stages[d]), default=0.0) for d in range(num_devices)]
    inflight = [0] * num_devices
    free_at = [0.0] * num_devices
    remaining = [len(dev_stages[d]) * m_total * (3 if split else 2) for d in range(num_devices)]
    programs: Programs = [[] for _ in range(num_devices)]
    new_tuple = tuple.__new__
    heap = [(0.0, d) for d in range(num_devices) if remaining[d]]
    heapq.heapify(heap)
    makespan = 0.0
    parked = [False] * num_devices

    def safe(d: int, s: int, k: int, oldest: bool) -> bool:
        """Whether F(s, k) keeps device d in a safe state (module docstring)."""
        a = act[s]
        room = act_cap[d] + _EPS
        # the simulator's own arithmetic (static + the running sum of the same changes, in the same
        # order), so a plan the scheduler calls fitting is one the simulator calls fitting; the
        # oldest micro-batch gets the rounding slack (a limit of exactly one micro-batch stays usable)
        if static[d] + (mem[d] + a) > limit[d] and not (oldest and mem[d] + a <= room):
            return False
        if not multi[d]:
            return True  # one stage: older micro-batches have no forward left here
        stages = dev_stages[d]
        lo = min([next_f[x] for x in stages])
        if lo >= k:
            return True
        need_d, held_d = need[d], held[d]
        if reserve_oldest and mem[d] + a + need_d[lo] > room:
            return False  # keep room for the oldest micro-batch's next chunk right now, not after releases
        # micro-batches below lo have done every forward here (need 0): they release all they hold
        # (held_done) before anyone else's turn; from lo on, oldest first, each one's remaining
        # forwards must fit once every older one has released
        level = mem[d] + a
        older = held_done[d]
        if level - older + partial_need_max[d] <= room:
            return True  # even the largest remaining need fits: no loop needed
        if len(stages) == 2:
            # two stages: every micro-batch in [lo, k) has one forward left, on the same stage, so
            # the oldest (least released before it) is the binding one
            return level - older + need_d[lo] <= room
        for j in range(lo, k):
            if need_d[j] > 0.0 and level - older + need_d[j] > room:
                return False
            older += held_d[j]
        return True

    while heap:
        t, d = heapq.heappop(heap)
        if t != free_at[d]:
            continue
        stages = dev_stages[d]
        # --- backward candidates
        best_b = None
        best_bk = None
        best_b_k = -1
        next_b_arrival = inf
        for s in stages:
            k = next_b[s]
            if k >= m_total:
                continue
            fe = f_end[s][k]
            if fe == inf:
                continue
            r = fe if s == last else b_end[s + 1][k] + p2p_grad[s + 1]
            if r <= t:
                key = (k, -s) if priority is None else (priority.b[s] * -1 + mbw * k, k, -s)
                if best_bk is None or key < best_bk:
                    best_bk, best_b, best_b_k = key, s, k
            elif r < next_b_arrival:
                next_b_arrival = r
        choice_op, choice_s, choice_k = "", -1, -1
        # forward candidates
        best_f = None
        best_fk: Any = None  # (int, int) or (float, int, int) by the policy
        next_f_arrival = inf
        blocked = False
        late_f: list[tuple[Any, float]] = []  # forwards whose input is in flight: (key, arrival)
        oldest = next_b[stages[0]] if len(stages) == 1 else min([next_b[s] for s in stages])
        # forwards matter only when no backward is ready, or when the policy alternates after one
        for s in stages if best_b is None or (alternate and last_fb[d] == "B") or priority is not None else ():
            k = next_f[s]
            if k >= m_total:
                continue
            r = 0.0 if s == 0 else f_end[s - 1][k] + p2p_act[s]
            if priority is not None:
                key = (priority.f[s] * -1 + mbw * k, k, -s)
            else:
                key = (k, -s) if f_order == "mb-depth" else (k, s) if f_order == "mb-breadth" else (-s, k)
            if r > t:
                if r < next_f_arrival:
                    next_f_arrival = r
                if r < inf:
                    late_f.append((key, r))
                continue
            if inflight[d] >= cap[d] and k > oldest:
                continue
            if binding[d] and not safe(d, s, k, k <= oldest):
                if fits_one[d] or k > oldest:
                    blocked = True
                    continue
            if best_fk is None or key < best_fk:
                best_fk, best_f = key, s
        if best_f is not None and f_yield > 0.0 and (yield_always or not any(next_b[x] for x in stages)):
            # an input of a more urgent action (a backward, or a forward ranked first) lands while
            # this forward would still run: keep the device for it
            soon = t + f_yield * f_dur[best_f]
            if next_b_arrival < soon or any(r < soon and key < best_fk for key, r in late_f):
                best_f = None
        f_first = alternate and last_fb[d] == "B" and best_f is not None
        if priority is not None and best_f is not None and best_b is not None:
            f_first = best_fk < best_bk  # the higher score runs
        if eager_w and last_op[d] == "B" and pending_w[d] and any(next_f[x] < m_total for x in stages):
            # the W of the backward just done runs next (the zero-bubble handcrafted rhythm F, I, W)
            # while forwards remain; in the cool-down W's wait, so the backwards reach stage 0 sooner
            k, s = heapq.heappop(pending_w[d])
            choice_op, choice_s, choice_k = "W", s, k
        elif best_b is not None and not f_first:
            choice_op, choice_s, choice_k = ("I" if split else "B"), best_b, best_b_k
        elif best_f is not None:
            choice_op, choice_s, choice_k = "F", best_f, next_f[best_f]
        elif pending_w[d]:
            k, s = pending_w[d][0]
            wait = inf
            if lookahead == "backward":
                wait = next_b_arrival
            elif lookahead == "all":
                wait = min(next_b_arrival, next_f_arrival)
            if blocked or t + w_dur[s] <= wait + _EPS:
                heapq.heappop(pending_w[d])
                choice_op, choice_s, choice_k = "W", s, k
        if not choice_op:
            # idle until an arrival we know of, or until a neighbour's action wakes us
            nxt = min(next_b_arrival, next_f_arrival)
            free_at[d] = nxt
            parked[d] = True
            if nxt < inf:
                heapq.heappush(heap, (nxt, d))
            continue
        parked[d] = False
        s, k = choice_s, choice_k
        if choice_op == "F":
            dur = f_dur[s]
            f_end[s][k] = t + dur
            next_f[s] += 1
            mem[d] += act[s]
            held[d][k] += act[s]
            need[d][k] -= act[s]
            if need[d][k] <= _EPS * per_mb[d]:
                need[d][k] = 0.0
                held_done[d] += held[d][k]
            inflight[d] += 1
        elif choice_op == "W":
            dur = w_dur[s]
            mem[d] -= act_w[s]
            held[d][k] -= act_w[s]
            if need[d][k] == 0.0:
                held_done[d] -= act_w[s]
        else:
            dur = b_dur[s]
            b_end[s][k] = t + dur
            next_b[s] += 1
            inflight[d] -= 1
            freed = act_i[s] if split else act[s]
            mem[d] -= freed
            held[d][k] -= freed
            if need[d][k] == 0.0:
                held_done[d] -= freed
            if split:
                heapq.heappush(pending_w[d], (k, s))
        last_op[d] = "F" if choice_op == "F" else "W" if choice_op == "W" else "B"
        if choice_op != "W":
            last_fb[d] = last_op[d]
        programs[d].append(new_tuple(Action, (s, choice_op, k)))  # Action(s, choice_op, k), built in C
        end = t + dur
        if end > makespan:
            makespan = end
        remaining[d] -= 1
        free_at[d] = end
        if remaining[d]:
            heapq.heappush(heap, (end, d))
        # only the device this action feeds can have gained a ready action: wake it on arrival
        if choice_op == "F" and s < last:
            target, arrival = stage_device[s + 1], end + p2p_act[s + 1]
        elif choice_op != "F" and choice_op != "W" and s > 0:
            target, arrival = stage_device[s - 1], end + p2p_grad[s]
        else:
            continue
        if parked[target] and arrival < free_at[target]:
            free_at[target] = arrival
            heapq.heappush(heap, (arrival, target))
    if any(remaining):
        stuck = [d for d in range(num_devices) if remaining[d]]
        raise RuntimeError(f"list scheduler could not place every action (devices {stuck})")
    return programs, makespan
