"""The list scheduler: memory safety across the stages a device holds, the W lookahead, the policies.

Property test (hypothesis) over random layer costs, placements (sequential, loop, V, random
maps), memory limits from "one micro-batch per device barely fits" to plenty, and every policy
of the search's portfolio: the scheduler always finishes, its programs obey the action contract,
and the simulated plan fits memory whenever one micro-batch's activations fit on every device.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adaptis_plan.core import Layout, uniform_costs
from adaptis_plan.judge.semantics import check_programs, stage_costs
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.schedules import get_spec
from adaptis_plan.search.generator import policy_portfolio
from adaptis_plan.search.listsched import ListPolicy, critical_path_priority, list_schedule

pytestmark = pytest.mark.unit


def _one_f_one_b_peak(p: int, m: int, costs) -> float:
    sd = tuple(range(p))
    layout = Layout(tuple(range(0, costs.num_layers + 1, costs.num_layers // p)), sd, p)
    return max(simulate(layout, costs, get_spec("1F1B").build(sd, p, m), m).peak_memory_bytes)


@st.composite
def _cases(draw):
    p = draw(st.integers(1, 4))
    chunks = draw(st.integers(1, 3))
    num_stages = p * chunks
    num_layers = num_stages + draw(st.integers(0, 4))
    style = draw(st.sampled_from(["loop", "v", "random"]))
    if style == "loop":
        sd = tuple(s % p for s in range(num_stages))
    elif style == "v":
        sd = tuple(s % p if (s // p) % 2 == 0 else p - 1 - s % p for s in range(num_stages))
    else:
        sd = tuple(draw(st.permutations(list(range(p)) * chunks)))
    cuts = []
    if num_stages > 1:
        cuts = sorted(draw(st.sets(st.integers(1, num_layers - 1), min_size=num_stages - 1, max_size=num_stages - 1)))
    bounds = (0, *cuts, num_layers)
    work = draw(st.lists(st.floats(0.1, 4.0), min_size=num_layers, max_size=num_layers))
    act = draw(st.lists(st.floats(0.1, 2.0), min_size=num_layers, max_size=num_layers))
    m = draw(st.integers(1, 3 * p + 2))
    layout = Layout(bounds, sd, p)
    base = uniform_costs(num_layers, p, latency=draw(st.sampled_from([0.0, 0.05])))
    w = np.array(work)
    costs = dataclasses.replace(
        base,
        f_s=np.tile(w, (p, 1)),
        i_s=np.tile(w * 1.1, (p, 1)),
        w_s=np.tile(w * 0.7, (p, 1)),
        act_bytes=np.array(act),
        act_w_bytes=np.array(act) * 0.4,
    )
    # from "one micro-batch of every stage a device holds barely fits" to plenty
    st_costs = stage_costs(layout, costs)
    per_mb = np.zeros(p)
    np.add.at(per_mb, np.array(sd), st_costs.act)
    factor = draw(st.sampled_from([1.0001, 1.5, 2.5, np.inf]))
    limit = float(per_mb.max()) * factor
    costs = dataclasses.replace(costs, mem_limit_bytes=np.full(p, limit))
    policy = draw(st.sampled_from(policy_portfolio()))
    return layout, costs, m, policy


@given(_cases())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_list_schedule_always_finishes_and_fits_memory(case):
    layout, costs, m, policy = case
    programs, est = list_schedule(layout, costs, m, policy)
    check_programs(layout, programs, m, backward="split" if policy.split_backward else "fused")
    res = simulate(layout, costs, programs, m)
    assert res.fits_memory, (res.peak_memory_bytes, res.mem_limit_bytes, policy.name)
    assert res.step_time_s <= est * (1 + 1e-9)  # as-soon-as-possible replay of the same orders is never later


def test_v_placement_at_one_f_one_b_memory_fits_and_matches_zbv():
    """V placement with 1F1B's peak memory: the old "oldest micro-batch may always run its F"
    rule overflowed here; the safe-state rule fits, and reaches the handcrafted ZB-V order's step."""
    p, m = 4, 16
    costs = uniform_costs(2 * p, p, f=0.5, i=0.5, w=0.5, act=0.5, act_w=0.25, latency=0.01)
    sd = tuple(range(p)) + tuple(reversed(range(p)))
    layout = Layout(tuple(range(2 * p + 1)), sd, p)
    seq = Layout(tuple(range(0, 2 * p + 1, 2)), tuple(range(p)), p)
    one_x = max(simulate(seq, costs, get_spec("1F1B").build(seq.stage_device, p, m), m).peak_memory_bytes)
    costs = dataclasses.replace(costs, mem_limit_bytes=np.full(p, one_x))
    zbv = simulate(layout, costs, get_spec("ZBVZeroBubble").build(sd, p, m), m)
    assert zbv.fits_memory
    best = min(
        (simulate(layout, costs, list_schedule(layout, costs, m, pol)[0], m) for pol in policy_portfolio()),
        key=lambda r: (not r.fits_memory, r.step_time_s),
    )
    assert best.fits_memory
    assert best.step_time_s <= zbv.step_time_s * (1 + 1e-9)


def test_w_lookahead_and_yield_keep_the_gradient_chain_moving():
    """p = m = 8, F = I = W = 1, comm 0.01: the greedy rule starts a forward or a W just before a
    gradient lands and delays the critical backward chain by almost a whole action each time; with
    the zero-bubble paper's rule (no W that would still run when a known input lands) and a forward
    that yields to a landing gradient, the plan reaches the lower bound's 31 + comm."""
    p = m = 8
    costs = uniform_costs(p, p, f=1.0, i=1.0, w=1.0, latency=0.01)
    layout = Layout(tuple(range(p + 1)), tuple(range(p)), p)
    greedy = simulate(layout, costs, list_schedule(layout, costs, m, ListPolicy())[0], m)
    careful = ListPolicy(w_lookahead="backward", f_yield=0.5)
    ruled = simulate(layout, costs, list_schedule(layout, costs, m, careful)[0], m)
    assert greedy.step_time_s == pytest.approx(33.1)
    assert ruled.step_time_s == pytest.approx(31.14)
    assert ruled.step_time_s >= ruled.lower_bound_s


def test_policy_names_describe_their_fields():
    assert ListPolicy().name == "I/W"
    assert ListPolicy(split_backward=False).name == "B"
    assert ListPolicy(alternate=True, w_lookahead="all", f_yield=1.0, yield_warmup_only=True).name == (
        "I/W alternate W-lookahead all yield 1 warm-up"
    )
    names = [pol.name for pol in policy_portfolio()]
    assert len(set(names)) == len(names)
    with pytest.raises(ValueError, match="w_lookahead"):
        ListPolicy(w_lookahead="sometimes")


@given(_cases(), st.sampled_from([0.5, 2.0, 8.0]), st.integers(0, 3))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_critical_path_ranks_keep_the_memory_and_action_contract(case, mb_weight, seed):
    """The priority mode replaces only the choice among ready actions: memory admission and the
    action contract hold as in the rule-based mode, for plain and for perturbed ranks."""
    layout, costs, m, policy = case
    pri = critical_path_priority(layout, costs, policy.split_backward, mb_weight)
    rng = np.random.default_rng(seed)
    pri = pri.perturbed(rng.normal(0, 1, layout.num_stages), rng.normal(0, 1, layout.num_stages))
    programs, est = list_schedule(layout, costs, m, policy, priority=pri)
    check_programs(layout, programs, m, backward="split" if policy.split_backward else "fused")
    res = simulate(layout, costs, programs, m)
    assert res.fits_memory, (res.peak_memory_bytes, res.mem_limit_bytes, policy.name)
    assert res.step_time_s <= est * (1 + 1e-9)


def test_critical_path_ranks_are_the_remaining_path_of_each_action():
    costs = uniform_costs(4, 2, f=1.0, i=2.0, w=0.5, latency=0.0)
    layout = Layout((0, 1, 2, 3, 4), (0, 1, 1, 0), 2)
    pri = critical_path_priority(layout, costs, True, 0.0)
    # I at stage s: the I's of stages s..0; F at stage s: the F's of stages s..3, then every I
    assert pri.b == pytest.approx((2.0, 4.0, 6.0, 8.0))
    assert pri.f == pytest.approx((12.0, 11.0, 10.0, 9.0))
    assert critical_path_priority(layout, costs, True, 2.0).mb_weight == pytest.approx(2.0)  # x the mean stage F (1)
    with pytest.raises(ValueError, match="ranks for 4 stages"):
        list_schedule(layout, costs, 2, priority=dataclasses.replace(pri, f=pri.f[:3], b=pri.b[:3]))
