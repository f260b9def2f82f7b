"""The CP-SAT solver set-up both planner models share (ortools is imported only under search/).

Reproducibility: a solve is budgeted in CP-SAT's deterministic time (`max_deterministic_time`,
a count of work, not seconds), on one worker with a fixed seed, so the same model gives the
same answer on any machine under any load. The wall-clock limit is only a hard abort; a solve
it stopped is reported as such (`clock_stopped`), because its answer may then differ run to run.

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
        try:
            worker.start()  # inside the try: a Ctrl-C right after the start still stops the solve
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


def new_solver(
    time_limit_s: float, num_workers: int, seed: int, deterministic_time: float | None = None
) -> cp_model.CpSolver:
    """A solver with the planner's wall-clock abort, work budget, worker count and seed, that Ctrl-C interrupts."""
    solver = _InterruptibleSolver()
    solver.parameters.max_time_in_seconds = max(float(time_limit_s), 1e-3)
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = max(float(deterministic_time), 1e-3)
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.catch_sigint_signal = False
    return solver


def clock_stopped(solver: cp_model.CpSolver, status: cp_model.CpSolverStatus) -> bool:
    """Whether the wall-clock limit, not the work budget or a proof, ended this solve."""
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
        return False
    params = solver.parameters
    dtime_left = params.max_deterministic_time - solver.deterministic_time
    return solver.wall_time >= 0.95 * params.max_time_in_seconds and dtime_left > 1e-3 * params.max_deterministic_time
