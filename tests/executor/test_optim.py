"""The executor's optimizers step exactly as torch's own classes on the single-tensor path."""

from __future__ import annotations

import pytest
import torch

from adaptis_plan.executor import optim


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*shape, generator=g)) for shape in ((7, 5), (5,), (3, 2, 4), (1,))]


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_steps_are_bitwise_torchs_own(name: str) -> None:
    ours, theirs = _params(0), _params(0)
    lr = 0.3 if name == "sgd" else 1e-2
    mine = optim.SGD(ours, lr) if name == "sgd" else optim.AdamW(ours, lr)
    ref = (
        torch.optim.SGD(theirs, lr=lr, foreach=False)
        if name == "sgd"
        else torch.optim.AdamW(theirs, lr=lr, weight_decay=optim.ADAMW_WEIGHT_DECAY, foreach=False)
    )
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        grads = [torch.randn(p.shape, generator=g) for p in ours]
        for i, (a, b, grad) in enumerate(zip(ours, theirs, grads, strict=True)):
            # one parameter gets no gradient at the first two steps: both skip it (no state, no decay)
            a.grad = b.grad = None if (i == 1 and step < 2) else grad.clone()
        mine.step()
        ref.step()
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a.detach(), b.detach())
    assert not torch.equal(ours[1].detach(), _params(0)[1].detach())  # it stepped once it had a gradient


def test_an_optimizer_without_parameters_steps_nothing() -> None:
    for opt in (optim.SGD([], 0.1), optim.AdamW([], 0.1)):
        opt.step()
        assert opt.param_groups == [{"params": []}]


def test_zero_1_owners_are_largest_first_to_the_least_loaded_rank() -> None:
    """ZeRO 1's partition (`dataparallel.owners`): as torch's ZeroRedundancyOptimizer assigns parameters."""
    from adaptis_plan.executor.dataparallel import owners

    assert owners([5, 3, 3, 1], 2) == [0, 1, 1, 0]  # 5 -> 0; 3 -> 1; 3 -> 1 (3 < 5); 1 -> 0 (5 < 6)
    assert owners([2, 2, 2, 2], 4) == [0, 1, 2, 3]
    assert owners([1, 1, 9], 2) == [1, 1, 0]  # the largest first, wherever it stands
    assert owners([4, 4], 1) == [0, 0] and owners([], 3) == []


def test_zero_1_on_one_rank_steps_as_the_plain_optimizer(one_rank_group: object) -> None:
    """On a group of one the sharded optimizer owns every parameter and steps as the plain one does (a bf16
    parameter beside the fp32 ones goes in a bucket of its own)."""
    from adaptis_plan.executor.dataparallel import ShardedOptimizer

    def params() -> list[torch.nn.Parameter]:
        return [*_params(0), torch.nn.Parameter(torch.linspace(-1, 1, 6, dtype=torch.bfloat16))]

    ours, theirs = params(), params()
    sharded, plain = ShardedOptimizer(ours, "adamw", 1e-2, one_rank_group), optim.AdamW(theirs, 1e-2)  # type: ignore[arg-type]
    for a, b in zip(ours, theirs, strict=True):
        a.grad = b.grad = torch.ones_like(a)
    sharded.step()
    plain.step()
    assert all(torch.equal(a.detach(), b.detach()) for a, b in zip(ours, theirs, strict=True))
    owned = sharded.local.param_groups[0]["params"]
    assert len(owned) == len(ours) and all(a is b for a, b in zip(owned, ours, strict=True))
