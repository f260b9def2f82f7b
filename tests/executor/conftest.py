"""Executor tests run torch in-process with one intra-op thread, as the workers do."""

from __future__ import annotations

import pytest
import torch


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
