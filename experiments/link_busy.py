"""Sends while both ranks compute: how long a receive waits, with and without a yield after the send.

Run: `python experiments/link_busy.py [--messages N]` (about 5 s; findings in experiments/NOTES.md).

Why: on CPU ranks every core computes (one rank per core, one intra-op thread each), and gloo's
I/O thread, which writes a posted send to the socket, has to wait for a core. Measured here
without a yield, the median message was there when its receiver asked for it, but about one in
five waited 2-3 ms, until its sender next blocked. The executor's `P2P.pump` therefore yields the
core (`os.sched_yield`) after posting sends on CPU; this probe keeps the effect measured.

What it does: two processes (gloo, one thread each) compute small matmuls; rank 0 posts a 64 KiB
`isend` at an agreed time, rank 1 (its `irecv` posted before) asks for it 1 ms later and times
the `wait`. Both clocks are the machine's monotonic clock. Per mode, `messages` messages; the
report gives the mean, median and 90th / 99th percentile of the wait. The two processes are
started as the executor's link probe starts its own (`executor.profile.free_port` / `pair_env`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MESSAGE_BYTES = 64 * 2**10
ASK_AFTER_S = 1e-3  # the receiver asks for the message this long after its send was posted
LEAD_S = 3e-3  # compute before each send, and after the ask before the sender waits on its send
MODES = ("no yield", "yield")


def _rank(rank: int, port: int, out: str, messages: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
    a = torch.randn(96, 96)
    buf = torch.zeros(MESSAGE_BYTES // 4)

    def busy(until: float) -> None:
        while time.perf_counter() < until:
            torch.mm(a, a)

    waits: dict[str, list[float]] = {}
    for mode in MODES:
        got = []
        for _ in range(messages):
            start = torch.tensor([time.perf_counter() + 1e-3], dtype=torch.float64)
            dist.broadcast(start, 0)
            t_send = float(start) + LEAD_S
            if rank == 0:
                busy(t_send)
                work = dist.isend(buf, 1)
                if mode == "yield":
                    os.sched_yield()
                busy(t_send + ASK_AFTER_S + LEAD_S)
                work.wait()
            else:
                work = dist.irecv(buf, 0)
                busy(t_send + ASK_AFTER_S)
                t0 = time.perf_counter()
                work.wait()
                got.append(time.perf_counter() - t0)
            dist.barrier()
        waits[mode] = got
    if rank == 1:
        Path(out).write_text(json.dumps(waits))
    dist.destroy_process_group()


def measure(messages: int = 200, timeout_s: float = 120.0) -> dict[str, dict[str, float]]:
    """Per mode ("no yield", "yield"): the receive's wait in seconds (mean, median, p90, p99)."""
    from adaptis_plan.executor.link import free_port, pair_env

    with tempfile.TemporaryDirectory(prefix="adaptis-busy-link-") as tmp:
        out = os.path.join(tmp, "waits.json")
        port = free_port()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--rank"]
        procs = [subprocess.Popen([*cmd, str(r), str(port), out, str(messages)], env=pair_env()) for r in (0, 1)]
        try:
            for p in procs:
                p.wait(timeout=timeout_s)
        finally:
            for p in procs:
                p.kill()
        if any(p.returncode for p in procs):
            raise RuntimeError(f"the busy-link probe failed (exit codes {[p.returncode for p in procs]})")
        waits = json.loads(Path(out).read_text())
    result = {}
    for mode, got in waits.items():
        got = sorted(got)
        n = len(got)
        result[mode] = {
            "mean_s": statistics.mean(got),
            "median_s": statistics.median(got),
            "p90_s": got[min(n - 1, int(0.9 * n))],
            "p99_s": got[min(n - 1, int(0.99 * n))],
            "messages": n,
        }
    return result


def sentence(result: dict[str, dict[str, float]]) -> str:
    """One markdown sentence of `measure`'s result."""
    parts = [
        f"{mode}: mean {r['mean_s'] * 1e6:.0f} us, median {r['median_s'] * 1e6:.0f} us,"
        f" p90 {r['p90_s'] * 1e6:.0f} us, p99 {r['p99_s'] * 1e6:.0f} us"
        for mode, r in result.items()
    ]
    n = next(iter(result.values()))["messages"]
    return (
        f"Sends while both ranks compute (`python experiments/link_busy.py`, {n} messages of"
        f" {MESSAGE_BYTES // 1024} KiB per mode, each asked for {ASK_AFTER_S * 1e3:g} ms after its send): the"
        f" receive waited, {'; '.join(parts)}. Our runtime yields the core after posting sends on CPU"
        " (`P2P.pump`), so that gloo's I/O thread writes them at once."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python experiments/link_busy.py", description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rank", nargs=4, metavar=("RANK", "PORT", "OUT", "MESSAGES"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank:
        r, port, out, n = args.rank
        _rank(int(r), int(port), out, int(n))
        return 0
    print(sentence(measure(args.messages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
