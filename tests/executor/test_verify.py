"""The verification dumps round-trip, and one process's optimizer step from the initial weights does not
depend on how many steps were taken before it (the initial model is built once and shared)."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers_executor import tiny_family

from adaptis_plan.executor.dumps import load_tensors, save_tensors
from adaptis_plan.executor.layers import build_model
from adaptis_plan.executor.verify import _named, step_with_grads


def test_dumped_tensors_come_back_with_their_names_shapes_and_nones(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(3, 4, generator=g), "b": None, "c": torch.randn(5, generator=g),
               "d": torch.zeros(0, 2), "e": torch.tensor(2.5)}  # fmt: skip
    save_tensors(tmp_path / "t.pt", tensors, loss=1.25, other=None)
    back, values = load_tensors(tmp_path / "t.pt")
    assert list(back) == list(tensors) and values == {"loss": 1.25, "other": None}
    for name, t in tensors.items():
        got = back[name]
        assert (got is None) if t is None else (got is not None and got.shape == t.shape and torch.equal(got, t))
    save_tensors(tmp_path / "none.pt", {"x": None})
    assert load_tensors(tmp_path / "none.pt") == ({"x": None}, {})


def test_step_with_grads_steps_a_fresh_copy_of_the_initial_weights_every_time() -> None:
    """Tied embeddings (gemma): one parameter under two names, stepped once with its gradient."""
    model = tiny_family("gemma")
    named = _named(build_model(model, seed=0))
    g = torch.Generator().manual_seed(1)
    grads: dict[str, torch.Tensor | None] = {n: torch.randn(p.shape, generator=g) for n, p in named}
    first = step_with_grads(model, grads, optimizer="adamw", lr=1e-2)
    again = step_with_grads(model, grads, optimizer="adamw", lr=1e-2)
    other = step_with_grads(model, {n: -t for n, t in grads.items() if t is not None}, optimizer="sgd", lr=0.5)
    assert list(first) == [n for n, _ in named]
    for name, p in named:  # the stepped weights moved from the initial ones, and equally both times
        assert torch.equal(first[name], again[name]) and not torch.equal(first[name], p.detach())
        assert not torch.equal(first[name], other[name])
    assert torch.equal(step_with_grads(model, grads, optimizer="adamw", lr=1e-2)[named[0][0]], first[named[0][0]])
