"""The CP-SAT solver set-up both planner models share (ortools is imported only under search/).

Ctrl-C. CP-SAT's own SIGINT handler (`catch_sigint_signal`, on by default) takes over SIGINT
while it solves: a Ctrl-C ends the search as if the time limit had passed, the planner goes on
and writes its plan, and when the solve returns OR-Tools resets SIGINT to the default action,
so a later Ctrl-C kills the process without any clean-up. `_InterruptibleSolver` turns that
handler off (Python's stays installed) and solves in a worker thread while the calling thread
waits: a Ctrl-C raises KeyboardInterrupt in the caller at once, the search is stopped with
`stop_search()` and joined, and the interrupt goes on up (the CLI exits 130, writing nothing).
"""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model


class _InterruptibleSolver(cp_model.CpSolver):
    """A CpSolver whose `solve` a Ctrl-C interrupts with KeyboardInterrupt (see the module docstring)."""

    def solve(self, model, solution_callback=None):
        if threading.current_thread() is not threading.main_thread():
            return super().solve(model, solution_callback)  # signals reach the main thread only
        outcome: dict[str, object] = {}

        def work() -> None:
            try:
                outcome["status"] = cp_model.CpSolver.solve(self, model, solution_callback)
            except BaseException as e:  # handed to the caller below
                outcome["error"] = e

        worker = threading.Thread(target=work, name="cp-sat", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.05)
        except KeyboardInterrupt:
            while worker.is_alive():  # stop_search is a no-op until the solve has set itself up
                self.stop_search()
                worker.join(0.05)
            raise
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["status"]


def new_solver(time_limit_s: float, num_workers: int, seed: int) -> cp_model.CpSolver:
    """A solver with the planner's time limit, worker count and seed, that Ctrl-C interrupts."""
    solver = _InterruptibleSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.catch_sigint_signal = False
    return solver
