"""How steady is this machine: the same kernels timed call after call, alone and with the other core streaming memory.

Run from the repository root (it imports `bench`): `PYTHONPATH=. python experiments/host_modes.py [--blocks 24] [--calls 10]`
(about 10 s; prints its markdown table; findings in experiments/NOTES.md).

Why: the CPU real runs (`bench.real`) compare a step with a profile of its layers taken minutes, or
seconds, earlier. On a shared VM the host's speed moves between them, and a profile's median cannot
follow it. This probe measures that movement directly, with nothing of adaptis in the loop but one
layer: per call, a memory stream (`STREAM_FLOATS` fp32 multiplied in place: read and write), a GEMM
(3 x 384^2) and the forward of tiny-nemotron-h's first Mamba-2 block (seq 256, no autograd: a
memory-bound layer of the real runs). It reports each kernel's fast (10th percentile) and slow
(90th) call, how closely the layer follows the stream from call to call, and how long the machine
stays in its slow mode. Blocks of 10 calls alternate between the other core idle and the other core
streaming memory (a process pinned to it), so the two settings see about the same stretches of the
host: the second measures what two ranks that both move memory cost each other. (The layer's cost read
-11..+13% over three runs in blocks of 40 calls, where the host's own drift set the sign, and
0..+23% over four runs in blocks of 10.)

One process, one intra-op thread, `bench.real.MALLOC_ENV`, pinned to core 0 (where the machine has
two); the streamer is a numpy process pinned to core 1. Imports torch in the probe process only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

STREAM_FLOATS = 4_000_000  # 16 MB: within the 32 MB L3 this VM reports, as the tiny models' layers are
KERNELS = ("stream", "gemm", "layer")
SETTINGS = ("other core idle", "other core streaming")


def pin(core: int) -> None:
    """This process on `core` alone, where the machine has more than one and the OS can pin."""
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {core})


def probe_block(model, kind: str):  # noqa: ANN001, ANN201 - a ModelSpec -> an executor Block (torch: lazy)
    """`model`'s first decoder-side layer of `kind` as the executor builds it, weights drawn N(0, 0.02)."""
    import torch

    from adaptis_plan.executor.layers import Block

    block = Block(model, next(x for x in model.layers if x.kind == kind))
    for p in block.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    return block


def _streamer(flag) -> None:  # noqa: ANN001 - a multiprocessing Event
    """Child process: stream memory on core 1 while `flag` is set."""
    import time

    import numpy as np

    pin(1)
    a = np.ones(STREAM_FLOATS, dtype=np.float32)
    while True:
        if flag.is_set():
            np.multiply(a, 1.0, out=a)
        else:
            time.sleep(1e-3)


def _probe(blocks: int, calls: int, out: str) -> None:
    """The probe process: `blocks` blocks of `calls` calls, settings alternating; writes seconds per call."""
    import multiprocessing as mp
    import time

    import torch

    from adaptis_plan.inputs.models.load import load_model

    pin(0)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = load_model("tiny-nemotron-h")
    layer = probe_block(model, "mamba")
    x = torch.randn(1, 256, model.hidden_size)
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    s = torch.ones(STREAM_FLOATS)
    ctx = mp.get_context("spawn")
    flag = ctx.Event()
    child = ctx.Process(target=_streamer, args=(flag,), daemon=True)
    child.start()
    times: dict[str, dict[str, list[float]]] = {st: {k: [] for k in KERNELS} for st in SETTINGS}
    try:
        with torch.no_grad():
            for _ in range(3):  # warm-up
                layer(x), a @ b, s.mul_(1.0)
            for blk in range(blocks):
                setting = SETTINGS[blk % 2]
                flag.set() if blk % 2 else flag.clear()
                time.sleep(0.05)
                for _ in range(calls):
                    t0 = time.perf_counter()
                    s.mul_(1.0)
                    t1 = time.perf_counter()
                    for _ in range(3):
                        a @ b
                    t2 = time.perf_counter()
                    layer(x)
                    t3 = time.perf_counter()
                    for k, v in zip(KERNELS, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                        times[setting][k].append(v)
    finally:
        child.terminate()
    Path(out).write_text(json.dumps(times))


@dataclass(frozen=True)
class KernelStats:
    fast_s: float  # 10th percentile of the calls
    median_s: float
    slow_s: float  # 90th percentile

    @property
    def spread(self) -> float:
        return self.slow_s / self.fast_s


@dataclass(frozen=True)
class HostModes:
    stats: dict[str, dict[str, KernelStats]]  # setting -> kernel -> stats
    layer_vs_stream: float  # correlation, call by call, other core idle
    gemm_vs_stream: float
    slow_share: float  # share of the idle-setting calls whose stream was nearer its slow than its fast time
    slow_stretch_s: float  # mean length of a run of such calls, in seconds of probe time
    calls: int  # per setting
    block: int  # calls per block (the settings alternate block by block)


def _stats(values: list[float]) -> KernelStats:
    q = statistics.quantiles(values, n=10, method="inclusive")
    return KernelStats(q[0], statistics.median(values), q[-1])


def stretches(slow: list[bool]) -> list[int]:
    """Lengths of the runs of consecutive True values."""
    runs, n = [], 0
    for s in slow:
        if s:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    if n:
        runs.append(n)
    return runs


def summarize(times: dict[str, dict[str, list[float]]], block: int) -> HostModes:
    idle = times[SETTINGS[0]]
    st = _stats(idle["stream"])
    mid = (st.fast_s + st.slow_s) / 2
    slow = [v > mid for v in idle["stream"]]
    per_call = statistics.fmean(sum(c) for c in zip(*(idle[k] for k in KERNELS), strict=True))
    runs = stretches(slow)
    return HostModes(
        stats={setting: {k: _stats(v) for k, v in times[setting].items()} for setting in SETTINGS},
        layer_vs_stream=statistics.correlation(idle["layer"], idle["stream"]),
        gemm_vs_stream=statistics.correlation(idle["gemm"], idle["stream"]),
        slow_share=sum(slow) / len(slow),
        slow_stretch_s=statistics.fmean(runs) * per_call if runs else 0.0,
        calls=len(idle["stream"]),
        block=block,
    )


def measure(blocks: int = 24, calls: int = 10, timeout_s: float = 300.0) -> HostModes:
    """Run the probe in a fresh process (one thread, `MALLOC_ENV`) and summarize it."""
    from bench.common import REPO
    from bench.real import worker_env

    with tempfile.TemporaryDirectory(prefix="adaptis-host-") as tmp:
        out = Path(tmp) / "times.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--probe",
            str(out),
            "--blocks",
            str(blocks),
            "--calls",
            str(calls),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(), cwd=REPO, timeout=timeout_s)
        if proc.returncode != 0 or not out.exists():
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
            raise RuntimeError(f"the host probe failed: {tail[0]}")
        return summarize(json.loads(out.read_text()), calls)


def section(res: HostModes, reproduce: str) -> str:
    """The BENCHMARKS.md section; `reproduce`: its provenance line (`bench.paper.Provenance.line`)."""
    ms = 1e3
    rows = [
        f"| {k} | {setting} | {s.fast_s * ms:.2f} | {s.median_s * ms:.2f} | {s.slow_s * ms:.2f} | {s.spread:.2f}x |"
        for k in KERNELS
        for setting, s in ((st, res.stats[st][k]) for st in SETTINGS)
    ]
    idle, busy = res.stats[SETTINGS[0]], res.stats[SETTINGS[1]]
    cost = {k: busy[k].median_s / idle[k].median_s for k in KERNELS}
    lo, hi = min(idle[k].spread for k in KERNELS), max(idle[k].spread for k in KERNELS)
    return "\n".join(
        [
            "## How steady is this machine? (CPU)",
            "",
            reproduce,
            "",
            "The same three kernels, call after call, in one process on one core (`experiments/host_modes.py`): a memory"
            f" stream ({STREAM_FLOATS * 4 // 10**6} MB read and written), a GEMM (3 x 384^2) and the forward of"
            " tiny-nemotron-h's first Mamba-2 block (seq 256, no autograd: a memory-bound layer of the real"
            " runs). Blocks of"
            f" {res.block} calls alternate between the other core idle and the other core streaming memory;"
            f" {res.calls} calls per setting. Fast = 10th percentile of the calls, slow = 90th.",
            "",
            "| kernel | setting | fast ms | median ms | slow ms | slow / fast |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"On one core with the other idle, the same call spreads {lo:.2f}-{hi:.2f}x between its fast and slow"
            f" tenth (the table's last column), with nothing else running in this VM. Call by call the layer's time"
            f" correlates {res.layer_vs_stream:.2f} with the stream's (the GEMM's {res.gemm_vs_stream:.2f});"
            f" {res.slow_share:.0%} of the calls found the stream nearer its slow time than its fast one, in"
            f" stretches of {res.slow_stretch_s:.2f} s on average. A profile (a median of repeats) and a step (a sum"
            " over hundreds of calls) taken at different moments see different mixes of such calls. With the other"
            f" core streaming, the medians move by {', '.join(f'{k} {cost[k] - 1:+.0%}' for k in KERNELS)} (blocks"
            " alternate, so this is the other core's cost plus whatever the host did from block to block).",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python experiments/host_modes.py", description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=24, help="blocks of calls, the settings alternating")
    ap.add_argument("--calls", type=int, default=10, help="calls per block")
    ap.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # internal: run the probe, write here
    args = ap.parse_args(argv)
    if args.blocks < 2 or args.calls < 10:
        ap.error("need at least 2 blocks of 10 calls")
    if args.probe:
        _probe(args.blocks, args.calls, args.probe)
        return 0
    res = measure(args.blocks, args.calls)
    for setting in SETTINGS:
        for k in KERNELS:
            s = res.stats[setting][k]
            print(
                f"{setting:22s} {k:7s} fast {s.fast_s * 1e3:7.2f} ms  median {s.median_s * 1e3:7.2f}  slow {s.slow_s * 1e3:7.2f}  x{s.spread:.2f}"
            )
    print(
        f"layer vs stream {res.layer_vs_stream:.2f}, gemm vs stream {res.gemm_vs_stream:.2f}; slow share {res.slow_share:.0%}, stretches {res.slow_stretch_s:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
