"""The rank layout of a training configuration: which global ranks form each parallel group.

Data flow: a `TrainingConfig`'s (tp, cp, ep, dp, pp) -> `RankLayout` -> `cost.comm.placement` (each
group's size and stride, hence how many of its members share a node) and the executor
(`worker.mesh_groups`, `expertparallel.ExpertParallel` build their process groups from `groups`).
Defined here once for both. Plain Python: imports nothing at run time.

Megatron-LM's order (megatron/core/parallel_state.py, `RankGenerator`, order "tp-cp-ep-dp-pp"):
tp varies fastest, then cp, then dp, then pp,

    rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)).

Megatron builds the dense groups with ep = 1 and the expert groups with a second generator in the
same order (expert tp = tp, ep, expert dp = dp x cp / ep, no cp): the ranks of one (tp, pp)
position form the dense gradient group "dp_cp" (Megatron reduces over data- and context-parallel
ranks together), ep consecutive of them form an expert-parallel group "ep" (stride tp), and those
holding the same experts the expert-data-parallel group "edp" (stride tp x ep: the expert
parameters' gradient group). So every group of every dimension is an arithmetic progression:
`size(dim)` ranks at `stride(dim)`, the groups of one dimension partitioning the world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adaptis_plan.spec.training import TrainingConfig

# the coordinates that name a rank, fastest first
GRID = ("tp", "cp", "dp", "pp")
# every group a configuration has: the grid's, the dense gradient group, the expert groups
DIMS = ("tp", "cp", "dp", "pp", "dp_cp", "ep", "edp")


@dataclass(frozen=True)
class RankLayout:
    """The global ranks of a tp x cp x dp x pp world, ep sharding the experts over dp x cp (module docstring)."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for dim in ("tp", "cp", "ep", "dp", "pp"):
            value = getattr(self, dim)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{dim} = {value!r}: every parallel degree is a positive integer")
        if (self.dp * self.cp) % self.ep:
            raise ValueError(
                f"ep = {self.ep} does not divide dp x cp = {self.dp} x {self.cp}: experts are sharded over"
                " the data- and context-parallel ranks; use an ep that divides dp x cp"
            )

    @classmethod
    def of(cls, training: TrainingConfig) -> RankLayout:
        """The layout of a training configuration."""
        return cls(tp=training.tp, cp=training.cp, ep=training.ep, dp=training.dp, pp=training.pp)

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def size(self, dim: str) -> int:
        """Ranks in one group of `dim` (one of `DIMS`)."""
        sizes = {
            "tp": self.tp,
            "cp": self.cp,
            "dp": self.dp,
            "pp": self.pp,
            "dp_cp": self.dp * self.cp,
            "ep": self.ep,
            "edp": self.dp * self.cp // self.ep,
        }
        return sizes[_known(dim)]

    def stride(self, dim: str) -> int:
        """Global-rank distance between consecutive members of a group of `dim`."""
        t, c, d = self.tp, self.cp, self.dp
        strides = {"tp": 1, "cp": t, "dp": t * c, "pp": t * c * d, "dp_cp": t, "ep": t, "edp": t * self.ep}
        return strides[_known(dim)]

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """The global rank at grid coordinate (tp, cp, dp, pp)."""
        for dim, value in zip(GRID, (tp, cp, dp, pp), strict=True):
            if not 0 <= value < self.size(dim):
                raise ValueError(f"{dim} rank {value} outside [0, {self.size(dim)})")
        return sum(value * self.stride(dim) for dim, value in zip(GRID, (tp, cp, dp, pp), strict=True))

    def coordinate(self, rank: int) -> dict[str, int]:
        """`rank`'s index in its group of every dimension of `DIMS` (its grid coordinate among them)."""
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} outside the world of {self.world}")
        return {dim: rank // self.stride(dim) % self.size(dim) for dim in DIMS}

    def group(self, dim: str, rank: int) -> list[int]:
        """The global ranks of `rank`'s group of `dim`, in group-rank order."""
        n, s = self.size(dim), self.stride(dim)
        first = rank - self.coordinate(rank)[dim] * s
        return [first + k * s for k in range(n)]

    def groups(self, dim: str) -> list[list[int]]:
        """Every group of `dim`, each in group-rank order, ordered by first rank; they partition the world."""
        n, s = self.size(dim), self.stride(dim)
        return [[first + k * s for k in range(n)] for first in range(self.world) if first // s % n == 0]


def _known(dim: str) -> str:
    if dim not in DIMS:
        raise ValueError(f"unknown parallel dimension '{dim}'; one of: {', '.join(DIMS)}")
    return dim
