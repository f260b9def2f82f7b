"""A stage of several layers against the sum of its layers' profiled times, in one process.

    python experiments/stage_chain.py MODEL FIRST LAST [--seq-len 256] [--rounds 4] [--reverse]

Data flow: a model (zoo name or spec) -> the executor's `Stage` of layers FIRST..LAST-1 timed as a
split-backward stage runs (F of a new micro-batch with two others held, the I of the oldest with its
weight GEMMs deferred, then the W of the I before), alternated in `rounds` rounds with
`profile_model` of the whole model (what planning reads: each distinct layer's ops back to back,
a small body layer in a chain of copies of itself, `executor.profile.stage_copies`)
-> per op, the stage's median against the sum of its layers' profiled times. The planner costs a
stage as that sum; the difference is what running the layers one after another (each its own
weights, the previous one's output as input) adds. Run two copies at once (one with `--reverse`)
to keep both cores busy, as the bench does. Imports torch and the executor.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque
from dataclasses import dataclass

import torch

from adaptis_plan.executor.cpu import enter_cpu_rank
from adaptis_plan.executor.profile import IN_FLIGHT, W_DEFERRED, backward, layer_inputs, profile_model
from adaptis_plan.executor.runtime import Stage
from adaptis_plan.executor.wgrad import WeightGradStore
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.spec.model import ModelSpec

OPS = ("f", "i", "w")


@dataclass(frozen=True)
class StageVsLayers:
    stage_s: dict[str, float]  # op -> the stage's median seconds
    layers_s: dict[str, float]  # op -> the sum of its layers' profiled seconds (median over rounds)


def _time_stage(model: ModelSpec, first: int, last: int, seq_len: int, repeats: int) -> dict[str, float]:
    stage = Stage(model, 0 if first == 0 else 1, first, last, seed=0)
    has_head = last == model.num_layers
    ids, labels, hidden = layer_inputs(model, first, seq_len, 1, torch.device("cpu"), torch.float32, 0)
    store = WeightGradStore()
    times: dict[str, list[float]] = {op: [] for op in OPS}
    held: deque = deque()
    stashed: deque = deque()
    steady = IN_FLIGHT + W_DEFERRED  # micro-batches held and a W's later I's, as in `profile_model`
    for rep in range(steady + repeats):
        x = ids if first == 0 else hidden.detach().requires_grad_()
        t0 = time.perf_counter()
        out = stage(x, labels if has_head else None)
        times["f"].append(time.perf_counter() - t0)
        held.append((rep, out))
        del out
        if len(held) > IN_FLIGHT:
            key, old = held.popleft()
            grad = None if has_head else torch.ones_like(old) / old.numel()
            t0 = time.perf_counter()
            backward(old, grad, store, key)
            times["i"].append(time.perf_counter() - t0)
            del old
            stashed.append(key)
            if len(stashed) > W_DEFERRED:
                t0 = time.perf_counter()
                store.run(stashed.popleft())
                times["w"].append(time.perf_counter() - t0)
    while stashed:
        store.run(stashed.popleft())
    return {op: statistics.median(v[-repeats:]) for op, v in times.items()}


def compare(
    model: ModelSpec, first: int, last: int, *, seq_len: int, rounds: int, repeats: int = 9, reverse: bool = False
) -> StageVsLayers:
    """The stage of layers [first, last) against the sum of its layers' `profile_model` times (module docstring)."""
    enter_cpu_rank()
    stage_rounds, layer_rounds = [], []
    for _ in range(rounds):
        stage_rounds.append(_time_stage(model, first, last, seq_len, repeats))
        prof = profile_model(model, seq_len=seq_len, micro_batch_size=1, repeats=repeats, reverse=reverse)
        total = dict.fromkeys(OPS, 0.0)
        for e in prof.entries:
            n = sum(1 for layer in e.layers if first <= layer < last)
            for op in OPS:
                total[op] += n * getattr(e, f"{op}_s")
        layer_rounds.append(total)
    med = statistics.median
    return StageVsLayers(
        {op: med(r[op] for r in stage_rounds) for op in OPS}, {op: med(r[op] for r in layer_rounds) for op in OPS}
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python experiments/stage_chain.py", description=__doc__.splitlines()[0])
    p.add_argument("model", help="zoo name or model spec")
    p.add_argument("first", type=int, help="the stage's first layer")
    p.add_argument("last", type=int, help="one past its last layer")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--rounds", type=int, default=4, help="(stage, profile) pairs, alternated")
    p.add_argument("--reverse", action="store_true", help="profile the layers last to first (the second copy)")
    args = p.parse_args(argv)
    model = load_model(args.model)
    got = compare(model, args.first, args.last, seq_len=args.seq_len, rounds=args.rounds, reverse=args.reverse)
    print(
        f"{model.name} layers {args.first}-{args.last - 1}: "
        + "; ".join(
            f"{op.upper()} stage {got.stage_s[op] * 1e3:.2f} ms, layers {got.layers_s[op] * 1e3:.2f} ms"
            f" ({got.stage_s[op] / got.layers_s[op] - 1:+.1%})"
            for op in OPS
        )
    )


if __name__ == "__main__":
    main()
