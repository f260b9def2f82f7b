"""Where a plan's costs come from: the `--costs` choice (analytic, the paper's profiled costs, or a
measured profile) and the cost-table builder the search calls for each model variant it tries.

Data flow: `--costs` -> `load_costs_profile` -> `cost_table_for` (one table per model and
per-layer recompute list) -> the search and the simulator. `CostTables` holds the inputs that stay
fixed while the search varies the model (its head split) and the recomputation, so that callers pass
one object, never a closure. Imports `cost`, `spec` and `text` only: no search, no solver, no UI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from adaptis_plan.core import CostTable
from adaptis_plan.errors import InputError
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.read import path_kind, read_boundary_file
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.text import cut


def load_costs_profile(path: str | None) -> CostProfile | str | None:
    """The measured profile at `path`; the built-in name `paper` (the paper's profiled costs) as is."""
    if path is None:
        return None
    from adaptis_plan.cost.paper import PAPER_COSTS

    if path == PAPER_COSTS:
        return PAPER_COSTS
    p = Path(path)
    if path_kind(p) is None:
        raise InputError(f"{p}: no such cost profile; measure one with `adaptis profile --model MODEL -o {p.name}`")
    return read_boundary_file(p, CostProfile, "cost profile", fix="pass the JSON file `adaptis profile -o` wrote")


def cost_table_for(
    model: ModelSpec,
    hw: HardwareProfile,
    training: TrainingConfig,
    profile: CostProfile | str | None,
    profile_source: str | None = None,
    recompute: list[str] | None = None,
) -> CostTable:
    """The cost table: `profile` is a measured profile, `paper` (the paper's profiled costs) or None
    (the analytic model); `profile_source` (the `--costs` file) names the profile in error messages;
    `recompute` is one mode per layer (None: `training.recompute` everywhere)."""
    from adaptis_plan.cost.paper import PAPER_COSTS

    if profile == PAPER_COSTS:
        from adaptis_plan.cost.paper import paper_cost_table

        return paper_cost_table(model, hw, training, recompute)
    from adaptis_plan.cost.table import build_cost_table

    return build_cost_table(
        model,
        hw,
        training,
        profile,  # type: ignore[arg-type]
        profile_source=profile_source or "the cost profile",
        recompute=recompute,
    )


def cost_source(costs_path: str | None) -> str:
    """What the costs of a plan came from, as plans and reports name it."""
    if costs_path is None:
        return "analytic"
    from adaptis_plan.cost.paper import PAPER_COSTS

    return "paper" if costs_path == PAPER_COSTS else f"measured profile {Path(costs_path).name}"


def costs_notes(profile: CostProfile | str | None, hw: HardwareProfile, source: str) -> list[str]:
    """Notes (stderr, no error) on a measured profile used with hardware it was plainly not measured on
    (`cost.table.profile_device_mismatch`): a legitimate stand-in at times, a mix-up more often."""
    if not isinstance(profile, CostProfile):
        return []
    from adaptis_plan.cost.table import profile_device_mismatch

    names = profile_device_mismatch(profile, hw)
    if not names:
        return []

    measured = "layer times and links" if profile.link is not None else "layer times"
    given = "memory limits" if profile.link is not None else "memory limits and links"
    return [
        f"{source}: device = '{cut(profile.device)}', but hardware '{cut(hw.name)}' has {cut(', '.join(names))}:"
        f" the plan's {measured} come from this profile, its {given} from the hardware; profile on that"
        " hardware (adaptis profile), or plan with the --hardware the profile was measured on"
    ]


@dataclass(frozen=True)
class CostTables:
    """Builds the cost table of any model variant on fixed hardware, training and profile.

    `profile` and `profile_source` as in `cost_table_for`; `default_mode` is the recompute mode of
    every layer when `table` is given none (a uniform `--recompute`, or "none" where the search
    chooses per layer).
    """

    hardware: HardwareProfile
    training: TrainingConfig
    profile: CostProfile | str | None = None
    profile_source: str | None = None
    default_mode: str = "none"

    def table(self, model: ModelSpec, modes: Sequence[str] | None = None) -> CostTable:
        """The cost table of `model` with `modes` (one recompute mode per layer; None: `default_mode`)."""
        chosen = list(modes) if modes else [self.default_mode] * model.num_layers
        return cost_table_for(model, self.hardware, self.training, self.profile, self.profile_source, chosen)

    @property
    def source(self) -> str:
        """What the costs come from, as plans and reports name it (`cost_source`)."""
        return cost_source(self.profile_source)
