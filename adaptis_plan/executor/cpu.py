"""How a rank computes on CPU: one intra-op thread, denormal floats flushed to zero.

Every process that runs or times layers on CPU enters `cpu_rank()` (the worker for its whole
life; the profiler, the single-process reference step and the benches for their measurements),
so a layer is timed with the same kernels and the same arithmetic it runs with in a pipeline.

One thread: ranks share the machine's cores, one rank per core (torch's default would start a
thread per core in every rank).

Denormals flushed: a float32 below 1.2e-38 in magnitude is a denormal, and x86 cores compute
with one through a microcode assist that is 10-100x slower than a normal operation. Decaying
products make them: a Mamba-2 layer's scan multiplies segment decays exp(A dt) together. Which
values come out denormal depends on the data, so the same layer took a different time on the
profiler's seeded inputs than inside a stage, on the activations its neighbours produce: on the
2-core CPU bench, a stage of tiny-nemotron-h's first Mamba layer ran F +13 % and I +14 % over
that layer's profiled times with denormals on, +3 % and -2 % flushed, and 15 % faster
(`python -m bench.stage_chain tiny-nemotron-h 1 2`). GPUs compute denormals at full speed; torch
flushes them on CPU only when told to (`torch.set_flush_denormal`). A flushed denormal becomes
0: a relative change below 1e-38 of the tensor's scale, far inside `verify`'s tolerances, and the
reference step flushes them too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

_flushing = False  # what this module last told torch (torch offers no way to read the setting back)


def _flush_denormals(on: bool) -> None:
    global _flushing
    torch.set_flush_denormal(on)
    _flushing = on


def enter_cpu_rank() -> None:
    """Set this process up as a CPU rank computes (module docstring), for the rest of its life."""
    torch.set_num_threads(1)
    _flush_denormals(True)


@contextmanager
def cpu_rank() -> Iterator[None]:
    """`enter_cpu_rank` for the duration, then the thread count and denormal setting from before
    (inside a rank, which entered for good, nothing changes back)."""
    threads, flushing = torch.get_num_threads(), _flushing
    enter_cpu_rank()
    try:
        yield
    finally:
        _flush_denormals(flushing)
        torch.set_num_threads(threads)
