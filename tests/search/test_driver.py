"""The outer pipeline search (adaptis_plan/search/driver.py) called on its own: a model, a cost-table
builder, the pipeline shape and a budget are all it needs, and it plans what `make_plan_for` plans."""

from __future__ import annotations

import math

import pytest

from adaptis_plan.cost.source import CostTables
from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.planfile.io import plan_file_search_info
from adaptis_plan.search.budget import Deadline, SearchBudget
from adaptis_plan.search.driver import PipelineOptions, classic_pipeline, search_pipeline
from adaptis_plan.spec.training import TrainingConfig
from adaptis_plan.usecases import PlanRequest, make_plan_for

SHAPE = {"pp": 2, "num_microbatches": 4}


def _tables() -> CostTables:
    training = TrainingConfig(num_microbatches=4, micro_batch_size=1, seq_len=128, pp=2)
    return CostTables(load_hardware("cpu"), training)


def test_the_driver_alone_plans_what_the_use_case_plans() -> None:
    budget = SearchBudget.for_time_limit(5.0).scaled(0.2)
    req = PlanRequest.of("tiny-llama", "cpu", 2, 4, seq_len=128, budget=budget, hard_stop=False, target="torch")
    out = make_plan_for(req)
    got = search_pipeline(
        load_model("tiny-llama"), _tables(), **SHAPE, budget=budget, deadline=Deadline(math.inf),
        options=PipelineOptions(target="torch"),
    )  # fmt: skip
    assert got.best.layout == out.layout and got.best.programs == out.programs
    assert plan_file_search_info(got.info) == plan_file_search_info(out.search_info)
    assert got.info["target"] == "torch" and got.unrestricted is not None


def test_classic_pipeline_refuses_what_the_target_cannot_run() -> None:
    got = classic_pipeline(load_model("tiny-llama"), _tables(), "1F1B", **SHAPE)
    assert got.strategy == "1F1B" and got.info["source"] == "1F1B" and got.modes == ["none"] * got.model.num_layers
    with pytest.raises(InputError, match="--target megatron"):
        classic_pipeline(load_model("tiny-llama"), _tables(), "ZBVZeroBubble", **SHAPE, target="megatron")


def test_the_outer_shares_are_budget_fields_that_plans_do_not_record() -> None:
    budget = SearchBudget()
    assert (budget.recompute_share, budget.target_share) == (0.75, 0.5)
    assert budget.scaled(0.5).target_share == 0.5
    assert "recompute_share" not in budget.summary() and "target_share" not in budget.summary()
    with pytest.raises(ValueError, match="target_share"):
        SearchBudget(target_share=-0.5)
