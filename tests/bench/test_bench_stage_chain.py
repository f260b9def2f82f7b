"""bench.stage_chain: a stage of several layers against the sum of its layers timed alone."""

from __future__ import annotations

import pytest

from adaptis_plan.executor.profile import profile_model
from adaptis_plan.inputs.models.load import load_model
from bench import stage_chain


def test_the_layers_side_is_the_sum_of_the_stage_layers_profiled_times(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model("tiny-llama")
    real = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1)
    fixed = real.model_copy(
        update={"entries": [e.model_copy(update={"f_s": 1.0, "i_s": 2.0, "w_s": 3.0}) for e in real.entries]}
    )
    monkeypatch.setattr(stage_chain, "profile_model", lambda *a, **k: fixed)
    got = stage_chain.compare(model, 1, 4, seq_len=16, rounds=2, repeats=1)  # three decoder layers
    assert got.layers_s == {"f": 3.0, "i": 6.0, "w": 9.0}
    assert min(got.stage_s.values()) > 0


def test_the_cli_prints_every_op(capsys: pytest.CaptureFixture[str]) -> None:
    stage_chain.main(["tiny-llama", "9", "10", "--seq-len", "16", "--rounds", "1"])
    out = capsys.readouterr().out
    assert out.startswith("tiny-llama layers 9-9: ") and all(f"{op} stage" in out for op in ("F", "I", "W"))
