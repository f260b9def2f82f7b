"""Memory-bound cases: the plan with recomputation off, full and auto, side by side (simulated, h200).

Run: `python -m bench.run --suites recompute [--quick]` (suite `recompute`: writes
bench/results/recompute.json, then re-renders BENCHMARKS.md).

Data flow: `RecomputeCase` -> `run_case` plans it three times through `app.plan.make_plan_for`
(the path `adaptis plan` takes) with `--recompute none`, `full` and `auto` -> `ModeRow`s ->
`run_suite` returns them as the suite's record -> `render` (from the record alone) one markdown
table with the command that reproduces each row. Every figure comes from running the planner. Imports `adaptis_plan` use cases and
`bench.common` / `bench.paper`'s formatting; no CLI, no rich.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from bench.common import REPO
from bench.paper import Provenance, fms, fpct, table

HEADING = "## Memory-bound cases: recomputation off, full and auto (simulated, h200)"
MODES = ("none", "full", "auto")


@dataclass(frozen=True)
class RecomputeCase:
    label: str
    model: str  # built-in name or a config path relative to the repository
    pp: int
    num_microbatches: int
    seq_len: int
    tp: int = 1
    time_limit_s: float = 5.0
    hardware: str = "h200"

    def command(self, mode: str) -> str:
        return (
            f"adaptis plan --model {self.model} --hardware {self.hardware} --pp {self.pp} --tp {self.tp}"
            f" --microbatches {self.num_microbatches} --seq-len {self.seq_len} --time-limit {self.time_limit_s:g}"
            f" --recompute {mode} -o plan.json --json"
        )


@dataclass
class ModeRow:
    """One plan: its figures, or `error` when no plan fits memory."""

    mode: str
    step_time_s: float | None = None
    bubble_ratio: float | None = None
    lower_bound_s: float | None = None
    peak_fraction: float | None = None  # max over devices of peak / limit
    stages: dict[str, list[int]] = field(default_factory=dict)
    num_stages: int = 0
    extra_compute_share: float = 0.0
    chosen: str = ""
    plan_time_s: float = 0.0
    error: str | None = None


@dataclass
class CaseRun:
    case: RecomputeCase
    rows: dict[str, ModeRow]
    classic_fit: int = 0  # classic strategies (uniform and balanced partitions) that fit, without recomputation
    classic_total: int = 0
    best_classic_s: float | None = None


def default_cases(quick: bool = False) -> list[RecomputeCase]:
    """The issue's Mixtral command; Mixtral-8x7B, DeepSeek-V2-Lite and Llama-3.1-70B at TP 8 at the
    sequence length where memory starts to bind at PP 4; the paper's large cases at 4K."""
    limit = 1.0 if quick else 5.0
    mixtral, llama = "tests/data/configs/mixtral-8x7b.json", "tests/data/configs/llama-3.1-70b.json"
    cases = [RecomputeCase("Mixtral-8x7B", mixtral, 8, 32, 4096, 1, limit)]
    if quick:
        return cases + [RecomputeCase("deepseek-l", "deepseek-l", 8, 32, 4096, 1, limit)]
    cases += [
        RecomputeCase("Mixtral-8x7B", mixtral, 4, 16, 65536, 8, limit),
        RecomputeCase("DeepSeek-V2-Lite", "deepseek-v2-lite", 4, 16, 65536, 8, limit),
        RecomputeCase("Llama-3.1-70B", llama, 4, 16, 32768, 8, limit),
    ]
    cases += [
        RecomputeCase(name, name, 8 if name == "deepseek-l" else 16, 32 if name == "deepseek-l" else 64, 4096, 1, limit)
        for name in ("gemma-l", "deepseek-l", "nemotron-h-l", "llama-2-l")
    ]
    return cases


def _model_arg(model: str) -> str:
    path = REPO / model
    return str(path) if "/" in model and path.exists() else model


def run_case(case: RecomputeCase) -> CaseRun:
    """The case planned with --recompute none, full and auto (each exactly as `adaptis plan`)."""
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.errors import AdaptisError

    run = CaseRun(case, {})
    for mode in MODES:
        req = PlanRequest.of(
            _model_arg(case.model),
            case.hardware,
            case.pp,
            case.num_microbatches,
            seq_len=case.seq_len,
            tp=case.tp,
            recompute=mode,
            time_limit_s=case.time_limit_s,
        )
        t0 = time.perf_counter()
        try:
            out = make_plan_for(req)
        except AdaptisError as e:
            run.rows[mode] = ModeRow(mode, plan_time_s=time.perf_counter() - t0, error=str(e))
            continue
        r, info = out.result, out.search_info.get("recompute", {})
        limits = [float(x) for x in out.costs.mem_limit_bytes]
        run.rows[mode] = ModeRow(
            mode,
            step_time_s=r.step_time_s,
            bubble_ratio=r.bubble_ratio,
            lower_bound_s=r.lower_bound_s,
            peak_fraction=max(p / lim for p, lim in zip(r.peak_memory_bytes, limits, strict=False)),
            stages={k: v for k, v in info.get("stages", {}).items() if v},
            num_stages=len(out.plan.stages),
            extra_compute_share=float(info.get("extra_compute_share", 0.0)),
            chosen=str(info.get("chosen") or info.get("reason") or ""),
            plan_time_s=out.plan_time_s,
        )
        if mode in ("none", "auto") and not run.classic_total:  # both plan the classics without recomputation
            run.classic_total = len(out.baselines)
            fit = [b.step_time_s for b in out.baselines.values() if b.fits_memory]
            run.classic_fit, run.best_classic_s = len(fit), min(fit, default=None)
    return run


def run_cases(cases: list[RecomputeCase], workers: int = 1, log=None) -> list[CaseRun]:
    """Every case, over `workers` processes (spawned); results in the order of `cases`."""
    log = log or (lambda _m: None)
    if workers <= 1 or len(cases) <= 1:
        out = []
        for n, c in enumerate(cases, 1):
            out.append(run_case(c))
            log(f"[{n}/{len(cases)}] recompute {c.label} pp{c.pp} tp{c.tp}")
        return out
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        out = list(pool.map(run_case, cases, chunksize=1))
    log(f"recompute: {len(cases)} cases")
    return out


def _seq(seq_len: int) -> str:
    return f"{seq_len // 1024}K" if seq_len % 1024 == 0 else str(seq_len)


def _ms(row: ModeRow) -> str:
    if row.error is not None:
        return "OOM"
    return f"{fms(row.step_time_s)} ({fpct(row.bubble_ratio)})"


def _where(row: ModeRow) -> str:
    if row.error is not None:
        return "–"
    if not row.stages:
        return f"none: {row.chosen}" if row.chosen else "none"
    parts = [f"{mode} on {len(ids)} of {row.num_stages} stages" for mode, ids in row.stages.items()]
    return ", ".join(parts) + f" (+{row.extra_compute_share:.1%} compute)"


def section(
    runs: list[CaseRun], prov: Provenance, quick: bool = False, wall_s: float | None = None, name: str | None = None
) -> str:
    """The markdown section (heading included); `name`: the `bench.run` section name for its command."""
    rows = []
    for run in runs:
        c, auto = run.case, run.rows["auto"]
        best = min((r for r in run.rows.values() if r.error is None), key=lambda r: r.step_time_s or 0.0, default=None)
        gap = (
            "–"
            if auto.error is not None or not auto.lower_bound_s
            else f"{auto.step_time_s / auto.lower_bound_s - 1:.1%}"
        )
        rows.append(
            [
                c.label,
                f"PP {c.pp}, TP {c.tp}, {c.num_microbatches} mb, seq {_seq(c.seq_len)}",
                f"{run.classic_fit} of {run.classic_total}"
                + (f" (best {fms(run.best_classic_s)})" if run.best_classic_s is not None else ""),
                *(_ms(run.rows[m]) for m in MODES),
                "–" if auto.error is not None else fms(auto.lower_bound_s),
                gap,
                _where(auto),
                "yes"
                if best is not None and auto.error is None and auto.step_time_s <= best.step_time_s * (1 + 1e-9)
                else "no",
                " / ".join(f"{run.rows[m].plan_time_s:.1f}" for m in MODES),
            ]
        )
    from adaptis_plan.search.budget import SearchBudget

    chose = sum(1 for run in runs if run.rows["auto"].stages)
    fastest = sum(1 for row in rows if row[9] == "yes")
    summary = (
        f"auto recomputed in {chose} of {len(runs)} cases and was the fastest of the three (ties included)"
        f" in {fastest} of {len(runs)}. auto runs exactly off's search; where memory binds it also runs each"
        " forced mode's search that the mode's lower bound does not rule out, on the same work, and per-stage"
        f" candidates on {SearchBudget().recompute_share:.0%} of it, and keeps the fastest plan that fits: on the same work it is"
        " never slower than a forced mode, unless the time limit cuts its extra searches short."
    )
    header = [
        "case",
        "setting",
        "classic plans that fit (off)",
        "off: step ms (bubble)",
        "full",
        "auto",
        "auto's lower bound ms",
        "auto above it",
        "auto chose",
        "auto fastest",
        "plan s (off / full / auto)",
    ]
    lines = [
        HEADING,
        "",
        prov.line(name, wall_s),
        "",
        "Every plan is made by `adaptis plan` (adaptive strategy) on the analytic cost model, the `h200` profile"
        " (memory limit 90% of 141 GB HBM = 118.2 GiB per GPU), at the TP shown, once with each"
        " `--recompute`: off (`none`: today's plans), `full` (every decoder block recomputes) and `auto` (the"
        " default: off's search, then where memory binds the forced modes' searches their lower bounds leave"
        " room for and per-stage recompute candidates, the likeliest first; the fastest plan is kept). A row's"
        " command:"
        f" `{runs[0].case.command('auto') if runs else ''}`. The lower bound is that of the plan's own cost"
        " table, recomputation included (a bound for the chosen recomputation, not over all choices). OOM: the"
        " search found no plan that fits memory. The classic strategies are planned without recomputation"
        " (uniform and balanced partitions). Planning times are"
        " wall times on this shared machine; the search's work is fixed by `--time-limit` (the same plan on"
        " any machine), which is also a hard stop: a plan it cut short says so."
        + (" **Quick run** (two cases, 1 s search time limit)." if quick else ""),
        "",
        table(header, rows),
        "",
        summary,
        "",
    ]
    return "\n".join(lines)


SUITE = "recompute"


def run_suite(quick: bool, workers: int, log=None) -> dict:  # noqa: ANN001
    """Plan every case off / full / auto and return the suite's record (not written)."""
    from bench import records

    t0 = time.perf_counter()
    runs = run_cases(default_cases(quick), workers, log=log)
    command = "python -m bench.run --suites recompute" + (" --quick" if quick else "")
    settings = {"quick": quick, "workers": workers, "hardware": "h200", "modes": list(MODES)}
    return records.record(SUITE, settings, records.to_json(runs), command, time.perf_counter() - t0)


def render(rec: Mapping) -> str:
    """The section from the suite's record."""
    from bench import records

    runs = records.from_json(list[CaseRun], rec["data"])
    return section(runs, Provenance.of(rec), bool(rec["settings"].get("quick")))
