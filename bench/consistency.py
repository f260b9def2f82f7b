"""Is the free configuration search the best of its neighbours? `adaptis plan --gpus N` against the same
command with one dimension forced next to the free pick.

Run: `python -m bench.consistency [--quick] [--cases NAME,...] [--workers 2] [--out FILE.md]` (prints the
table; `python -m bench.run --suites consistency` writes the record, bench/results/consistency.json).

The claim measured: no configuration forced along one dimension beats the free search. Each case is one
`adaptis plan --model M --hardware H --gpus N --global-batch-size B --seq-len S` as a user types it
(default options: no `--time-limit`, so a deterministic budget; auto recomputation, adaptive pipeline), in
a new process. Then, for each dimension, the same command with that one dimension forced and the rest
still searched: `--pp`, `--tp`, `--cp`, `--ep` (models with experts only) and `--micro-batch-size` at
twice and half the free pick (where the value is a whole number within the GPUs, the global batch for
the micro-batch size), `--zero` at every other stage of 0..3. A forced value the planner refuses (illegal,
or nothing fits memory) is recorded with its one-line reason; it is an outcome, not a failure of the
bench. Per case: the free configuration, its tokens/s per GPU and wall seconds, every forced run, the
best forced over free ratio, and the forced runs that beat free by more than `MARGIN` (`verdict`).
A forced run that beats free means the search missed a point it could have planned (the screen ranks
points by a closed-form classic estimate; the best `PLAN_LIMIT` and, of each deeper pipeline, the point
with the most bubble to fill are planned, `PLAN_MOST` in all: a neighbour the adaptive search would have
made faster can still be screened out). The free search's `co_design` (what the co-designed pipeline buys
at its configuration over the best classic schedule there, and whether classic schedules alone would
have chosen another configuration) is kept per case.

Cases (`CASES`): models with heterogeneous layers (the Gemma family's sliding-window / global
attention), mixtures of experts, hybrid Mamba, and dense models; 8 to 16,384 GPUs on the built-in `h100`
and `a100` profiles (their memory margins as shipped); each with a global batch a training run of that
size would use (stated per case: the published one where the model's report gives it). `--quick` runs
`QUICK` only (a few minutes). `workers` cases run side by side, each its runs one at a time; every
`adaptis plan` also forks its own search workers over all the CPUs (`adaptis_plan.search.workers`), so
the wall seconds are under that load (`--workers 1` times each search alone). The plans do not depend
on the load: the budget is deterministic, and a run cut short by the hard stop is counted
(`Run.aborted`). Imports only the standard library and bench helpers: the planner runs as the command
line it is.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO

SUITE = "consistency"
HEADING = "## Free configuration search against one dimension forced (adaptis plan --gpus, simulated)"
#: a forced run beats free when its tokens/s per GPU is more than this above the free search's
MARGIN = 0.003
#: the dimensions forced, by their `adaptis plan` flag; ZeRO is tried at every stage, the others at x2 and /2
FLAGS = {
    "zero": "--zero",
    "pp": "--pp",
    "tp": "--tp",
    "cp": "--cp",
    "ep": "--ep",
    "micro_batch_size": "--micro-batch-size",
}
ZERO_STAGES = (0, 1, 2, 3)
CONFIGS = "tests/data/configs"
#: the model families the cases cover: heterogeneous layers (Gemma), experts, hybrid Mamba, dense
FAMILIES = ("heterogeneous", "moe", "hybrid", "dense")


@dataclass(frozen=True)
class Case:
    name: str
    family: str  # one of FAMILIES
    model: str  # built-in name or config path, relative to the repository
    hardware: str
    gpus: int
    global_batch_size: int
    seq_len: int
    experts: bool = False  # the model has expert layers: --ep is forced too

    def args(self) -> tuple[str, ...]:
        return ("--model", self.model, "--hardware", self.hardware, "--gpus", str(self.gpus),
                "--global-batch-size", str(self.global_batch_size), "--seq-len", str(self.seq_len))  # fmt: skip

    def command(self) -> str:
        return "adaptis plan " + " ".join(self.args()) + " -o plan.json"


def _c(name: str, family: str, config: str, hw: str, gpus: int, batch: int, seq: int, experts: bool = False) -> Case:
    model = config if "/" in config or not config.endswith(".json") else f"{CONFIGS}/{config}"
    return Case(name, family, model, hw, gpus, batch, seq, experts)


#: batches: 1-4M tokens per step for the mid-size runs (a common pre-training choice), the published
#: ones where the model's report states them (GPT-NeoX-20B: 1,538 x 2,048 on 96 A100s, here 1,536 so that
#: it splits; Falcon-40B: 1,152 x 2,048 on 384 A100s; Llama 3 405B: 2,048 x 8,192 at 16K GPUs)
CASES: tuple[Case, ...] = (
    _c("gemma-3-27b 64 h100", "heterogeneous", "gemma-3-27b.json", "h100", 64, 256, 4096),
    _c("gemma-3-4b 16 h100", "heterogeneous", "gemma-3-4b-it.json", "h100", 16, 256, 4096),
    _c("gemma-3-4b 8 a100", "heterogeneous", "gemma-3-4b-it.json", "a100", 8, 128, 4096),
    _c("gemma-7b 32 a100", "heterogeneous", "gemma-7b.json", "a100", 32, 256, 4096),
    _c("gemma-2-9b 64 h100", "heterogeneous", "gemma-2-9b.json", "h100", 64, 512, 4096),
    _c("gemma-3-27b 128 a100", "heterogeneous", "gemma-3-27b.json", "a100", 128, 512, 4096),
    _c("qwen3-30b-a3b 64 h100", "moe", "qwen3-30b-a3b.json", "h100", 64, 512, 4096, True),
    _c("qwen3-30b-a3b 256 a100", "moe", "qwen3-30b-a3b.json", "a100", 256, 1024, 4096, True),
    _c("mixtral-8x7b 64 h100", "moe", "mixtral-8x7b.json", "h100", 64, 256, 4096, True),
    _c("mixtral-8x7b 128 a100", "moe", "mixtral-8x7b.json", "a100", 128, 512, 4096, True),
    _c("deepseek-v2-lite 32 h100", "moe", "deepseek-v2-lite.json", "h100", 32, 256, 4096, True),
    _c("nemotron-h-8b 32 h100", "hybrid", "nemotron-h-8b.json", "h100", 32, 256, 8192),
    _c("nemotron-h-8b 16 a100", "hybrid", "nemotron-h-8b.json", "a100", 16, 128, 4096),
    _c("jamba-v0.1 64 h100", "hybrid", "jamba-v0.1.json", "h100", 64, 256, 4096, True),
    _c("llama-2-7b 8 h100", "dense", "llama-2-7b", "h100", 8, 64, 4096),
    _c("llama-2-7b 64 a100", "dense", "llama-2-7b", "a100", 64, 512, 4096),
    _c("llama-3.1-70b 256 h100", "dense", "llama-3.1-70b.json", "h100", 256, 512, 8192),
    _c("llama-3.1-70b 1024 h100", "dense", "llama-3.1-70b.json", "h100", 1024, 1024, 4096),
    _c("llama-3.1-405b 16384 h100", "dense", "llama-3.1-405b.json", "h100", 16384, 2048, 8192),
    _c("gpt-neox-20b 96 a100", "dense", "gpt-neox-20b.json", "a100", 96, 1536, 2048),
    _c("falcon-40b 384 a100", "dense", "falcon-40b.json", "a100", 384, 1152, 2048),
)
QUICK = ("gemma-3-4b 16 h100", "qwen3-30b-a3b 64 h100", "llama-2-7b 8 h100")


# ----------------------------------------------------------------------------- forced values and verdict


def forced_values(
    configuration: Mapping[str, int], gpus: int, global_batch_size: int, experts: bool
) -> list[tuple[str, int]]:
    """(dimension, value) of every forced run next to the free pick `configuration`: ZeRO at every other
    stage; pp, tp, cp, ep (with experts only) and the micro-batch size at x2 and /2 where the value is a
    whole number >= 1 and at most the GPUs (the micro-batch size: at most the global batch)."""
    out = [("zero", z) for z in ZERO_STAGES if z != configuration["zero"]]
    for dim in ("pp", "tp", "cp", "ep", "micro_batch_size"):
        if dim == "ep" and not experts:
            continue
        v = configuration[dim]
        cap = global_batch_size if dim == "micro_batch_size" else gpus
        if 2 * v <= cap:
            out.append((dim, 2 * v))
        if v % 2 == 0:
            out.append((dim, v // 2))
    return out


@dataclass
class Run:
    """One `adaptis plan` process: its configuration and tokens/s per GPU, or the reason it refused."""

    wall_s: float
    configuration: dict | None = None
    tokens_per_s_per_gpu: float | None = None
    aborted: bool = False  # the hard stop cut the search short
    reason: str | None = None
    dimension: str | None = None  # None: the free search
    value: int | None = None
    co_design: dict | None = None  # `adaptis plan --json`'s co_design


@dataclass(frozen=True)
class Verdict:
    best: Run | None  # the fastest forced run that planned
    ratio: float | None  # its tokens/s per GPU / the free search's
    beats: tuple[Run, ...]  # forced runs more than `MARGIN` above the free search, fastest first


def verdict(free: Run, forced: Sequence[Run], margin: float = MARGIN) -> Verdict:
    """The best forced run against the free one, and every forced run that beats it by more than `margin`."""
    planned = [r for r in forced if r.tokens_per_s_per_gpu is not None]
    if not planned or free.tokens_per_s_per_gpu is None:
        return Verdict(None, None, ())
    base = free.tokens_per_s_per_gpu
    ranked = sorted(planned, key=lambda r: -float(r.tokens_per_s_per_gpu or 0.0))
    best = ranked[0]
    beats = tuple(r for r in ranked if float(r.tokens_per_s_per_gpu or 0.0) > base * (1.0 + margin))
    return Verdict(best, float(best.tokens_per_s_per_gpu or 0.0) / base, beats)


def config_label(k: Mapping | None) -> str:
    if not k:
        return "–"
    strategy = k["strategy"] + (f" x{k['stages_per_device']}" if k.get("stages_per_device", 1) > 1 else "")
    return (f"tp{k['tp']} pp{k['pp']} dp{k['dp']} cp{k['cp']} ep{k['ep']} zero{k['zero']}"
            f" mbs{k['micro_batch_size']} M{k['num_microbatches']} {strategy}")  # fmt: skip


def run_label(r: Run) -> str:
    return "free" if r.dimension is None else f"{FLAGS[r.dimension]} {r.value}"


# ----------------------------------------------------------------------------- running


def reason_of(stderr: str, returncode: int) -> str:
    """The one line that says why `adaptis plan` refused: its last non-empty stderr line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {returncode}"


def plan_once(case: Case, extra: Sequence[str] = (), dimension: str | None = None, value: int | None = None) -> Run:
    """`adaptis plan` of `case` (plus `extra`) in a new process, as a user runs it."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "adaptis_plan.cli", "plan", *case.args(), *extra, "--json",
               "-o", str(Path(tmp) / "plan.json")]  # fmt: skip
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        wall = time.perf_counter() - t0
    run = Run(round(wall, 2), dimension=dimension, value=value)
    if r.returncode != 0:
        run.reason = reason_of(r.stderr, r.returncode)
        return run
    out = json.loads(r.stdout)
    run.configuration = out["configuration"]
    run.tokens_per_s_per_gpu = out["tokens_per_s_per_gpu"]
    run.aborted = bool(out.get("search", {}).get("aborted"))
    run.co_design = out.get("co_design")
    return run


@dataclass
class CaseResult:
    case: Case
    free: Run
    forced: list[Run] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return verdict(self.free, self.forced)


def run_case(case: Case, dimensions: Sequence[str] = tuple(FLAGS)) -> CaseResult:
    """The free search of `case`, then each forced run of `dimensions` next to its pick, one at a time."""
    free = plan_once(case)
    res = CaseResult(case, free)
    if free.configuration is not None:
        for dim, v in forced_values(free.configuration, case.gpus, case.global_batch_size, case.experts):
            if dim in dimensions:
                res.forced.append(plan_once(case, (FLAGS[dim], str(v)), dim, v))
    t = sum(r.wall_s for r in [free, *res.forced])
    print(f"{case.name}: {config_label(free.configuration)}, {len(res.forced)} forced, {t:.0f} s", file=sys.stderr)
    return res


def run_cases(cases: Sequence[Case], workers: int) -> list[CaseResult]:
    """`workers` cases side by side (threads waiting on their planning processes), the most GPUs first (the
    longest), returned in `cases` order."""
    order = sorted(range(len(cases)), key=lambda i: -cases[i].gpus)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        done = dict(zip(order, pool.map(run_case, [cases[i] for i in order]), strict=True))
    return [done[i] for i in range(len(cases))]


def select(names: str | None, quick: bool) -> list[Case]:
    cases = [c for c in CASES if c.name in QUICK] if quick else list(CASES)
    if names:
        wanted = [s.strip() for s in names.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {c.name for c in CASES})
        if unknown:
            raise ValueError(f"unknown case(s) {unknown}; known: {[c.name for c in CASES]}")
        cases = [c for c in CASES if c.name in wanted]
    return cases


def run_suite(quick: bool, workers: int = 2) -> dict:
    """The suite's record: every case's free search and forced runs (module docstring)."""
    from bench import records

    cases = select(None, quick)
    t0 = time.perf_counter()
    results = run_cases(cases, workers)
    settings = {"margin": MARGIN, "defaults": "adaptis plan --gpus defaults (no --time-limit)",
                "cases": [records.to_json(c) for c in cases]}  # fmt: skip
    command = f"python -m bench.run --suites {SUITE}" + (" --quick" if quick else "")
    return records.record(SUITE, settings, {"results": records.to_json(results)}, command,
                          time.perf_counter() - t0)  # fmt: skip


def results_from_record(rec: Mapping) -> list[CaseResult]:
    from bench import records

    return [records.from_json(CaseResult, r) for r in rec["data"]["results"]]


# ----------------------------------------------------------------------------- rendering


def summary(results: Sequence[CaseResult]) -> dict[str, int]:
    forced = [r for res in results for r in res.forced]
    return {
        "cases": len(results),
        "free_refused": sum(res.free.reason is not None for res in results),
        "forced_runs": len(forced),
        "forced_planned": sum(r.tokens_per_s_per_gpu is not None for r in forced),
        "forced_refused": sum(r.reason is not None for r in forced),
        "cases_beaten": sum(bool(res.verdict.beats) for res in results),
        "runs_beating": sum(len(res.verdict.beats) for res in results),
        "aborted": sum(r.aborted for res in results for r in [res.free, *res.forced]),
        "co_design_decides": sum(
            bool(res.free.co_design and res.free.co_design["decides_configuration"]) for res in results
        ),  # fmt: skip
    }


def _tps(r: Run) -> str:
    return "–" if r.tokens_per_s_per_gpu is None else f"{r.tokens_per_s_per_gpu:,.0f}"


def _co_design(r: Run) -> str:
    """The free plan's gain over the best classic schedule at its configuration, and whether classic schedules
    alone would have chosen another configuration (then that one's throughput)."""
    co = r.co_design
    if not co:
        return "–"
    out = f"{co['gain_over_classic']:+.1%}"
    if co["decides_configuration"]:
        out += f"; classic alone: {config_label(co['classic_only']['configuration'])}"
        out += f" at {co['classic_only']['tokens_per_s_per_gpu']:,.0f} ({co['gain_over_classic_only']:+.1%})"
    return out


def table(results: Sequence[CaseResult]) -> str:
    lines = [
        "| case | free config | free tok/s/GPU | co-design | best forced | ratio | beats > 0.3% | wall s |",
        "|---|---|---:|---|---|---:|---|---:|",
    ]
    for res in results:
        v = res.verdict
        free = config_label(res.free.configuration) if res.free.reason is None else f"refused: {res.free.reason}"
        best = "–" if v.best is None else f"`{run_label(v.best)}`: {config_label(v.best.configuration)}"
        ratio = "–" if v.ratio is None else f"{v.ratio:.4f}"
        beats = ", ".join(f"`{run_label(r)}` +{(r.tokens_per_s_per_gpu or 0) / (res.free.tokens_per_s_per_gpu or 1) - 1:.1%}"
                          for r in v.beats) or "none"  # fmt: skip
        lines.append(
            f"| {res.case.name} | {free} | {_tps(res.free)} | {_co_design(res.free)} | {best} | {ratio} | {beats}"
            f" | {res.free.wall_s:.1f} |"
        )
    return "\n".join(lines)


def refusals(results: Sequence[CaseResult]) -> str:
    """Every forced run that did not plan, with its reason."""
    lines = [f"- {res.case.name}, `{run_label(r)}`: {r.reason}" for res in results for r in res.forced if r.reason]
    return "\n".join(lines) or "- none"


def summary_line(results: Sequence[CaseResult]) -> str:
    s = summary(results)
    return (
        f"{s['cases']} cases ({s['free_refused']} refused free); {s['forced_runs']} forced runs: {s['forced_planned']}"
        f" planned, {s['forced_refused']} refused; {s['runs_beating']} forced runs in {s['cases_beaten']} cases beat the"
        f" free search by more than {MARGIN:.1%}; {s['aborted']} runs cut short by the hard stop; the co-designed"
        f" pipeline decides the configuration in {s['co_design_decides']} cases."
    )


def render(rec: Mapping) -> str:
    from bench import records

    results = results_from_record(rec)
    return "\n".join([
        HEADING,
        "",
        records.reproduce_line(rec),
        "",
        "Each case is `adaptis plan --model M --hardware H --gpus N --global-batch-size B --seq-len S` with its default"
        " options (analytic cost model, the built-in profile as shipped), then the same command with one dimension"
        " forced next to the free pick (`--pp`, `--tp`, `--cp`, `--ep` for models with experts, `--micro-batch-size`"
        " at x2 and /2; `--zero` at every other stage), the rest still searched. Ratio: the best forced run's tokens/s"
        " per GPU over the free search's (above 1: the free search missed it). Co-design: the free plan against the"
        " best classic schedule at its configuration, and where classic schedules alone would choose another"
        " configuration, that one (its tokens/s per GPU and the free plan's gain over it). Wall s: the free search,"
        " one process,"
        " beside the other cases' runs.",
        "",
        table(results),
        "",
        summary_line(results),
        "",
    ])  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.consistency", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--cases", default=None, help="comma-separated case names (see CASES)")
    ap.add_argument("--workers", type=int, default=2, help="cases planned side by side")
    ap.add_argument("--json", default=None, help="also write every run as JSON to this file")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    try:
        cases = select(args.cases, args.quick)
    except ValueError as e:
        ap.error(str(e))
    t0 = time.perf_counter()
    results = run_cases(cases, args.workers)
    wall = time.perf_counter() - t0
    from bench import records

    if args.json:
        Path(args.json).write_text(json.dumps(records.to_json(results), indent=1) + "\n")
    text = "\n\n".join([
        table(results),
        summary_line(results),
        "Forced runs that did not plan:\n\n" + refusals(results),
        f"{len(cases)} cases, {args.workers} workers, {wall:.0f} s",
    ])  # fmt: skip
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
