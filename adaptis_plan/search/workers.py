"""Independent pieces of a search, run side by side in worker processes.

`pmap(fn, items)` is `[fn(x) for x in items]`, the same list in the same order, computed by up to
`workers()` forked processes: each piece is deterministic and shares nothing with the others, so the
result does not depend on how many ran at once (the plan stays byte-identical under any load). Used
where the pieces are many or heavy: the whole-configuration search's per-point bounds, its screen
(`Pool`, batch by batch) and its planned points' pipeline searches. `Background` runs one piece beside
this process: a big pipeline's ranking run and its second full-length pick (`search.generator`).

Workers: the CPUs this process may run on, or `ADAPTIS_WORKERS` (an integer >= 1; 1 runs everything
in this process). Where `fork` is not available (macOS and Windows spawn a fresh interpreter, which
costs more than these pieces), or with a single piece or CPU, `pmap` runs in this process. A worker
never prints: the caller keeps its terminal. A worker may fork its own (recompute auto's forced modes
inside one of several planned points): when its siblings finish first, the CPUs they leave are used.

Each worker is a forked process that inherits the piece and its inputs (nothing is pickled on the way
in) and sends its results back on a pipe of its own, which only this process's calling thread reads:
a worker ended part-way through a send (Ctrl-C, `Background.cancel`) leaves nothing waiting on it.
A worker's hard stop aborts its copy of the search's `Deadline`: it comes back with the result and is
replayed on the parent's (`budget.replay_aborts`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from adaptis_plan.errors import InputError
from adaptis_plan.search.budget import record_aborts, recorded_aborts, replay_aborts

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
    """`[fn(x) for x in items]`, computed by up to `workers()` (and `limit`) forked processes, in order."""
    todo: Sequence[T] = list(items)
    with Pool(min(len(todo), limit or len(todo))) as pool:
        return pool.map(fn, todo)


def _forkable() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def _worker_start() -> None:
    """A worker leaves at once and silently on Ctrl-C (the terminal sends it to the whole process group):
    the parent reports the interrupt. It also leaves when its parent is gone (ended by
    `Background.cancel`, or killed): its own workers would otherwise run on unwanted."""
    signal.signal(signal.SIGINT, lambda signum, _frame: os._exit(128 + signum))
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _run(fn: Callable[[], Any], out: Connection) -> None:
    """A worker's body: `fn()`, sent back as ("ok", result) or ("error", the exception), with the aborts
    of the deadlines it inherited (`budget.record_aborts`), which the parent replays on its own."""
    _worker_start()
    record_aborts()
    try:
        got: tuple[str, Any] = ("ok", fn())
    except BaseException as e:  # noqa: BLE001 - the parent raises it, as if it had run here
        got = ("error", e)
    try:
        out.send((*got, recorded_aborts()))
    except Exception as e:  # noqa: BLE001 - the result or the exception does not pickle
        out.send(("error", RuntimeError(f"a worker's result could not be sent back: {e!r}"), recorded_aborts()))
    out.close()


class _Worker:
    """One forked process running `fn()`, and the pipe it answers on."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_run, args=(fn, child), daemon=False)
        self._process.start()
        child.close()

    def result(self) -> Any:
        try:
            kind, got, aborts = self._conn.recv()
        except EOFError:
            code = self._process.exitcode
            raise RuntimeError(f"a worker process ended without its result (exit code {code})") from None
        finally:
            self.close()
        replay_aborts(aborts)
        if kind == "error":
            raise got
        return got

    def close(self, kill: bool = False) -> None:
        if kill and self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._conn.close()


def _chunk(fn: Callable[[T], R], chunk: Sequence[T]) -> list[R]:
    return [fn(x) for x in chunk]


class Pool:
    """`map` in up to `workers()` (and `limit`) forked processes per call, each on a contiguous chunk of
    the pieces. Inline where `pmap` is (one CPU, or no fork). Use it as a context manager: leaving the
    block by an error or Ctrl-C ends the workers of a `map` it interrupted."""

    def __init__(self, limit: int | None = None) -> None:
        self.size = min(workers(), limit or workers())
        self._running: list[_Worker] = []

    @property
    def parallel(self) -> bool:
        """Whether `map` can run pieces side by side."""
        return self.size > 1 and _forkable()

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`[fn(x) for x in items]`, in order (module docstring)."""
        todo: Sequence[T] = list(items)
        if len(todo) <= 1 or not self.parallel:
            return [fn(x) for x in todo]
        n = min(self.size, len(todo))
        size = -(-len(todo) // n)
        chunks = [todo[k : k + size] for k in range(0, len(todo), size)]
        # the first chunk runs here, the others in workers
        self._running = [_Worker(partial(_chunk, fn, c)) for c in chunks[1:]]
        out = _chunk(fn, chunks[0])
        for worker in self._running:
            out.extend(worker.result())
        self._running = []
        return out

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self._running:
            worker.close(kill=True)
        self._running = []


class Background(Generic[R]):
    """`fn()` started in a forked worker while this process goes on; `result()` waits for it. Where
    `pmap` would run inline (one CPU, or no fork), `inline` (default `fn`: the same piece, which may
    then report progress) runs at `result()`, in this process. Use it as a context manager: leaving
    the block by an error or Ctrl-C ends the worker."""

    def __init__(self, fn: Callable[[], R], inline: Callable[[], R] | None = None) -> None:
        self._fn = inline or fn
        self._worker: _Worker | None = _Worker(fn) if Pool(2).parallel else None

    def result(self) -> R:
        if self._worker is None:
            return self._fn()
        worker, self._worker = self._worker, None
        return worker.result()

    def cancel(self) -> None:
        """End the worker now, its work unfinished (an error or Ctrl-C left the block that wanted it)."""
        if self._worker is not None:
            self._worker.close(kill=True)
            self._worker = None

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.cancel()
        elif self._worker is not None:
            self._worker.result()  # not asked for: wait for it, so no process outlives the block


__all__ = ["ENV", "Background", "Pool", "pmap", "workers"]
