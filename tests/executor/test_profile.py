"""`adaptis profile`'s measurements: per-layer F / I / W, head chunks, the gloo link.

Run: `pytest tests/executor/test_profile.py`.
"""

from __future__ import annotations

import pytest
from helpers_executor import (
    tiny_family,
)

from adaptis_plan.executor.profile import distinct_layers, measure_link, profile_model
from adaptis_plan.spec.cost_profile import CostProfile

M = 4  # micro-batches in the executor runs

# ---------------------------------------------------------------- profiling


def test_profile_groups_identical_layers_and_measures_every_op() -> None:
    model = tiny_family("nemotron")
    prof = profile_model(model, seq_len=16, micro_batch_size=1, repeats=2, warmup=1)
    assert [e.layers for e in prof.entries] == distinct_layers(model) == [[0], [1, 4], [2, 5], [3], [6]]
    for e in prof.entries:
        assert e.kind == model.layers[e.layers[0]].kind
        assert min(e.f_s, e.i_s, e.w_s, e.b_s) > 0
        assert 0 < e.act_w_bytes <= e.act_bytes
    assert prof.num_threads == 1 and prof.link is None
    assert CostProfile.model_validate_json(prof.model_dump_json()) == prof


@pytest.mark.slow
def test_measure_link_between_two_local_processes() -> None:
    link = measure_link(repeats=3, large_bytes=2**20)
    assert link.backend == "gloo" and link.latency_s > 0 and link.bandwidth_gbps > 0


def test_profile_measures_the_head_split_into_chunks() -> None:
    model = tiny_family("nemotron")
    prof = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, head_chunks=(2, 3))
    assert [hp.num_chunks for hp in prof.head_chunks] == [2, 3]
    two, three = prof.head_chunks
    assert [e.layers for e in two.entries] == [[0], [1]] and [e.layers for e in three.entries] == [[0], [1], [2]]
    for hp in prof.head_chunks:
        assert all(e.kind == "head" and min(e.f_s, e.i_s, e.w_s) > 0 for e in hp.entries)
    assert profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0).head_chunks == []
