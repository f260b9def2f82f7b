"""How a rank computes on CPU: one intra-op thread, denormal floats flushed to zero, one core of its own.

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

One core each (`pin_core`): when several local processes compute side by side (the ranks of a
launch, `LOCAL_RANK` of `LOCAL_WORLD_SIZE`; the two ends of the profiler's link probe; the bench's
concurrent profile copies) and they are no more than the cores this process may use, process k is
pinned to the k-th of them, before it starts gloo, so gloo's threads share its core too. Why: a
rank's placement is then fixed and known (`run --json` reports it as `cpu_cores`), as CPU
training launchers commonly bind ranks to cores, and the OS can no longer run both ranks' threads
on one core for a while. What it did to the predictions, measured on the 2-core CPU bench
(`python -m bench.run --out BENCHMARKS.md --sections real,match`, 24 plans, fp32, PP 2): a short
A/B (tiny-nemotron-h and tiny-gemma, 6 rounds, one launch each way) moved the mean |error| of the
12 plans' in-launch predictions from about 5.6 % to 2.8 %, but two full runs a session apart
(run 25 unpinned, run 26 pinned; the host is a shared VM whose speed moves by 10-40 % over
minutes) did not confirm it: in-launch mean |error| 3.7 % vs 4.6 %, worst 11.4 % vs 10.2 %;
planning-profile mean 9.1 % vs 7.6 %, worst 19.8 % vs 24.8 %. On another VM (Intel, runs 27 and 28,
pinned, the planning profile's copies too) the in-launch mean |error| was 3.3 % and 2.7 %, with no
unpinned run there to compare. So pinning is no proven accuracy gain; it is kept for the fixed,
reported placement. A single process (the profiler, a one-process
reference step) is not pinned: it has no neighbour to keep apart, and pinned it could not leave a
core another job is using. `ADAPTIS_CPU_PIN=0` in the environment turns pinning off (for example
when several launches share one machine, which would otherwise pin their rank 0s to the same core).
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
