"""Where a plan's measured step goes: its dependency graph replayed with the run's own action spans.

Run on the output of a `bench.torch_runtime` launch whose config set `record_actions`:

    python experiments/actions.py OUT_DIR RUN_NAME PLAN.json [--model MODEL] [--costs PROFILE.json]

Data flow: both ranks' `action_spans_s[RUN_NAME]` (per measured round, every action's name, start
and end in the rank's program order) + the plan file -> the judge's dependency replay
(`judge.semantics.replay`, with the plan's P2P times from `--costs` or its own) fed
(a) each round's measured spans: its median over the rounds should be the measured step, which
    checks the dependency and link model;
(b) each action's median span over the rounds: the step without variation within a round;
(c) nothing measured: the simulated step, the prediction.
(a) - (b) is what variation within a round costs this plan (a plan without slack on either device
pays both devices' delays); (b) - (c) is the per-op cost the profile missed. Also: the actions
that ran more than `OUTLIER_S` over their own median, by whether they send or receive across
devices. Imports the adaptis use cases and the judge; findings in experiments/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaptis_plan.core import Layout, Programs
from adaptis_plan.judge.semantics import Flat, StageCosts, check_programs, replay, stage_costs
from adaptis_plan.judge.simulate import simulate
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.usecases import load_plan_inputs

#: an action this much over its own median span (across rounds) counts as an outlier
OUTLIER_S = 1e-3


@dataclass(frozen=True)
class Breakdown:
    measured_s: float  # the run's step (rank 0's barrier-to-barrier median)
    replayed_s: float  # (a): median over rounds of the replay with that round's spans
    median_spans_s: float  # (b)
    predicted_s: float  # (c): the simulated step
    outliers: dict[str, tuple[int, int]]  # "F sends" ... -> (outliers, actions) over all rounds


def replay_step(
    layout: Layout, programs: Programs, num_microbatches: int, sc: StageCosts, flat: Flat, spans: list
) -> float:
    """The step of `programs` (checked: `flat`) when every action takes the given seconds (`spans[d][k]`),
    P2P as in `sc`."""
    seconds = np.array([x for row in spans for x in row], dtype=float)
    run = replay(
        layout, programs, num_microbatches, None, (sc.p2p_act, sc.p2p_grad), (sc.occ_act, sc.occ_grad),
        flat=flat, action_durations=seconds,
    )  # fmt: skip
    return max((row[-1] for row in run.ends if row), default=0.0)


def _kind(layout: Layout, device: int, stage: int, op: str) -> str:
    last, dev = layout.num_stages - 1, layout.stage_device
    sends = (op == "F" and stage < last and dev[stage + 1] != device) or (
        op in "IB" and stage > 0 and dev[stage - 1] != device
    )
    receives = (op == "F" and stage > 0 and dev[stage - 1] != device) or (
        op in "IB" and stage < last and dev[stage + 1] != device
    )
    return op + (" sends" if sends else "") + (" receives" if receives else "")


def breakdown(
    ranks: list[dict], run: str, plan_path: str, *, model_arg: str | None = None, costs_path: str | None = None
) -> Breakdown:
    """(a), (b), (c) and the outliers of `run` (module docstring); `ranks`: the launch's rank{r}.json."""
    inputs = load_plan_inputs(plan_path, model_arg=model_arg, costs_path=costs_path)
    layout, programs, m = plan_layout(inputs.plan), plan_programs(inputs.plan), inputs.plan.training.num_microbatches
    costs = inputs.cost_table()
    sc, flat = stage_costs(layout, costs), check_programs(layout, programs, m)
    rounds = [r["action_spans_s"][run] for r in ranks]  # [device][round][action] = (name, start, end)
    n_rounds = min(len(x) for x in rounds)
    for d, program in enumerate(programs):
        names = [str(a) for a in program]
        for k in range(n_rounds):
            if [x[0] for x in rounds[d][k]] != names:
                raise ValueError(f"{run}: device {d}'s recorded actions in round {k} are not the plan's program")
    durations = [[[e - s for _, s, e in rounds[d][k]] for d in range(len(ranks))] for k in range(n_rounds)]
    medians = [
        [statistics.median(durations[k][d][a] for k in range(n_rounds)) for a in range(len(programs[d]))]
        for d in range(len(ranks))
    ]
    outliers: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for d, program in enumerate(programs):
        for a, act in enumerate(program):
            kind = _kind(layout, d, act.stage, act.op)
            for k in range(n_rounds):
                totals[kind] += 1
                outliers[kind] += durations[k][d][a] - medians[d][a] > OUTLIER_S
    return Breakdown(
        measured_s=statistics.median(ranks[0]["step_times_s"][run]),
        replayed_s=statistics.median(replay_step(layout, programs, m, sc, flat, durations[k]) for k in range(n_rounds)),
        median_spans_s=replay_step(layout, programs, m, sc, flat, medians),
        predicted_s=simulate(layout, costs, programs, m).step_time_s,
        outliers={k: (outliers[k], totals[k]) for k in sorted(totals)},
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python experiments/actions.py", description=__doc__.splitlines()[0])
    p.add_argument("out", help="the launch's output folder (rank0.json, rank1.json, ...)")
    p.add_argument("run", help="the run's name in the launch config")
    p.add_argument("plan", help="the run's plan file")
    p.add_argument("--model", default=None)
    p.add_argument("--costs", default=None, help="profile for the P2P times and the prediction (default: the plan's)")
    args = p.parse_args(argv)
    ranks = [json.loads(f.read_text()) for f in sorted(Path(args.out).glob("rank*.json"))]
    b = breakdown(ranks, args.run, args.plan, model_arg=args.model, costs_path=args.costs)
    ms = 1e3
    print(f"measured {b.measured_s * ms:.1f} ms; replayed with each round's spans {b.replayed_s * ms:.1f};")
    print(f"  with each action's median span {b.median_spans_s * ms:.1f}; predicted {b.predicted_s * ms:.1f}")
    print(f"  variation within a round costs {(b.replayed_s - b.median_spans_s) * ms:.1f} ms,")
    print(f"  per-op cost over the profile {(b.median_spans_s - b.predicted_s) * ms:.1f} ms")
    for kind, (n, total) in b.outliers.items():
        print(f"  {kind}: {n} of {total} actions over {OUTLIER_S * ms:.0f} ms past their median")


if __name__ == "__main__":
    main()
