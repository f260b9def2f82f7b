"""The rank layout (`spec.ranks.RankLayout`): Megatron-LM's published example, the coordinate round trip,
and the groups every dimension has (sizes, partition of the world, the expert groups inside dp x cp)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptis_plan.spec.ranks import DIMS, GRID, RankLayout

pytestmark = pytest.mark.unit


def test_megatron_initialize_model_parallel_example() -> None:
    # megatron/core/parallel_state.py, initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4
    layout = RankLayout(tp=2, dp=2, pp=4)
    assert layout.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert layout.groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]]
    assert layout.groups("pp") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_context_and_expert_groups_in_megatron_order() -> None:
    layout = RankLayout(tp=2, cp=2, ep=2, dp=2, pp=2)  # 16 ranks
    assert layout.rank(tp=1, cp=1, dp=1, pp=1) == 1 + 2 * (1 + 2 * (1 + 2 * 1))
    assert layout.groups("cp")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert layout.groups("dp_cp")[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    # ep consecutive of the dp x cp ranks; edp: those holding the same experts
    assert layout.groups("ep")[:3] == [[0, 2], [1, 3], [4, 6]]
    assert layout.groups("edp")[:3] == [[0, 4], [1, 5], [2, 6]]
    assert layout.coordinate(6) == {"tp": 0, "cp": 1, "dp": 1, "pp": 0, "dp_cp": 3, "ep": 1, "edp": 1}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dp": 4, "cp": 1, "ep": 3}, "ep = 3 does not divide dp x cp = 4 x 1"),
        ({"tp": 0}, "tp = 0: every parallel degree is a positive integer"),
    ],
)
def test_refuses_a_layout_that_cannot_exist(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RankLayout(**kwargs)


def test_refuses_unknown_dimensions_and_ranks_outside() -> None:
    layout = RankLayout(tp=2, pp=2)
    with pytest.raises(ValueError, match="unknown parallel dimension 'xp'"):
        layout.groups("xp")
    with pytest.raises(ValueError, match="rank 4 outside the world of 4"):
        layout.coordinate(4)
    with pytest.raises(ValueError, match="tp rank 2 outside"):
        layout.rank(tp=2)


@st.composite
def layouts(draw: st.DrawFn) -> RankLayout:
    tp, cp, dp, pp = (draw(st.integers(1, 4)) for _ in range(4))
    ep = draw(st.sampled_from([e for e in range(1, dp * cp + 1) if dp * cp % e == 0]))
    return RankLayout(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp)


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_groups_partition_the_world_and_coordinates_round_trip(layout: RankLayout) -> None:
    world = list(range(layout.world))
    for dim in DIMS:
        groups = layout.groups(dim)
        assert sorted(r for g in groups for r in g) == world
        assert {len(g) for g in groups} == {layout.size(dim)}
        for g in groups:
            assert all(b - a == layout.stride(dim) for a, b in zip(g, g[1:], strict=False))
            for k, r in enumerate(g):
                assert layout.coordinate(r)[dim] == k
                assert layout.group(dim, r) == g
    for r in world:
        at = layout.coordinate(r)
        assert layout.rank(**{d: at[d] for d in GRID}) == r
        # a grid group varies its own coordinate only
        for dim in GRID:
            others = [{d: layout.coordinate(m)[d] for d in GRID if d != dim} for m in layout.group(dim, r)]
            assert all(o == others[0] for o in others)
        # the expert groups live inside the rank's dp x cp group; ep x edp tile it
        dense = set(layout.group("dp_cp", r))
        ep, edp = set(layout.group("ep", r)), set(layout.group("edp", r))
        assert ep <= dense and edp <= dense and ep & edp == {r}
        assert len(ep) * len(edp) == len(dense)
        # the ranks of an edp group hold the same experts: the same ep rank
        assert {layout.coordinate(m)["ep"] for m in edp} == {at["ep"]}
