"""Real execution on this CPU machine: PP=2 over gloo, torch's own pipeline runtime vs adaptis' executor.

Run: `python -m bench.real [--quick] [--models tiny-gemma,...] [--rounds N] [--allow-dirty]` writes the
suite's record to bench/results/real.json (the full run takes about half an hour on 2 cores; `--quick`
a few minutes); `python -m bench.run` calls `run_suite` and renders the record with `render`.
With `BENCH_REAL_WORK=DIR` the profiles, plans and launch outputs are kept in DIR.

Data flow, per tiny model (`ModelCase`):
1. measure: `adaptis profile` (= `executor.profile.profile_model`, one intra-op thread and
   denormals flushed, as each rank runs (`executor.cpu`); the repeats in rounds, each timing every
   layer; with the head also split into 2, 3 and 4 vocabulary chunks), two copies at once in
   fresh processes with `MALLOC_ENV` as the two ranks run, averaged -> a cost profile, plus the
   gloo link (`measure_link` with what each message end costs a computing rank, median of a few
   measurements, once per run) ->
   `<work>/<model>/profile.json`;
2. plan with it (`app.plan.make_plan_for`, hardware `cpu`, `costs_path` = that profile): the
   classic `GPipe`, `1F1B`, `Interleaved1F1B`, `ZBVZeroBubble` on the uniform partition, and
   `adaptive`; `plan.predicted.expected_step_time_s` is adaptis' simulation with the measured profile,
   each action's time varying as the profile measured (`predictions`; `step_time_s` without that).
   Plus `1F1B+recompute`: 1F1B on the uniform partition with every stage marked for full
   recomputation, planned with the same profile (`--recompute full`: the cost table charges each
   decoder block's I its measured forward once more and keeps only the block's input);
   our executor runs it with the recomputation for real (torch's runtime does not run it);
   When adaptive splits the head into vocabulary chunks, the split model is profiled too (after
   the launches, step 3: nothing stands between the planning profile and the launches) and the
   adaptive plan re-simulated with it (a diagnostic column: the planner itself costs the
   chunks from the chunks the planning profile measured; this profile and the after-run one measure
   the layers alone and take the planning profile's link and time per action, `RUNTIME_KEYS`);
3. torchrun launches (`bench.torch_runtime`, 2 ranks, gloo, one thread each; `launches` per model, the
   measured rounds split among them; all models are profiled and planned first, and both the profiling
   sessions and the launches go round the models: `SPREAD`); each builds torch's
   schedule classes over the classic plans' own stages (the split and stage-to-rank map are
   the plan's, checked against torch's loop / V mapping) and our `RankRuntime` on every plan,
   and steps them in alternating rounds (A B ... B A), so noise hits all alike; one more item of
   the rotation profiles the model (and its split-head form) again, on both ranks at once, a few
   repeats per round (`InRunProfile`): each plan is also simulated with that in-launch profile,
   once per kept round with that round's profile (paired with the round's step) and once with
   each layer's median over the rounds;
4. the launches' rounds merged (`merge_launches`); medians of the measured rounds -> per-model tables
   and the three targets below.
Imports `adaptis_plan` (planning, plan IO, the executor's link measurement) and `bench.records`
(torch is imported with `executor.profile`); everything measured runs in subprocesses: `adaptis
profile`, the link probe, and the ranks, which run `bench.torch_runtime`.

Targets (issue "Benchmarks" part 3 and the executor's prediction target):
- ours / torch on the identical schedule and split <= 1.10 (every classic schedule, every model);
- adaptive vs the best torch schedule >= 1.3x on tiny-gemma (the head is the heaviest layer);
- predicted vs measured step time within 15% for every plan we run (planning-time profile), and
  within 10% when each plan is simulated with its layers profiled inside the launch, between the
  steps (`bench.torch_runtime.InRunProfile`; the median over the kept rounds of each round's error,
  its step against that round's profile: on a shared VM the machine's speed drifts by several %
  within seconds, and the profile and steps of one round see the same stretch of it);
- the recompute plan predicted as well as the plans without recomputation: its absolute error
  no larger than the worst of that model's plans without it (or within 15%).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO

CLASSIC = ("GPipe", "1F1B", "Interleaved1F1B", "ZBVZeroBubble")
STRATEGIES = (*CLASSIC, "adaptive")
RECOMPUTE = "1F1B+recompute"  # 1F1B on the uniform split with every stage recomputing its blocks in full
RUNS = (*STRATEGIES, RECOMPUTE)
HEADING = "## Real execution (CPU, gloo)"
PP = 2

TARGET_RATIO = 1.10  # ours / torch, identical schedule + split
TARGET_SPEEDUP = 1.30  # adaptive vs best torch schedule, on TARGET_SPEEDUP_MODEL
TARGET_SPEEDUP_MODEL = "tiny-gemma"
TARGET_ERROR = 0.15  # |predicted - measured| / measured, planning-time profile
TARGET_ERROR_IN_RUN = 0.10  # the same, each plan simulated with its layers profiled inside the launch
LOSS_TOL = 1e-5
#: why each model's profiling sessions and launches are spread over the run, going round the models
SPREAD = (
    "the host's speed moves from second to second and over minutes, memory-bound layers most (experiments/NOTES.md);"
    " a profile taken in one stretch of time and steps run in another differ by whatever the host did in between,"
    " so each model's profiling sessions, and its measured rounds, are spread over the whole run, going round the"
    " models, as the rounds of one launch go round the plans (A B … B A)"
)


@dataclass(frozen=True)
class ModelCase:
    """One tiny model at PP=2 and a step shape that takes ~50-500 ms on one core per rank."""

    model: str
    seq_len: int
    num_microbatches: int
    micro_batch_size: int = 1

    @property
    def shape(self) -> str:
        return f"seq {self.seq_len}, {self.num_microbatches} micro-batches of {self.micro_batch_size}"


@dataclass(frozen=True)
class RealConfig:
    cases: tuple[ModelCase, ...]
    warmup: int = 2  # rounds not in the medians (torch infers its stage shapes in the first)
    # measured rounds; every run takes one step per round (a plan's median over n rounds moves as 1 / sqrt(n)
    # of one round's spread)
    rounds: int = 21
    time_limit_s: float = 5.0  # adaptive search
    profile_repeats: int = 7
    profile_procs: int = PP  # concurrent profiler processes (as many as ranks: the same contention)
    # the planning profile also measures the runtime's time per action (`adaptis profile --runtime`); without it
    # the plans charge none (the CI smoke: tests/executor/test_profile.py measures it)
    profile_runtime: bool = True
    # planning profiles of each model, their per-layer median planned with; the sessions go round the models
    profile_sessions: int = 3
    # launches per model, the measured rounds split among them; they go round the models (`SPREAD`)
    launches: int = 2
    link_samples: int = 3  # gloo link measurements (median); 0 = keep the `cpu` profile's guess
    seed: int = 0
    timeout_s: float = 600.0  # one torchrun launch
    keep_memory: bool = True  # MALLOC_ENV for the profiler and both ranks
    quiet_wait_s: float = 20.0  # before profiling and before the launch: wait for other jobs to calm down
    quiet_share: float = 0.10  # rounds where other processes took more of the machine are dropped
    label: str = "full"

    @property
    def launch_rounds(self) -> list[int]:
        """Measured rounds per launch of a model: `rounds` over `launches` (at most one launch per round)."""
        return part_rounds(self.rounds, max(1, min(self.launches, self.rounds)))


FULL = RealConfig(
    cases=(
        ModelCase("tiny-llama", 256, 8),
        ModelCase("tiny-gemma", 128, 4),
        ModelCase("tiny-deepseek", 128, 8),
        ModelCase("tiny-nemotron-h", 256, 8),
    )
)
QUICK = RealConfig(
    cases=(ModelCase("tiny-gemma", 64, 4),),
    warmup=1,
    rounds=3,
    time_limit_s=1.0,
    profile_repeats=3,
    profile_sessions=1,
    launches=1,
    link_samples=3,
    label="quick",
)


# ----------------------------------------------------------------------------- results


@dataclass
class PlanRun:
    """One plan of one model: predicted, and measured under our runtime (and torch's, if classic)."""

    strategy: str
    stages: list[tuple[int, int, int]]  # (start, stop, device) per stage
    predicted_s: float
    predicted_busy_s: list[dict[str, float]]  # per device: op letter -> summed simulated action spans
    ours_s: list[float]  # measured step times, rounds after warm-up
    ours_busy_s: list[list[dict[str, float]]]  # per round, per device: op letter -> summed measured spans
    ours_losses: list[float]
    torch_s: list[float] | None = None
    torch_losses: list[float] | None = None
    head_chunks: int = 1
    source: str = ""
    plan_time_s: float = 0.0
    num_actions: list[int] = field(default_factory=list)  # per device
    predicted_chunks_s: float | None = None  # re-simulated with the split head's chunks profiled as such
    predicted_after_s: float | None = None  # re-simulated with a second profile taken right after the runs
    #: re-simulated with the layers it runs profiled inside the launch, between the steps (a split head as its
    #: chunks): each layer's median over the rounds; then per kept round, with that round's profile alone
    predicted_in_run_s: float | None = None
    predicted_in_run_rounds_s: list[float] = field(default_factory=list)
    #: the step with every action at its cost (no variation charged; `predictions`): the planning profile's,
    #: and per kept round the in-launch one's (None / empty: the same as the prediction)
    predicted_fixed_s: float | None = None
    predicted_in_run_rounds_fixed_s: list[float] = field(default_factory=list)
    #: "F3" (op letter, stage) -> summed simulated action spans; the same measured, per kept round
    predicted_stage_busy_s: dict[str, float] = field(default_factory=dict)
    ours_stage_busy_s: list[dict[str, float]] = field(default_factory=list)
    #: minor page faults of our runtime's step, both ranks together, per kept round (memory touched afresh)
    page_faults: list[int] = field(default_factory=list)

    @property
    def ours(self) -> float:
        return statistics.median(self.ours_s)

    @property
    def torch(self) -> float | None:
        return statistics.median(self.torch_s) if self.torch_s else None

    @property
    def ratio(self) -> float | None:
        t = self.torch
        return self.ours / t if t else None

    @property
    def error(self) -> float:
        """(predicted - measured) / measured of our runtime: negative = the prediction is optimistic."""
        return (self.predicted_s - self.ours) / self.ours

    @property
    def in_run_error(self) -> float | None:
        """`error` with the prediction re-simulated from the in-launch profile, paired by round: the median over
        the kept rounds of (that round's prediction - that round's step) / that round's step. The machine's
        speed drifts by several % within seconds; a round's profile and steps see the same stretch of it.
        Without the per-round profiles: the round medians' error (`in_run_median_error`)."""
        rounds = self.in_run_round_errors
        return statistics.median(rounds) if rounds else self.in_run_median_error

    @property
    def in_run_round_errors(self) -> list[float]:
        """Each kept round's error with that round's in-launch profile (empty without per-round profiles)."""
        return self._round_errors(self.predicted_in_run_rounds_s)

    def _round_errors(self, predicted: list[float]) -> list[float]:
        """Each kept round's (prediction - step) / step, paired by round (empty without predictions)."""
        return [(p - m) / m for p, m in zip(predicted, self.ours_s, strict=True)] if predicted else []

    @property
    def fixed_errors(self) -> tuple[float, float | None]:
        """(`error`, `in_run_error`) with every action at its cost (`predicted_fixed_s`): what the prediction
        would miss without the variation the profiles measured."""
        fixed = self.predicted_s if self.predicted_fixed_s is None else self.predicted_fixed_s
        rounds = self.predicted_in_run_rounds_fixed_s or self.predicted_in_run_rounds_s
        paired = self._round_errors(rounds)
        return (fixed - self.ours) / self.ours, (statistics.median(paired) if paired else self.in_run_error)

    @property
    def in_run_median_error(self) -> float | None:
        """`error` with the prediction re-simulated from the in-launch profile's medians over the rounds."""
        return None if self.predicted_in_run_s is None else (self.predicted_in_run_s - self.ours) / self.ours

    @property
    def drift(self) -> float | None:
        """How far the same plan's prediction moves with a profile taken after the runs."""
        return None if self.predicted_after_s is None else self.predicted_after_s / self.predicted_s - 1.0

    @property
    def loss_diff(self) -> float | None:
        if not self.torch_losses:
            return None
        return max(abs(a - b) for a, b in zip(self.ours_losses, self.torch_losses, strict=True))

    def busy(self, device: int, ops: str = "FIWB") -> float:
        """Measured compute time of `device` in one step (median over rounds), `ops` only."""
        return statistics.median(sum(r[device][op] for op in ops) for r in self.ours_busy_s)

    def predicted_busy(self, device: int, ops: str = "FIWB") -> float:
        return sum(self.predicted_busy_s[device][op] for op in ops)

    def inflation(self, ops: str = "FIWB") -> float | None:
        """Measured / predicted compute of `ops` over both devices, minus 1 (None when none is planned)."""
        devices = range(len(self.predicted_busy_s))
        pred = sum(self.predicted_busy(d, ops) for d in devices)
        return sum(self.busy(d, ops) for d in devices) / pred - 1.0 if pred > 0 else None

    def extra_per_action(self) -> float:
        """(measured - predicted) compute per action, seconds, over both devices."""
        devices = range(len(self.predicted_busy_s))
        extra = sum(self.busy(d) - self.predicted_busy(d) for d in devices)
        return extra / max(sum(self.num_actions), 1)

    def stage_inflation(self, stage: int, op: str) -> float | None:
        """Measured / predicted compute of `op` on `stage` (median over rounds), minus 1; None when not planned."""
        key = f"{op}{stage}"
        pred = self.predicted_stage_busy_s.get(key, 0.0)
        if pred <= 0 or not self.ours_stage_busy_s:
            return None
        return statistics.median(r.get(key, 0.0) for r in self.ours_stage_busy_s) / pred - 1.0

    def split(self) -> str:
        return " ".join(f"{a}-{b - 1}@d{d}" if b - a > 1 else f"{a}@d{d}" for a, b, d in self.stages)


@dataclass
class ModelResult:
    case: ModelCase
    plans: dict[str, PlanRun]
    profile: dict  # the CostProfile as JSON
    wall_s: float
    torch_version: str = ""
    num_threads: int = 1
    cpu_cores: list[int | None] = field(default_factory=list)  # per rank, the core it was pinned to
    layer_kinds: list[str] = field(default_factory=list)
    profile_others_share: float = 0.0  # other processes' share of the machine while profiling
    round_others_share: list[float] = field(default_factory=list)  # per measured round
    kept: list[int] = field(default_factory=list)  # measured rounds in the medians
    #: the in-launch profile's work over the planning profile's (`host_speed`); None without in-launch profiles
    host_speed: float | None = None

    @property
    def best_torch(self) -> PlanRun:
        return min((self.plans[s] for s in CLASSIC), key=lambda p: p.torch or float("inf"))

    @property
    def speedup(self) -> float:
        return (self.best_torch.torch or float("nan")) / self.plans["adaptive"].ours

    def head_share(self) -> float:
        """The head's share of one micro-batch's F + I + W work in the measured profile."""
        work = layer_work(self.profile)
        return work[max(work)] / sum(work.values())

    def host_error(self, p: PlanRun) -> float | None:
        """`p.error` with the planning profile scaled by `host_speed`: what is left once the host's
        speed change between the profile and the launch is taken out."""
        if self.host_speed is None:
            return None
        return (p.predicted_s * self.host_speed - p.ours) / p.ours


def layer_work(profile: dict) -> dict[int, float]:
    """Layer index -> one micro-batch's F + I + W seconds in a profile (its whole-model entries)."""
    return {i: e["f_s"] + e["i_s"] + e["w_s"] for e in profile["entries"] for i in e["layers"]}


def host_speed(in_launch: dict, planning: dict) -> float:
    """The model's F + I + W work in the in-launch profile over the planning profile's, layer by layer
    summed: how much slower (> 1) the host ran the same layers during the launch than while planning."""
    a, b = layer_work(in_launch), layer_work(planning)
    return sum(a[i] for i in b) / sum(b.values())


@dataclass
class RealResults:
    config: RealConfig
    models: list[ModelResult]
    link: dict | None
    wall_s: float
    load: tuple[str, str]
    date: str
    cpu_count: int = 0  # the machine's CPUs (os.cpu_count)


# ----------------------------------------------------------------------------- running


#: glibc malloc settings for every process that measures (the profiler and both ranks): serve
#: every allocation from the heap and never hand freed memory back to the OS. By default glibc
#: maps each allocation over 32 MiB (and, depending on its history, smaller ones) afresh and
#: unmaps it on free, so every step page-faults its large activations (tiny-gemma's
#: [seq, 96000] logits) in again (experiments/NOTES.md). With these, freed memory is reused, as
#: torch's caching allocator does on GPUs. Both runtimes run in the same processes, so they share the setting.
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot (/proc/stat); (0, 0) where unavailable.

    Busy counts user, system, interrupts and steal (a hypervisor taking the CPU away is interference too).
    """
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return 0, 0
    v = [int(x) for x in fields]  # user nice system idle iowait irq softirq steal
    total = sum(v)
    return total - v[3] - v[4], total


def process_ticks(pid: int) -> int:
    """User + system CPU ticks of process `pid`, all its threads (/proc/PID/stat); 0 where unavailable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])


def others_share(before: tuple[int, int, int], after: tuple[int, int, int]) -> float:
    """Share of the machine's CPU time that processes other than ours used between two samples of
    (machine busy ticks, machine total ticks, our processes' ticks)."""
    busy, total, ours = (a - b for a, b in zip(after, before, strict=True))
    return max(busy - ours, 0) / total if total > 0 else 0.0


def _own_ticks() -> int:
    t = os.times()
    return round((t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK"))


def _sample() -> tuple[int, int, int]:
    return (*machine_ticks(), _own_ticks())


def wait_quiet(max_wait_s: float, threshold: float = 0.10, window_s: float = 1.0) -> float:
    """Wait (at most `max_wait_s`) until other processes use at most `threshold` of the machine over a
    `window_s` window; returns the last window's share."""
    if max_wait_s <= 0:
        return 0.0
    deadline = time.monotonic() + max_wait_s
    while True:
        before = _sample()
        time.sleep(window_s)
        share = others_share(before, _sample())
        if share <= threshold or time.monotonic() >= deadline:
            return share


def worker_env(keep_memory: bool = True) -> dict[str, str]:
    """The environment of a measuring process: one BLAS thread, `MALLOC_ENV` (with `keep_memory`),
    this checkout first on the import path."""
    env = dict(os.environ, **THREAD_ENV, **(MALLOC_ENV if keep_memory else {}))
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _env(cfg: RealConfig) -> dict[str, str]:
    return worker_env(cfg.keep_memory)


def wait_all(procs: Sequence[subprocess.Popen], timeout_s: float, what: str) -> None:
    """Wait for every process (started with stderr piped); the first that failed raises RuntimeError
    with `what` and the last line it wrote to stderr."""
    for p in procs:
        _, err = p.communicate(timeout=timeout_s)
        if p.returncode != 0:
            tail = [ln for ln in err.splitlines() if ln.strip()][-1:] or [f"exit {p.returncode}"]
            raise RuntimeError(f"{what} failed: {tail[0]}")


def profile(model_arg: str | Path, case: ModelCase, cfg: RealConfig, out: Path, runtime: bool = True) -> dict:
    """`adaptis profile` run as the ranks run -> the profile JSON (also written to `out`); without
    `runtime`, the layers alone (`--no-runtime`: no gloo link, no time per action).

    `cfg.profile_procs` copies at once, each a fresh process with one intra-op thread and
    `MALLOC_ENV`: with PP=2 both cores are busy, as in the pipeline, so the profile sees the
    same contention (shared caches and memory, and whatever else this machine runs) as the
    ranks. Every second copy walks the layers last to first (`--reverse`), as the in-launch
    profile's second rank does: no two copies time the same layer at once (a large-vocabulary
    head on both cores shares the memory bandwidth that only one rank uses for it in a pipeline).
    Copy k is pinned as local rank k is (`executor.cpu.pin_core`, in the copy before it starts), so the
    profile and the ranks run on the same cores in the same way. The copies' F / I / W / B seconds are
    averaged per layer.
    """
    from adaptis_plan.executor.cpu import pin_core

    procs, outs = [], []
    for k in range(cfg.profile_procs):
        path = out.with_name(f"{out.stem}.proc{k}.json")
        cmd = [
            sys.executable, "-m", "adaptis_plan.cli", "profile", "--model", str(model_arg), "--device", "cpu",
            "--seq-len", str(case.seq_len), "--micro-batch-size", str(case.micro_batch_size),
            "--repeats", str(cfg.profile_repeats), "-o", str(path), *(["--reverse"] if k % 2 else []),
            *([] if runtime else ["--no-runtime"]),
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(cfg), cwd=REPO,
                preexec_fn=functools.partial(pin_core, k, cfg.profile_procs),
            )
        )  # fmt: skip
        outs.append(path)
    wait_all(procs, 600, f"adaptis profile --model {model_arg}")
    merged = average_profiles([json.loads(path.read_text()) for path in outs])
    out.write_text(json.dumps(merged, indent=1))
    return merged


def average_profiles(copies: Sequence[dict]) -> dict:
    """Profiles (CostProfile JSON) of one model measured at once by several processes -> one, each
    layer's F / I / W / B seconds averaged (the head's chunk entries too)."""
    return combine_profiles(copies, statistics.fmean)


def combine_profiles(copies: Sequence[dict], reduce: Callable[[Iterable[float]], float]) -> dict:
    """Profiles (CostProfile JSON) of one model -> one: the first, with each layer's F / I / W / B
    seconds (the head's chunk entries too) and the `time_spread` replaced by `reduce` over all of them."""
    merged = json.loads(json.dumps(copies[0]))
    if all(c.get("time_spread") is not None for c in copies):
        merged["time_spread"] = reduce(c["time_spread"] for c in copies)
    for n, entry in enumerate(merged["entries"]):
        for key in _TIMES:
            if entry.get(key) is not None:
                entry[key] = reduce(c["entries"][n][key] for c in copies)
    for h, chunks in enumerate(merged.get("head_chunks", [])):  # the head's chunks, measured alike
        for n, entry in enumerate(chunks["entries"]):
            for key in _TIMES:
                if entry.get(key) is not None:
                    entry[key] = reduce(c["head_chunks"][h]["entries"][n][key] for c in copies)
    return merged


#: the seconds fields of a profile entry (`w_hot_s` only in profiles that measured it)
_TIMES = ("f_s", "i_s", "w_s", "w_hot_s", "b_s")


def _quiet_profiles(
    items: Sequence[tuple[str | Path, ModelCase, Path]], cfg: RealConfig, sessions: int = 1, runtime: bool = True
) -> list[tuple[dict, float]]:
    """`profile` each (model, case, out) `sessions` times, each session after waiting for a quiet
    machine; the sessions go round the models (model 1, 2, ..., 1, 2, ...), so each model's sessions
    spread over the whole profiling phase. Each layer's times are the median over the model's
    sessions, so a slowdown of the whole host that lasts one session (invisible in the other
    processes' share of the CPU) does not move it, and a phase of the host that lasts minutes
    (`SPREAD`) meets every model's profile alike. A single session is taken once more when other jobs took over 1.5 x `quiet_share`
    of the machine meanwhile (the quieter one is kept; none when `quiet_wait_s` is 0).
    Returns per item (profile, the largest others' share of the sessions kept)."""
    retry = cfg.quiet_wait_s > 0 and sessions <= 1
    kept: list[list[tuple[dict, float]]] = [[] for _ in items]
    for _ in range(max(1, sessions)):
        for got, (model_arg, case, out) in zip(kept, items, strict=True):
            got.append(_quiet_session(model_arg, case, cfg, out, retry, runtime))
    results = []
    for got, (_, _, out) in zip(kept, items, strict=True):
        merged = got[0][0] if len(got) == 1 else combine_profiles([p for p, _ in got], statistics.median)
        out.write_text(json.dumps(merged, indent=1))
        results.append((merged, max(share for _, share in got)))
    return results


def _quiet_session(
    model_arg: str | Path, case: ModelCase, cfg: RealConfig, out: Path, retry: bool, runtime: bool = True
) -> tuple[dict, float]:
    """One `profile` after waiting for a quiet machine, and with `retry` once more when other jobs took
    over 1.5 x `quiet_share` of it meanwhile: (the quieter profile, others' share while it ran)."""
    best: tuple[dict, float] | None = None
    for _attempt in range(2 if retry else 1):
        wait_quiet(cfg.quiet_wait_s, cfg.quiet_share)
        before = _sample()
        got = profile(model_arg, case, cfg, out, runtime)
        share = others_share(before, _sample())
        if best is None or share < best[1]:
            best = (got, share)
        if share <= 1.5 * cfg.quiet_share:
            break
    assert best is not None
    return best


def measure_link(samples: int) -> dict | None:
    """Median gloo latency / bandwidth of `samples` measurements (each a median of ping-pongs)."""
    if samples <= 0:
        return None
    from adaptis_plan.executor.link import measure_link as one

    got = [one(host_costs=True) for _ in range(samples)]
    return {
        "latency_s": statistics.median(g.latency_s for g in got),
        "bandwidth_gbps": statistics.median(g.bandwidth_gbps for g in got),
        "backend": got[0].backend,
        "host_s_per_message": statistics.median(g.host_s_per_message or 0.0 for g in got),
        "host_s_per_byte": statistics.median(g.host_s_per_byte or 0.0 for g in got),
    }


def _plan(
    case: ModelCase, strategy: str, profile_path: Path, cfg: RealConfig, out: Path, recompute: str = "none"
) -> tuple[object, float]:
    """Plan `strategy` with the profile and `recompute` on every stage (the cost table charges it, the
    executor runs it)."""
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.planfile.io import write_plan

    classic = strategy != "adaptive"
    req = PlanRequest.of(
        model_arg=case.model,
        hardware_arg="cpu",
        pp=PP,
        num_microbatches=case.num_microbatches,
        seq_len=case.seq_len,
        micro_batch_size=case.micro_batch_size,
        strategy=strategy,
        partition="uniform" if classic else None,
        costs_path=str(profile_path),
        recompute=recompute,
        time_limit_s=cfg.time_limit_s,
        seed=cfg.seed,
    )
    outcome = make_plan_for(req)
    write_plan(outcome.plan, out)
    return outcome, outcome.plan_time_s


def _split_spec(model, num_chunks: int, work: Path) -> Path:  # noqa: ANN001
    """The model with its head split into `num_chunks` vocabulary chunks, as a spec file."""
    from adaptis_plan.inputs.models.transform import split_head

    spec = work / f"model-{num_chunks}-chunks.json"
    spec.write_text(split_head(model, num_chunks).model_dump_json())
    return spec


def _resimulate_with_chunks(
    spec: Path, case: ModelCase, cfg: RealConfig, link: dict | None, work: Path, planning: dict
) -> dict:
    """{"adaptive": step time} of the adaptive plan simulated with the split model's own profile
    (`spec`, from `_split_spec`).

    The planner costs vocabulary chunks from the chunks the planning profile measured of the
    unsplit head; this measures the split model itself (each chunk a layer), to show how much of
    the prediction error that is. Taken after the launch, so that nothing stands between the
    planning profile and the launch (this VM's speed moves over minutes).
    """
    from adaptis_plan.app.simulate import simulate_plan_file

    path = work / "profile-chunks.json"
    _profile_with_link(spec, case, cfg, link, path, runtime_from=planning)
    outcome = simulate_plan_file(str(work / "plan-adaptive.json"), costs_path=str(path))
    return {"adaptive": predictions(outcome.result)[0]}


def _profile_with_link(
    model_arg: str | Path,
    case: ModelCase,
    cfg: RealConfig,
    link: dict | None,
    out: Path,
    *,
    runtime_from: dict | None = None,
) -> tuple[dict, float]:
    """`_profiles_with_link` of one model (what planning and re-simulation read)."""
    return _profiles_with_link([(model_arg, case, out)], cfg, link, runtime_from=runtime_from)[0]


#: what `adaptis profile --runtime` adds to the layers' costs: the host's, not the layers' (measured once per run)
RUNTIME_KEYS = ("link", "action_overhead_s")


def _profiles_with_link(
    items: Sequence[tuple[str | Path, ModelCase, Path]],
    cfg: RealConfig,
    link: dict | None,
    sessions: int = 1,
    *,
    runtime_from: dict | None = None,
) -> list[tuple[dict, float]]:
    """`_quiet_profiles` with the measured gloo link added to each. With `runtime_from` (the planning
    profile), the layers alone are profiled and the runtime's costs (`RUNTIME_KEYS`) are that profile's:
    a profile taken again for its layers (after the launch, or of the split head) measures them again."""
    got = _quiet_profiles(items, cfg, sessions, runtime=runtime_from is None and cfg.profile_runtime)
    for (measured, _), (_, _, out) in zip(got, items, strict=True):
        if runtime_from is not None:
            measured.update({k: runtime_from[k] for k in RUNTIME_KEYS if runtime_from.get(k) is not None})
        if link is not None:
            measured["link"] = link
        out.write_text(json.dumps(measured, indent=1))
    return got


def _in_run_profiles(ranks: Sequence[dict], planning: dict, work: Path, rnd: int | None = None) -> list[Path]:
    """The launch's own profiles (`bench.torch_runtime.InRunProfile`, each rank's medians over the
    measured rounds, or with `rnd` its profile of that measured round alone), the ranks averaged as
    the profiler copies are, with the planning profile's gloo link and time per action (not layer
    costs: measured once per run) -> one file per profiled model: the model, then its split-head
    form when the adaptive plan splits it."""
    paths = []
    for k in range(len(ranks[0]["profiles"])):
        copies = [r["profiles"][k] if rnd is None else r["profile_rounds"][rnd][k] for r in ranks]
        merged = average_profiles(copies)
        for key in RUNTIME_KEYS:
            if planning.get(key) is not None:
                merged[key] = planning[key]
        name = "profile-in-run" + ("" if k == 0 else "-chunks") + ("" if rnd is None else f".round{rnd}")
        path = work / f"{name}.json"
        path.write_text(json.dumps(merged, indent=1))
        paths.append(path)
    return paths


def predictions(result) -> tuple[float, float]:  # noqa: ANN001 - a SimResult, or a plan file's `predicted`
    """(the prediction, the step with every action at its cost): the prediction is the expected step time
    when the profile measured how op times vary (`judge.simulate.expected_step`), else the step time."""
    fixed = result.step_time_s
    return (fixed if result.expected_step_time_s is None else result.expected_step_time_s), fixed


def _resimulate(plan_paths: dict[str, Path], profile_path: Path) -> dict[str, tuple[float, float]]:
    """Each plan's `predictions` simulated with another profile of the same model and shape."""
    from adaptis_plan.app.simulate import simulate_plan_file

    return {
        s: predictions(simulate_plan_file(str(p), costs_path=str(profile_path)).result) for s, p in plan_paths.items()
    }


def _launch(config_path: Path, out: Path, cfg: RealConfig) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PP}",
        "--max-restarts=0", "-m", "bench.torch_runtime", "--config", str(config_path), "--out", str(out),
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(cfg), timeout=cfg.timeout_s, cwd=REPO)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the torchrun launch ran past {cfg.timeout_s:.0f} s") from None
    if proc.returncode != 0:
        errors = sorted(out.glob("error.rank*.json"))
        if errors:
            e = json.loads(errors[0].read_text())
            raise RuntimeError(f"rank {e['rank']} failed: {e['line']}")
        tail = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-1:] or ["no output"]
        raise RuntimeError(f"torchrun failed (exit {proc.returncode}): {tail[0]}")


@dataclass
class _Prepared:
    """One model profiled and planned, its launches still to come (`run_bench` interleaves them with the
    other models')."""

    case: ModelCase
    work: Path
    model: object  # ModelSpec
    measured: dict  # the planning profile
    profile_noise: float  # others' share of the machine while profiling
    plans: dict[str, tuple]  # run name -> (PlanOutcome, planning seconds)
    plan_paths: dict[str, Path]
    split_spec: Path | None  # the split-head model, when the adaptive plan splits the head
    config: dict  # `bench.torch_runtime`'s, less the rounds
    wall_s: float = 0.0  # seconds spent on this model so far
    outs: list[Path] = field(default_factory=list)  # one results folder per launch
    after: dict[str, float] = field(default_factory=dict)  # each plan re-simulated with the after-run profile


def prepare_model(
    case: ModelCase, cfg: RealConfig, work: Path, measured: dict, profile_noise: float, log: Callable[[str], None]
) -> _Prepared:
    """Plan one model with its planning profile (step 2 of the module docstring)."""
    from adaptis_plan.inputs.models.load import load_model

    t0 = time.perf_counter()
    model = load_model(case.model)
    profile_path = work / "profile.json"
    model_path = work / "model.json"
    model_path.write_text(model.model_dump_json())

    plans = {}
    runs = []
    for strategy in STRATEGIES:
        path = work / f"plan-{strategy}.json"
        outcome, plan_time = _plan(case, strategy, profile_path, cfg, path)
        plans[strategy] = (outcome, plan_time)
        if strategy != "adaptive":
            runs.append({"name": f"torch:{strategy}", "runtime": "torch", "plan": str(path), "schedule": strategy})
        runs.append({"name": f"ours:{strategy}", "runtime": "ours", "plan": str(path)})
    rc_path = work / f"plan-{RECOMPUTE}.json"
    plans[RECOMPUTE] = _plan(case, "1F1B", profile_path, cfg, rc_path, recompute="full")
    runs.append({"name": f"ours:{RECOMPUTE}", "runtime": "ours", "plan": str(rc_path)})
    adaptive = plans["adaptive"][0]
    split_spec = None
    if adaptive.plan.model.head_chunks > 1:
        split_spec = _split_spec(model, adaptive.plan.model.head_chunks, work)
    log(
        f"{case.model}: planned ({', '.join(f'{s} {o.plan.predicted.step_time_s * 1e3:.0f} ms' for s, (o, _) in plans.items())})"
    )
    config = {
        "model": str(model_path),
        "runs": runs,
        "warmup": cfg.warmup,
        "seed": cfg.seed,
        "timeout_s": 120.0,
        "record_actions": True,  # every action's span (experiments/actions.py reads them)
        # each plan's layers profiled inside the launch, between the steps (a split head as its chunks)
        "profile_models": [str(model_path)] + ([str(split_spec)] if split_spec is not None else []),
    }
    return _Prepared(
        case=case,
        work=work,
        model=model,
        measured=measured,
        profile_noise=profile_noise,
        plans=plans,
        plan_paths={**{s: work / f"plan-{s}.json" for s in STRATEGIES}, RECOMPUTE: rc_path},
        split_spec=split_spec,
        config=config,
        wall_s=time.perf_counter() - t0,
    )


def part_rounds(rounds: int, parts: int) -> list[int]:
    """`rounds` measured rounds over `parts` launches, as evenly as they go (the first ones one more)."""
    return [rounds // parts + (1 if k < rounds % parts else 0) for k in range(parts)]


def launch_part(prep: _Prepared, cfg: RealConfig, rounds: int, log: Callable[[str], None]) -> None:
    """One torchrun launch of every run of `prep`, `cfg.warmup` + `rounds` rounds (step 3)."""
    t0 = time.perf_counter()
    k = len(prep.outs)
    config_path = prep.work / f"config.part{k}.json"
    config_path.write_text(json.dumps({**prep.config, "rounds": rounds}, indent=1))
    out = prep.work / f"out.part{k}"
    shutil.rmtree(out, ignore_errors=True)
    wait_quiet(cfg.quiet_wait_s, cfg.quiet_share)
    t1 = time.perf_counter()
    _launch(config_path, out, cfg)
    prep.outs.append(out)
    log(
        f"{prep.case.model}: launch {k + 1}, {len(prep.config['runs'])} runs x {cfg.warmup + rounds} rounds"
        f" in {time.perf_counter() - t1:.1f} s"
    )
    prep.wall_s += time.perf_counter() - t0


def after_profile(prep: _Prepared, cfg: RealConfig, link: dict | None) -> None:
    """A second profile right after the model's last launch, and every plan re-simulated with it."""
    t0 = time.perf_counter()
    after_path = prep.work / "profile-after.json"
    _profile_with_link(prep.case.model, prep.case, cfg, link, after_path, runtime_from=prep.measured)
    prep.after = _resimulate(prep.plan_paths, after_path)
    prep.wall_s += time.perf_counter() - t0


def merge_launches(parts: Sequence[dict]) -> dict:
    """One rank's results (`bench.torch_runtime`'s rank JSON) of several launches -> one, rounds in launch
    order: every per-round list concatenated (losses and warm-up times with each launch's warm-up), and
    the in-launch profile again each field's median over all the measured rounds' own medians."""
    if len(parts) == 1:
        return parts[0]
    merged = dict(parts[0])
    for key in ("step_times_s", "warmup_times_s", "minor_faults", "losses", "busy_s", "stage_busy_s", "action_spans_s"):
        merged[key] = {name: [v for p in parts for v in p[key][name]] for name in parts[0][key]}
    for key in ("others_share", "profile_rounds"):
        merged[key] = [v for p in parts for v in p[key]]
    merged["profiles"] = [
        {
            **combine_profiles([r[k] for r in merged["profile_rounds"]], statistics.median),
            "repeats": sum(p["profiles"][k]["repeats"] for p in parts),
            "rounds": sum(p["profiles"][k]["rounds"] for p in parts),
        }
        for k in range(len(parts[0]["profiles"]))
    ]
    return merged


def finish_model(prep: _Prepared, cfg: RealConfig, link: dict | None) -> ModelResult:
    """Step 4 for one launched model: the rounds of its launches -> its results."""
    t0 = time.perf_counter()
    case, work, measured, plans = prep.case, prep.work, prep.measured, prep.plans
    after, plan_paths = prep.after, prep.plan_paths
    split_spec = prep.split_spec
    chunked = _resimulate_with_chunks(split_spec, case, cfg, link, work, measured) if split_spec is not None else {}
    ranks = [merge_launches([json.loads((out / f"rank{r}.json").read_text()) for out in prep.outs]) for r in range(PP)]

    def in_run_predictions(profiles: list[Path]) -> dict[str, tuple[float, float]]:
        return {
            s: _resimulate({s: path}, profiles[1 if plans[s][0].plan.model.head_chunks > 1 else 0])[s]
            for s, path in plan_paths.items()
        }

    in_run_paths = _in_run_profiles(ranks, measured, work)
    in_run_pred = in_run_predictions(in_run_paths)

    def losses(name: str) -> list[float]:
        return [
            next(v for v in (d["losses"][name][i] for d in ranks) if v is not None)
            for i in range(len(ranks[0]["losses"][name]))
        ]

    shares = ranks[0]["others_share"]
    keep = kept_rounds(shares, cfg.quiet_share)
    # each kept round's steps against the plans simulated with that round's own profile
    in_run_rounds = (
        [in_run_predictions(_in_run_profiles(ranks, measured, work, i)) for i in keep]
        if ranks[0].get("profile_rounds")
        else []
    )

    def kept(values: list) -> list:
        return [values[i] for i in keep]

    results = {}
    for strategy, (outcome, plan_time) in plans.items():
        plan = outcome.plan
        predicted, fixed = predictions(plan.predicted)
        bounds = [(s.layers[0], s.layers[1], s.device) for s in plan.stages]
        pred_busy = []
        pred_stage: dict[str, float] = {}
        for dev in plan.devices:
            per_op = dict.fromkeys("FIWB", 0.0)
            for a in dev.actions:
                per_op[a.op] += a.end_s - a.start_s
                pred_stage[f"{a.op}{a.stage}"] = pred_stage.get(f"{a.op}{a.stage}", 0.0) + a.end_s - a.start_s
            pred_busy.append(per_op)
        ours = f"ours:{strategy}"
        busy = [list(x) for x in zip(*(d["busy_s"][ours] for d in ranks), strict=True)]
        # each stage lives on one rank: the ranks' per-stage dicts merge without overlap
        stage_busy = [
            {k: v for d in per_rank for k, v in d.items()}
            for per_rank in zip(*(d["stage_busy_s"][ours] for d in ranks), strict=True)
        ]
        faults = [sum(x) for x in zip(*(d["minor_faults"][ours] for d in ranks), strict=True)]
        pr = PlanRun(
            strategy=strategy,
            stages=bounds,
            predicted_s=predicted,
            predicted_fixed_s=fixed,
            predicted_busy_s=pred_busy,
            ours_s=kept(ranks[0]["step_times_s"][ours]),
            ours_busy_s=kept(busy),
            ours_losses=losses(ours),
            head_chunks=plan.model.head_chunks,
            source=str(outcome.search_info.get("source", "")),
            plan_time_s=plan_time,
            num_actions=[len(dev.actions) for dev in plan.devices],
            predicted_chunks_s=chunked.get(strategy),
            predicted_after_s=after[strategy][0],
            predicted_in_run_s=in_run_pred[strategy][0],
            predicted_in_run_rounds_s=[r[strategy][0] for r in in_run_rounds],
            predicted_in_run_rounds_fixed_s=[r[strategy][1] for r in in_run_rounds],
            predicted_stage_busy_s=pred_stage,
            ours_stage_busy_s=kept(stage_busy),
            page_faults=kept(faults),
        )
        if strategy in CLASSIC:
            pr.torch_s = kept(ranks[0]["step_times_s"][f"torch:{strategy}"])
            pr.torch_losses = losses(f"torch:{strategy}")
        results[strategy] = pr
    return ModelResult(
        case=case,
        plans=results,
        profile=measured,
        wall_s=prep.wall_s + time.perf_counter() - t0,
        torch_version=ranks[0]["torch_version"],
        num_threads=ranks[0]["num_threads"],
        cpu_cores=[r.get("cpu_core") for r in ranks],
        layer_kinds=[layer.kind for layer in prep.model.layers],
        profile_others_share=prep.profile_noise,
        round_others_share=shares,
        kept=keep,
        host_speed=host_speed(json.loads(in_run_paths[0].read_text()), measured),
    )


def kept_rounds(shares: Sequence[float], quiet: float) -> list[int]:
    """Indices of the measured rounds where other processes used at most `quiet` of the machine; at
    least the quieter half (in round order), so a busy machine thins the sample but never empties it."""
    keep = [i for i, s in enumerate(shares) if s <= quiet]
    need = (len(shares) + 1) // 2
    if len(keep) < need:
        keep = sorted(sorted(range(len(shares)), key=lambda i: shares[i])[:need])
    return keep


def run_bench(
    cfg: RealConfig, *, work_dir: Path | None = None, log: Callable[[str], None] | None = None
) -> RealResults:
    """Everything measured and planned for `cfg`; nothing rendered."""
    log = log or (lambda _m: None)
    t0 = time.perf_counter()
    load0 = _load()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tmp = None
    if work_dir is None:
        tmp = tempfile.mkdtemp(prefix="adaptis-real-")
        work_dir = Path(tmp)
    try:
        link = measure_link(cfg.link_samples)
        if link:
            log(f"gloo link: {link['latency_s'] * 1e6:.0f} us, {link['bandwidth_gbps']:.2f} GB/s")
        works = [work_dir / c.model for c in cfg.cases]
        for w in works:
            w.mkdir(parents=True, exist_ok=True)
        t1 = time.perf_counter()
        profiled = _profiles_with_link(
            [(c.model, c, w / "profile.json") for c, w in zip(cfg.cases, works, strict=True)],
            cfg,
            link,
            cfg.profile_sessions,
        )
        log(f"profiled {len(works)} model(s) in {time.perf_counter() - t1:.1f} s")
        share_s = (time.perf_counter() - t1) / max(len(works), 1)
        preps = [
            prepare_model(c, cfg, w, measured, noise, log)
            for c, w, (measured, noise) in zip(cfg.cases, works, profiled, strict=True)
        ]
        # the launches go round the models (A B C D A B C D): a phase of the host that lasts minutes
        # meets each model's rounds in several places (`SPREAD`)
        parts = cfg.launch_rounds
        for k, rounds in enumerate(parts):
            for prep in preps:
                launch_part(prep, cfg, rounds, log)
                if k == len(parts) - 1:
                    after_profile(prep, cfg, link)
        models = []
        for prep in preps:
            prep.wall_s += share_s
            models.append(finish_model(prep, cfg, link))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return RealResults(cfg, models, link, time.perf_counter() - t0, (load0, _load()), date, os.cpu_count() or 0)


# ----------------------------------------------------------------------------- rendering


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1e3:.1f}"


def _pct(v: float) -> str:
    return f"{v * 100:+.1f}%"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _spread(times: Sequence[float]) -> float:
    """Inter-quartile range / median (0 for fewer than 4 samples: max - min / median)."""
    med = statistics.median(times)
    if len(times) >= 4:
        q = statistics.quantiles(times, n=4)
        return (q[2] - q[0]) / med
    return (max(times) - min(times)) / med


def targets(res: RealResults) -> list[tuple[str, str, str, bool | None, str]]:
    """(figure, value, target, passed, what limits it) for the three targets; passed None = context row."""
    rows: list[tuple[str, str, str, bool | None, str]] = []
    pairs = [(m, p) for m in res.models for p in (m.plans[s] for s in CLASSIC)]
    worst_m, worst = max(pairs, key=lambda mp: mp[1].ratio or 0.0)
    ok = worst.ratio <= TARGET_RATIO
    faster = sum(p.ratio <= 1.0 for _, p in pairs)
    by_strategy = {s: [p.ratio for _, p in pairs if p.strategy == s] for s in CLASSIC}
    lowest = min(CLASSIC, key=lambda s: statistics.median(by_strategy[s]))
    lo, hi = min(by_strategy[lowest]), max(by_strategy[lowest])
    why = (
        f"same arithmetic, same order; ours is at or below torch in {faster} of {len(pairs)} pairs. What is left is"
        " per-action Python work and how each runtime posts its gloo sends / receives (ours: every receive of"
        f" the step posted at its start, each send in the global transfer order). Torch is furthest behind on {lowest} (ours / torch"
        + (f" {lo:.2f})" if lo == hi else f" {lo:.2f}-{hi:.2f})")
    )
    if lowest == "ZBVZeroBubble" and hi < 1.0:
        why += (
            ": its I / W split walks the autograd graph in Python (`stage_backward_input` / `_weight`), ours"
            " defers the weight GEMMs inside the linear layers"
        )
    if not ok:
        why = (
            f"{worst_m.case.model} {worst.strategy} is {(worst.ratio - TARGET_RATIO) * 100:.1f} points over (the"
            f" step times of its rounds spread {_spread(worst.ours_s) * 100:.0f}% ours,"
            f" {_spread(worst.torch_s) * 100:.0f}% torch: inter-quartile range / median); " + why
        )
    rows.append(
        (
            f"ours / torch on the identical schedule + split, worst of {len(pairs)}"
            f" (median {statistics.median(p.ratio for _, p in pairs):.2f})",
            f"{worst.ratio:.2f} ({worst_m.case.model} {worst.strategy})",
            f"<= {TARGET_RATIO:.2f}",
            ok,
            why,
        )
    )
    gem = [m for m in res.models if m.case.model == TARGET_SPEEDUP_MODEL]
    if gem:
        m = gem[0]
        ok = m.speedup >= TARGET_SPEEDUP
        a, b = m.plans["adaptive"], m.best_torch
        predicted = b.predicted_s / a.predicted_s
        why = (
            f"the head is {m.head_share() * 100:.0f}% of the work and every uniform split leaves it whole on one"
            f" device; adaptive splits it into {a.head_chunks} vocabulary chunk(s) over both. Predicted speed-up"
            f" {predicted:.2f}x"
        )
        if m.speedup < predicted and a.error < 0:
            why += (
                f"; measured less because the adaptive plan ran slower than predicted ({_pct(a.error)}: with the"
                " head split, mostly the chunks' own cost, see below)"
                if a.head_chunks > 1
                else f"; measured less because the adaptive plan ran slower than predicted ({_pct(a.error)})"
            )
        if not ok:
            why = f"{(TARGET_SPEEDUP - m.speedup):.2f}x short; " + why
        rows.append(
            (
                f"adaptive vs the best torch schedule, {TARGET_SPEEDUP_MODEL} ({b.strategy})",
                f"{m.speedup:.2f}x",
                f">= {TARGET_SPEEDUP:.1f}x",
                ok,
                why,
            )
        )
    runs = [(m, p) for m in res.models for p in m.plans.values()]
    wm, wp = max(runs, key=lambda mp: abs(mp[1].error))
    ok = abs(wp.error) <= TARGET_ERROR
    classic = [(m, p) for m, p in runs if p.strategy in CLASSIC]
    cm, cp = max(classic, key=lambda mp: abs(mp[1].error))
    ada = [p for _, p in runs if p.strategy == "adaptive"]
    drifts = [abs(p.drift) for _, p in runs if p.drift is not None]
    infl = [_inflation(p) for _, p in runs]
    idle_gap = max(abs(_idle(p)[0] - _idle(p)[1]) for _, p in runs)
    why = (
        f"classic plans {_range(p.error for _, p in classic)}, adaptive plans {_range(p.error for p in ada)}"
        f" ({_sense([p.error for _, p in runs])}). Measured compute ran {_range(infl)} vs the profile's and the"
        f" step errors follow it, while the busier device's idle time is predicted within {idle_gap * 1e3:.0f} ms"
        " (table below): what misses is the per-layer costs, not the simulated schedule."
    )
    if drifts:
        why += (
            " The profile itself moves: the same plans re-simulated with a second profile taken right after the"
            f" runs shift by {statistics.median(drifts) * 100:.0f}% (median), up to {max(drifts) * 100:.0f}%, on"
            " this shared VM: noise of that size is in every single comparison here."
        )
    hosts = [m for m in res.models if m.host_speed is not None]
    if hosts:
        why += (
            " Taking the host's speed out (one factor per model: its layers' work in the in-launch profile over"
            " the planning profile's, "
            + ", ".join(f"{m.case.model} x{m.host_speed:.2f}" for m in hosts)
            + f"): classic plans {_range(m.host_error(p) for m in hosts for p in m.plans.values() if p.strategy in CLASSIC)},"
            f" adaptive plans {_range(m.host_error(m.plans['adaptive']) for m in hosts)}."
        )
    chunked = [(m, p) for m, p in runs if p.predicted_chunks_s is not None]
    if chunked:
        why += (
            " The planning profile measured the head split into 2-4 chunks, and the planner costs a split head"
            " from those; re-simulated with the split model itself profiled: "
            + ", ".join(f"{m.case.model} {_pct((p.predicted_chunks_s - p.ours) / p.ours)}" for m, p in chunked)
            + "."
        )
    if not ok:
        why = f"{(abs(wp.error) - TARGET_ERROR) * 100:.1f} points over; " + why
    rows.append(
        (
            f"predicted vs measured step time, worst absolute error of {len(runs)} plans (plan-time profile)",
            f"{_pct(wp.error)} ({wm.case.model} {wp.strategy})",
            f"within {TARGET_ERROR * 100:.0f}%",
            ok,
            why,
        )
    )

    # `adaptis simulate PLAN --costs P` with P a profile of the layers the plan runs, taken inside the
    # launch between the steps (a split head profiled as its chunks)
    in_run = [(m, p) for m, p in runs if p.predicted_in_run_s is not None]
    if in_run:
        wm2, wp2 = max(in_run, key=lambda mp: abs(mp[1].in_run_error or 0.0))
        err2 = wp2.in_run_error or 0.0
        ok2 = abs(err2) <= TARGET_ERROR_IN_RUN
        why2 = (
            f"classic plans {_range(p.in_run_error for _, p in in_run if p.strategy in CLASSIC)}, adaptive plans"
            f" {_range(p.in_run_error for _, p in in_run if p.strategy == 'adaptive')}. The profile: every distinct"
            " layer of the model (and of its split-head form, for a plan that splits the head) timed by both"
            " ranks at once inside the launch, a few repeats per round between the plans' steps"
            " (`bench.torch_runtime.InRunProfile`); each kept round's steps against `adaptis simulate --costs`"
            " with that round's profile, median over the rounds (paired: the machine's speed drifts by several %"
            " within seconds, and a round's profile and steps see the same stretch of it). It sees the machine the"
            " steps see; the row above is the profile planning used, minutes earlier"
        )
        if any(p.predicted_in_run_rounds_s for _, p in in_run):
            medians = [p.in_run_median_error for _, p in in_run if p.in_run_median_error is not None]
            worst_unpaired = max(medians, key=abs)
            why2 += f". Unpaired (each layer's median over the rounds, one prediction per plan): worst {_pct(worst_unpaired)}"
        if not ok2:
            over = f"{(abs(err2) - TARGET_ERROR_IN_RUN) * 100:.1f} points over"
            rounds = wp2.in_run_round_errors
            if len(rounds) >= 4:
                q = statistics.quantiles(rounds, n=4)
                over += f" (that plan's per-round errors: inter-quartile {_pct(q[0])} to {_pct(q[2])})"
            why2 = over + "; " + why2
        rows.append(
            (
                f"predicted vs measured step time, worst absolute error of {len(in_run)} plans, each simulated with"
                " a profile of the layers it runs",
                f"{_pct(err2)} ({wm2.case.model} {wp2.strategy})",
                f"within {TARGET_ERROR_IN_RUN * 100:.0f}%",
                ok2,
                why2,
            )
        )
    rows.append(_variation_row(res))
    rows.append(_recompute_row(res))
    rows.append(
        (
            f"context: the same, {len(classic)} classic plans only",
            f"{_pct(cp.error)} ({cm.case.model} {cp.strategy})",
            f"within {TARGET_ERROR * 100:.0f}%",
            None,
            "",
        )
    )
    return rows


def _variation_row(res: RealResults) -> tuple[str, str, str, bool | None, str]:
    """Context: the two error rows above with every action at its cost, no variation charged."""
    runs = [(m, p) for m in res.models for s, p in m.plans.items() if s != RECOMPUTE]
    plan_w = max(runs, key=lambda mp: abs(mp[1].fixed_errors[0]))
    in_runs = [(m, p) for m, p in runs if p.fixed_errors[1] is not None]
    in_w = max(in_runs, key=lambda mp: abs(mp[1].fixed_errors[1] or 0.0)) if in_runs else None
    spreads = ", ".join(
        f"{m.case.model} {m.profile['time_spread']:.3f}" for m in res.models if m.profile.get("time_spread") is not None
    )
    return (
        "context: the two rows above with every action at its cost (no variation charged)",
        f"{_pct(plan_w[1].fixed_errors[0])} ({plan_w[0].case.model} {plan_w[1].strategy}, plan-time profile)"
        + (
            f"; {_pct(in_w[1].fixed_errors[1] or 0.0)} ({in_w[0].case.model} {in_w[1].strategy}, in-launch)"
            if in_w
            else ""
        ),
        "",
        None,
        "the predictions above are the plans' expected step times: each action's time varied about its cost as"
        " the profile measured op times vary from repeat to repeat within a round (sd of log time, planning"
        f" profiles: {spreads or 'none measured'}), median of the simulator's replays"
        " (`judge.simulate.expected_step`); here the step with no variation, as the search sees it. The"
        " variation moved each plan's planning-profile error by (with minus without): classic plans"
        f" {_range(p.error - p.fixed_errors[0] for _, p in runs if p.strategy in CLASSIC)}, adaptive plans"
        f" {_range(p.error - p.fixed_errors[0] for _, p in runs if p.strategy == 'adaptive')}",
    )


def _recompute_row(res: RealResults) -> tuple[str, str, str, bool, str]:
    """The recompute plan's error against the same model's plans without recomputation."""
    ok, parts = [], []
    for m in res.models:
        rc = m.plans[RECOMPUTE]
        others = [p for s, p in m.plans.items() if s != RECOMPUTE]
        ok.append(abs(rc.error) <= max(TARGET_ERROR, max(abs(p.error) for p in others)))
        same = m.plans["1F1B"]
        parts.append(
            f"{m.case.model} {_pct(rc.error)} (1F1B without it {_pct(same.error)}, its other plans"
            f" {_range(p.error for p in others)}; measured {_ms(rc.ours)} ms vs {_ms(same.ours)} ms without)"
        )
    return (
        f"predicted vs measured step time of {RECOMPUTE} (every stage recomputes its blocks in full)",
        ", ".join(f"{_pct(m.plans[RECOMPUTE].error)} ({m.case.model})" for m in res.models),
        f"no worse than the plans without recomputation (or within {TARGET_ERROR * 100:.0f}%)",
        all(ok),
        "predicted with the planning profile charged as the cost model charges full recompute (one more"
        " forward per block in I and B); measured with the executor rerunning each block's forward: "
        + "; ".join(parts),
    )


def _range(values) -> str:  # noqa: ANN001
    v = list(values)
    return f"{_pct(min(v))} to {_pct(max(v))}" if len(v) > 1 else _pct(v[0])


def _sense(errors: Sequence[float]) -> str:
    if all(e < 0 for e in errors):
        return "all optimistic"
    if all(e > 0 for e in errors):
        return "all pessimistic"
    return "both signs"


def _idle(p: PlanRun) -> tuple[float, float]:
    """(measured, predicted) step time minus the busier device's compute time."""
    busy = [p.busy(d) for d in range(len(p.predicted_busy_s))]
    pbusy = [p.predicted_busy(d) for d in range(len(p.predicted_busy_s))]
    return p.ours - max(busy), p.predicted_s - max(pbusy)


def _inflation(p: PlanRun) -> float:
    """Measured summed action time over the profile's (both devices): > 0 = compute ran slower than profiled."""
    return p.inflation() or 0.0


def _faults(p: PlanRun) -> str:
    return f"{statistics.median(p.page_faults):.0f}" if p.page_faults else "–"


def _pct_or_dash(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:+.0f}%"


def _pinning(models: Sequence[ModelResult]) -> str:
    """How the ranks sat on the cores, from what they reported (`executor.cpu.pin_core`)."""
    cores = {tuple(m.cpu_cores) for m in models}
    if len(cores) == 1 and (only := next(iter(cores))) and None not in only and len(set(only)) == len(only):
        return f"each rank pinned to a core of its own (cores {', '.join(map(str, only))}; the planning profile's copies likewise, copy k on rank k's core)"
    return "ranks not pinned to cores one each (`ADAPTIS_CPU_PIN=0`, more ranks than cores, or the cores changed)"


def render_results(res: RealResults) -> str:
    """The section's body, below its heading and reproduce line."""
    cfg = res.config
    m0 = res.models[0] if res.models else None
    lines = [
        f"Measured {res.date} in {res.wall_s:.0f} s wall time ({cfg.label} configuration), torch"
        f" {m0.torch_version if m0 else '?'}, gloo, PP={PP}: 2 ranks on this machine's {res.cpu_count} cores, one"
        f" intra-op thread per rank (`torch.set_num_threads({m0.num_threads if m0 else 1})`, OMP_NUM_THREADS=1)"
        " and denormal floats flushed to zero (`executor.cpu`, both runtimes and the profiler); "
        + _pinning(res.models)
        + "; fp32, no optimizer step timed; glibc malloc "
        + (
            "keeps freed memory (`MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`, see `MALLOC_ENV`)"
            " in the profiling process and both ranks."
            if cfg.keep_memory
            else "at its defaults (large buffers page-fault afresh every step)."
        )
        + f" Machine load average (1 min) at start / end: {res.load[0]} / {res.load[1]}"
        " (other jobs share this machine: compare side by side, not across runs).",
        "",
        f"Per model: a cost profile measured here (`adaptis profile`, one thread, medians of"
        f" {cfg.profile_repeats} repeats"
        + (
            f" spread over {m0.profile['rounds']} rounds, each timing every layer (and head chunk) in turn"
            if m0 and (m0.profile.get("rounds") or 1) > 1
            else ""
        )
        + f", {cfg.profile_procs} copies at once as the ranks run, every second"
        " one walking the layers last to first, averaged"
        + (f"; per layer the median of {cfg.profile_sessions} such sessions)" if cfg.profile_sessions > 1 else ")")
        + (
            f" and the gloo link ({res.link['latency_s'] * 1e6:.0f} us, {res.link['bandwidth_gbps']:.2f} GB/s;"
            f" each message end costs a computing rank {res.link.get('host_s_per_message', 0.0) * 1e6:.0f} us +"
            f" {res.link.get('host_s_per_byte', 0.0) * 1e9 * 2**20 / 1e6:.2f} ms per MiB, charged by the"
            f" planner to each action that sends or receives across ranks; medians of {cfg.link_samples})"
            if res.link
            else ""
        )
        + "; plans made with it (`make_plan_for`, hardware `cpu`, classic strategies on the uniform partition);"
        + (
            f" then {len(cfg.launch_rounds)} torchrun launches per model"
            " (all models' profiles first, their sessions going round the models, then the launches, going round"
            f" the models likewise: {SPREAD}); each launch (`bench/torch_runtime.py`) builds"
            if len(cfg.launch_rounds) > 1
            else " then one torchrun launch (`bench/torch_runtime.py`) that builds"
        )
        + " torch.distributed.pipelining's own"
        " `ScheduleGPipe` / `Schedule1F1B` / `ScheduleInterleaved1F1B` / `ScheduleZBVZeroBubble` over the"
        " plan's own stages (identical split and stage-to-rank map, checked) and adaptis' executor on the same"
        " plans plus the adaptive plan, every layer from `build_layer` with the same seed, and steps them in"
        f" alternating rounds (A B … B A), {cfg.warmup} warm-up + "
        + " + ".join(str(r) for r in cfg.launch_rounds)
        + " measured. Step time = rank 0's"
        " wall time barrier to barrier; figures are medians of the measured rounds. Error ="
        " (predicted − measured) / measured, negative = the prediction is optimistic.",
        "",
    ]
    lines += [
        "### Targets",
        "",
        "| figure | ours | target | result | what limits it |",
        "|---|---|---|---|---|",
    ]
    for fig, val, tgt, ok, why in targets(res):
        lines.append(f"| {fig} | {val} | {tgt} | {'context' if ok is None else _verdict(ok)} | {why} |")
    lines += ["", "### Per model", ""]
    lines += [
        "| model | shape | plan | split (layers@device) | torch ms | ours ms | ours / torch | predicted ms | error"
        " | error with the in-launch profile, paired by round (unpaired) | error with the after-run profile |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    spreads = []
    for m in res.models:
        for s in RUNS:
            p = m.plans[s]
            spreads.append(_spread(p.ours_s))
            if p.torch_s:
                spreads.append(_spread(p.torch_s))
            name = s
            if s == "adaptive":
                name = f"adaptive (`{p.source}`" + (f", head in {p.head_chunks} chunks)" if p.head_chunks > 1 else ")")
            elif s == RECOMPUTE:
                name = f"{RECOMPUTE} (full, every stage)"
            ratio = "–" if p.ratio is None else f"{p.ratio:.2f}"
            after = "–" if p.predicted_after_s is None else _pct((p.predicted_after_s - p.ours) / p.ours)
            in_run = "–" if p.in_run_error is None else _pct(p.in_run_error)
            if p.predicted_in_run_rounds_s and p.in_run_median_error is not None:
                in_run += f" ({_pct(p.in_run_median_error)})"
            lines.append(
                f"| {m.case.model} | {m.case.shape} | {name} | {p.split()} | {_ms(p.torch)} | {_ms(p.ours)}"
                f" | {ratio} | {_ms(p.predicted_s)} | {_pct(p.error)} | {in_run} | {after} |"
            )
    lines += [
        "",
        "### Other jobs on the machine",
        "",
        f"Noise: the largest inter-quartile range of any run's kept rounds is {max(spreads) * 100:.0f}% of"
        f" its median (median over runs {statistics.median(spreads) * 100:.0f}%). Other jobs share this machine;"
        " rank 0 measures, per round, the share of the machine's CPU time that processes other than the two"
        f" ranks took (/proc/stat; steal included), and the medians use only rounds where it was at most"
        f" {cfg.quiet_share * 100:.0f}% (at least the quieter half of the rounds). Profiling and each launch"
        f" first wait up to {cfg.quiet_wait_s:.0f} s for such a quiet second; a single profile disturbed meanwhile"
        " is taken again once, each profile times every layer in each of a few rounds (a slowdown of the whole"
        " host for a second or two moves a few repeats of every layer, not one layer's whole sample), and the"
        " planning profile is the per-layer median of several sessions (a slowdown of the whole host during one,"
        " which this share does not see, does not move it).",
        "",
        "| model | other jobs while profiling | rounds kept | other jobs per measured round: median / max |",
        "|---|---|---|---|",
    ]
    for m in res.models:
        sh = m.round_others_share
        lines.append(
            f"| {m.case.model} | {m.profile_others_share * 100:.0f}% | {len(m.kept)} of {len(sh)}"
            f" | {statistics.median(sh) * 100:.0f}% / {max(sh) * 100:.0f}% |"
        )
    lines += [
        "",
        "### Adaptive vs the best torch schedule",
        "",
        "| model | head share of the work | best torch schedule | its ms | adaptive ms | speed-up"
        " | adaptive predicted ms (error) | re-simulated with the head chunks profiled ms (error) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in res.models:
        b, a = m.best_torch, m.plans["adaptive"]
        chunks = "– (head not split)"
        if a.predicted_chunks_s is not None:
            chunks = f"{_ms(a.predicted_chunks_s)} ({_pct((a.predicted_chunks_s - a.ours) / a.ours)})"
        lines.append(
            f"| {m.case.model} | {m.head_share() * 100:.0f}% | {b.strategy} | {_ms(b.torch)} | {_ms(a.ours)}"
            f" | {m.speedup:.2f}x | {_ms(a.predicted_s)} ({_pct(a.error)}) | {chunks} |"
        )
    lines += [
        "",
        "### Where our runtime's time goes",
        "",
        "Busy = the summed spans of a device's compute actions in one step (median over rounds), measured vs"
        " the profile's (the plan's simulated action spans). Compute inflation = measured busy / predicted"
        " busy − 1 over both devices (then per op letter): compute that ran slower in the pipeline than the"
        " profile measured layer by layer; extra per action = that difference over the plan's number of"
        " actions. Idle = step − busy of the busier device: waiting on the other rank, gloo P2P, and"
        " per-action Python work. Page faults = minor page faults of one step, both ranks (median over"
        " rounds): memory the step touched afresh (4 KiB each; one tiny-gemma logits tensor is about"
        " 12,000), which the profile's warm layers do not pay.",
        "",
        "| model | plan | step ms (pred) | busy d0 ms (pred) | busy d1 ms (pred) | compute inflation"
        " | F | I | W | B | extra per action us | idle of the busier device ms (pred) | page faults |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in res.models:
        for s in RUNS:
            p = m.plans[s]
            busy = [p.busy(d) for d in range(PP)]
            pbusy = [p.predicted_busy(d) for d in range(PP)]
            idle, pidle = _idle(p)
            per_op = " | ".join(_pct_or_dash(p.inflation(op)) for op in "FIWB")
            lines.append(
                f"| {m.case.model} | {s} | {_ms(p.ours)} ({_ms(p.predicted_s)}) | {_ms(busy[0])}"
                f" ({_ms(pbusy[0])}) | {_ms(busy[1])} ({_ms(pbusy[1])})"
                f" | {_pct(_inflation(p))} | {per_op} | {p.extra_per_action() * 1e6:.0f} | {_ms(idle)} ({_ms(pidle)})"
                f" | {_faults(p)} |"
            )
    lines += [
        "",
        "### Per stage",
        "",
        "For the plans that split the backward (I and W as their own actions, W deferred):"
        " compute inflation of each stage's F, I and W (measured / predicted summed spans − 1, median over"
        " rounds).",
        "",
        "| model | plan | stage | layers | device | F | I | W |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in res.models:
        for s in RUNS:
            p = m.plans[s]
            if not any(k.startswith("W") for k in p.predicted_stage_busy_s):
                continue
            for n, (a, b, d) in enumerate(p.stages):
                per_op = " | ".join(_pct_or_dash(p.stage_inflation(n, op)) for op in "FIW")
                layers = f"{a}-{b - 1}" if b - a > 1 else str(a)
                lines.append(f"| {m.case.model} | {s} | {n} | {layers} | d{d} | {per_op} |")
    lines += ["", "### Same loss in both runtimes", ""]
    diffs = [(m, p) for m in res.models for p in (m.plans[s] for s in CLASSIC)]
    worst = max(p.loss_diff for _, p in diffs)
    lines.append(
        f"Every round's loss (sum of the micro-batches' scaled cross-entropies) of torch's runtime vs ours on the"
        f" same classic plan and data: max |difference| {worst:.1e} over {len(diffs)} schedule pairs x"
        f" {cfg.warmup + cfg.rounds} rounds ({_verdict(worst <= LOSS_TOL)} at {LOSS_TOL:.0e}). The adaptive"
        " plan's loss is not compared: a head split into vocabulary chunks initializes each chunk from its own"
        " seed, so at the same seed it is not the same initial model."
    )
    lines += ["", "### How to read the figures", ""]
    lines.append(
        "- ours / torch: both runtimes run the same actions in the same order on the same stages; torch's"
        " stage modules use plain `F.linear` so that its input-only backward (ZBV's I) does not also compute"
        " the weight gradient our deferrable linear would hand it (see `bench/torch_runtime.py`)."
    )
    lines.append(
        "- predicted: the plan's `predicted.expected_step_time_s` (its `step_time_s` when the profile measured no"
        " variation), i.e. `adaptis simulate` with the profile measured above: the median step of replays in"
        " which each action's time varies about its cost as the profile's op times varied within a round"
        " (`time_spread`; the Targets table's context row gives the errors without it). The profiler times each distinct layer's F, I, W as a pipeline stage runs them, with two"
        " other micro-batches' graphs alive, each backward that of the oldest and each W timed twice: after a"
        " later micro-batch's I, as a split-backward schedule defers it, and right after its own I; the"
        " simulator charges a W that the plan puts right after its own I the second, and a fused B what the"
        " fused backward measured (`executor/profile.py`); a body layer whose weights fit the core's cache in"
        " a chain of copies with their own weights, as a stage of several layers runs it (`stage_copies`: a layer timed alone"
        " keeps its weights cached, which a stage does not); with both cores busy (two copies at once, as the"
        " two ranks run), and"
        " each message end charged what it costs a rank while both compute (`measure_link`); whatever a"
        " pipeline adds beyond that (per-action interpreter work, hand-offs between ranks, waits) is error."
        " The profile is measured"
        " minutes before the runs, on a shared machine: its own noise carries into every prediction of that"
        " model."
    )
    lines.append(
        "- the malloc setting and the concurrent profiling are measurement hygiene, identical for both"
        " runtimes (they share the processes); without them the large-vocabulary head's times swing by"
        " 1.5-2.5x between runs and the profile misses the contention of two busy ranks."
    )
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the suite's record

SUITE = "real"


def settings(cfg: RealConfig) -> dict:
    """What the suite ran, named: the setting every figure of the record depends on."""
    return {
        "configuration": cfg.label,
        "device": "cpu",
        "dtype": "fp32",
        "pp": PP,
        "backend": "gloo",
        "tp": 1,
        "memory_limit": None,
        "costs": "measured profiles (adaptis profile on this machine, per model)",
        "profile_runtime": cfg.profile_runtime,
        "models": [dataclasses.asdict(c) for c in cfg.cases],
        "warmup": cfg.warmup,
        "rounds": cfg.rounds,
        "launches": cfg.launches,
        "profile_sessions": cfg.profile_sessions,
        "profile_repeats": cfg.profile_repeats,
        "malloc": MALLOC_ENV if cfg.keep_memory else None,
    }


def run_suite(quick: bool, workers: int = 1, *, config: RealConfig | None = None, command: str | None = None) -> dict:
    """Run the suite (`workers` is unused: the launches own both cores) and return its record."""
    from bench import records

    cfg = config or (QUICK if quick else FULL)
    work = os.environ.get("BENCH_REAL_WORK")
    t0 = time.perf_counter()
    res = run_bench(
        cfg,
        work_dir=Path(work) if work else None,
        log=lambda m: print(f"[bench.real] {m}", file=sys.stderr, flush=True),
    )
    command = command or "python -m bench.real" + (" --quick" if quick else "")
    return records.record(SUITE, settings(cfg), records.to_json(res), command, time.perf_counter() - t0)


def results_from_record(rec: dict) -> RealResults:
    from bench.records import from_json

    return from_json(RealResults, rec["data"])


def render(rec: dict) -> str:
    """The markdown section of a record: heading, reproduce line, body."""
    from bench.records import reproduce_line

    return "\n".join([HEADING, "", reproduce_line(rec), "", render_results(results_from_record(rec)).rstrip(), ""])


def cli(argv: Sequence[str] | None = None) -> int:
    from bench import records

    ap = argparse.ArgumentParser(prog="python -m bench.real", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one model, small shape, few rounds")
    ap.add_argument("--models", default=None, help="comma list of the configuration's models to run")
    ap.add_argument("--rounds", type=int, default=None, help="measured rounds (default: the configuration's)")
    ap.add_argument("--default-malloc", action="store_true", help="leave glibc malloc at its defaults")
    ap.add_argument("--allow-dirty", action="store_true", help="write the record from a checkout with changes")
    ap.add_argument("--out-dir", default=str(records.RESULTS), help="folder of the record (real.json)")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    if args.models:
        want = [s.strip() for s in args.models.split(",") if s.strip()]
        known = {c.model: c for c in cfg.cases}
        bad = [w for w in want if w not in known]
        if bad:
            ap.error(f"--models: {bad[0]} is not in the {cfg.label} configuration ({', '.join(known)})")
        cfg = dataclasses.replace(cfg, cases=tuple(known[w] for w in want))
    if args.rounds is not None:
        if args.rounds < 1:
            ap.error(f"--rounds = {args.rounds}: need at least 1")
        cfg = dataclasses.replace(cfg, rounds=args.rounds)
    if args.default_malloc:
        cfg = dataclasses.replace(cfg, keep_memory=False)
    command = "python -m bench.real" + "".join(
        f" {flag}" + ("" if value is True else f" {value}")
        for flag, value in (
            ("--quick", args.quick),
            ("--models", args.models),
            ("--rounds", args.rounds),
            ("--default-malloc", args.default_malloc),
        )
        if value not in (None, False)
    )
    if not args.allow_dirty and not records.checkout()[1]:  # refuse before the run, not after it
        print("error: the checkout has uncommitted changes; commit them first, or pass --allow-dirty", file=sys.stderr)
        return 2
    rec = run_suite(args.quick, config=cfg, command=command)
    try:
        path = records.write(rec, Path(args.out_dir), allow_dirty=args.allow_dirty)
    except records.DirtyTree as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
