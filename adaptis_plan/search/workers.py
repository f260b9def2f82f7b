"""Independent pieces of a search, run side by side in worker processes.

`pmap(fn, items)` is `[fn(x) for x in items]`, the same list in the same order, computed by up to
`workers()` forked processes: each piece is deterministic and shares nothing with the others, so the
result does not depend on how many ran at once (the plan stays byte-identical under any load). Used
where the pieces are many or heavy: the whole-configuration search's per-point bounds, its screen
(a `Pool` kept across the batches) and its planned points' pipeline searches.

Workers: the CPUs this process may run on, or `ADAPTIS_WORKERS` (an integer >= 1; 1 runs everything
in this process). Where `fork` is not available (macOS and Windows spawn a fresh interpreter, which
costs more than these pieces), or with a single piece or CPU, `pmap` runs in this process. A worker
never prints: the caller keeps its terminal. A worker may fork its own (recompute auto's forced modes
inside one of several planned points): when its siblings finish first, the CPUs they leave are used.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from adaptis_plan.errors import InputError

T = TypeVar("T")
R = TypeVar("R")

ENV = "ADAPTIS_WORKERS"


def workers() -> int:
    """How many processes `pmap` may use (module docstring)."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise InputError(f"{ENV} = {raw!r}: use an integer >= 1 (1 plans in one process)")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pmap(fn: Callable[[T], R], items: Iterable[T], *, limit: int | None = None) -> list[R]:
    """`[fn(x) for x in items]`, computed by up to `workers()` (and `limit`) forked processes, in order.

    `fn` and the items must pickle (a module-level function, or a `functools.partial` of one)."""
    todo: Sequence[T] = list(items)
    with Pool(min(len(todo), limit or len(todo))) as pool:
        return pool.map(fn, todo)


def _executor(size: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start)


def _worker_start() -> None:
    """A worker leaves at once and silently on Ctrl-C (the terminal sends it to the whole process group):
    the parent reports the interrupt and shuts the pool down; an idle worker would otherwise print a
    traceback from the middle of waiting for work. It also leaves when its parent is gone (ended by
    `Background.cancel`, or killed): its own workers would otherwise wait for work forever."""
    signal.signal(signal.SIGINT, lambda signum, _frame: os._exit(128 + signum))
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


class Pool:
    """Forked workers kept for several `map` calls (a loop that hands out a few pieces at a time): up to
    `workers()` and `limit` of them, started on the first call that has two pieces. Inline where `pmap`
    is (one CPU, or no fork). Use it as a context manager: the workers end with the block."""

    def __init__(self, limit: int | None = None) -> None:
        self.size = min(workers(), limit or workers())
        self._pool: ProcessPoolExecutor | None = None

    @property
    def parallel(self) -> bool:
        """Whether `map` can run pieces side by side."""
        return self.size > 1 and "fork" in multiprocessing.get_all_start_methods()

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`[fn(x) for x in items]`, in order (module docstring)."""
        todo: Sequence[T] = list(items)
        if len(todo) <= 1 or not self.parallel:
            return [fn(x) for x in todo]
        if self._pool is None:
            self._pool = _executor(self.size)
        chunk = -(-len(todo) // self.size)  # one contiguous chunk per worker: each pickles fn once
        return list(self._pool.map(fn, todo, chunksize=chunk))

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class Background:
    """`fn()` started in one forked worker while this process goes on; `result()` waits for it. Where
    `pmap` would run inline (one CPU, or no fork), `fn` runs at `result()`, in this process. Use it as
    a context manager: leaving the block (an error, Ctrl-C) ends the worker, which would otherwise wait
    for more work after its parent is gone."""

    def __init__(self, fn: Callable[[], R]) -> None:
        self._fn = fn
        self._pool: ProcessPoolExecutor | None = None
        self._future = None
        if Pool(2).parallel:
            self._pool = _executor(1)
            self._future = self._pool.submit(fn)

    def result(self) -> R:
        if self._future is None:
            return self._fn()
        return self._future.result()

    def cancel(self) -> None:
        """End the worker now, its work unfinished (an error or Ctrl-C left the block that wanted it)."""
        if self._pool is not None:
            for process in (getattr(self._pool, "_processes", None) or {}).values():
                process.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._future = None, None

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.cancel()  # an error or Ctrl-C: the piece is not wanted any more
        elif self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["ENV", "Background", "Pool", "pmap", "workers"]
