"""`SolveResult`: what every CP-SAT model of the planner hands back.

Data flow: produced by `search.cpsat_partition`, `search.cpsat_order` and `search.cpsat_window`,
read by the planner (which keeps the payload, logs status / objective / bound / gap / wall time, and lets the
simulator judge the plan). Plain dataclass; imports nothing from the solver, so callers can
hold results without importing ortools.

Objective and bound are in the model's own units converted back to seconds: they are what
the solver optimized on integer-scaled data (times rounded to the model's time unit), so
`bound <= objective` always holds between them. They are the solver's estimate, never the
plan's prediction (the simulator gives that).

Also here: the integer scaling both models share (`time_unit_s`, `mem_unit_bytes`), chosen
once per model so that times round to nearest and memory rounds conservatively.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

#: CP-SAT status names that come with a solution.
SOLVED_STATUSES = ("OPTIMAL", "FEASIBLE")


@dataclass(frozen=True)
class SolveResult(Generic[T]):
    """One solve: status, objective, best bound, wall time and the solution (None without one).

    `status` is CP-SAT's status name (`OPTIMAL`, `FEASIBLE`, `INFEASIBLE`, `UNKNOWN`,
    `MODEL_INVALID`). `objective` and `bound` are in seconds (see the module docstring);
    `hint_objective` is the objective of the hint the solver started from, in the same units
    (None when there was no usable hint). `wall_s` covers building and solving the model.
    `clock_stopped`: the wall-clock abort, not the work budget or a proof, ended the solve (the
    answer may then differ from run to run).
    """

    status: str
    objective: float | None
    bound: float | None
    wall_s: float
    payload: T | None
    hint_objective: float | None = None
    clock_stopped: bool = False

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"

    @property
    def feasible(self) -> bool:
        """A solution came back (optimal or not)."""
        return self.status in SOLVED_STATUSES and self.payload is not None

    @property
    def gap(self) -> float | None:
        """Relative optimality gap (objective - bound) / objective; 0 when optimal, None without both."""
        if self.objective is None or self.bound is None or not math.isfinite(self.bound):
            return None
        if self.optimal or self.objective <= 0:
            return 0.0
        return max(0.0, (self.objective - self.bound) / self.objective)


#: Longest horizon, in time units, a model is scaled to (far inside int64 and CP-SAT's domains).
MAX_TIME_UNITS = 10**9
#: Units the shortest positive duration should span (rounding error <= 0.05 % of it).
MIN_DURATION_UNITS = 1000


#: Largest memory reference (the device limit), in memory units.
MAX_MEM_UNITS = 2**24


def time_unit_s(horizon_s: float, shortest_s: float = 0.0, max_units: int = MAX_TIME_UNITS) -> float:
    """The model's time unit (seconds): a power of ten.

    The largest power of ten with `shortest_s / unit >= MIN_DURATION_UNITS` (the shortest
    positive duration keeps three significant digits), but never so fine that `horizon_s`
    exceeds `max_units`. A power of ten keeps decimal costs exact (1.0 s -> 10**k units),
    which makes small instances hand-checkable.
    """
    finest = horizon_s / max_units if math.isfinite(horizon_s) and horizon_s > 0 else 0.0
    if not math.isfinite(shortest_s) or shortest_s <= 0:
        shortest_s = horizon_s if finest > 0 else 1.0
    unit = 10.0 ** math.floor(math.log10(shortest_s / MIN_DURATION_UNITS))
    if unit < finest:
        unit = 10.0 ** math.ceil(math.log10(finest))
    return unit


def mem_unit_bytes(reference_bytes: float, max_units: int = MAX_MEM_UNITS) -> float:
    """The model's memory unit: the power of two (bytes) with `reference_bytes / unit` just <= `max_units`.

    Demands are rounded up and capacities down in this unit, so a model-feasible plan is
    memory-feasible in bytes. A power of two keeps binary fractions exact, and it may be below
    one byte (abstract cost tables count memory in arbitrary units), so small demands never
    round up to a whole unit that is larger than themselves.
    """
    if not math.isfinite(reference_bytes) or reference_bytes <= 0:
        return 1.0
    return 2.0 ** math.ceil(math.log2(reference_bytes / max_units))


def to_time_units(seconds: float, unit_s: float) -> int:
    """Round a duration to the nearest time unit (never negative)."""
    return max(0, int(round(seconds / unit_s)))


def demand_units(nbytes: float, unit_bytes: float) -> int:
    """A memory demand in units, rounded up (conservative)."""
    return max(0, int(math.ceil(nbytes / unit_bytes - 1e-9)))


def capacity_units(nbytes: float, unit_bytes: float) -> int | None:
    """A memory capacity in units, rounded down (conservative); None when unlimited (inf)."""
    if not math.isfinite(nbytes):
        return None
    return int(math.floor(nbytes / unit_bytes + 1e-9))
