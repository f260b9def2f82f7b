"""Executor tests run torch in-process with one intra-op thread, as the workers do; the four-process cases
of tensor, data and expert parallelism share one torchrun launch, the two-process verified steps another."""

from __future__ import annotations

import pytest
import torch
from helpers_common import once_per_session
from helpers_executor import Ran, four_rank_launch, two_rank_launch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread, like the workers: on a busy 2-core machine OpenMP spinning makes tiny ops 100x slower."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture
def one_rank_group():
    """A one-process gloo group in this process (a HashStore: nothing started)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="session")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every four-process case of tests/executor (tp, dp and ep), by label: one torchrun launch of 4 gloo ranks
    for the whole session, whichever worker asks first (each torchrun launch costs every rank a torch import)."""
    return once_per_session(tmp_path_factory, "four-ranks", four_rank_launch)


@pytest.fixture(scope="session")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """The two-process cases of tests/executor that verify a step (plan shapes, recomputation, every strategy's
    plan, split heads, one in bf16, three training steps), by label: one torchrun launch of 2 gloo ranks for the
    whole session (`two_rank_launch`)."""
    return once_per_session(tmp_path_factory, "two-ranks", two_rank_launch)
