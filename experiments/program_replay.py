"""What a plan's order costs its ops, without communication: each device's program run alone.

    PYTHONPATH=. python experiments/program_replay.py PLAN.json [--rounds 7] [--repeats 7] [--out DIR]

Data flow: a plan file -> one process per device, all at once (every core busy, as in the
pipeline; one intra-op thread each, `bench.real`'s malloc setting), each:
1. times the plan's model layer by layer twice: `profile_model` (what planning reads: each
   distinct layer's ops back to back, a small body layer in a chain of copies of itself, see
   `executor.profile.stage_copies`), and round-robin (`round_robin_times`:
   every repeat runs F of every distinct layer, then each one's backward, then each one's
   deferred W, so that every op runs after the other layers' ops, not after its own);
2. runs its rank's program `rounds` times through the executor's own interpreter
   (`RankRuntime.run_step`) with a loopback in place of gloo (`Loopback`: a receive is a
   seeded tensor of the boundary's shape, a send is dropped), every action timed;
3. times the layers again as in 1.
Per device, stage and op: the actions' median span against each timing's charge (the two
sessions and the processes averaged, no link or per-action cost: there are no hand-offs).
Replay / profile is what the program's order (the caches each op finds, the other layers' data
in between) does to the op; a launch's own spans (`experiments/actions.py`) add the hand-offs on top.
`section` renders the table (findings in experiments/NOTES.md). Run from the repository root: it
imports `bench.real`'s worker environment. Imports torch, the executor and the judge.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch

from adaptis_plan.executor.cpu import enter_cpu_rank
from adaptis_plan.executor.data import synthetic_batch
from adaptis_plan.executor.layers import boundary_spec, build_layer
from adaptis_plan.executor.lowering import lower
from adaptis_plan.executor.profile import (
    IN_FLIGHT,
    W_DEFERRED,
    backward,
    distinct_layers,
    layer_inputs,
    profile_model,
)
from adaptis_plan.executor.runtime import RankRuntime
from adaptis_plan.executor.wgrad import WeightGradStore
from adaptis_plan.judge.semantics import stage_costs
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.usecases import load_plan_and_model, load_plan_inputs
from bench.common import REPO
from bench.real import average_profiles, wait_all, worker_env

#: the two timings of step 1 (module docstring), in the order the report shows them
TIMINGS = ("profile", "round_robin")


def round_robin_times(
    model: ModelSpec, *, seq_len: int, micro_batch_size: int, repeats: int, warmup: int, seed: int, reverse: bool
) -> dict[int, dict[str, float]]:
    """{first layer of each distinct group: {"f", "i", "w", "w_hot", "b": median seconds}}, each op
    timed between the other layers' ops (module docstring, 1): per repeat, F of every layer in
    order, then the backward of each one's oldest held micro-batch (`IN_FLIGHT` stay alive, as in
    `profile_model`) last to first, then (split) each layer's W of the I `W_DEFERRED` repeats
    before. Passes: split (F, I, deferred W), hot (I, then its own W at once), fused (B)."""
    dev, dtype = torch.device("cpu"), torch.float32
    order = [g[0] for g in distinct_layers(model)]
    if reverse:
        order = order[::-1]
    layers = {i: build_layer(model, i, seed=seed) for i in order}
    inputs = {i: layer_inputs(model, i, seq_len, micro_batch_size, dev, dtype, seed) for i in order}
    times = {i: {k: [] for k in ("f", "i", "w", "w_hot", "b")} for i in order}
    steady = warmup + IN_FLIGHT + W_DEFERRED

    def forward(i: int) -> torch.Tensor:
        ids, labels, hidden = inputs[i]
        kind = model.layers[i].kind
        if kind == "embedding":
            return layers[i](ids)
        x = hidden.detach().requires_grad_()
        return layers[i](x, labels) if kind == "head" else layers[i](x)

    for mode in ("split", "hot", "fused"):
        store = WeightGradStore()
        held: dict[int, deque] = {i: deque() for i in order}
        stashed: dict[int, deque] = {i: deque() for i in order}
        for rep in range(steady + repeats):
            timed = rep >= steady
            for i in order:
                t0 = time.perf_counter()
                out = forward(i)
                if timed and mode == "split":
                    times[i]["f"].append(time.perf_counter() - t0)
                held[i].append(((i, rep), out))
                del out
            for i in order[::-1]:
                if len(held[i]) <= IN_FLIGHT:
                    continue
                key, old = held[i].popleft()
                grad = None if i == model.num_layers - 1 else torch.ones_like(old) / old.numel()
                t0 = time.perf_counter()
                backward(old, grad, store, None if mode == "fused" else key)
                t1 = time.perf_counter()
                del old
                if mode == "hot":
                    store.run(key)
                    if timed:
                        times[i]["w_hot"].append(time.perf_counter() - t1)
                elif mode == "split":
                    stashed[i].append(key)
                if timed:
                    times[i]["i" if mode != "fused" else "b"].append(t1 - t0)
            for i in order if mode == "split" else ():
                if len(stashed[i]) > W_DEFERRED:
                    t0 = time.perf_counter()
                    store.run(stashed[i].popleft())
                    if timed:
                        times[i]["w"].append(time.perf_counter() - t0)
        for i in order:  # untimed: no stash left behind
            while stashed[i]:
                store.run(stashed[i].popleft())
            for p in layers[i].parameters():
                p.grad = None
    return {i: {k: statistics.median(v) for k, v in t.items()} for i, t in times.items()}


class Loopback:
    """`RankRuntime.comm` without communication: a receive returns a seeded tensor of the
    boundary's shape (made before the action's clock starts, as a posted receive's buffer is),
    a send is dropped."""

    def __init__(self, boundaries: dict[int, tuple[tuple[int, ...], torch.dtype]], seed: int) -> None:
        self._boundaries, self._gen = boundaries, torch.Generator().manual_seed(seed)

    def start_step(self) -> None:
        pass

    def send(self, key: tuple[str, int, int], tensor: torch.Tensor) -> None:
        pass

    def recv(self, key: tuple[str, int, int]) -> torch.Tensor:
        kind, stage, _mb = key
        shape, dtype = self._boundaries[stage if kind == "act" else stage - 1]
        return (torch.randn(shape, generator=self._gen) * 1e-2).to(dtype)

    def finish(self) -> None:
        pass


def _timings(model: ModelSpec, seq_len: int, micro_batch_size: int, repeats: int, reverse: bool) -> dict:
    iso = profile_model(model, seq_len=seq_len, micro_batch_size=micro_batch_size, repeats=repeats, reverse=reverse)
    rr = round_robin_times(
        model, seq_len=seq_len, micro_batch_size=micro_batch_size, repeats=repeats, warmup=2, seed=0, reverse=reverse
    )
    return {"profile": iso.model_dump(mode="json"), "round_robin": {str(i): t for i, t in rr.items()}}


def worker(plan_path: str, device: int, rounds: int, repeats: int, out: Path) -> None:
    """Steps 1-3 of the module docstring for `device`, written to `out` as JSON."""
    enter_cpu_rank()
    plan, model = load_plan_and_model(plan_path)
    tr = plan.training
    before = _timings(model, tr.seq_len, tr.micro_batch_size, repeats, device % 2 == 1)
    rt = RankRuntime(
        rank=device, model=model, lowered=lower(plan_layout(plan), plan_programs(plan), tr.num_microbatches),
        micro_batch_size=tr.micro_batch_size, seq_len=tr.seq_len, seed=0, device=torch.device("cpu"),
        dtype=torch.float32, timeout_s=60.0, recompute=[st.recompute for st in plan.stages],
    )  # fmt: skip
    b = plan_layout(plan).bounds
    boundaries = {
        s: boundary_spec(model, b[s + 1] - 1, tr.micro_batch_size, tr.seq_len, torch.float32) for s in range(len(b) - 2)
    }  # what the runtime's P2P would carry between stages s and s + 1
    rt.comm = Loopback(boundaries, seed=device)  # type: ignore[assignment]
    spans = []
    for step in range(2 + rounds):  # two warm-up steps
        inputs, labels = synthetic_batch(
            model.vocab_size, tr.num_microbatches, tr.micro_batch_size, tr.seq_len, seed=0, step=step
        )
        rt.zero_grad()
        res = rt.run_step(inputs, labels)
        if step >= 2:
            spans.append([(name, end - start) for name, _s, _m, _op, start, end in res.actions])
    after = _timings(model, tr.seq_len, tr.micro_batch_size, repeats, device % 2 == 1)
    out.write_text(json.dumps({"device": device, "spans": spans, "sessions": [before, after]}))


@dataclass(frozen=True)
class Row:
    device: int
    stage: int
    op: str
    num_actions: int
    replay_s: float  # the actions' summed median spans
    charged_s: dict[str, float]  # timing -> what it charges the same actions


def compare(plan_path: str, results: list[dict], work: Path) -> list[Row]:
    """Per device, stage and op: the replay's spans against each timing's charge (module docstring)."""
    plan, model = load_plan_and_model(plan_path)
    layout, programs = plan_layout(plan), plan_programs(plan)
    sessions = [s for r in results for s in r["sessions"]]
    iso = average_profiles([s["profile"] for s in sessions])
    iso.pop("link", None)
    iso["action_overhead_s"] = 0.0
    rr = json.loads(json.dumps(iso))
    for entry in rr["entries"]:
        got = [s["round_robin"][str(entry["layers"][0])] for s in sessions]
        for key in ("f", "i", "w", "w_hot", "b"):
            entry[f"{key}_s"] = statistics.fmean(g[key] for g in got)
    charges = {}
    for name, prof in zip(TIMINGS, (iso, rr), strict=True):
        path = work / f"profile-{name}.json"
        path.write_text(json.dumps(prof))
        charges[name] = stage_costs(layout, load_plan_inputs(plan_path, costs_path=str(path)).cost_table())
    rows = []
    for r in sorted(results, key=lambda r: r["device"]):
        d, program = r["device"], programs[r["device"]]
        medians = [statistics.median(step[k][1] for step in r["spans"]) for k in range(len(program))]
        groups: dict[tuple[int, str], list[int]] = {}
        for k, a in enumerate(program):
            groups.setdefault((a.stage, a.op), []).append(k)
        for (stage, op), ks in sorted(groups.items()):
            charged = {}
            for name, sc in charges.items():
                total = 0.0
                for k in ks:
                    prev = program[k - 1] if k else None
                    hot = (
                        op == "W"
                        and prev is not None
                        and prev.op == "I"
                        and (prev.stage, prev.mb) == (stage, program[k].mb)
                    )
                    total += sc.w_hot[stage] if hot else getattr(sc, op.lower())[stage]
                charged[name] = total
            rows.append(Row(d, stage, op, len(ks), sum(medians[k] for k in ks), charged))
    return rows


def run(plan_path: str, rounds: int, repeats: int, work: Path) -> list[Row]:
    """One worker process per device of the plan, all at once; their results compared."""
    plan, _ = load_plan_and_model(plan_path)
    env = worker_env()
    procs, outs = [], []
    for d in range(plan_layout(plan).num_devices):
        out = work / f"device{d}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), plan_path, "--worker", str(d), "--rounds", str(rounds),
               "--repeats", str(repeats), "--out", str(out)]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    wait_all(procs, 1800, "a replay worker")
    return compare(plan_path, [json.loads(o.read_text()) for o in outs], work)


def render(rows: list[Row]) -> str:
    lines = [
        "| device | stage | op | actions | replay ms | " + " | ".join(f"{t} ms (replay / it)" for t in TIMINGS) + " |"
    ]
    lines.append("|" + "---|" * (5 + len(TIMINGS)))
    for r in rows:
        cells = " | ".join(f"{r.charged_s[t] * 1e3:.1f} ({r.replay_s / r.charged_s[t] - 1:+.0%})" for t in TIMINGS)
        lines.append(f"| d{r.device} | {r.stage} | {r.op} | {r.num_actions} | {r.replay_s * 1e3:.1f} | {cells} |")
    for d in sorted({r.device for r in rows}):
        mine = [r for r in rows if r.device == d]
        replay = sum(r.replay_s for r in mine)
        cells = ", ".join(f"{t} {replay / sum(r.charged_s[t] for r in mine) - 1:+.1%}" for t in TIMINGS)
        lines.append(f"\nd{d}: replay busy {replay * 1e3:.1f} ms; replay / charge - 1: {cells}")
    return "\n".join(lines)


HEADING = "## Program order without communication (CPU)"
#: the plans of the section, per model of `bench.real`'s cases
SECTION_STRATEGIES = ("1F1B", "ZBVZeroBubble", "adaptive")


def section(command: str, quick: bool) -> str:
    """The BENCHMARKS.md section: every `bench.real` case's 1F1B and ZBVZeroBubble plans (uniform
    split) and adaptive plan, planned on the analytic `cpu` costs (the order is what is measured
    here, not the costs), each replayed (`run`); per device, replay busy / each timing's charge."""
    import datetime as dt

    from adaptis_plan.planfile.io import write_plan
    from adaptis_plan.usecases import PlanRequest, make_plan_for
    from bench.common import machine
    from bench.real import FULL, QUICK
    from bench.records import checkout

    t0 = time.perf_counter()
    cfg = QUICK if quick else FULL
    rounds, repeats = (2, 3) if quick else (7, 7)
    lines = [
        "| model | shape | plan | device | replay busy ms | vs the profile | vs round-robin timing"
        " | the op furthest from the profile (summed over its actions) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    iso_all, rr_all = [], []
    with tempfile.TemporaryDirectory(prefix="adaptis-replay-") as tmp:
        for case in cfg.cases:
            for strategy in SECTION_STRATEGIES[-1:] if quick else SECTION_STRATEGIES:
                req = PlanRequest.of(
                    model_arg=case.model, hardware_arg="cpu", pp=2, num_microbatches=case.num_microbatches,
                    seq_len=case.seq_len, micro_batch_size=case.micro_batch_size, strategy=strategy,
                    partition=None if strategy == "adaptive" else "uniform", time_limit_s=cfg.time_limit_s,
                )  # fmt: skip
                work = Path(tmp) / f"{case.model}-{strategy}"
                work.mkdir()
                plan_path = str(work / "plan.json")
                outcome = make_plan_for(req)
                write_plan(outcome.plan, plan_path)
                rows = run(plan_path, rounds, repeats, work)
                name = strategy + (
                    f" (head in {outcome.plan.model.head_chunks} chunks)" if outcome.plan.model.head_chunks > 1 else ""
                )
                shape = f"seq {case.seq_len}, {case.num_microbatches} micro-batches"
                for d in sorted({r.device for r in rows}):
                    mine = [r for r in rows if r.device == d]
                    replay = sum(r.replay_s for r in mine)
                    iso = replay / sum(r.charged_s["profile"] for r in mine) - 1
                    rr = replay / sum(r.charged_s["round_robin"] for r in mine) - 1
                    iso_all.append(iso)
                    rr_all.append(rr)
                    far = max(mine, key=lambda r: abs(r.replay_s - r.charged_s["profile"]))
                    off = far.replay_s - far.charged_s["profile"]
                    lines.append(
                        f"| {case.model} | {shape} | {name} | d{d} | {replay * 1e3:.1f} | {iso:+.1%} | {rr:+.1%}"
                        f" | stage {far.stage} {far.op}: {off * 1e3:+.1f} ms ({off / far.charged_s['profile']:+.0%}) |"
                    )
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    prov = (
        f"_Reproduce: `{command} --sections replay` · machine: {machine()} · date: {now} · commit:"
        f" `{checkout()[0]}{'' if checkout()[1] else '+dirty'}` · section wall time {time.perf_counter() - t0:.0f} s_"
    )
    med = statistics.median
    intro = [
        "Each device's program of a plan run alone through the executor's own interpreter, with a loopback"
        " in place of gloo (a receive is a seeded tensor, a send is dropped), both devices at once (every core"
        f" busy), {rounds} steps after 2 warm-up; against the layer timings taken in the same processes just"
        " before and after (`python experiments/program_replay.py PLAN`). Profile = `adaptis profile` (what planning"
        " reads: each distinct layer's ops back to back, a small body layer in a chain of copies of itself);"
        " round-robin = every op after the other"
        " distinct layers' ops. Figures: the device's summed action spans / what the timing charges the same"
        " actions − 1 (positive: the program ran slower than the timing says). Plans on the analytic `cpu`"
        " costs (the order is measured, not the costs); fp32, one thread per process, `bench.real`'s malloc"
        " setting.",
        "",
        f"Median over devices: {med(iso_all):+.1%} against the profile (range {min(iso_all):+.1%} to"
        f" {max(iso_all):+.1%}), {med(rr_all):+.1%} against the round-robin one ({min(rr_all):+.1%} to"
        f" {max(rr_all):+.1%}). " + _reading(iso_all, rr_all),
        "",
    ]
    return "\n".join([HEADING, "", prov, "", *intro, *lines, ""])


def _reading(iso: list[float], rr: list[float]) -> str:
    """What the section's figures say, from the figures."""
    if min(iso) < 0 < max(iso):
        first = (
            "Without communication the programs run within"
            f" {max(abs(x) for x in iso):.0%} of their profile, some faster, some slower: the order"
            " of the ops (the caches each one finds) moves a device's time by no common sign, so it does not"
            " explain a launch's excess over the profile by itself (a launch's own spans: `experiments/actions.py`)."
        )
    else:
        first = (
            f"Every device ran {'slower' if min(iso) > 0 else 'faster'} than its profile"
            f" ({min(iso):+.1%} to {max(iso):+.1%}): the order of the ops itself moves the time that way."
        )
    closer = "round-robin" if abs(statistics.median(rr)) < abs(statistics.median(iso)) else "profile"
    return first + f" The {closer} timing is the closer of the two (median)."


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python experiments/program_replay.py", description=__doc__.splitlines()[0])
    p.add_argument("plan", help="plan file (its embedded model is the one run)")
    p.add_argument("--rounds", type=int, default=7, help="timed steps per device (after two warm-up steps)")
    p.add_argument("--repeats", type=int, default=7, help="repeats per op of each layer timing")
    p.add_argument("--out", default=None, help="folder for the per-device results (default: a temporary one)")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        worker(args.plan, args.worker, args.rounds, args.repeats, Path(args.out))
        return
    with tempfile.TemporaryDirectory(prefix="adaptis-replay-") as tmp:
        work = Path(args.out) if args.out else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(render(run(args.plan, args.rounds, args.repeats, work)))


if __name__ == "__main__":
    main()
