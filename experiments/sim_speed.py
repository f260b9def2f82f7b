"""Simulator throughput: how many actions per second `simulate` judges.

Run: `python experiments/sim_speed.py [--devices 16] [--microbatches 4167] [--repeat 3]`

Builds zero-bubble-style 1F1B programs (F, I, W per stage and micro-batch: P * M * 3 actions,
200,016 with the defaults) and an interleaved 1F1B-like program with two stages per device
and B (P * 2 * M * 2 actions) locally — the simulator's judge role means no builder from
`adaptis_plan.schedules` is used — then times `simulate` (which includes `check_programs`).
Target: 200,000 actions in under 2 s.
"""

from __future__ import annotations

import argparse
import time

from adaptis_plan.core import Action, Layout, Programs, uniform_costs
from adaptis_plan.judge.simulate import simulate


def one_f_one_b_split(num_devices: int, num_microbatches: int) -> Programs:
    """1F1B with each B split into I then W right away (one stage per device)."""
    programs: Programs = []
    for d in range(num_devices):
        warmup = min(num_devices - d - 1, num_microbatches)
        prog: list[Action] = [Action(d, "F", mb) for mb in range(warmup)]
        f = warmup
        for b in range(num_microbatches):
            if f < num_microbatches:
                prog.append(Action(d, "F", f))
                f += 1
            prog += [Action(d, "I", b), Action(d, "W", b)]
        programs.append(prog)
    return programs


def interleaved_breadth_first(num_devices: int, num_microbatches: int) -> Programs:
    """Two looped stages per device; all forwards of a round, then all backwards (valid, not tuned)."""
    num_stages = 2 * num_devices
    programs: Programs = [[] for _ in range(num_devices)]
    for s in range(num_stages):
        programs[s % num_devices] += [Action(s, "F", mb) for mb in range(num_microbatches)]
    for s in reversed(range(num_stages)):
        programs[s % num_devices] += [Action(s, "B", mb) for mb in range(num_microbatches)]
    return programs


def _time(layout: Layout, programs: Programs, num_microbatches: int, repeat: int) -> tuple[int, float, float]:
    costs = uniform_costs(layout.num_layers, layout.num_devices, f=1e-3, i=1e-3, w=1e-3, out=1e6, bw=1e11, latency=1e-5)
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = simulate(layout, costs, programs, num_microbatches)
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return sum(len(p) for p in programs), best, result.step_time_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=4167)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    p, m = args.devices, args.microbatches

    layout = Layout(tuple(range(p + 1)), tuple(range(p)), p)
    n, secs, step = _time(layout, one_f_one_b_split(p, m), m, args.repeat)
    print(
        f"1F1B (F/I/W)      P={p} M={m}: {n:,} actions in {secs:.3f} s = {n / secs:,.0f} actions/s (step {step:.3f} s)"
    )

    m2 = max(1, m * 3 // 4)
    layout2 = Layout(tuple(range(2 * p + 1)), tuple(s % p for s in range(2 * p)), p)
    n, secs, step = _time(layout2, interleaved_breadth_first(p, m2), m2, args.repeat)
    print(
        f"interleaved (F/B) P={p} M={m2}: {n:,} actions in {secs:.3f} s = {n / secs:,.0f} actions/s (step {step:.3f} s)"
    )


if __name__ == "__main__":
    main()
