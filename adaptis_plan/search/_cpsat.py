"""The CP-SAT solver set-up both planner models share (ortools is imported only under search/).

Reproducibility: a solve is budgeted in CP-SAT's deterministic time (`max_deterministic_time`,
a count of work, not seconds), on one worker with a fixed seed, so the same model gives the
same answer on any machine under any load. The wall-clock limit is only a hard abort; a solve
it stopped is reported as such (`clock_stopped`), because its answer may then differ run to run.
"""

from __future__ import annotations

from ortools.sat.python import cp_model


def new_solver(
    time_limit_s: float, num_workers: int, seed: int, deterministic_time: float | None = None
) -> cp_model.CpSolver:
    """A solver with the planner's wall-clock abort, work budget, worker count and seed."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(float(time_limit_s), 1e-3)
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = max(float(deterministic_time), 1e-3)
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    return solver


def clock_stopped(solver: cp_model.CpSolver, status: int) -> bool:
    """Whether the wall-clock limit, not the work budget or a proof, ended this solve."""
    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID):
        return False
    params = solver.parameters
    dtime_left = params.max_deterministic_time - solver.deterministic_time
    return solver.wall_time >= 0.95 * params.max_time_in_seconds and dtime_left > 1e-3 * params.max_deterministic_time
