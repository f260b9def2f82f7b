"""Launch plans on real devices under torchrun and report measured vs predicted step time.

Use from Python (the `adaptis run` use case calls this with the plan it read and checked):

    from adaptis_plan.executor.launch import RunOptions, run_plan
    result = run_plan(plan, model, RunOptions(steps=3, verify=True))

Data flow: a `PlanFile` and the `ModelSpec` it was made for, as objects (the caller read and
checked the plan file once; the launcher never rereads the user's path) -> the pairing check
(fingerprint; an unsplit model is split into the plan's `model.head_chunks` vocabulary chunks,
`models.transform.split_head`) and `lowering.lower` (a plan the runtime cannot finish is
refused before any process starts) -> a temporary run folder holding, per plan, the plan file
and the model spec the workers read, and the job list -> one `python -m torch.distributed.run
--nproc-per-node P --max-restarts 0 ... -m adaptis_plan.executor.worker` (one process per plan
device; gloo on CPU, NCCL on GPU) -> result files in that folder -> the `run --json` keys
(+ the optional single-process verification and the measured Chrome trace). Imports
torch (for the device check and the verification), the executor, the plan IO and `processes`.

A failing rank ends the whole run: torchrun (max restarts 0) tears the group down as soon as
one worker exits non-zero, and `init_process_group` has `timeout_s` so no wait is endless.
The launcher then names the rank that failed first and its last error line: a rank's own
error (not a communication error) wins; else a rank that died without leaving an error file
(crash, os._exit, killed), preferring torchrun's "root cause" rank; else the earliest
communication error.

While torchrun runs, the launcher supervises it (`_supervise`, every 0.1 s), because torch's
timeouts cannot end every stuck run:
- a rank whose heartbeat (`processes.start_lifeline`) is older than max(timeout_s, 3 s) while
  its process is alive is stuck (stopped, frozen): the run is ended at once and that rank named;
- once a rank has written its error file, torchrun gets `ERROR_GRACE_S` to end the others
  itself (it waits 30 s for a stopped process before SIGKILL); then the launcher does;
- with `nnodes` > 1, a rendezvous that has not started the workers within timeout_s is ended
  and named (torchrun's own static rendezvous was seen waiting 908 s for a missing node);
- a busy or unusable `--master-port` is caught before the launch (a test bind) or, racing
  another process for it, in torchrun's output, and named as a port problem (exit 2).
Whatever ends the launcher (normal end, error, Ctrl-C, SIGTERM / SIGHUP, which raise
`Terminated` here; SIGKILL, which the reaper notices), no process of the run and no run folder
survives it: see `processes.py`.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaptis_plan.errors import AdaptisError, InputError, located
from adaptis_plan.executor import processes
from adaptis_plan.executor.lowering import P2P_ORDERS, lower
from adaptis_plan.executor.support import refusal
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.planfile.io import check_model_matches, plan_layout, plan_programs, write_json_atomic, write_plan
from adaptis_plan.render.measured import measured_trace
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile

log = logging.getLogger(__name__)

_DTYPES = ("fp32", "bf16", "fp16")
_POLL_S = 0.1
ERROR_GRACE_S = 3.0  # after a rank's error file: torchrun's time to end the other ranks itself
STALE_MIN_S = 3.0  # a heartbeat older than max(timeout_s, this) marks a stuck rank (it beats every 1 s)
START_BACKSTOP_S = 120.0  # one node: torchrun must have started its workers by timeout_s + this


@dataclass(frozen=True)
class RunOptions:
    """How to run: everything `adaptis run` takes besides the plan and the model.

    `steps` measured after `warmup` steps; `verify`: compare the first step's loss and every gradient
    with a single-process step; `device` auto / cpu / cuda; `timeout_s`: the longest wait on any peer
    (and on a stuck rank or a rendezvous); `seed`: weights and data; `nnodes`, `node_rank`,
    `rdzv_endpoint` (HOST:PORT of node 0), `master_port` (one node): torchrun's; `p2p_order`: "auto"
    ("ahead" on gloo: every receive posted at the step's start; one line per rank on NCCL), "peer",
    "ahead" or "global" (see `runtime.py`).
    """

    steps: int = 3
    warmup: int = 1
    verify: bool = False
    device: str = "auto"
    dtype: str = "fp32"
    timeout_s: float = 60.0
    seed: int = 0
    optimizer: str = "adamw"
    lr: float = 1e-3
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    master_port: int | None = None
    p2p_order: str = "auto"

    def check(self) -> None:
        """Raise `InputError` naming the option, its value and the fix, for the first bad one."""
        if self.steps < 1:
            raise InputError(f"--steps = {self.steps}: need at least 1 measured step")
        if self.warmup < 0:
            raise InputError(f"--warmup = {self.warmup}: must be >= 0")
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise InputError(
                f"--node-rank = {self.node_rank}: must be in 0..{self.nnodes - 1} for --nnodes {self.nnodes}"
            )
        if self.dtype not in _DTYPES:
            raise InputError(f"dtype = {self.dtype!r}: use one of {', '.join(_DTYPES)}")
        if not self.timeout_s > 0:
            raise InputError(f"--timeout = {self.timeout_s}: must be > 0 seconds")
        if self.optimizer not in ("sgd", "adamw"):
            raise InputError(f"optimizer = {self.optimizer!r}: use 'sgd' or 'adamw'")
        _check_p2p_order(self.p2p_order)
        if self.verify and self.nnodes > 1:
            raise InputError(
                "--verify with --nnodes > 1: the other nodes' gradients are not visible here; verify on one node"
            )
        if self.master_port is not None:
            _check_port_number("--master-port", self.master_port)
        if self.rdzv_endpoint is not None:
            _endpoint(self.rdzv_endpoint)
        elif self.nnodes > 1:
            raise InputError(f"--nnodes = {self.nnodes} needs --rdzv-endpoint HOST:PORT of node 0")


@dataclass(frozen=True)
class PlanJob:
    """One plan to run (with the model it was made for); several run one after another in one launch.

    `label` names the plan in messages and in the result's `plan` key (the CLI passes the file's path).
    `predicted_s`: the step the judge simulates for the plan, reported beside the measured one (None:
    the plan's stored figure, which a hand-edited plan may have left stale); `expected_s` likewise its
    expected step under the profile's measured variation (`judge.simulate.expected_step`; None: none).
    `predicted_comm_s`: the cost model's time of the step's collectives by dimension (e.g. {"dp": s}),
    reported as `predicted_comm_s` beside the measured `comm_s`; None: no prediction given.
    `p2p_order`: this plan's order of sends and receives (`RunOptions.p2p_order`'s values; None: the
    launch's), so that one launch can run the same plans in several orders side by side.
    `steps`, `dtype`: this plan's measured steps after the launch's warm-up and its compute dtype (None: the
    launch's `RunOptions.steps` / `dtype`), so that plans needing other values still share one launch.
    """

    plan: PlanFile
    model: ModelSpec
    trace_path: str | Path | None = None
    label: str = "plan"
    predicted_s: float | None = None
    expected_s: float | None = None
    predicted_comm_s: dict[str, float] | None = None
    p2p_order: str | None = None
    steps: int | None = None
    dtype: str | None = None

    @property
    def predicted_step_time_s(self) -> float:
        return self.plan.predicted.step_time_s if self.predicted_s is None else self.predicted_s

    @property
    def expected_step_time_s(self) -> float | None:
        return self.plan.predicted.expected_step_time_s if self.predicted_s is None else self.expected_s

    def options(self, launch: RunOptions) -> RunOptions:
        """The launch's options with this plan's own steps and dtype; `InputError` (naming the plan) if bad."""
        mine = dataclasses.replace(
            launch,
            steps=launch.steps if self.steps is None else self.steps,
            dtype=launch.dtype if self.dtype is None else self.dtype,
        )
        try:
            mine.check()
        except InputError as e:
            raise located(e, self.label) from None
        return mine


def _check_p2p_order(order: str) -> None:
    if order not in ("auto", *P2P_ORDERS):
        raise InputError(f"p2p_order = {order!r}: use auto, {', '.join(P2P_ORDERS[:-1])} or {P2P_ORDERS[-1]}")


class Terminated(AdaptisError):
    """The launcher got SIGTERM or SIGHUP; the run's processes were stopped. Exits 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(
            f"adaptis run got {signal.Signals(signum).name}: stopped torchrun and every worker, removed the run folder"
        )
        self.exit_code = 128 + signum


def run_plan(
    plan: PlanFile,
    model: ModelSpec,
    options: RunOptions | None = None,
    *,
    trace_path: str | Path | None = None,
    label: str = "plan",
    predicted_s: float | None = None,
    expected_s: float | None = None,
    predicted_comm_s: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Execute `plan` for `warmup + steps` steps; returns the `run --json` keys.

    Keys: `steps`, `measured_step_time_s` (median of the steps after warm-up, rank 0's wall
    time from a barrier to a barrier), `predicted_step_time_s` (`predicted_s`, else the plan's stored
    figure), `expected_step_time_s` (`expected_s`, likewise; None without measured variation), `step_times_s`,
    `world_size` (pp x dp x tp processes), `tp`, `comm_s` (`{"dp": s, "tp": s}`: the median over
    measured steps of the slowest rank's seconds in data-parallel collectives, gradient sync plus
    parameter gathers, without the wait for the slowest replica, 0 with dp = 1; and in tensor-parallel
    collectives, the layers' all-reduces in forwards, backwards and recomputed forwards plus the step's
    sum of partial gradients, including the wait for the slowest tp peer at each, 0 with tp = 1;
    `tpcomm.TP_COMM`), `comm_step_s` (per measured step, `{"dp", "dp_wait", "dp_grad_sync",
    "dp_param_gather", "tp", "tp_bytes", "optimizer_step"}` (and "ep" with ep > 1: the seconds inside
    the experts' all-to-alls, `expertparallel`), each the slowest rank's;
    `dataparallel.DataParallel.start_step`), `ep`,
    `predicted_comm_s` (`predicted_comm_s`, or None),
    and with `verify` also `loss_diff`, `max_abs_grad_diff`, `max_abs_param_diff`, `verified` (the
    first step's loss, every gradient of every dp replica, and every parameter after the optimizer
    step, against a single-process step over the whole global batch; tolerances in `verify.py`).
    """
    job = PlanJob(plan, model, trace_path, label, predicted_s, expected_s, predicted_comm_s)
    return run_plans([job], options)[0]


def run_plans(jobs: list[PlanJob], options: RunOptions | None = None) -> list[dict[str, Any]]:
    """Run several plans side by side in one torchrun launch; one result dict each.

    The plans need the same number of processes (pp x dp x tp), not the same split of it: each job
    creates its own process groups (`worker.mesh_groups`), so one launch can measure pp 4 against
    pp 2 x dp 2 against tp 2 x dp 2 on the same four ranks."""
    if not jobs:
        return []
    options = options or RunOptions()
    options.check()
    jobs = [_prepare(job) for job in jobs]
    sizes = [job.plan.training.pp * job.plan.training.dp * job.plan.training.tp for job in jobs]
    job_options = [job.options(options) for job in jobs]  # each job's steps and dtype, checked
    for job, size in zip(jobs, sizes, strict=True):
        if job.p2p_order is not None:
            _check_p2p_order(job.p2p_order)
        if size != sizes[0]:
            t = job.plan.training
            raise InputError(
                f"{job.label}: pp x dp x tp = {t.pp} x {t.dp} x {t.tp} = {size} processes: plans run together need"
                f" the same number of processes ({sizes[0]}); run them separately"
            )
    world = sizes[0]
    if world % options.nnodes:
        raise InputError(
            f"--nnodes = {options.nnodes}: the plan's pp x dp x tp = {world} processes do not split evenly over the"
            " nodes; use a divisor of that"
        )
    nproc = world // options.nnodes
    dev = _resolve_device(options.device, nproc)
    cmd = _torchrun_command(nproc, options)
    with _terminate_on_signals(), _Run() as run:
        manifest = []
        for j, job in enumerate(jobs):
            plan_file, model_file = run.work / f"plan{j}.json", run.work / f"model{j}.json"
            write_plan(job.plan, plan_file)
            model_file.write_text(job.model.model_dump_json())
            manifest.append(
                {
                    "name": f"job{j}",
                    "plan": str(plan_file),
                    "model": str(model_file),
                    "p2p_order": job.p2p_order,
                    "steps": job.steps,
                    "dtype": job.dtype,
                }
            )
        write_json_atomic(manifest, run.work / "jobs.json")
        o = options
        worker_args = [
            "--jobs", str(run.work / "jobs.json"), "--out", str(run.out),
            "--steps", str(o.steps), "--warmup", str(o.warmup), "--seed", str(o.seed),
            "--device", dev, "--dtype", o.dtype, "--optimizer", o.optimizer, "--lr", repr(o.lr),
            "--timeout-s", repr(float(o.timeout_s)), "--p2p-order", o.p2p_order,
        ]  # fmt: skip
        if o.verify:
            worker_args.append("--verify")
        _supervise(run, cmd + worker_args, options, nproc, dev)
        references: dict[tuple[object, ...], Any] = {}  # one single-process step per model and global batch
        return [
            _collect(job, run.out / f"job{j}", nproc, job_options[j], dev, references) for j, job in enumerate(jobs)
        ]


# ---------------------------------------------------------------- checks


def _prepare(job: PlanJob) -> PlanJob:
    """The pairing check, what the executor can run (`support.refusal`) and the lowering."""
    model = _model_for_plan(job)
    plan = job.plan
    why = refusal(plan, model)
    if why is not None:
        raise InputError(f"{job.label}: {why}")
    try:
        lower(plan_layout(plan), plan_programs(plan), plan.training.num_microbatches)
    except InputError as e:
        raise located(e, job.label) from None
    return dataclasses.replace(job, model=model)


def _model_for_plan(job: PlanJob) -> ModelSpec:
    """The model as planned: split into the plan's head chunks when given unsplit (same fingerprint)."""
    plan, model = job.plan, job.model
    check_model_matches(plan, model, job.label)
    k = plan.model.head_chunks
    if k > 1 and model.num_head_chunks == 1:
        model = split_head(model, k)
    if model.num_head_chunks != k or model.num_layers != plan.model.num_layers:
        raise InputError(
            f"{job.label}: model.num_layers = {plan.model.num_layers} with the head in {k} chunk(s), but"
            f" '{model.name}' has {model.num_layers} layers with the head in {model.num_head_chunks} chunk(s);"
            " pass the model the plan was made for or re-plan"
        )
    return model


def _resolve_device(device: str, nproc: int) -> str:
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"device = {device!r}: use auto, cpu or cuda")
    if device == "cpu" or (device == "auto" and not _gpu_build()):
        return "cpu"
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and n < nproc:
        raise InputError(f"device = cuda: {nproc} processes per node need {nproc} GPUs, found {n}; use --device cpu")
    return "cuda" if n >= nproc else "cpu"


def _gpu_build() -> bool:
    """Whether the installed torch is built for GPUs (CUDA or ROCm), read from its version file: on a CPU
    build, `auto` means cpu without importing torch into the launcher (about 2 s of CPU per launch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False  # no torch here: the ranks' own import says so
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return True  # unknown: torch itself is asked
    builds = re.findall(r"^(?:cuda|hip)\s*(?::[^=\n]*)?=\s*(.+?)\s*$", text, re.MULTILINE)
    return len(builds) != 2 or any(b != "None" for b in builds)


def _check_port_number(flag: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise InputError(f"{flag} = {port}: not a TCP port; use a free port in 1024..65535")


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--rdzv-endpoint = {text!r}: expected HOST:PORT, e.g. node0:29500")
    _check_port_number("--rdzv-endpoint", int(port))
    return host, int(port)


def _check_port_free(flag: str, port: int) -> None:
    """Bind `port` here the way torchrun's store will (all interfaces, SO_REUSEADDR); name what is wrong."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            raise InputError(_port_message(flag, port, e.errno)) from None


def _port_message(flag: str, port: int, err: int | None) -> str:
    if err in (errno.EACCES, errno.EPERM):
        return (
            f"{flag} = {port}: this user may not listen on port {port} (below 1024 needs root); use a port above 1023"
        )
    return (
        f"{flag} = {port}: the port is already in use on this machine (another run or service listens there);"
        " pick a free port"
        + (" or leave --master-port out (torchrun then picks one)" if flag == "--master-port" else "")
    )


# ---------------------------------------------------------------- launching


def _torchrun_command(nproc: int, options: RunOptions) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--nnodes={options.nnodes}",
        "--max-restarts=0",
    ]
    if options.rdzv_endpoint:
        host, port = _endpoint(options.rdzv_endpoint)
        if options.node_rank == 0:  # node 0 hosts the rendezvous store on that port
            _check_port_free("--rdzv-endpoint", port)
        cmd += [f"--node-rank={options.node_rank}", f"--master-addr={host}", f"--master-port={port}"]
    elif options.master_port is not None:
        _check_port_free("--master-port", options.master_port)
        cmd += ["--node-rank=0", "--master-addr=127.0.0.1", f"--master-port={options.master_port}"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", "adaptis_plan.executor.worker"]


@contextmanager
def _terminate_on_signals() -> Iterator[None]:
    """SIGTERM / SIGHUP raise `Terminated` while a run is on, so its `finally` clean-up runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT / SIGTERM / SIGHUP during the clean-up (a second Ctrl-C must not cut it short)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


class _Run:
    """One launch: its token, its reaper, its temporary folder; leaving the `with` ends all of them."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(8)
        self.root = str(Path(__file__).resolve().parents[2])
        # the reaper first: from here on, even a SIGKILL of this process leaves nothing behind
        self.reaper = subprocess.Popen(
            [sys.executable, "-m", "adaptis_plan.executor.processes", self.token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self._env(os.environ, token=False),
            start_new_session=True,
            text=True,
        )
        try:
            self.work = Path(tempfile.mkdtemp(prefix="adaptis-run-"))
            self._tell_reaper(f"dir {self.work}")
        except BaseException:
            self._end_reaper()
            raise
        self.out = self.work / "out"
        self.out.mkdir()
        (self.work / "tmp").mkdir()
        self.torchrun: subprocess.Popen | None = None

    def _env(self, base: os._Environ | dict, *, token: bool) -> dict[str, str]:
        env = dict(base)
        env["PYTHONPATH"] = self.root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop(processes.RUN_ID_ENV, None)
        if token:
            env[processes.RUN_ID_ENV] = self.token
            env[processes.LAUNCHER_PID_ENV] = str(os.getpid())
            env["TMPDIR"] = str(self.work / "tmp")  # torchrun's and the workers' temporary files die with the run
        return env

    def child_env(self, dev: str) -> dict[str, str]:
        env = self._env(os.environ, token=True)
        if dev == "cpu":
            env["OMP_NUM_THREADS"] = "1"
        return env

    def _tell_reaper(self, line: str) -> None:
        assert self.reaper.stdin is not None
        self.reaper.stdin.write(line + "\n")
        self.reaper.stdin.flush()

    def _end_reaper(self) -> None:
        try:
            if self.reaper.stdin is not None:
                self.reaper.stdin.close()  # EOF: the reaper checks once more and exits
            self.reaper.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.reaper.kill()

    def stop(self) -> None:
        """End every process of the run (idempotent)."""
        processes.kill_run(self.token, [self.torchrun.pid] if self.torchrun is not None else [], grace_s=1.0)
        if self.torchrun is not None:
            try:
                self.torchrun.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("torchrun (pid %d) did not exit after SIGKILL", self.torchrun.pid)

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, *exc: object) -> None:
        with _signals_held():
            self.stop()
            shutil.rmtree(self.work, ignore_errors=True)
            self._end_reaper()


def _supervise(run: _Run, cmd: list[str], options: RunOptions, nproc: int, dev: str) -> None:
    """Run torchrun to its end, or end it (see the module docstring); raise naming what failed."""
    log.info("launching: %s", " ".join(cmd))
    stale_s = max(options.timeout_s, STALE_MIN_S)
    local = range(options.node_rank * nproc, (options.node_rank + 1) * nproc)
    with open(run.work / "torchrun.log", "w") as sink:
        run.torchrun = proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=run.child_env(dev), start_new_session=True
        )
    t0 = time.monotonic()
    spawned: float | None = None  # when torchrun had started its workers (its rendezvous completed)
    first_error: float | None = None
    stuck: tuple[int, float] | None = None
    while proc.poll() is None:
        time.sleep(_POLL_S)
        now = time.monotonic()
        beats = processes.heartbeats(run.out)
        if spawned is None:
            if beats or processes.worker_children(proc.pid):
                spawned = now
            elif options.nnodes > 1 and now - t0 > options.timeout_s:
                run.stop()
                raise InputError(_rendezvous_message(options))
            elif now - t0 > options.timeout_s + START_BACKSTOP_S:
                run.stop()
                raise AdaptisError(f"torchrun did not start the workers within {now - t0:.0f} s")
            continue
        missing = [r for r in local if r not in beats]
        if missing and now - spawned > options.timeout_s + START_BACKSTOP_S:
            run.stop()
            raise AdaptisError(f"rank {missing[0]} failed: it did not start within {now - spawned:.0f} s")
        late = [
            (rank, age)
            for rank, (pid, age) in beats.items()
            if age > stale_s and processes.carries_token(pid, run.token) and processes.is_running(pid)
        ]
        if late:
            stuck = min(late)
            break
        if first_error is None and any(run.out.glob("error.rank*.json")):
            first_error = now
        if first_error is not None and now - first_error > ERROR_GRACE_S:
            break
    run.stop()
    output = (run.work / "torchrun.log").read_text(errors="replace")
    if output:
        log.debug("torchrun output:\n%s", output)
    if stuck is not None:
        rank, age = stuck
        raise AdaptisError(
            f"rank {rank} failed: it stopped responding (no heartbeat for {age:.0f} s, --timeout {options.timeout_s:g}):"
            " the process was stopped or is frozen; the run was ended"
        )
    if proc.returncode != 0 or first_error is not None:
        if not any(run.out.glob("error.rank*.json")):  # no rank ran: torchrun itself failed (its port?)
            _raise_port_problem(output, options)
        raise AdaptisError(_diagnose(run.out, local, output))


def _rendezvous_message(options: RunOptions) -> str:
    return (
        f"--rdzv-endpoint = {options.rdzv_endpoint}: the rendezvous of --nnodes {options.nnodes} did not complete"
        f" within --timeout {options.timeout_s:g} s (not every node joined); start `adaptis run` with the same"
        " plan, --nnodes and --rdzv-endpoint on every node (--node-rank 0 .. N-1), or raise --timeout"
    )


def _raise_port_problem(output: str, options: RunOptions) -> None:
    """Raise the port's `InputError` when torchrun's output says its rendezvous port could not be bound."""
    text = output.lower()
    if "eaddrinuse" in text or "address already in use" in text:
        err: int | None = errno.EADDRINUSE
    elif "eacces" in text or ("permission denied" in text and "socket" in text):
        err = errno.EACCES
    else:
        return
    if options.rdzv_endpoint:
        flag, port = "--rdzv-endpoint", _endpoint(options.rdzv_endpoint)[1]
    elif options.master_port is not None:
        flag, port = "--master-port", options.master_port
    else:
        m = re.search(r"port[:= ]+(\d+)", text)
        flag, port = "the rendezvous port", int(m.group(1)) if m else 0
    raise InputError(_port_message(flag, port, err))


def _diagnose(out: Path, ranks: range, output: str) -> str:
    """'rank R failed: <its last error line>' for the rank that failed first (see the module docstring)."""
    errors = {}
    for r in ranks:
        f = out / f"error.rank{r}.json"
        if f.is_file():
            try:
                errors[r] = json.loads(f.read_text())
            except (OSError, json.JSONDecodeError):
                pass
    own = sorted((e["time"], r) for r, e in errors.items() if not e.get("comm"))
    if own:
        r = own[0][1]
        return f"rank {r} failed: {errors[r]['line']}"
    root, codes = _torchrun_failures(output)
    silent = [r for r in ranks if r not in errors]
    if silent:
        r = root if root in silent else silent[0]
        code = codes.get(r)
        if code is None:
            why = "no error report"
        elif code < 0:
            why = f"killed by signal {-code}"
        else:
            why = f"exit code {code}"
        msg = f"rank {r} failed: the process died or hung without a Python error ({why})"
        if errors:
            c = min(errors, key=lambda k: errors[k]["time"])
            msg += f"; rank {c} saw: {_short(errors[c]['line'])}"
        return msg
    if errors:
        r = min(errors, key=lambda k: errors[k]["time"])
        return f"rank {r} failed: {errors[r]['line']}"
    tail = [ln for ln in output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
    return f"the torchrun launch failed: {tail[0]}"


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _torchrun_failures(output: str) -> tuple[int | None, dict[int, int]]:
    """torchrun's summary: the root-cause rank and every failed rank's exit code."""
    codes = {
        int(r): int(c)
        for r, c in re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*exitcode\s*:\s*(-?\d+)", output)
    }
    part = output.split("Root Cause", 1)
    root = re.search(r"rank\s*:\s*(\d+)", part[1]) if len(part) == 2 else None
    return (int(root.group(1)) if root else None), codes


# ---------------------------------------------------------------- results


def _collect(
    job: PlanJob, out: Path, nproc: int, options: RunOptions, dev: str, references: dict[tuple[object, ...], Any]
) -> dict[str, Any]:
    """One job's `run --json` keys from its ranks' files; `references`: the launch's single-process steps so far
    (`_verify`)."""
    ranks = range(options.node_rank * nproc, (options.node_rank + 1) * nproc)
    per_rank = {r: json.loads((out / f"rank{r}.json").read_text()) for r in ranks}
    first = per_rank[ranks[0]]
    times = first["step_times_s"]
    # each replica's last stage reports its replica's mean loss; the step's loss is their mean
    replica_losses = [d["losses"] for d in per_rank.values() if d["losses"]]
    losses = [statistics.fmean(step) for step in zip(*replica_losses, strict=True)] if replica_losses else []
    comm_steps = []
    for i, mine in enumerate(first["comm_s"]):
        step = {k: max(d["comm_s"][i][k] for d in per_rank.values()) for k in mine}
        step["dp"] = max(d["comm_s"][i]["dp_grad_sync"] + d["comm_s"][i]["dp_param_gather"] for d in per_rank.values())
        step["tp_bytes"] = max(d["comm_s"][i]["tp_bytes"] for d in per_rank.values())
        comm_steps.append(step)
    plan = job.plan
    result: dict[str, Any] = {
        "plan": job.label,
        "strategy": plan.strategy,
        "steps": options.steps,
        "warmup": options.warmup,
        "measured_step_time_s": statistics.median(times),
        "predicted_step_time_s": job.predicted_step_time_s,
        "expected_step_time_s": job.expected_step_time_s,
        "step_times_s": times,
        "device": dev,
        "backend": "nccl" if dev == "cuda" else "gloo",
        "dtype": options.dtype,
        "pp": plan.training.pp,
        "dp": plan.training.dp,
        "zero": plan.training.zero,
        "tp": plan.training.tp,
        "ep": plan.training.ep,
        "world_size": plan.training.pp * plan.training.dp * plan.training.tp,
        "global_batch_size": plan.training.dp * plan.training.micro_batch_size * plan.training.num_microbatches,
        "comm_s": {
            **{k: statistics.median(c[k] for c in comm_steps) if comm_steps else 0.0 for k in ("dp", "tp")},
            # ep > 1: seconds inside the expert all-to-alls (`expertparallel`), the slowest rank's, median over steps
            **({"ep": statistics.median(c["ep"] for c in comm_steps)} if comm_steps and "ep" in comm_steps[0] else {}),
        },
        "comm_step_s": comm_steps,
        # per rank of this node: elements its optimizer updates, full parameters it holds between steps, its stages' parameters
        "held_elements": [per_rank[r]["held_elements"] for r in ranks],
        "predicted_comm_s": job.predicted_comm_s,
        "num_microbatches": plan.training.num_microbatches,
        "recompute": [st.recompute for st in plan.stages],
        "losses": losses,
        # this node's projection GEMMs in the last step; forward includes what recomputation reran
        "gemm_flops": {k: sum(d["gemm_flops"][k] for d in per_rank.values()) for k in first["gemm_flops"]},
        # per rank of this node, the core it was pinned to (CPU ranks that fit one per core; `executor.cpu`)
        "cpu_cores": [per_rank[r].get("cpu_core") for r in ranks],
        "p2p_order": first["p2p_order"],  # the order of sends and receives the ranks ran (auto resolved)
    }
    if options.verify:
        result.update(_verify(plan, job.model, out, ranks, options, dev, references))
    if job.trace_path is not None:  # the timeline of replica 0 (dp rank 0), its tp rank 0
        timelines = {
            d["pp_rank"]: d["timeline"] for d in per_rank.values() if d["dp_rank"] == 0 and d.get("tp_rank", 0) == 0
        }
        write_json_atomic(measured_trace(plan, timelines, job.predicted_step_time_s), job.trace_path)
        result["trace"] = str(job.trace_path)
    return result


def _verify(
    plan: PlanFile,
    model: ModelSpec,
    out: Path,
    ranks: range,
    options: RunOptions,
    dev: str,
    references: dict[tuple[object, ...], Any],
) -> dict[str, Any]:
    """Every dp replica's gradients (after the dp average) and parameters (after the optimizer step)
    against one process's step over the whole global batch; the loss is the replicas' mean. With tp,
    each (dp rank, tp rank) is checked: its tp-sharded tensors gathered over tp, its replicated ones
    its own copy (so tp ranks whose copies drift apart fail too). The single-process step depends on the
    model, the global batch and the optimizer only: plans of a launch that share them share it
    (`references`, read-only), whatever their split, schedule or ZeRO stage."""

    from adaptis_plan.executor.dumps import load_tensors
    from adaptis_plan.executor.verify import compare, compare_tensors, reference_update, step_with_grads, tolerance
    from adaptis_plan.executor.worker import DTYPES

    tr = plan.training
    replicas: dict[tuple[int, int], tuple[dict, dict]] = {}
    replica_losses = []
    for r in ranks:
        rank_grads, values = load_tensors(out / f"grads.rank{r}.pt")
        params, _ = load_tensors(out / f"params.rank{r}.pt")
        grads, ps = replicas.setdefault(((r // tr.tp) % tr.dp, r % tr.tp), ({}, {}))
        grads.update(rank_grads)
        ps.update(params)
        if values["loss"] is not None:
            replica_losses.append(values["loss"])
    pipe_loss = statistics.fmean(replica_losses)
    zero_fill = tr.dp > 1 and tr.zero >= 2  # flat shards step a gradient-less parameter with zeros
    key = (
        model.model_dump_json(),
        tr.num_microbatches,
        tr.micro_batch_size,
        tr.seq_len,
        tr.dp,
        zero_fill,
        options.dtype,
    )
    if key not in references:  # the other options are the launch's: the same for every job
        references[key] = reference_update(
            model,
            num_microbatches=tr.num_microbatches,
            micro_batch_size=tr.micro_batch_size,
            seq_len=tr.seq_len,
            optimizer=options.optimizer,
            lr=options.lr,
            seed=options.seed,
            device=dev,
            dtype=DTYPES[options.dtype],
            dp=tr.dp,
            none_grads_as_zero=zero_fill,
        )
    ref_loss, ref_grads, ref_params = references[key]
    rtol, atol = tolerance(dev, options.dtype)
    worst: Any = None
    mismatched: list[str] = []
    param_diff, param_worst, single_diff = 0.0, None, 0.0
    for (d, t), (grads, ps) in sorted(replicas.items()):
        c = compare(float(pipe_loss), grads, ref_loss, ref_grads, rtol=rtol, atol=atol)
        where = ([f"dp rank {d}"] if tr.dp > 1 else []) + ([f"tp rank {t}"] if tr.tp > 1 else [])
        tag = f" ({', '.join(where)})" if where else ""
        mismatched += [n + tag for n in c.mismatched]
        if worst is None or c.max_abs_grad_diff > worst[0].max_abs_grad_diff:
            worst = (c, tag)
        # the optimizer machinery: this replica's parameters against one process's step with its gradients
        want = step_with_grads(
            model,
            grads,
            optimizer=options.optimizer,
            lr=options.lr,
            seed=options.seed,
            device=dev,
            dtype=DTYPES[options.dtype],
            none_grads_as_zero=zero_fill,
        )
        pd, pw, pm = compare_tensors(ps, want, rtol=rtol, atol=atol)
        mismatched += [f"{n} after the step{tag}" for n in pm]
        if pd >= param_diff:
            param_diff, param_worst = pd, None if pw is None else pw + tag
        single_diff = max(single_diff, compare_tensors(ps, ref_params, rtol=rtol, atol=atol)[0])
    c, tag = worst
    return {
        "verified": c.verified and not mismatched,
        "loss_diff": c.loss_diff,
        "max_abs_grad_diff": c.max_abs_grad_diff,
        # parameters after the step against one process's optimizer step with the run's averaged gradients
        "max_abs_param_diff": param_diff,
        # ... and against the whole single-process step (information: AdamW's first step amplifies gradient
        # rounding near g = 0 up to lr * |dg| / eps; `verify.step_with_grads`)
        "max_abs_param_diff_single_process": single_diff,
        "loss": pipe_loss,
        "reference_loss": ref_loss,
        "worst_param": None if c.worst_param is None else c.worst_param + tag,
        "worst_param_after_step": param_worst,
        "mismatched_params": mismatched[:20],
        "tolerance": {"rtol": rtol, "atol": atol},
    }
