"""The executor's process groups are the ones the cost model prices: for any layout, every group
`worker.mesh_groups` creates (`worker.group_ranks`, no torch.distributed needed) has the size of the
cost model's `GroupLink` for it (`cost.comm.placement`) and, where the nodes cut it evenly, as many
members on each node as the cost model's `per_node` says."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptis_plan.cost.comm import placement
from adaptis_plan.executor.worker import group_ranks
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.ranks import RankLayout
from adaptis_plan.spec.training import TrainingConfig

pytestmark = pytest.mark.unit

# each `GroupLinks` field -> the process-group dimension of the executor it prices
PRICED = {"tp": "tp", "cp": "cp", "ep": "ep", "dp": "dp_cp", "edp": "edp"}
H100 = load_hardware("h100")


def _hardware(devices_per_node: int, world: int) -> HardwareProfile:
    group = H100.groups[0].model_copy(
        update={"devices_per_node": devices_per_node, "num_nodes": -(-world // devices_per_node)}
    )
    return H100.model_copy(update={"groups": [group]})


@st.composite
def cases(draw: st.DrawFn) -> tuple[TrainingConfig, int]:
    tp, cp, dp, pp = (draw(st.integers(1, 8)) for _ in range(4))
    ep = draw(st.sampled_from([e for e in range(1, dp * cp + 1) if dp * cp % e == 0]))
    training = TrainingConfig(num_microbatches=pp, pp=pp, tp=tp, cp=cp, dp=dp, ep=ep, seq_len=64 * cp)
    return training, draw(st.sampled_from([1, 2, 4, 8, 16]))


@settings(max_examples=250, deadline=None)
@given(cases())
def test_executor_groups_are_the_cost_models(case: tuple[TrainingConfig, int]) -> None:
    training, dpn = case
    layout = RankLayout.of(training)
    links = placement(_hardware(dpn, layout.world), training)
    made = group_ranks(layout)
    for field, dim in PRICED.items():
        link = links.group(field)
        if link.size == 1:
            assert dim not in made  # the executor creates no one-rank group
            continue
        groups = made[dim]
        assert sorted(r for g in groups for r in g) == list(range(layout.world))
        assert {len(g) for g in groups} == {link.size}, (field, groups)
        stride = groups[0][1] - groups[0][0]
        on_node = {n for g in groups for n in Counter(r // dpn for r in g).values()}
        if dpn % (stride * link.size) == 0:  # every group inside one node
            assert link.in_node and on_node == {link.size}, (field, stride)
        elif dpn % stride == 0 and (stride * link.size) % dpn == 0:  # nodes cut every group evenly
            assert not link.in_node and on_node == {link.per_node} == {dpn // stride}, (field, stride)
        elif stride % dpn == 0:  # one member per node
            assert link.per_node == 1 and on_node == {1}, (field, stride)


def test_pp_is_the_default_group_only_when_it_is_the_world() -> None:
    assert "pp" not in group_ranks(RankLayout(pp=4))
    assert group_ranks(RankLayout(dp=2, pp=2))["pp"] == [[0, 2], [1, 3]]
    assert group_ranks(RankLayout(dp=4, ep=2, pp=2)) == {
        "dp_cp": [[0, 1, 2, 3], [4, 5, 6, 7]],
        "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
        "ep": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "edp": [[0, 2], [1, 3], [4, 6], [5, 7]],
    }
