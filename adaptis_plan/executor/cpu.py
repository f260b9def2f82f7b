"""How a rank computes on CPU: one intra-op thread, denormal floats flushed to zero, one core of its own.

Every process that runs or times layers on CPU enters `cpu_rank()` (the worker for its whole
life; the profiler, the single-process reference step and the benches for their measurements),
so a layer is timed with the same kernels and the same arithmetic it runs with in a pipeline.

One thread: ranks share the machine's cores, one rank per core (torch's default would start a
thread per core in every rank).

Denormals flushed: a float32 below 1.2e-38 in magnitude is a denormal, and x86 cores compute
with one through a microcode assist that is 10-100x slower than a normal operation. Decaying
products make them: a Mamba-2 layer's scan multiplies segment decays exp(A dt) together. Which
values come out denormal depends on the data, so unflushed, the same layer can take a different
time on the profiler's seeded inputs than inside a stage, on the activations its neighbours
produce (measured: experiments/findings-executor.md). GPUs compute denormals at full speed; torch
flushes them on CPU only when told to (`torch.set_flush_denormal`). A flushed denormal becomes
0: a relative change below 1e-38 of the tensor's scale, far inside `verify`'s tolerances, and the
reference step flushes them too.

One core each (`pin_core`): when several local processes compute side by side (the ranks of a
launch, `LOCAL_RANK` of `LOCAL_WORLD_SIZE`; the two ends of the link probe, `executor.link`; the
bench's concurrent profile copies) and they are no more than the cores this process may use,
process k is pinned to the k-th of them, before it starts gloo, so gloo's threads share its core
too. Why: a rank's placement is then fixed and known (`run --json` reports it as `cpu_cores`), as
CPU training launchers commonly bind ranks to cores, and the OS can no longer run both ranks'
threads on one core for a while. Known limit: pinning is no proven accuracy gain for the
predictions (the CPU bench's A/B runs disagreed: experiments/findings-executor.md); it is kept for
the fixed, reported placement. A single process (the profiler, a one-process reference step) is not
pinned: it has no neighbour to keep apart, and pinned it could not leave a core another job is
using. `ADAPTIS_CPU_PIN=0` in the environment turns pinning off (for example when several launches
share one machine, which would otherwise pin their rank 0s to the same core).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

#: the environment variable that turns pinning off when set to 0 (module docstring)
PIN_ENV = "ADAPTIS_CPU_PIN"

_flushing = False  # what this module last told torch (torch offers no way to read the setting back)


def _flush_denormals(on: bool) -> None:
    global _flushing
    torch.set_flush_denormal(on)
    _flushing = on


def pin_core(index: int, of: int) -> int | None:
    """Pin this process, and the threads it starts from now on, to the `index`-th of the cores it may
    use, when it is one of `of` > 1 local processes computing side by side and they fit one per core;
    returns the core, or None where it stays unpinned: a lone process, more processes than cores,
    `ADAPTIS_CPU_PIN=0`, or an OS that cannot pin (module docstring)."""
    if of < 2 or os.environ.get(PIN_ENV, "1").strip() == "0" or not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if of > len(cores) or not 0 <= index < of:
        return None
    os.sched_setaffinity(0, {cores[index]})
    return cores[index]


def pinned_core() -> int | None:
    """The one core this process may run on, or None when it may run on several (or the OS cannot say)."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    return next(iter(cores)) if len(cores) == 1 else None


def local_position() -> tuple[int, int]:
    """This process's (LOCAL_RANK, LOCAL_WORLD_SIZE) as torchrun sets them; (0, 1) outside torchrun."""
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def enter_cpu_rank(index: int = 0, of: int = 1) -> int | None:
    """Set this process up as a CPU rank computes (module docstring), for the rest of its life: one
    thread, denormals flushed, and pinned as local process `index` of `of` (`pin_core`, whose
    core it returns)."""
    torch.set_num_threads(1)
    _flush_denormals(True)
    return pin_core(index, of)


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
