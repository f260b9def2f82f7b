"""Plans for the interoperability tests: every classic strategy and adaptive plans with irregular
placement, V placement and unequal stages, for one CPU-sized model at PP 2.

The adaptive plans take their layouts from here (the search picks sequential or loop placements
for models this small) and their per-device orders from the adaptive list scheduler, which the
search uses for every layout it tries; each plan is judged by the simulator and written by
`make_plan`, as `adaptis plan` writes one.
"""

from __future__ import annotations

import json
from pathlib import Path

from adaptis_plan.core import Layout
from adaptis_plan.cost.table import build_cost_table
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.planfile.io import make_plan, write_plan
from adaptis_plan.schedules import STRATEGIES
from adaptis_plan.search.listsched import ListPolicy, list_schedule
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.usecases import PlanRequest, make_plan_for
from tests.helpers_executor import tiny_family

NUM_MICROBATCHES = 4
SEQ_LEN = 16

# (name, layer bounds, stage -> device, split backward): 6 layers (embedding, 4 blocks, head)
ADAPTIVE_LAYOUTS = (
    ("irregular", (0, 1, 2, 4, 5, 6), (0, 0, 1, 0, 1), True),  # 3 stages on device 0, 2 on device 1
    ("v", (0, 2, 3, 4, 6), (0, 1, 1, 0), True),  # V placement, stages of 2, 1, 1, 2 layers
    ("unequal", (0, 1, 6), (0, 1), False),  # the embedding alone, everything else on device 1
)


def parity_model() -> ModelSpec:
    return tiny_family("llama")


def training() -> TrainingConfig:
    return TrainingConfig(num_microbatches=NUM_MICROBATCHES, seq_len=SEQ_LEN, pp=2, dtype="fp32")


def adaptive_plan(folder: Path, name: str, bounds, stage_device, split: bool, model: ModelSpec) -> Path:
    hw = load_hardware("cpu")
    tr = training()
    costs = build_cost_table(model, hw, tr)
    layout = Layout(bounds=tuple(bounds), stage_device=tuple(stage_device), num_devices=2)
    programs, _ = list_schedule(layout, costs, tr.num_microbatches, ListPolicy(split_backward=split))
    result = simulate(layout, costs, programs, tr.num_microbatches)
    plan = make_plan(
        strategy="adaptive",
        model=model,
        hardware=hw,
        training=tr,
        layout=layout,
        programs=programs,
        result=result,
        costs=costs,
        search={"source": f"list scheduler on a fixed {name} layout"},
    )
    path = folder / f"adaptive-{name}.json"
    write_plan(plan, path)
    return path


def searched_plan(folder: Path, model_path: Path, strategy: str, target: str = "adaptis") -> Path:
    outcome = make_plan_for(
        PlanRequest.of(
            model_arg=str(model_path),
            hardware_arg="cpu",
            pp=2,
            num_microbatches=NUM_MICROBATCHES,
            seq_len=SEQ_LEN,
            strategy=strategy,
            time_limit_s=1.0,
            hard_stop=False,
            target=target,
        )
    )
    path = folder / f"{strategy.lower()}-{target}.json"
    write_plan(outcome.plan, path)
    return path


def all_plans(folder: Path) -> dict[str, Path]:
    """name -> plan file: every classic strategy, the search's own adaptive plan, and the three fixed layouts."""
    model = parity_model()
    model_path = folder / "model.json"
    model_path.write_text(json.dumps(model.model_dump(mode="json")))
    plans = {name: searched_plan(folder, model_path, name) for name in STRATEGIES}
    plans["adaptive-searched"] = searched_plan(folder, model_path, "adaptive", target="torch")
    for name, bounds, stage_device, split in ADAPTIVE_LAYOUTS:
        plans[f"adaptive-{name}"] = adaptive_plan(folder, name, bounds, stage_device, split, model)
    return plans
