"""bench/memory.py's prediction of one published run: the peak splits into its static part and its
activations, and full recomputation keeps fewer activations than none (plans, so not a unit test)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import memory as mem  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_prediction_splits_into_static_and_activations() -> None:
    by_id = {r["id"]: r for r in mem.load_runs()}
    none = mem.predict(by_id["torchao-f8nc-8b-8-none-bf16-eager"])
    full = mem.predict(by_id["torchao-f8nc-8b-8-full-bf16-eager"])
    for row in (none, full):
        assert row.error_text is None
        assert row.predicted_bytes == pytest.approx(row.static_bytes + row.activation_bytes)
        assert row.error == pytest.approx(row.predicted_bytes / row.measured_bytes - 1)
    assert full.static_bytes == pytest.approx(none.static_bytes)
    assert full.activation_bytes < none.activation_bytes
