"""How steady is this machine over minutes: layers timed for minutes on both cores at once, as two ranks run.

Run from the repository root (it imports `bench`): `PYTHONPATH=. python experiments/host_drift.py [--minutes 10] [--window 30]`
(prints its markdown table; findings in experiments/NOTES.md).

Why: `experiments/host_modes.py` measures the host call by call, over seconds. The CPU real runs (`bench.real`)
also compare a profile with steps taken minutes apart, and what decides that comparison is how the
host's speed moves over minutes: if it moved only from second to second, a profile's median over a
minute would already hold its average. Here two processes, pinned to core 0 and core 1 (one intra-op
thread, `bench.real.MALLOC_ENV`, denormals flushed: as the ranks run), time the forward and backward
of tiny-nemotron-h's Mamba-2, attention and MLP blocks (seq 256, micro-batch 1), and a GEMM (3 x 384^2),
one after another, for the whole probe. Per window of `--window` seconds, each kernel's median over
both cores, over its median for the whole probe, is the host's speed for that kernel in that window.
The report gives, per kernel: the spread of those window speeds, their correlation from one window to
the next, how long the host stays on one side of its median window (a phase), and how much a mean over 1, 3
and 5 consecutive minutes still varies (if phases last minutes, averaging one stretch of time removes
little of them; spreading the samples over the whole run does). How long the phases last changes
from run to run: on 2026-12-04 a 15-minute run of this probe found phases of about 2 minutes (window
speeds 0.91-1.28 for the Mamba-2 block; 5-minute means still varying 57% as much as 1-minute ones,
against 45% for independent minutes), and the 10-minute run committed to BENCHMARKS.md an hour later
phases of about 40 s (31%).

Imports torch in the probe processes only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from host_modes import pin, probe_block

KERNELS = ("mamba", "attention", "mlp", "gemm")
HEADING = "## How steady is this machine, over minutes? (CPU)"


def _probe(core: int, seconds: float, out: str) -> None:
    """One probe process on `core`: (wall time, kernel, seconds) of every call for `seconds`."""
    import time

    import torch

    from adaptis_plan.inputs.models.load import load_model

    pin(core)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    model = load_model("tiny-nemotron-h")
    blocks = {kind: probe_block(model, kind) for kind in KERNELS[:3]}
    x = torch.randn(1, 256, model.hidden_size, requires_grad=True)
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    calls: list[tuple[float, str, float]] = []
    end = time.time() + seconds
    while time.time() < end:
        for kind, block in blocks.items():
            t0 = time.perf_counter()
            block(x).sum().backward()
            calls.append((time.time(), kind, time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(3):
            a @ b
        calls.append((time.time(), "gemm", time.perf_counter() - t0))
    Path(out).write_text(json.dumps(calls))


@dataclass(frozen=True)
class KernelDrift:
    median_ms: float  # over the whole probe, both cores
    speeds: list[float]  # per window: its median / the whole probe's median
    lag1: float  # correlation of a window's speed with the next window's
    phase_s: float  # mean length of a run of windows on one side of their median
    sd_by_minutes: dict[int, float]  # minutes -> sd of the means over that many consecutive minutes

    @property
    def sd(self) -> float:
        return statistics.pstdev(self.speeds)


@dataclass(frozen=True)
class HostDrift:
    kernels: dict[str, KernelDrift]
    window_s: float
    seconds: float
    calls: int  # per kernel, both cores


def _sides(speeds: list[float]) -> list[int]:
    """Lengths of the runs of consecutive windows on the same side of the windows' median (a window at the
    median continues the run it is in)."""
    mid = statistics.median(speeds) if speeds else 0.0
    runs, n, side = [], 0, 0
    for s in speeds:
        here = 1 if s > mid else -1 if s < mid else side
        if n and side and here != side:
            runs.append(n)
            n = 0
        side, n = here, n + 1
    if n:
        runs.append(n)
    return runs


def _sd_of_means(speeds: list[float], per_minute: int, minutes: int) -> float | None:
    """Sd of the means of every `minutes`-long stretch of windows (sliding); None when the probe is shorter."""
    n = per_minute * minutes
    if n > len(speeds) - 1:
        return None
    means = [statistics.fmean(speeds[i : i + n]) for i in range(len(speeds) - n + 1)]
    return statistics.pstdev(means)


def summarize(calls: list[tuple[float, str, float]], window_s: float) -> HostDrift:
    """Both cores' calls (wall time, kernel, seconds) -> each kernel's speed per window and its statistics."""
    t0 = min(t for t, _, _ in calls)
    last = int((max(t for t, _, _ in calls) - t0) // window_s)
    per_minute = max(1, round(60 / window_s))
    kernels = {}
    for k in KERNELS:
        mine = [(t, d) for t, kind, d in calls if kind == k]
        whole = statistics.median(d for _, d in mine)
        bins: dict[int, list[float]] = {}
        for t, d in mine:
            bins.setdefault(int((t - t0) // window_s), []).append(d)
        # the last window is partial: dropped unless it is the only one
        speeds = [statistics.median(bins[i]) / whole for i in sorted(bins) if i < last or last == 0]
        lag1 = statistics.correlation(speeds[:-1], speeds[1:]) if len(speeds) > 2 else 0.0
        sds = {m: _sd_of_means(speeds, per_minute, m) for m in (1, 3, 5)}
        kernels[k] = KernelDrift(
            median_ms=whole * 1e3,
            speeds=speeds,
            lag1=lag1,
            phase_s=statistics.fmean(_sides(speeds)) * window_s,
            sd_by_minutes={m: v for m, v in sds.items() if v is not None},
        )
    return HostDrift(kernels, window_s, len(kernels["mamba"].speeds) * window_s, len(calls) // len(KERNELS))


def measure(seconds: float = 600.0, window_s: float = 30.0) -> HostDrift:
    """Run the probe on both cores at once (fresh processes, `bench.real.worker_env`) and summarize it."""
    from bench.common import REPO
    from bench.real import wait_all, worker_env

    with tempfile.TemporaryDirectory(prefix="adaptis-drift-") as tmp:
        outs = [Path(tmp) / f"core{c}.json" for c in (0, 1)]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--probe",
                    str(out),
                    "--core",
                    str(c),
                    "--seconds",
                    str(seconds),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=worker_env(),
                cwd=REPO,
            )
            for c, out in enumerate(outs)
        ]
        wait_all(procs, seconds + 300, "the host drift probe")
        calls = [tuple(c) for out in outs for c in json.loads(out.read_text())]
    return summarize(calls, window_s)  # type: ignore[arg-type]


def _averaging(k: KernelDrift) -> str:
    """Sentences: how much a longer stretch of consecutive time averages the kernel's phases away, and
    what that means for a profile and steps taken at different times."""
    if 1 not in k.sd_by_minutes or max(k.sd_by_minutes) == 1:
        return ""
    longest = max(k.sd_by_minutes)
    ratio = k.sd_by_minutes[longest] / k.sd_by_minutes[1] if k.sd_by_minutes[1] > 0 else 1.0
    independent = longest**-0.5
    if ratio > 1.1 * independent:
        what = (
            " its phases outlast a minute, so a profile taken in one stretch of minutes and steps run in another"
            " differ by the phase each met, however many repeats each takes."
        )
    elif ratio < independent / 1.1:
        what = (
            " here a few consecutive minutes average the phases away; how long they last changes from run to"
            " run of this probe (module docstring)."
        )
    else:
        what = " about as minutes independent of each other would: here the phases last about a minute."
    return (
        f" For the Mamba-2 block a mean over {longest} consecutive minutes still varies {ratio:.0%} as much as a"
        f" one-minute mean (minutes independent of each other would give {independent:.0%}):" + what
    )


def section(res: HostDrift, reproduce: str) -> str:
    """The BENCHMARKS.md section; `reproduce`: its provenance line (`bench.paper.Provenance.line`)."""
    minutes = sorted({m for k in res.kernels.values() for m in k.sd_by_minutes})
    rows = []
    for name, k in res.kernels.items():
        sds = " | ".join(f"{k.sd_by_minutes[m]:.1%}" if m in k.sd_by_minutes else "–" for m in minutes)
        rows.append(
            f"| {name} | {k.median_ms:.2f} | {min(k.speeds):.2f}-{max(k.speeds):.2f} | {k.sd:.1%} | {k.lag1:.2f}"
            f" | {k.phase_s:.0f} | {sds} |"
        )
    mamba, gemm = res.kernels["mamba"], res.kernels["gemm"]
    return "\n".join(
        [
            HEADING,
            "",
            reproduce,
            "",
            f"Forward + backward of tiny-nemotron-h's Mamba-2, attention and MLP blocks (seq 256) and a GEMM"
            f" (3 x 384^2), one after another on both cores at once for {res.seconds / 60:.0f} minutes"
            f" (`experiments/host_drift.py`: two processes pinned one per core, one thread each, as the ranks of the real"
            f" runs; {res.calls} calls per kernel). Speed = a {res.window_s:.0f}-s window's median over the whole"
            " probe's median (above 1 = slower). Phase = how long the speed stays on one side of its median window, on average."
            " The last columns: how much a mean over that many consecutive minutes still varies (sd).",
            "",
            "| kernel | median ms | window speeds | sd | next-window correlation | phase s | "
            + " | ".join(f"sd of {m}-min means" for m in minutes)
            + " |",
            "|---|---|---|---|---|---|" + "---|" * len(minutes),
            *rows,
            "",
            f"The host's speed moves in phases of about {statistics.fmean(k.phase_s for k in res.kernels.values()):.0f} s"
            f" here, all kernels together, the memory-bound Mamba-2 block most (window speeds"
            f" {min(mamba.speeds):.2f}-{max(mamba.speeds):.2f}, the GEMM {min(gemm.speeds):.2f}-{max(gemm.speeds):.2f})."
            + _averaging(mamba)
            + ' The real runs (section "Real execution") spread each model\'s profiling sessions and its measured'
            " rounds over the whole run, going round the models, so that either way the host meets every model"
            " alike.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python experiments/host_drift.py", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the probe runs")
    ap.add_argument("--window", type=float, default=30.0, help="seconds per window")
    ap.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # internal: one probe process, writes here
    ap.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        _probe(args.core, args.seconds, args.probe)
        return 0
    if args.minutes * 60 < 3 * args.window or args.window <= 0:
        ap.error("need --window > 0 and at least 3 windows in --minutes")
    res = measure(args.minutes * 60, args.window)
    for name, k in res.kernels.items():
        print(
            f"{name:9s} {k.median_ms:6.2f} ms  speeds {min(k.speeds):.2f}-{max(k.speeds):.2f}  sd {k.sd:.1%}"
            f"  lag1 {k.lag1:.2f}  phase {k.phase_s:.0f} s  "
            + "  ".join(f"sd {m}-min {v:.1%}" for m, v in k.sd_by_minutes.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
