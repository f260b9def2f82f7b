"""The executor's communication per parallel dimension, measured beside the cost model's prediction
(CPU, gloo).

Run: `python -m bench.run --suites comm [--quick]` (suite `comm`: writes bench/results/comm.json,
then re-renders BENCHMARKS.md).

Data flow: `CASES` (a tiny model, its pipeline shape and the dimensions beside the pipeline) ->
`run_case` plans the pipeline replica with `adaptis plan` (cpu profile, adaptive, the planner's
own --tp), sets the plan's `training.dp` / `zero` / `ep` as a cluster run would, then runs it with
`adaptis run --verify --json` under torchrun (gloo) -> per dimension the measured collectives per
step (`comm_s`, the slowest rank, median over steps, waits for the peers included) beside the
cost model's (`predicted_comm_s`: the `cpu` profile's link model, no overlap) -> `render`.

There is no accuracy target on CPU: the ranks (4 to 8 processes) share this machine's 2 cores, so
a rank waiting for a descheduled peer counts as communication. The figures show that each
dimension's traffic is measured and predicted, and the order of magnitude of the gap.
Imports the package's use cases; torch only inside the torchrun workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO
from bench.paper import table

HEADING = "## Communication per parallel dimension: measured against predicted (CPU, gloo)"
SUITE = "comm"


@dataclass(frozen=True)
class CommCase:
    label: str
    model: str
    pp: int
    tp: int = 1
    dp: int = 1
    zero: int = 1
    ep: int = 1
    extra: tuple[str, ...] = ()

    @property
    def ranks(self) -> int:
        return self.pp * self.tp * self.dp

    def plan_args(self) -> list[str]:
        return ["--model", self.model, "--hardware", "cpu", "--pp", str(self.pp), "--microbatches", "4",
                "--seq-len", "16", "--tp", str(self.tp), "--time-limit", "2", "--no-hard-stop", *self.extra]  # fmt: skip


CASES = (
    CommCase("PP2 x DP2, ZeRO 1", "tiny-llama", 2, dp=2, zero=1),
    CommCase("PP2 x DP2, ZeRO 3", "tiny-llama", 2, dp=2, zero=3),
    CommCase("PP2 x TP2", "tiny-llama", 2, tp=2),
    CommCase("PP2 x TP2, full recompute", "tiny-llama", 2, tp=2, extra=("--recompute", "full")),
    CommCase("TP2 x DP2 (pp 1), ZeRO 1", "tiny-llama", 1, tp=2, dp=2),
    CommCase("PP2 x TP2 x DP2, ZeRO 1", "tiny-llama", 2, tp=2, dp=2),
    CommCase("PP2 x DP2 x EP2, ZeRO 1 (tiny-deepseek)", "tiny-deepseek", 2, dp=2, ep=2),
)


@dataclass
class CommRow:
    label: str
    ranks: int
    verified: bool | None = None
    measured_step_s: float | None = None
    comm_s: dict[str, float] = field(default_factory=dict)
    predicted_comm_s: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "adaptis_plan.cli", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )


def run_case(case: CommCase) -> CommRow:
    row = CommRow(case.label, case.ranks)
    with tempfile.TemporaryDirectory(prefix="adaptis-bench-comm-") as tmp:
        plan = Path(tmp) / "plan.json"
        r = _cli("plan", *case.plan_args(), "-o", str(plan))
        if r.returncode:
            row.error = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"plan exit {r.returncode}"
            return row
        data = json.loads(plan.read_text())
        data["training"].update(dp=case.dp, zero=case.zero, ep=case.ep)
        plan.write_text(json.dumps(data))
        r = _cli("run", str(plan), "--verify", "--json", "--steps", "3")
        if r.returncode:
            row.error = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"run exit {r.returncode}"
            return row
        out = json.loads(r.stdout)
        row.verified = out.get("verified")
        row.measured_step_s = out.get("measured_step_time_s")
        row.comm_s = {k: v for k, v in (out.get("comm_s") or {}).items() if v}
        row.predicted_comm_s = dict(out.get("predicted_comm_s") or {})
    return row


def run_suite(quick: bool, workers: int = 1, log=None) -> dict:  # noqa: ANN001, ARG001
    """One torchrun launch per case, one at a time (their timings are the figure)."""
    from bench import records

    t0 = time.perf_counter()
    cases = CASES[:2] if quick else CASES
    rows = [run_case(c) for c in cases]
    command = "python -m bench.run --suites comm" + (" --quick" if quick else "")
    settings = {"hardware": "cpu", "backend": "gloo", "models": sorted({c.model for c in cases}), "quick": quick}
    return records.record(SUITE, settings, {"rows": records.to_json(rows)}, command, time.perf_counter() - t0)


def render(rec: Mapping) -> str:
    from bench.records import from_json, reproduce_line

    rows = from_json(list[CommRow], rec["data"]["rows"])

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1e3:.1f}"

    body = []
    for r in rows:
        dims = sorted(set(r.comm_s) | set(r.predicted_comm_s)) or ["-"]
        for k, dim in enumerate(dims):
            body.append([
                r.label if k == 0 else "", str(r.ranks) if k == 0 else "",
                ("yes" if r.verified else "no") if k == 0 and r.error is None else (r.error or "")[:60] if k == 0 else "",
                ms(r.measured_step_s) if k == 0 else "", dim, ms(r.comm_s.get(dim)), ms(r.predicted_comm_s.get(dim)),
            ])  # fmt: skip
    return "\n".join(
        [
            HEADING,
            "",
            reproduce_line(rec),
            "",
            "`adaptis run --verify --json` on tiny-llama (and tiny-deepseek) plans (cpu profile, seq 16, 4 micro-batches), the plan's"
            " `training` set to the dimensions shown: per step the collectives of each dimension on the slowest rank"
            " (`comm_s`, median over 3 steps, waits for peers included) beside the cost model's (`predicted_comm_s`,"
            " the cpu profile's link, no overlap). No accuracy target on CPU: 4-8 ranks share 2 cores, so most of"
            " the measured time is waiting for a descheduled peer; noise between runs is 20-50% here.",
            "",
            table(["configuration", "ranks", "verified", "step ms", "dimension", "measured ms", "predicted ms"], body),
            "",
        ]
    )
