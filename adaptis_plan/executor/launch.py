"""Launch a plan on real devices under torchrun and report measured vs predicted step time.

Use from Python (the CLI's `adaptis run PLAN.json [--verify] [--trace T.json]` calls this):

    from adaptis_plan.executor.launch import run_plan
    result = run_plan("plan.json", model_spec, steps=3, verify=True)

Data flow: plan file (+ the `ModelSpec` it was made for) -> checks (`read_plan`, model
fingerprint, the layer count and head chunks (an unsplit model is split into the plan's
`model.head_chunks` vocabulary chunks, `models.transform.split_head`), `lowering.lower`:
refused before any process starts) -> one
`python -m torch.distributed.run --nproc-per-node P --max-restarts 0 ... -m
adaptis_plan.executor.worker` (one process per plan device; gloo on CPU, NCCL on GPU) ->
result files in a temporary folder -> the `run` JSON keys of DESIGN.md (+ the optional
single-process verification and the measured Chrome trace). Imports torch (for the device
check and the verification), the executor and the plan IO.

A failing rank ends the whole run: torchrun (max restarts 0) tears the group down as soon as
one worker exits non-zero, and `init_process_group` has `timeout_s` so no wait is endless.
The launcher then names the rank that failed first and its last error line: a rank's own
error (not a communication error) wins; else a rank that died without leaving an error file
(crash, os._exit, killed), preferring torchrun's "root cause" rank; else the earliest
communication error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaptis_plan.errors import AdaptisError, InputError, located
from adaptis_plan.executor.lowering import lower
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.planfile.io import check_model_matches, plan_layout, plan_programs, read_plan, write_json_atomic
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile

log = logging.getLogger(__name__)

_OP_NAMES = {"F": "forward", "B": "backward", "I": "backward (inputs)", "W": "backward (weights)"}
_DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class PlanJob:
    """One plan to run; several run one after another in a single torchrun launch (`run_plans`)."""

    plan_path: str | Path
    model: ModelSpec
    trace_path: str | Path | None = None


def run_plan(
    plan_path: str | Path,
    model: ModelSpec,
    *,
    steps: int = 3,
    warmup: int = 1,
    verify: bool = False,
    trace_path: str | Path | None = None,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    master_port: int | None = None,
    device: str = "auto",
    dtype: str = "fp32",
    timeout_s: float = 60.0,
    seed: int = 0,
    optimizer: str = "adamw",
    lr: float = 1e-3,
) -> dict[str, Any]:
    """Execute `plan_path` for `warmup + steps` steps; returns the `run` JSON keys of DESIGN.md.

    Keys: `steps`, `measured_step_time_s` (median of the steps after warm-up, rank 0's wall
    time from a barrier to a barrier), `predicted_step_time_s` (the plan's), `step_times_s`,
    and with `verify` also `loss_diff`, `max_abs_grad_diff`, `verified` (the first step's loss
    and every gradient against a single-process step; tolerances in `verify.py`).
    """
    return run_plans(
        [PlanJob(plan_path, model, trace_path)],
        steps=steps,
        warmup=warmup,
        verify=verify,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        master_port=master_port,
        device=device,
        dtype=dtype,
        timeout_s=timeout_s,
        seed=seed,
        optimizer=optimizer,
        lr=lr,
    )[0]


def run_plans(
    jobs: list[PlanJob],
    *,
    steps: int = 3,
    warmup: int = 1,
    verify: bool = False,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    master_port: int | None = None,
    device: str = "auto",
    dtype: str = "fp32",
    timeout_s: float = 60.0,
    seed: int = 0,
    optimizer: str = "adamw",
    lr: float = 1e-3,
    p2p_order: str = "auto",
) -> list[dict[str, Any]]:
    """Run several plans (same `pp`) side by side in one torchrun launch; one result dict each.

    `p2p_order`: "auto" (per peer on gloo, one line per rank on NCCL), "peer" or "global"
    (see `runtime.py`)."""
    if not jobs:
        return []
    _check_options(steps, warmup, nnodes, node_rank, dtype, timeout_s, optimizer, verify)
    if p2p_order not in ("auto", "peer", "global"):
        raise InputError(f"p2p_order = {p2p_order!r}: use auto, peer or global")
    plans = [_load(job) for job in jobs]
    jobs = [dataclasses.replace(job, model=_model_for_plan(job, plan)) for job, plan in zip(jobs, plans, strict=True)]
    pp = plans[0].training.pp
    for job, plan in zip(jobs, plans, strict=True):
        if plan.training.pp != pp:
            raise InputError(
                f"{job.plan_path}: training.pp = {plan.training.pp}: plans run together need the same pp"
                f" ({pp}); run them separately"
            )
    if pp % nnodes:
        raise InputError(
            f"nnodes = {nnodes}: the plan's {pp} devices do not split evenly over the nodes; use a divisor of {pp}"
        )
    nproc = pp // nnodes
    dev = _resolve_device(device, nproc)
    work = Path(tempfile.mkdtemp(prefix="adaptis-run-"))
    try:
        manifest = []
        for j, job in enumerate(jobs):
            model_file = work / f"model{j}.json"
            model_file.write_text(job.model.model_dump_json())
            manifest.append({"name": f"job{j}", "plan": str(Path(job.plan_path).resolve()), "model": str(model_file)})
        write_json_atomic(manifest, work / "jobs.json")
        worker_args = [
            "--jobs", str(work / "jobs.json"), "--out", str(work / "out"),
            "--steps", str(steps), "--warmup", str(warmup), "--seed", str(seed),
            "--device", dev, "--dtype", dtype, "--optimizer", optimizer, "--lr", repr(lr),
            "--timeout-s", repr(float(timeout_s)), "--p2p-order", p2p_order,
        ]  # fmt: skip
        if verify:
            worker_args.append("--verify")
        cmd = _torchrun_command(nproc, nnodes, node_rank, rdzv_endpoint, master_port) + worker_args
        _launch(cmd, work / "out", pp, nproc, node_rank, dev)
        results = []
        for j, (job, plan) in enumerate(zip(jobs, plans, strict=True)):
            results.append(
                _collect(job, plan, work / "out" / f"job{j}", nproc, node_rank, steps, warmup, verify, seed, dev, dtype)
            )
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------- checks


def _check_options(
    steps: int, warmup: int, nnodes: int, node_rank: int, dtype: str, timeout_s: float, optimizer: str, verify: bool
) -> None:
    if steps < 1:
        raise InputError(f"--steps = {steps}: need at least 1 measured step")
    if warmup < 0:
        raise InputError(f"--warmup = {warmup}: must be >= 0")
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise InputError(f"--node-rank = {node_rank}: must be in 0..{nnodes - 1} for --nnodes {nnodes}")
    if dtype not in _DTYPES:
        raise InputError(f"dtype = {dtype!r}: use one of {', '.join(_DTYPES)}")
    if timeout_s <= 0:
        raise InputError(f"timeout_s = {timeout_s}: must be > 0 seconds")
    if optimizer not in ("sgd", "adamw"):
        raise InputError(f"optimizer = {optimizer!r}: use 'sgd' or 'adamw'")
    if verify and nnodes > 1:
        raise InputError(
            "--verify with --nnodes > 1: the other nodes' gradients are not visible here; verify on one node"
        )


def _load(job: PlanJob) -> PlanFile:
    plan = read_plan(job.plan_path)
    check_model_matches(plan, job.model, job.plan_path)
    try:
        lower(plan_layout(plan), plan_programs(plan), plan.training.num_microbatches)
    except InputError as e:
        raise located(e, job.plan_path) from None
    return plan


def _model_for_plan(job: PlanJob, plan: PlanFile) -> ModelSpec:
    """The model as planned: split into the plan's head chunks when given unsplit (same fingerprint)."""
    model, k = job.model, plan.model.head_chunks
    if k > 1 and model.num_head_chunks == 1:
        model = split_head(model, k)
    if model.num_head_chunks != k or model.num_layers != plan.model.num_layers:
        raise InputError(
            f"{job.plan_path}: model.num_layers = {plan.model.num_layers} with the head in {k} chunk(s), but"
            f" '{model.name}' has {model.num_layers} layers with the head in {model.num_head_chunks} chunk(s);"
            " pass the model the plan was made for or re-plan"
        )
    return model


def _resolve_device(device: str, nproc: int) -> str:
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"device = {device!r}: use auto, cpu or cuda")
    if device == "cpu":
        return "cpu"
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and n < nproc:
        raise InputError(f"device = cuda: {nproc} processes per node need {nproc} GPUs, found {n}; use --device cpu")
    return "cuda" if n >= nproc else "cpu"


# ---------------------------------------------------------------- launching


def _torchrun_command(
    nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None, master_port: int | None
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        f"--nnodes={nnodes}",
        "--max-restarts=0",
    ]
    if rdzv_endpoint:
        host, _, port = rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise InputError(f"rdzv_endpoint = {rdzv_endpoint!r}: expected HOST:PORT, e.g. node0:29500")
        cmd += [f"--node-rank={node_rank}", f"--master-addr={host}", f"--master-port={port}"]
    elif nnodes > 1:
        raise InputError(f"--nnodes = {nnodes} needs --rdzv-endpoint HOST:PORT of node 0")
    elif master_port is not None:
        cmd += ["--node-rank=0", "--master-addr=127.0.0.1", f"--master-port={master_port}"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", "adaptis_plan.executor.worker"]


def _launch(cmd: list[str], out: Path, world: int, nproc: int, node_rank: int, dev: str) -> None:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if dev == "cpu":
        env["OMP_NUM_THREADS"] = "1"
    out.mkdir(parents=True, exist_ok=True)
    log.info("launching: %s", " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        output, _ = proc.communicate()
    except BaseException:
        # Ctrl-C or similar: SIGTERM lets torchrun stop its workers before we give up on it.
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    if output:
        log.debug("torchrun output:\n%s", output)
    if proc.returncode != 0:
        local = range(node_rank * nproc, (node_rank + 1) * nproc)
        raise AdaptisError(_diagnose(out, local, output or ""))


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
    job: PlanJob,
    plan: PlanFile,
    out: Path,
    nproc: int,
    node_rank: int,
    steps: int,
    warmup: int,
    verify: bool,
    seed: int,
    dev: str,
    dtype: str,
) -> dict[str, Any]:
    ranks = range(node_rank * nproc, (node_rank + 1) * nproc)
    per_rank = {r: json.loads((out / f"rank{r}.json").read_text()) for r in ranks}
    first = per_rank[ranks[0]]
    times = first["step_times_s"]
    losses = next((d["losses"] for d in per_rank.values() if d["losses"]), [])
    result: dict[str, Any] = {
        "plan": str(job.plan_path),
        "strategy": plan.strategy,
        "steps": steps,
        "warmup": warmup,
        "measured_step_time_s": statistics.median(times),
        "predicted_step_time_s": plan.predicted.step_time_s,
        "step_times_s": times,
        "device": dev,
        "backend": "nccl" if dev == "cuda" else "gloo",
        "dtype": dtype,
        "pp": plan.training.pp,
        "num_microbatches": plan.training.num_microbatches,
        "losses": losses,
    }
    if verify:
        result.update(_verify(plan, job.model, out, ranks, seed, dev, dtype))
    if job.trace_path is not None:
        write_json_atomic(measured_trace(plan, {r: d["timeline"] for r, d in per_rank.items()}), job.trace_path)
        result["trace"] = str(job.trace_path)
    return result


def _verify(
    plan: PlanFile, model: ModelSpec, out: Path, ranks: range, seed: int, dev: str, dtype: str
) -> dict[str, Any]:
    import torch

    from adaptis_plan.executor.verify import compare, reference_step, tolerance
    from adaptis_plan.executor.worker import DTYPES

    grads: dict[str, Any] = {}
    pipe_loss = None
    for r in ranks:
        dump = torch.load(out / f"grads.rank{r}.pt", weights_only=True)
        grads.update(dump["grads"])
        if dump["loss"] is not None:
            pipe_loss = dump["loss"]
    tr = plan.training
    ref_loss, ref_grads = reference_step(
        model,
        num_microbatches=tr.num_microbatches,
        micro_batch_size=tr.micro_batch_size,
        seq_len=tr.seq_len,
        seed=seed,
        device=dev,
        dtype=DTYPES[dtype],
    )
    rtol, atol = tolerance(dev, dtype)
    c = compare(float(pipe_loss), grads, ref_loss, ref_grads, rtol=rtol, atol=atol)
    return {
        "verified": c.verified,
        "loss_diff": c.loss_diff,
        "max_abs_grad_diff": c.max_abs_grad_diff,
        "loss": pipe_loss,
        "reference_loss": ref_loss,
        "worst_param": c.worst_param,
        "mismatched_params": c.mismatched[:20],
        "tolerance": {"rtol": rtol, "atol": atol},
    }


def measured_trace(plan: PlanFile, timelines: dict[int, list]) -> dict[str, Any]:
    """Chrome trace of the last measured step, laid out like the simulator's (`render/trace.py`):
    one process per device, thread 0 "compute", one `ph: "X"` event per action (µs)."""
    events: list[dict[str, Any]] = []
    for d in sorted(timelines):
        events += [
            {"name": "process_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": f"device {d}"}},
            {"name": "process_sort_index", "ph": "M", "pid": d, "tid": 0, "args": {"sort_index": d}},
            {"name": "thread_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": "compute"}},
        ]
        for name, stage, mb, op, t0, t1 in timelines[d]:
            st = plan.stages[stage]
            events.append(
                {
                    "name": name,
                    "cat": _OP_NAMES[op],
                    "ph": "X",
                    "pid": d,
                    "tid": 0,
                    "ts": t0 * 1e6,
                    "dur": max(t1 - t0, 0.0) * 1e6,
                    "args": {"stage": stage, "mb": mb, "op": op, "layers": list(st.layers)},
                }
            )
    end = max((a[5] for tl in timelines.values() for a in tl), default=0.0)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "name": f"measured: {plan.strategy}",
            "measured": True,
            "step_span_s": end,
            "predicted_step_time_s": plan.predicted.step_time_s,
            "num_devices": plan.training.pp,
            "num_stages": len(plan.stages),
            "num_microbatches": plan.training.num_microbatches,
        },
    }
