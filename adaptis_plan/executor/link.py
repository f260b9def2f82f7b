"""The gloo point-to-point link between two local processes, measured (`measure_link`).

Data flow: nothing but the machine -> `MeasuredLink` (latency, bandwidth and, for CPU ranks, what
each end of a message costs a computing rank), which the `adaptis profile` use case adds to the
profile. Imports torch and `executor.cpu`; never a plan, a builder or the simulator.

`measure_link` starts two processes of this module, one per end (one thread and one core each,
as the ranks of a launch), and reads their results back from files:

    python -m adaptis_plan.executor.link --link-rank RANK PORT OUT_FILE REPEATS BYTES HOST

(HOST: 1 to also measure what each message end costs a rank while both compute, `_host_busy`.)

Known limits: a busy machine can leave a large message indistinguishable from a small one; the
probe then tries larger messages and, failing that, refuses to report a bandwidth. The host cost
is measured between two processes on one machine, with a compute load shaped like a small
decoder's; figures from the 2-core CPU bench are in experiments/findings-executor.md.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from adaptis_plan.errors import AdaptisError
from adaptis_plan.executor.cpu import enter_cpu_rank
from adaptis_plan.spec.cost_profile import MeasuredLink


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for a pair of local gloo processes)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the large message's sizes `measure_link` tries, in multiples of its first, until one stands out of the noise
_LARGE_FACTORS = (1, 4, 16)
#: Message sizes (bytes) at which `measure_link` times what each end of a message costs a computing rank.
_HOST_SIZES = (64 * 2**10, 1 * 2**20)
#: compute units per timed phase of `_host_busy`, and how many units after its send a message is waited for
_HOST_UNITS = 120
_HOST_LAG = 20
#: (without, with messages) phase pairs per size; the medians are taken
_HOST_PAIRS = 3


def _compute_unit(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """About 2 ms of one-thread work shaped like a small decoder's projections (many short GEMMs)."""
    y = x
    for _ in range(6):
        y = torch.relu(y @ w1) @ w2 * 0.01
    return y


def _host_busy(rank: int, sizes: tuple[int, ...]) -> list[float]:
    """Seconds one end of a message of each of `sizes` costs a rank while both ranks compute.

    Both ranks run `_HOST_UNITS` compute units twice over: once alone, once posting a message to
    the other after every unit as the executor does (`isend`, then `os.sched_yield`, see
    `runtime.P2P.pump`), every receive posted before the phase into its own buffer (as the
    executor's "ahead" order posts a step's) and waited `_HOST_LAG` units after its send (long
    there: the wait itself costs nothing). The difference in wall time over
    the 2 x `_HOST_UNITS` message ends (one send, one receive per unit) is what a message costs
    its ends beyond the transfer: gloo's I/O thread taking the core to write and read it, and
    the compute it displaces and slows (the process's CPU time per end misses most of it:
    experiments/findings-executor.md).
    """
    import torch.distributed as dist

    peer = 1 - rank
    g = torch.Generator().manual_seed(rank)
    x, w1, w2 = (torch.randn(*shape, generator=g) for shape in ((256, 128), (128, 352), (352, 128)))

    def phase(nbytes: int) -> float:
        t = torch.zeros(max(nbytes, 4) // 4)
        recvs: dict[int, object] = {}

        if nbytes:  # every receive posted before the messages flow, as the executor does on CPU ("ahead")
            recvs = {k: dist.irecv(torch.empty_like(t), src=peer, tag=k) for k in range(_HOST_UNITS)}
        sends = []
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(_HOST_UNITS):
            _compute_unit(x, w1, w2)
            if nbytes:
                sends.append(dist.isend(t, dst=peer, tag=i))
                os.sched_yield()
                if i >= _HOST_LAG:
                    recvs.pop(i - _HOST_LAG).wait()  # type: ignore[attr-defined]
        elapsed = time.perf_counter() - t0
        for h in [*recvs.values(), *sends]:
            h.wait()  # type: ignore[attr-defined]
        return elapsed

    phase(sizes[0])  # warm-up: the first messages of a size pay allocation and connection set-up
    got = []
    for n in sizes:
        alone, with_messages = [], []
        for _ in range(_HOST_PAIRS):
            alone.append(phase(0))
            with_messages.append(phase(n))
        got.append(max(0.0, statistics.median(with_messages) - statistics.median(alone)) / (2 * _HOST_UNITS))
    return got


def _link_worker(rank: int, port: int, out: str, repeats: int, large_bytes: int, host_costs: bool) -> None:
    import torch.distributed as dist

    enter_cpu_rank(rank, 2)  # one core per end, as the ranks of a launch
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
    peer = 1 - rank
    small = torch.zeros(1)

    def pingpong(t: torch.Tensor) -> float:
        samples = []
        for _ in range(repeats + 2):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, peer)
                dist.recv(small, peer)
            else:
                dist.recv(t, peer)
                dist.send(small, peer)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples[2:])

    def agree(verdict: bool) -> bool:  # rank 0's round trips decide for both ends
        flag = torch.tensor([float(verdict)])
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    rtt_small = pingpong(small)
    size, rtt_large, stood_out = settle_large(rtt_small, large_bytes, lambda n: pingpong(torch.zeros(n // 4)), agree)
    host = _host_busy(rank, _HOST_SIZES) if host_costs and stood_out else []
    Path(f"{out}.{rank}").write_text(json.dumps({"size": size, "rtt": [rtt_small, rtt_large], "host": host}))
    dist.barrier()
    dist.destroy_process_group()


def measure_link(
    *, repeats: int = 20, large_bytes: int = 16 * 2**20, timeout_s: float = 60.0, host_costs: bool = False
) -> MeasuredLink:
    """gloo point-to-point latency and bandwidth between two local processes (one thread each).

    Latency = half a small message's round trip; bandwidth from a large message's round trip (the
    large one way, a small one back) less a small round trip. When that difference does not stand
    out of the noise (under one small round trip: a busy machine), the same two processes measure the
    large message again 4x and 16x larger (`_LARGE_FACTORS`); if it still does not, the measurement fails
    with one line instead of reporting a bandwidth that is noise. Runs `python -m adaptis_plan.executor.link
    --link-rank R PORT OUT REPEATS BYTES HOST` once per end (BYTES: the first large size), allowed
    `timeout_s` per large size it may try.

    `host_costs` (for CPU ranks, whose compute shares the cores with gloo's I/O threads): also
    the time one end of a message costs a rank while both ranks compute, fixed + per byte, fitted
    to the two ranks' mean cost per message end at `_HOST_SIZES` (`_host_busy`; `host_s_per_message`,
    `host_s_per_byte`), once a large size stood out. It takes a few seconds more.
    """
    # `timeout_s` per large size the pair may try: the budget one pair of processes per size had
    size, rtt_small, rtt_large, host = _link_pair(repeats, large_bytes, timeout_s * len(_LARGE_FACTORS), host_costs)
    one_way = rtt_large - rtt_small
    if not _stands_out(rtt_small, rtt_large):
        raise AdaptisError(
            f"measuring the gloo link: a {size} B message took no longer than a 4 B one ({rtt_large * 1e3:.3f} vs"
            f" {rtt_small * 1e3:.3f} ms round trip): the machine is too busy to measure; try again when it is quieter"
        )
    link = MeasuredLink(latency_s=rtt_small / 2, bandwidth_gbps=size / one_way / 1e9, backend="gloo")
    if host_costs:
        (n0, n1), (c0, c1) = _HOST_SIZES, host
        per_byte = max(0.0, (c1 - c0) / (n1 - n0))
        fixed = max(0.0, c0 - n0 * per_byte)
        link = link.model_copy(update={"host_s_per_message": fixed, "host_s_per_byte": per_byte})
    return link


def _stands_out(rtt_small: float, rtt_large: float) -> bool:
    """Whether a large message's round trip stands out of the noise: its one-way time over a small round trip."""
    return rtt_large - rtt_small >= rtt_small


def settle_large(
    rtt_small: float, large_bytes: int, round_trip: Callable[[int], float], agree: Callable[[bool], bool]
) -> tuple[int, float, bool]:
    """(size, round trip, whether it stood out) of the first of `_LARGE_FACTORS` x `large_bytes` whose round
    trip stands out of the noise, or of the last one tried when none does. `round_trip(size)`: measure one;
    `agree(verdict)`: the verdict both ends act on (rank 0's, broadcast)."""
    for factor in _LARGE_FACTORS:
        size = factor * large_bytes
        rtt_large = round_trip(size)
        if agree(_stands_out(rtt_small, rtt_large)):
            return size, rtt_large, True
    return size, rtt_large, False


def pair_env() -> dict[str, str]:
    """The environment of a local probe process: one intra-op thread, and this checkout importable
    (`python -m adaptis_plan...` or `python -m bench...` from any working directory)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _link_pair(
    repeats: int, large_bytes: int, timeout_s: float, host_costs: bool = False
) -> tuple[int, float, float, list[float]]:
    """The large message's size the two link processes settled on (`_LARGE_FACTORS`), their median round
    trips (small, large) and (`host_costs`, once a size stood out) their mean cost per message end at each
    of `_HOST_SIZES` (`_host_busy`; else an empty list), in seconds."""
    with tempfile.TemporaryDirectory(prefix="adaptis-link-") as tmp:
        out = os.path.join(tmp, "link.txt")
        port = free_port()
        env = pair_env()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "adaptis_plan.executor.link",
                    "--link-rank",
                    str(r),
                    str(port),
                    out,
                    str(repeats),
                    str(large_bytes),
                    str(int(host_costs)),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for r in (0, 1)
        ]
        errors = []
        for r, p in enumerate(procs):
            try:
                _, err = p.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AdaptisError(f"measuring the gloo link timed out after {timeout_s:g} s") from None
            if p.returncode:
                errors.append(f"rank {r}: {(err or '').strip().splitlines()[-1:] or ['exit ' + str(p.returncode)]}")
        if errors:
            raise AdaptisError("measuring the gloo link failed: " + "; ".join(errors))
        ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in (0, 1)]
    rtt_small, rtt_large = (float(x) for x in ranks[0]["rtt"])
    host = [statistics.mean(float(r["host"][k]) for r in ranks) for k in range(len(ranks[0]["host"]))]
    return int(ranks[0]["size"]), rtt_small, rtt_large, host


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "--link-rank":
        a = sys.argv[2:]
        _link_worker(int(a[0]), int(a[1]), a[2], int(a[3]), int(a[4]), a[5] == "1")
    else:
        sys.exit("usage: python -m adaptis_plan.executor.link --link-rank RANK PORT OUT REPEATS BYTES HOST")
