"""simulate: hand-computed step times, P2P and link FIFO, memory, deadlocks, lower bound.

Programs are written out here (no schedule builder): the simulator is the judge, so it is
tested against hand arithmetic and against `_reference`, an independent heap-based event
simulation of the same semantics.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random

import numpy as np
import pytest
from helpers_common import one_f_one_b
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptis_plan import schedules
from adaptis_plan.core import Action, CostTable, Layout, Programs, uniform_costs
from adaptis_plan.errors import DeadlockError, InputError
from adaptis_plan.judge.bound import lower_bound
from adaptis_plan.judge.simulate import SimResult, simulate

A = Action.parse


def p(*texts: str) -> list[Action]:
    return [A(t) for t in texts]


def straight(num_devices: int) -> Layout:
    return Layout(tuple(range(num_devices + 1)), tuple(range(num_devices)), num_devices)


def gpipe(num_devices: int, m: int) -> Programs:
    return [
        [Action(d, "F", mb) for mb in range(m)] + [Action(d, "B", mb) for mb in range(m)] for d in range(num_devices)
    ]


# --- hand-computed step times -------------------------------------------------------------


@pytest.mark.parametrize("num_devices,m", [(1, 1), (2, 1), (2, 4), (4, 4), (4, 8), (3, 7)])
def test_1f1b_unit_costs(num_devices: int, m: int) -> None:
    costs = uniform_costs(num_devices, num_devices, f=1, i=1, w=1)
    r = simulate(straight(num_devices), costs, one_f_one_b(num_devices, m), m)
    assert r.step_time_s == pytest.approx((m + num_devices - 1) * 3)
    assert r.busy_s == pytest.approx([3.0 * m] * num_devices)
    expected_bubble = 1 - 3 * m / ((m + num_devices - 1) * 3)
    assert r.bubble_ratio == pytest.approx(expected_bubble)
    assert r.bubble_ratio_per_device == pytest.approx([expected_bubble] * num_devices)


@pytest.mark.parametrize("num_devices,m", [(2, 2), (4, 4), (4, 8)])
def test_gpipe_unit_costs(num_devices: int, m: int) -> None:
    costs = uniform_costs(num_devices, num_devices, f=1, i=1, w=1)
    r = simulate(straight(num_devices), costs, gpipe(num_devices, m), m)
    assert r.step_time_s == pytest.approx((m + num_devices - 1) * 3)


def test_times_parallel_to_programs() -> None:
    progs = one_f_one_b(3, 5)
    r = simulate(straight(3), uniform_costs(3, 3), progs, 5)
    assert [len(t) for t in r.times] == [len(x) for x in progs]
    for row in r.times:
        for (s0, e0), (s1, _) in zip(row, row[1:], strict=False):
            assert s0 <= e0 <= s1


def test_multi_layer_stage_durations() -> None:
    layout = Layout((0, 3, 4), (0, 1), 2)
    costs = uniform_costs(4, 2, f=1, i=2, w=3)
    r = simulate(layout, costs, [p("0F0", "0I0", "0W0"), p("1F0", "1B0")], 1)
    # 0F0 [0,3]  1F0 [3,4]  1B0 [4,9]  0I0 [9,15]  0W0 [15,24]
    assert r.times[0] == [(0, 3), (9, 15), (15, 24)]
    assert r.times[1] == [(3, 4), (4, 9)]
    assert r.step_time_s == 24


def test_a_w_right_after_its_own_i_costs_the_hot_w() -> None:
    """`w_hot_s`: a W that directly follows its own I on the device (its stash still in cache); any
    other W, even one right after another micro-batch's I, costs `w_s`; a fused B is I + the hot W."""
    layout = Layout((0, 1), (0,), 1)
    costs = dataclasses.replace(uniform_costs(1, 1, f=1, i=2, w=4), w_hot_s=np.full((1, 1), 3.0))
    r = simulate(layout, costs, [p("0F0", "0F1", "0I0", "0W0", "0I1", "0F2", "0W1", "0B2")], 3)
    spans = [e - s for s, e in r.times[0]]
    assert spans == [1, 1, 2, 3, 2, 1, 4, 5]
    assert r.step_time_s == 19
    # without a hot W every W costs w_s, and B = I + W
    r = simulate(layout, dataclasses.replace(costs, w_hot_s=None), [p("0F0", "0I0", "0W0", "0F1", "0B1")], 2)
    assert [e - s for s, e in r.times[0]] == [1, 2, 4, 1, 6]


def test_lower_bound_holds_when_a_hot_w_is_cheaper() -> None:
    layout = Layout((0, 1, 2), (0, 1), 2)
    costs = dataclasses.replace(uniform_costs(2, 2, f=1, i=1, w=4), w_hot_s=np.full((2, 2), 0.5))
    progs = [[A(t) for mb in range(4) for t in (f"0F{mb}",)] + [A(t) for mb in range(4) for t in (f"0I{mb}", f"0W{mb}")],
             [A(t) for mb in range(4) for t in (f"1F{mb}", f"1I{mb}", f"1W{mb}")]]  # fmt: skip
    r = simulate(layout, costs, progs, 4)
    assert r.lower_bound_s <= r.step_time_s
    assert r.step_time_s < simulate(layout, dataclasses.replace(costs, w_hot_s=None), progs, 4).lower_bound_s


def test_heterogeneous_device_speeds() -> None:
    costs = uniform_costs(2, 2, f=1, i=1, w=1)
    costs.f_s[1] *= 2
    costs.i_s[1] *= 2
    costs.w_s[1] *= 2
    r = simulate(straight(2), costs, gpipe(2, 1), 1)
    # 0F0 [0,1]  1F0 [1,3]  1B0 [3,7]  0B0 [7,9]
    assert r.times == [[(0, 1), (7, 9)], [(1, 3), (3, 7)]]
    assert r.busy_s == [3, 6]
    assert r.bubble_ratio_per_device == pytest.approx([1 - 3 / 9, 1 - 6 / 9])


# --- P2P ----------------------------------------------------------------------------------


def test_p2p_latency_and_bandwidth() -> None:
    costs = uniform_costs(2, 2, f=1, i=1, w=1, out=2e6, bw=4e6, latency=0.25)  # 0.25 + 0.5 per message
    r = simulate(straight(2), costs, gpipe(2, 1), 1)
    # 0F0 [0,1]  act [1,1.75]  1F0 [1.75,2.75]  1B0 [2.75,4.75]  grad [4.75,5.5]  0B0 [5.5,7.5]
    assert r.step_time_s == pytest.approx(7.5)
    assert r.times[1][0] == pytest.approx((1.75, 2.75))
    assert [(t.src_device, t.dst_device, t.kind, t.stage, t.mb) for t in r.transfers] == [
        (0, 1, "act", 0, 0),
        (1, 0, "grad", 1, 0),
    ]
    assert (r.transfers[0].start_s, r.transfers[0].end_s) == pytest.approx((1.0, 1.75))
    assert (r.transfers[1].start_s, r.transfers[1].end_s) == pytest.approx((4.75, 5.5))


def test_boundary_bytes_come_from_last_layer_of_sending_side() -> None:
    layout = Layout((0, 2, 3), (0, 1), 2)
    costs = uniform_costs(3, 2, f=1, i=1, w=1, bw=1.0)
    costs.out_bytes[:] = [100.0, 5.0, 100.0]  # boundary after layer 1
    r = simulate(layout, costs, gpipe(2, 1), 1)
    assert r.transfers[0].end_s - r.transfers[0].start_s == pytest.approx(5.0)


def test_same_device_stages_have_no_p2p_delay() -> None:
    layout = Layout((0, 1, 2), (0, 0), 1)
    costs = uniform_costs(2, 1, f=1, i=1, w=1, out=1e9, bw=1.0, latency=100.0)
    r = simulate(layout, costs, [p("0F0", "1F0", "1B0", "0B0")], 1)
    assert r.step_time_s == 6
    assert r.transfers == []
    assert r.bubble_ratio == 0


def test_latency_is_flight_time_not_link_occupancy() -> None:
    costs = uniform_costs(2, 2, f=1, i=1, w=1, latency=3.0)
    r = simulate(straight(2), costs, gpipe(2, 2), 2)
    # acts ready at 1 and 2 both fly 3: arrive 4 and 5 (their latencies overlap)
    assert [(t.src_device, t.start_s) for t in r.transfers][:2] == [(0, 1), (0, 2)]
    assert r.times[1][:2] == [(4, 5), (5, 6)]


def test_link_is_fifo_in_ready_order() -> None:
    # 3 bytes at 1 byte/s: each message holds the link for 3 s
    costs = uniform_costs(2, 2, f=1, i=1, w=1, out=3.0, bw=1.0)
    r = simulate(straight(2), costs, gpipe(2, 2), 2)
    # acts ready at 1 and 2 share link 0->1: [1,4] then [4,7]; 1F0 [4,5] 1F1 [7,8]
    # 1B0 [8,10] 1B1 [10,12]; grads ready 10, 12 share 1->0: [10,13] [13,16]; 0B0 [13,15] 0B1 [16,18]
    spans = [(t.src_device, t.start_s, t.end_s) for t in r.transfers]
    assert spans == [(0, 1, 4), (0, 4, 7), (1, 10, 13), (1, 13, 16)]
    assert r.times == [[(0, 1), (1, 2), (13, 15), (16, 18)], [(4, 5), (7, 8), (8, 10), (10, 12)]]
    assert r.step_time_s == 18


def test_links_of_different_pairs_are_independent() -> None:
    # 0->1 and 0->2 carry messages at the same time: no serialization across pairs.
    layout = Layout((0, 1, 2, 3, 4), (0, 1, 0, 2), 3)
    costs = uniform_costs(4, 3, f=1, i=1, w=1, latency=3.0)
    progs = [p("0F0", "2F0", "2B0", "0B0"), p("1F0", "1B0"), p("3F0", "3B0")]
    r = simulate(layout, costs, progs, 1)
    assert r.times[1][0] == (4, 5)  # 0F0 [0,1] -> [1,4]
    assert r.times[0][1] == (8, 9)  # 1F0 [4,5] -> [5,8]
    assert r.times[2][0] == (12, 13)  # 2F0 [8,9] -> [9,12]


# --- memory -------------------------------------------------------------------------------


def test_memory_gpipe_vs_1f1b() -> None:
    num_devices, m = 4, 8
    costs = uniform_costs(num_devices, num_devices, act=1.0, static=10.0)
    g = simulate(straight(num_devices), costs, gpipe(num_devices, m), m)
    o = simulate(straight(num_devices), costs, one_f_one_b(num_devices, m), m)
    assert g.peak_memory_bytes == [10.0 + m] * num_devices
    assert o.peak_memory_bytes == [10.0 + num_devices - d for d in range(num_devices)]
    assert g.static_bytes == [10.0] * num_devices
    for tl in g.memory_timeline + o.memory_timeline:
        assert tl[0] == (0.0, 10.0) and tl[-1][1] == pytest.approx(10.0)
        assert all(t0 <= t1 for (t0, _), (t1, _) in zip(tl, tl[1:], strict=False))


def test_memory_i_w_split() -> None:
    layout = Layout((0, 2), (0,), 1)
    costs = uniform_costs(2, 1, act=1.0, act_w=0.25)  # per stage: act 2, act_w 0.5
    r = simulate(layout, costs, [p("0F0", "0F1", "0I0", "0I1", "0W0", "0W1")], 2)
    levels = [b for _, b in r.memory_timeline[0]]
    assert levels == [0.0, 2.0, 4.0, 2.5, 1.0, 0.5, 0.0]
    assert r.peak_memory_bytes == [4.0]
    # F allocates at its start, I/W free at their end (F=2, I=2, W=2 per stage)
    assert [t for t, _ in r.memory_timeline[0]] == [0, 0, 2, 6, 8, 10, 12]


def test_memory_limit_and_overflow() -> None:
    costs = uniform_costs(2, 2, act=1.0, static=1.0, mem_limit=3.0)
    r = simulate(straight(2), costs, gpipe(2, 4), 4)
    assert r.peak_memory_bytes == [5.0, 5.0]
    assert not r.fits_memory
    assert r.overflow_bytes == [2.0, 2.0]
    ok = simulate(straight(2), costs, one_f_one_b(2, 4), 4)
    assert ok.fits_memory and ok.overflow_bytes == [0.0, 0.0]


# --- deadlocks and bad input --------------------------------------------------------------


def test_circular_wait_between_two_devices() -> None:
    layout = Layout((0, 1, 2, 3, 4), (0, 1, 0, 1), 2)
    progs = [p("2F0", "0F0", "2B0", "0B0"), p("3F0", "1F0", "3B0", "1B0")]
    with pytest.raises(DeadlockError) as info:
        simulate(layout, uniform_costs(4, 2), progs, 1)
    msg = str(info.value)
    assert msg.startswith("device 0 waits at step 0 for 1F0, which never runs: device 1 is stuck at step 0 on 3F0")
    assert "device 0 -> device 1 -> device 0" in msg and "\n" not in msg
    assert info.value.grid.count("<-- ERROR") == 1 and "[2F0]" in info.value.grid and "[3F0]" in info.value.grid


def test_self_wait_on_one_device() -> None:
    layout = Layout((0, 1, 2), (0, 0), 1)
    with pytest.raises(DeadlockError, match=r"device 0 waits at step 0 for 0F0, which never runs: it comes later"):
        simulate(layout, uniform_costs(2, 1), [p("1F0", "0F0", "1B0", "0B0")], 1)


def test_deadlock_deep_in_long_programs_is_reported_in_a_short_grid() -> None:
    num_devices, m = 4, 2000
    progs = one_f_one_b(num_devices, m)
    last = progs[-1]
    i, j = last.index(Action(3, "F", 1500)), last.index(Action(3, "B", 1500))
    last[i], last[j] = last[j], last[i]  # now 3B1500 runs before its F: invalid, not a deadlock
    with pytest.raises(InputError):
        simulate(straight(num_devices), uniform_costs(num_devices, num_devices), progs, m)
    progs = one_f_one_b(num_devices, m)
    first = progs[0]
    i, j = first.index(Action(0, "B", 1500)), first.index(Action(0, "F", 1502))
    first[i], first[j] = first[j], first[i]  # device 0 waits for a gradient before sending the input it needs
    with pytest.raises(DeadlockError) as info:
        simulate(straight(num_devices), uniform_costs(num_devices, num_devices), progs, m)
    assert len(info.value.grid.splitlines()) < 40


def test_cost_table_mismatch() -> None:
    with pytest.raises(InputError, match="num_layers = 3"):
        simulate(straight(2), uniform_costs(3, 2), gpipe(2, 1), 1)
    with pytest.raises(InputError, match="num_devices = 1"):
        simulate(straight(2), uniform_costs(2, 1), gpipe(2, 1), 1)


def test_idle_device_and_summary() -> None:
    layout = Layout((0, 1), (0,), 2)
    r = simulate(layout, uniform_costs(1, 2), [p("0F0", "0B0"), []], 1)
    assert r.bubble_ratio_per_device == [0.0, 1.0]
    assert r.times[1] == [] and r.memory_timeline[1] == [(0.0, 0.0)]
    s = r.summary()
    assert set(s) >= {"step_time_s", "bubble_ratio", "bubble_ratio_per_device", "peak_memory_bytes", "lower_bound_s"}


# --- lower bound --------------------------------------------------------------------------


def test_lower_bound_terms() -> None:
    costs = uniform_costs(4, 2, f=1, i=2, w=3)
    # (a) 8 * 4 * 6 / 2 = 96; (b) 4 + 8 + 3 = 15; (c) 3 + 8*3 + 6 + 3 = 36; (d) 3 + 8*6 = 51
    assert lower_bound(costs, 2, 8) == 96
    # one micro-batch: (a) 12 (b) 15 (c) 3+3+6+3 = 15 (d) 3+6 = 9
    assert lower_bound(costs, 2, 1) == 15
    heavy = uniform_costs(4, 4, f=1, i=1, w=1)
    heavy.f_s[:, 3] = 10.0
    heavy.i_s[:, 3] = 10.0
    # heavy last layer: (c) 3 + 8*20 + 3 + 1 = 167, (d) 3 + 8*21 = 171, both beat (a) 8*39/4 = 78
    assert lower_bound(heavy, 4, 8) == 171
    heavy.w_s[:, 0] = 20.0
    # now (c) 3 + 160 + 3 + 20 = 186 wins over (d) 171 and (b) 13 + 13 + 20 = 46
    assert lower_bound(heavy, 4, 8) == 186


def test_lower_bound_uses_fastest_device_and_ignores_layout() -> None:
    costs = uniform_costs(2, 2, f=1, i=1, w=1)
    costs.f_s[1] *= 0.5
    # per-layer minima over devices: f=0.5, f+i+w = 2.5; device 0 is 3 / 2.5 = 1.2x slower on every
    # layer, so the two devices have the capacity of 1 + 1/1.2 fast ones: (a) 4*2*2.5 / (11/6) = 10.909;
    # (d) at layer 1: 0.5 + 4*2.5 = 10.5
    assert lower_bound(costs, 2, 4) == pytest.approx(4 * 2 * 2.5 / (1 + 1 / 1.2))
    r = simulate(straight(2), costs, one_f_one_b(2, 4), 4)
    assert r.lower_bound_s == lower_bound(costs, 2, 4) <= r.step_time_s
    with pytest.raises(InputError):
        lower_bound(costs, 3, 4)


@pytest.mark.parametrize("b", [0.5, 1.5, 2.5, 4.0, 5.0])
@pytest.mark.parametrize("m", [1, 4])
def test_lower_bound_holds_when_a_measured_fused_b_costs_less_than_i_plus_w(b: float, m: int) -> None:
    # I = 2, W = 3 apart; a profile timed the fused backward at `b` (even under I alone: noise)
    costs = dataclasses.replace(uniform_costs(2, 2, f=1, i=2, w=3), b_fused_s=np.full((2, 2), b))
    fused = simulate(straight(2), costs, one_f_one_b(2, m), m)
    split = simulate(straight(2), costs, one_f_one_b(2, m, split=True), m)
    assert fused.lower_bound_s <= min(fused.step_time_s, split.step_time_s) + 1e-9
    # B costs what was measured, against B = I + W = 5 without a measured B
    plain = uniform_costs(2, 2, f=1, i=2, w=3)
    unmeasured = simulate(straight(2), plain, one_f_one_b(2, m), m)
    assert fused.step_time_s < unmeasured.step_time_s if b < 5.0 else fused.step_time_s == unmeasured.step_time_s
    assert split.step_time_s == simulate(straight(2), plain, one_f_one_b(2, m, split=True), m).step_time_s
    if b == 5.0:  # measured as I + W: the same bound as without it
        assert fused.lower_bound_s == unmeasured.lower_bound_s


def _random_case(seed: int) -> tuple[Layout, CostTable, Programs, int]:
    """A random layout, costs and programs valid by construction (a random topological order)."""
    rng = random.Random(seed)
    num_devices = rng.randint(1, 4)
    num_stages = rng.randint(1, 6)
    num_layers = num_stages + rng.randint(0, 3)
    cuts = sorted(rng.sample(range(1, num_layers), num_stages - 1))
    layout = Layout((0, *cuts, num_layers), tuple(rng.randrange(num_devices) for _ in range(num_stages)), num_devices)
    m = rng.randint(1, 5)
    np_rng = np.random.default_rng(seed)
    costs = uniform_costs(num_layers, num_devices, out=1.0)
    for arr in (costs.f_s, costs.i_s, costs.w_s):
        arr[:] = np_rng.uniform(0.1, 2.0, arr.shape)
    if rng.random() < 0.5:  # a measured profile's W right after its own I (`CostTable.w_hot_s`)
        costs = dataclasses.replace(costs, w_hot_s=costs.w_s * np_rng.uniform(0.3, 1.0, costs.w_s.shape))
    costs.link_latency_s[:] = np_rng.uniform(0.0, 0.5, costs.link_latency_s.shape)
    costs.link_bw_bytes_per_s[:] = np_rng.uniform(1.0, 4.0, costs.link_bw_bytes_per_s.shape)
    split = {(s, mb): rng.random() < 0.5 for s in range(num_stages) for mb in range(m)}
    done: set[tuple[int, str, int]] = set()
    todo = [(s, "F", mb) for s in range(num_stages) for mb in range(m)]
    for (s, mb), sp in split.items():
        todo += [(s, "I", mb), (s, "W", mb)] if sp else [(s, "B", mb)]

    def ready(a: tuple[int, str, int]) -> bool:
        s, op, mb = a
        if op == "F":
            return s == 0 or (s - 1, "F", mb) in done
        if op == "W":
            return (s, "I", mb) in done
        return (s, "F", mb) in done and (s == num_stages - 1 or (s + 1, "B", mb) in done or (s + 1, "I", mb) in done)

    programs: Programs = [[] for _ in range(num_devices)]
    while todo:
        a = rng.choice([a for a in todo if ready(a)])
        todo.remove(a)
        done.add(a)
        programs[layout.stage_device[a[0]]].append(Action(*a))
    return layout, costs, programs, m


def _reference(layout: Layout, costs: CostTable, programs: Programs, m: int) -> list[list[tuple[float, float]]]:
    """Independent formulation: a global time-ordered event queue with explicit link queues."""
    num_devices = layout.num_devices
    dur: dict[tuple[int, str], float] = {}
    hot = costs.w_s if costs.w_hot_s is None else costs.w_hot_s
    for s, d in enumerate(layout.stage_device):
        ls = list(layout.layers(s))
        f, i, w, wh = (float(sum(x[d, ls])) for x in (costs.f_s, costs.i_s, costs.w_s, hot))
        dur.update({(s, "F"): f, (s, "I"): i, (s, "W"): w, (s, "B"): i + wh, (s, "W hot"): wh})
    arrived: set[tuple[str, int, int]] = set()  # ("act"|"grad", receiving stage, mb)
    nxt = [0] * num_devices
    busy = [False] * num_devices
    times: list[list[tuple[float, float]]] = [[] for _ in range(num_devices)]
    link_busy: dict[tuple[int, int], bool] = {}
    link_q: dict[tuple[int, int], list] = {}
    events: list = []
    seq = 0

    def push(t: float, kind: str, data: tuple) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, data))
        seq += 1

    def start_link(link: tuple[int, int], t: float) -> None:
        if not link_busy.get(link) and link_q.get(link):
            msg, secs = link_q[link].pop(0)
            link_busy[link] = True
            latency = float(costs.link_latency_s[link])
            push(t + max(secs - latency, 0.0), "link_free", (link, None))  # bytes / bandwidth on the wire
            push(t + secs, "arrive", (None, msg))  # then the flight time

    def try_start(t: float) -> None:
        for d in range(num_devices):
            if busy[d] or nxt[d] >= len(programs[d]):
                continue
            s, op, mb = programs[d][nxt[d]]
            if op == "F" and s > 0 and ("act", s, mb) not in arrived:
                continue
            if op in "IB" and s < layout.num_stages - 1 and ("grad", s, mb) not in arrived:
                continue
            busy[d] = True
            # a W right after its own I on the device: its stash is still in cache
            after_own_i = op == "W" and nxt[d] > 0 and tuple(programs[d][nxt[d] - 1]) == (s, "I", mb)
            push(t + dur[(s, "W hot" if after_own_i else op)], "end", (d, t))

    try_start(0.0)
    while events:
        t, _, kind, data = heapq.heappop(events)
        if kind == "end":
            d, t0 = data
            s, op, mb = programs[d][nxt[d]]
            times[d].append((t0, t))
            nxt[d] += 1
            busy[d] = False
            msg = None
            if op == "F" and s < layout.num_stages - 1:
                msg, dst = ("act", s + 1, mb), s + 1
            elif op in "IB" and s > 0:
                msg, dst = ("grad", s - 1, mb), s - 1
            if msg is not None:
                a, b = layout.stage_device[s], layout.stage_device[dst]
                if a == b:
                    arrived.add(msg)
                else:
                    nbytes = float(costs.out_bytes[layout.bounds[max(s, dst)] - 1])
                    link_q.setdefault((a, b), []).append((msg, costs.p2p_s(a, b, nbytes)))
                    start_link((a, b), t)
        elif kind == "arrive":
            arrived.add(data[1])
        else:
            link = data[0]
            link_busy[link] = False
            start_link(link, t)
        try_start(t)
    return times


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9))
def test_random_valid_programs_match_reference_and_bound(seed: int) -> None:
    layout, costs, programs, m = _random_case(seed)
    r: SimResult = simulate(layout, costs, programs, m)
    ref = _reference(layout, costs, programs, m)
    for got, want in zip(r.times, ref, strict=True):
        assert np.allclose(got, want, rtol=1e-12, atol=1e-12) if got else not want
    assert r.lower_bound_s <= r.step_time_s * (1 + 1e-9)
    assert r.lower_bound_s == lower_bound(costs, layout.num_devices, m)
    assert all(0.0 <= b <= 1.0 for b in r.bubble_ratio_per_device)
    # link FIFO: transfers on one directed pair never overlap
    by_link: dict[tuple[int, int], list] = {}
    for t in r.transfers:
        by_link.setdefault((t.src_device, t.dst_device), []).append(t)
    for (src, dst), ts in by_link.items():
        latency = float(costs.link_latency_s[src, dst])
        assert all(a.end_s - latency <= b.start_s + 1e-12 for a, b in zip(ts, ts[1:], strict=False))


@pytest.mark.parametrize("num_devices,m", [(2, 1), (2, 3), (3, 5), (4, 8)])
def test_lower_bound_below_classic_schedules(num_devices: int, m: int) -> None:
    for heavy_last in (False, True):
        costs = uniform_costs(num_devices, num_devices, f=1, i=1, w=1)
        if heavy_last:
            costs.f_s[:, -1] = 4.0
        for progs in (gpipe(num_devices, m), one_f_one_b(num_devices, m), one_f_one_b(num_devices, m, split=True)):
            r = simulate(straight(num_devices), costs, progs, m)
            assert r.lower_bound_s <= r.step_time_s + 1e-12


# --- the classic builders, judged ----


@pytest.mark.parametrize("num_devices,m", [(2, 4), (4, 8), (3, 6)])
def test_classic_builders_run_without_deadlock(num_devices: int, m: int) -> None:
    for name in schedules.STRATEGIES:
        spec = schedules.get_spec(name)
        try:
            stage_device = spec.stage_device(num_devices)
            programs = spec.build(stage_device, num_devices, m)
        except InputError:
            continue  # this strategy does not apply to (num_devices, m)
        num_stages = len(stage_device)
        layout = Layout(tuple(range(num_stages + 1)), tuple(stage_device), num_devices)
        costs = uniform_costs(num_stages, num_devices, f=1, i=1, w=1, latency=0.1)
        r = simulate(layout, costs, programs, m)
        assert r.lower_bound_s <= r.step_time_s, name
        for got, want in zip(r.times, _reference(layout, costs, programs, m), strict=True):
            assert np.allclose(got, want) if got else not want, name


@pytest.mark.slow
@given(st.lists(st.integers(1, 9), min_size=1, max_size=7), st.integers(1, 3))
@settings(max_examples=80, deadline=None)
def test_packing_bound_never_exceeds_the_optimal_makespan(sizes, num_devices):
    """(e) of lower_bound: brute-force P||Cmax on small instances is never below the bound."""
    import itertools

    from adaptis_plan.judge.bound import _packing_bound

    opt = min(
        max(sum(s for s, d in zip(sizes, assign, strict=False) if d == k) for k in range(num_devices))
        for assign in itertools.product(range(num_devices), repeat=len(sizes))
    )
    assert _packing_bound(np.array(sizes, dtype=float), num_devices) <= opt + 1e-9


def test_packing_bound_sees_layer_granularity():
    from adaptis_plan.judge.bound import _packing_bound

    # 65 equal layers on 8 devices: some device holds 9 of them, not 65 / 8 = 8.125
    assert _packing_bound(np.ones(65), 8) == pytest.approx(9.0, rel=1e-6)


def _best_packing(sizes: list[float], bins: int) -> float:
    """Brute force P||Cmax: every assignment of the items to the bins."""
    best = float("inf")
    for assign in itertools.product(range(bins), repeat=len(sizes)):
        loads = [0.0] * bins
        for s, b in zip(sizes, assign, strict=True):
            loads[b] += s
        best = min(best, max(loads))
    return best


def test_subset_sum_bound_never_exceeds_the_optimal_makespan() -> None:
    from adaptis_plan.judge.bound import _subset_sum_bound

    rng = random.Random(7)
    for _ in range(150):
        n, bins = rng.randint(2, 7), rng.randint(2, 3)
        pool = [round(rng.uniform(0.1, 3.0), 2) for _ in range(rng.randint(1, 3))]
        sizes = [rng.choice(pool) for _ in range(n)]
        bound = _subset_sum_bound(np.array(sizes), bins)
        assert bound <= _best_packing(sizes, bins) + 1e-9, (sizes, bins)
        assert bound >= sum(sizes) / bins - 1e-6


def test_best_packing_is_the_optimal_makespan_and_its_assignment() -> None:
    """`best_packing` equals brute-force P||Cmax on small instances with a few sizes (and zero-cost
    layers, an embedding), and its per-device counts are an assignment reaching that load."""
    from adaptis_plan.judge.bound import best_packing

    rng = random.Random(11)
    checked = 0
    for _ in range(200):
        n, bins = rng.randint(1, 7), rng.randint(1, 4)
        pool = [round(rng.uniform(0.1, 3.0), 2) for _ in range(rng.randint(1, 3))] + [0.0]
        sizes = [rng.choice(pool) for _ in range(n)]
        packing = best_packing(np.array(sizes), bins)
        if packing is None:  # nothing but zero-cost layers
            assert not any(sizes)
            continue
        checked += 1
        assert packing.max_load == pytest.approx(_best_packing(sizes, bins), rel=1e-9), (sizes, bins)
        assert len(packing.per_device) == bins
        loads = [sum(c * x for c, x in zip(d, packing.sizes, strict=True)) for d in packing.per_device]
        assert max(loads) == pytest.approx(packing.max_load, rel=1e-12)
        dealt = sorted(x for d in packing.per_device for x, c in zip(packing.sizes, d, strict=True) for _ in range(c))
        assert dealt == pytest.approx(sorted(x for x in sizes if x > 0))
    assert checked > 150


def test_best_packing_of_many_equal_blocks_whatever_their_size() -> None:
    """498 equal blocks on 64 devices: 8 on the busiest, at any block size. The DP prunes sub-multisets
    heavier than a greedy packing's busiest device; summed job by job, that load can land a rounding
    below 8 x size, which once pruned the 8-block subsets and gave 57 x size (a 500-layer model's
    bound came out 7x above its own simulated plans)."""
    from adaptis_plan.judge.bound import best_packing

    for size in (1.0, 0.003995, 0.00399533, 3.7e-3):
        packing = best_packing(np.array([size] * 498 + [1.385 * size]), 64)
        assert packing is not None and packing.max_load == pytest.approx(8 * size, rel=1e-12), size


def test_lower_bound_sees_the_best_packing_of_two_layer_kinds() -> None:
    """19 Mamba-like layers (3.77) and 9 attention-like ones (9.09) plus a head (12.28) on 4 devices:
    a device load of 11 small layers sits just above the mean (41.47 vs 41.43), but the rest cannot
    then be split four ways below 42.35 (3 attention + 4 small layers); every layer runs 16
    micro-batches, so no plan is faster than 16 x 42.35."""
    sizes = [0.0] + [3.77, 3.77, 9.09] * 9 + [3.77, 12.28]
    costs = uniform_costs(len(sizes), 4, f=0.0, i=0.0, w=0.0)
    costs = dataclasses.replace(costs, f_s=np.tile(sizes, (4, 1)))
    assert lower_bound(costs, 4, 16) == pytest.approx(16 * (3 * 9.09 + 4 * 3.77), rel=1e-9)


def test_subset_sum_bound_sees_a_stack_of_equal_blocks() -> None:
    """Two block sizes, 16 each, plus an embedding and a head on 8 devices (a mixture-of-experts model
    with half its blocks recomputed): no device's load can land between the mean and the next
    subset sum up, 5 small blocks, although the mean is 6% lower."""
    from adaptis_plan.judge.bound import _packing_bound, _subset_sum_bound

    sizes = np.array([1.1007] * 16 + [0.8245] * 16 + [0.0158, 0.2866])
    mean = sizes.sum() / 8
    assert _subset_sum_bound(sizes, 8) == pytest.approx(5 * 0.8245, rel=1e-7)
    assert _subset_sum_bound(sizes, 8) > 1.05 * mean > _packing_bound(sizes, 8)


def test_a_peak_over_its_limit_by_rounding_fits_and_by_more_does_not():
    """`MEM_SLACK`: float rounding on a peak (the list scheduler's sums give the oldest micro-batch that
    room) is not an overflow; anything past it is, and is reported in full."""
    from adaptis_plan.judge.simulate import MEM_SLACK

    layout = Layout((0, 1, 2), (0, 1), 2)
    programs = [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "F", 0), Action(1, "B", 0)]]
    peak = simulate(layout, uniform_costs(2, 2, act=0.1 + 0.2), programs, 1).peak_memory_bytes[0]
    assert peak == 0.1 + 0.2 != 0.3  # 0.30000000000000004
    fits = simulate(layout, uniform_costs(2, 2, act=0.1 + 0.2, mem_limit=0.3), programs, 1)
    assert fits.fits_memory and fits.overflow_bytes == [0.0, 0.0]
    over = simulate(layout, uniform_costs(2, 2, act=0.3 + 2 * MEM_SLACK, mem_limit=0.3), programs, 1)
    assert not over.fits_memory and over.overflow_bytes[0] == pytest.approx(2 * MEM_SLACK)


# --- expected step time under measured variation (`expected_step`) ---------------------------------


def _expected(costs: CostTable, layout: Layout, programs: Programs, m: int) -> tuple[float, float | None]:
    from adaptis_plan.judge.simulate import with_expected

    res = with_expected(layout, costs, programs, m, simulate(layout, costs, programs, m))
    return res.step_time_s, res.expected_step_time_s


def test_no_measured_variation_means_no_expected_step() -> None:
    costs = uniform_costs(2, 2)
    assert _expected(costs, straight(2), one_f_one_b(2, 4), 4)[1] is None
    assert "expected_step_time_s" in simulate(straight(2), costs, one_f_one_b(2, 4), 4).summary()


def test_expected_step_is_reproducible_and_grows_with_the_spread() -> None:
    layout, programs = straight(2), one_f_one_b(2, 8)
    small = dataclasses.replace(uniform_costs(2, 2), time_spread=0.05)
    large = dataclasses.replace(uniform_costs(2, 2), time_spread=0.3)
    step, e_small = _expected(small, layout, programs, 8)
    assert e_small is not None and e_small == _expected(small, layout, programs, 8)[1]  # a fixed seed
    _, e_large = _expected(large, layout, programs, 8)
    assert e_large is not None and step < e_small < e_large


def test_hand_offs_without_slack_pay_the_variation_a_lone_device_does_not() -> None:
    # one device running everything: each action's median stays its cost, so the step's median grows
    # only by the skew of a sum (a few %); two devices in lockstep wait for the later of two at every hand-off
    spread, m = 0.3, 8
    lone = dataclasses.replace(uniform_costs(2, 1), time_spread=spread)
    lone_layout = Layout((0, 1, 2), (0, 0), 1)
    lone_prog = [[Action(0, "F", mb) for mb in range(m)] + [Action(1, "F", mb) for mb in range(m)]
                 + [Action(s, "B", mb) for s in (1, 0) for mb in range(m)]]  # fmt: skip
    step1, exp1 = _expected(lone, lone_layout, lone_prog, m)
    pair = dataclasses.replace(uniform_costs(2, 2), time_spread=spread)
    step2, exp2 = _expected(pair, straight(2), one_f_one_b(2, m), m)
    assert exp1 is not None and exp2 is not None
    assert exp2 / step2 - 1 > 2 * (exp1 / step1 - 1) > 0
