"""The CP-SAT solver set-up both planner models share (ortools is imported only under search/)."""

from __future__ import annotations

from ortools.sat.python import cp_model


def new_solver(time_limit_s: float, num_workers: int, seed: int) -> cp_model.CpSolver:
    """A solver with the planner's time limit, worker count and seed."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    return solver
