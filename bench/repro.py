"""Same inputs, same plan: `adaptis plan` with its default options, run twice idle and twice under load.

Run: `python -m bench.repro [--quick] [--cases NAME,...] [--no-load] [--out FILE.md]`

Each case is one `adaptis plan` command as a user types it: no `--time-limit`, no `--no-hard-stop`,
no `--recompute` (the defaults), in a new process, one at a time. It runs `RUNS` times on the
machine as it is ("idle"), then `RUNS` times with `LOAD_PROCESSES` busy loops beside it ("loaded":
on a 2-core machine, both cores taken), and checks that every run wrote the same plan file (md5)
and that no run was cut short by the wall clock (`search.aborted` in the plan). It prints one
markdown table (the wall times of every run, the md5, the verdict) and exits 1 when a case was not
reproducible, so it serves as a check as well as a measurement (docs/reproducibility.md holds the
figures it measured).

Cases (`CASES`): the AdaPtis paper's 18 heterogeneous cases at its tensor parallelism (bench.paper's
`papertp`, calibrated model: Gemma TP 4, DeepSeek and Nemotron-H TP 2, PP 4 / 8 / 16 with DeepSeek-L
at PP 8, 4 x PP micro-batches, seq 2K and 4K), Mixtral-8x7B at PP 8 (memory-bound: recomputation
auto searches the forced modes too) and three whole-configuration searches (`--gpus`). `--quick`
runs `QUICK` only (seconds each).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO
from bench.paper import HETEROGENEOUS, PAPER_TP, paper_pp

RUNS = 2
LOAD_PROCESSES = 2


@dataclass(frozen=True)
class ReproCase:
    name: str
    args: tuple[str, ...]  # `adaptis plan` arguments, without -o

    def command(self) -> str:
        return "adaptis plan " + " ".join(self.args) + " -o plan.json"


def _paper_cases() -> list[ReproCase]:
    out = []
    for fam in HETEROGENEOUS:
        for sc in ("s", "m", "l"):
            model = f"{fam}-{sc}"
            pp = paper_pp(model)
            for seq in (2048, 4096):
                args = ("--model", model, "--hardware", "h200", "--pp", str(pp), "--microbatches", str(4 * pp))
                args += ("--seq-len", str(seq), "--tp", str(PAPER_TP[fam]))
                out.append(ReproCase(f"{model} {seq // 1024}K", args))
    return out


CASES: tuple[ReproCase, ...] = (
    *_paper_cases(),
    ReproCase(
        "mixtral-8x7b PP 8",
        ("--model", "tests/data/configs/mixtral-8x7b.json", "--hardware", "h200", "--pp", "8", "--microbatches", "32",
         "--seq-len", "4096"),
    ),
    ReproCase(
        "llama-2-7b 16 GPUs",
        ("--model", "llama-2-7b", "--hardware", "h100", "--gpus", "16", "--global-batch-size", "64"),
    ),
    ReproCase(
        "llama-2-7b 64 GPUs",
        ("--model", "llama-2-7b", "--hardware", "h100", "--gpus", "64", "--global-batch-size", "256", "--seq-len",
         "4096"),
    ),
    ReproCase(
        "llama-3.1-405b 16384 GPUs",
        ("--model", "tests/data/configs/llama-3.1-405b.json", "--hardware", "h100", "--gpus", "16384",
         "--global-batch-size", "2048", "--seq-len", "8192"),
    ),
)  # fmt: skip
QUICK = ("gemma-s 2K", "deepseek-s 4K", "llama-2-7b 16 GPUs")


@dataclass
class Run:
    wall_s: float
    md5: str | None
    aborted: bool
    error: str | None = None


@dataclass
class CaseReport:
    case: ReproCase
    idle: list[Run] = field(default_factory=list)
    loaded: list[Run] = field(default_factory=list)

    @property
    def runs(self) -> list[Run]:
        return self.idle + self.loaded

    @property
    def reproducible(self) -> bool:
        runs = self.runs
        return bool(runs) and all(r.error is None and not r.aborted for r in runs) and len({r.md5 for r in runs}) == 1


def run_once(case: ReproCase, tmp: Path, extra: Sequence[str] = ()) -> Run:
    """One `adaptis plan` in a new process, as a user runs it; its wall time, the plan's md5 and abort flag."""
    run = _run_once(case, tmp, extra)
    print(f"{case.name}: {run.wall_s:.1f} s, {run.md5}, aborted {run.aborted}, {run.error or 'ok'}", file=sys.stderr)
    return run


def _run_once(case: ReproCase, tmp: Path, extra: Sequence[str]) -> Run:
    out = tmp / "plan.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "adaptis_plan.cli", "plan", *case.args, *extra, "--json", "-o", str(out)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return Run(wall, None, False, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1])
    data = out.read_bytes()
    aborted = bool(json.loads(data).get("search", {}).get("aborted"))
    return Run(wall, hashlib.md5(data).hexdigest(), aborted)


class Load:
    """`n` busy loops beside the runs (`for i in 1 2; do (while :; do :; done) & done`), ended on exit."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Load:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"]))
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def check(cases: Sequence[ReproCase], runs: int = RUNS, load: int = LOAD_PROCESSES) -> list[CaseReport]:
    reports = [CaseReport(c) for c in cases]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for rep in reports:
            rep.idle = [run_once(rep.case, tmp) for _ in range(runs)]
        if load > 0:
            with Load(load):
                for rep in reports:
                    rep.loaded = [run_once(rep.case, tmp) for _ in range(runs)]
    return reports


def _walls(runs: Sequence[Run]) -> str:
    return " / ".join(f"{r.wall_s:.1f}" for r in runs) or "–"


def render(reports: Sequence[CaseReport], load: int) -> str:
    head = f"| case | command | idle wall s | loaded wall s ({load} busy loops) | plan md5 | same plan, never cut |"
    lines = [head, "|---|---|---|---|---|---|"]
    for rep in reports:
        md5s = sorted({r.md5 or "error" for r in rep.runs})
        errors = [r.error for r in rep.runs if r.error]
        verdict = "yes" if rep.reproducible else "**no**" + (f" ({errors[0]})" if errors else "")
        if any(r.aborted for r in rep.runs):
            verdict += " (cut short)"
        lines.append(
            f"| {rep.case.name} | `{rep.case.command()}` | {_walls(rep.idle)} | {_walls(rep.loaded)} |"
            f" {', '.join(m[:8] for m in md5s)} | {verdict} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--cases", default=None, help="comma-separated case names (see CASES)")
    ap.add_argument("--runs", type=int, default=RUNS, help="runs per condition")
    ap.add_argument("--no-load", action="store_true", help="skip the loaded runs")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    cases = list(CASES)
    if args.quick:
        cases = [c for c in CASES if c.name in QUICK]
    if args.cases:
        wanted = [s.strip() for s in args.cases.split(",")]
        unknown = sorted(set(wanted) - {c.name for c in CASES})
        if unknown:
            ap.error(f"unknown case(s) {unknown}; known: {[c.name for c in CASES]}")
        cases = [c for c in CASES if c.name in wanted]
    load = 0 if args.no_load else LOAD_PROCESSES
    t0 = time.perf_counter()
    reports = check(cases, args.runs, load)
    table = render(reports, load)
    load1 = os.getloadavg()[0]
    footer = f"\n\n{len(cases)} cases, {time.perf_counter() - t0:.0f} s; load average (1 min) at the end {load1:.1f}"
    print(table + footer)
    if args.out:
        Path(args.out).write_text(table + footer + "\n")
    return 0 if all(r.reproducible for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
