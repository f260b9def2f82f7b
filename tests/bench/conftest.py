"""Fixtures shared by the bench tools' tests."""

from __future__ import annotations

import pytest

from adaptis_plan.planfile.io import write_plan
from adaptis_plan.usecases import PlanRequest, make_plan_for


@pytest.fixture(scope="package")
def zbv_plan_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small tiny-llama ZBVZeroBubble plan at PP 2 (analytic CPU costs), written to a file."""
    req = PlanRequest.of(
        model_arg="tiny-llama", hardware_arg="cpu", pp=2, num_microbatches=4, seq_len=64, micro_batch_size=1,
        strategy="ZBVZeroBubble", partition="uniform", time_limit_s=1.0, hard_stop=False,
    )  # fmt: skip
    path = str(tmp_path_factory.mktemp("zbv") / "plan.json")
    write_plan(make_plan_for(req).plan, path)
    return path
