"""One rank under torchrun (a pipeline rank of one data-parallel replica, one tp slice): run the plan for real.

Run (normally `launch.run_plan` / `adaptis run` does this for you, and checks that the plan
and the model belong together first: the worker does not):

    python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 0 \
        -m adaptis_plan.executor.worker --plan plan.json --model model.json --out results/

Data flow: plan + model spec (JSON files) -> the process groups of world = pp x dp x tp
(`mesh_groups`; rank layout: `spec.ranks.RankLayout`) ->
`lowering.lower` -> `RankRuntime` (with the plan's per-stage recomputation and, with tp > 1, this
tp rank's slice of every layer; point-to-point inside this rank's pp group, the ranks of the same
(dp, tp) index), `TensorParallel` (partial gradients summed over tp; with --verify every tensor
gathered over tp) and `DataParallel` (dp-averaged gradients, ZeRO, the optimizer; with training.ep > 1 the MoE layers'
experts sharded over ep of the dp ranks and `expertparallel.ExpertDataParallel` instead, which adds
the experts' all-to-all seconds as `comm_s` "ep") -> per-step
timings, the timeline of
the last step, and with `--verify` the first step's loss, gradients and updated parameters,
written under `--out` (one file per rank; the launcher merges them). Data: each step draws
the global batch (`data.synthetic_batch` with dp x micro_batch_size sequences per
micro-batch); replica r takes sequences [r * micro_batch_size, (r + 1) * micro_batch_size) of
every micro-batch (every tp rank of the replica the same ones). `--jobs FILE`
runs several (plan, model) pairs one after another in the same process group (what the
launcher uses to measure several plans side by side). Imports torch and the executor.

Output per job and rank, in `<out>/<job name>/`: `rank{r}.json` (step times, losses, action
timeline and projection GEMM FLOPs of the last step: forward, recomputed forwards included,
input-gradient, weight-gradient; `comm_s`: per step, the seconds in dp and tp collectives and in
the optimizer step), `grads.rank{r}.pt` (with --verify, `dumps.save_tensors`: {param name: grad or None}
and the loss, after the first
step's backward, tied-gradient sync, tp sum of partial gradients and dp average, before the
optimizer step; ZeRO 2/3 gather the full gradients for it, tp-sharded ones are gathered over tp,
replicated ones are this rank's own copy) and `params.rank{r}.pt` (with --verify: {param name: parameter} after
the first optimizer step). On failure
`<out>/error.rank{r}.json` (the last error line, the traceback, and whether it was a communication
error, i.e. probably a consequence of another rank's failure) and exit code 1. Before anything
else the worker starts its lifeline (`processes.start_lifeline`): the heartbeat file
`<out>/alive.rank{r}` the launcher watches, and an exit within a second of the launcher's or
torchrun's death. Logs go to stderr only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from adaptis_plan.executor.cpu import enter_cpu_rank, local_position, pinned_core
from adaptis_plan.executor.data import synthetic_batch
from adaptis_plan.executor.dataparallel import DataParallel
from adaptis_plan.executor.dumps import save_tensors
from adaptis_plan.executor.lowering import P2P_ORDERS, lower
from adaptis_plan.executor.processes import start_lifeline
from adaptis_plan.executor.runtime import CommError, Fault, RankRuntime, warm_up_pairs
from adaptis_plan.executor.tensorparallel import TensorParallel
from adaptis_plan.executor.tpcomm import TP_COMM, all_reduce_
from adaptis_plan.executor.wgrad import FLOPS
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from adaptis_plan.spec.ranks import RankLayout

if TYPE_CHECKING:
    from adaptis_plan.executor.expertparallel import ExpertDataParallel
    from adaptis_plan.spec.training import TrainingConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m adaptis_plan.executor.worker", description=__doc__.splitlines()[0])
    p.add_argument("--plan", help="plan JSON file")
    p.add_argument("--model", help="model spec JSON file (ModelSpec)")
    p.add_argument("--jobs", help="JSON list of {name, plan, model}; instead of --plan/--model")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--steps", type=int, default=3, help="measured steps after warm-up")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps (not in the median)")
    p.add_argument("--verify", action="store_true", help="dump the first step's loss and gradients")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="adamw")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--timeout-s", type=float, default=60.0, help="longest wait on any peer")
    p.add_argument(
        "--p2p-order",
        choices=["auto", *P2P_ORDERS],
        default="auto",
        help="post transfers per peer (gloo; 'ahead': every receive at the step's start) or in one line per"
        " rank (NCCL); auto picks 'ahead' on CPU, 'global' on CUDA",
    )
    args = p.parse_args(argv)
    if not args.jobs and not (args.plan and args.model):
        p.error("give --plan and --model, or --jobs")
    return args


def _log(msg: str) -> None:
    print(f"[adaptis worker rank {os.environ.get('RANK', '?')}] {msg}", file=sys.stderr, flush=True)


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


@dataclass(frozen=True)
class MeshPlace:
    """This process's place in the rank layout (`spec.ranks`): its rank in each dimension and each
    dimension's process group (None where the group has one rank, or for pp when it is the whole
    world: the default group). `dp_group` is the dense gradients' dp x cp group."""

    pp_rank: int
    dp_rank: int
    tp_rank: int
    ep_rank: int = 0
    pp_group: dist.ProcessGroup | None = None
    dp_group: dist.ProcessGroup | None = None
    tp_group: dist.ProcessGroup | None = None
    ep_group: dist.ProcessGroup | None = None
    edp_group: dist.ProcessGroup | None = None


# the process groups the executor creates, in creation order: `spec.ranks` dimensions
GROUP_DIMS = ("tp", "cp", "dp_cp", "pp", "ep", "edp")


def group_ranks(layout: RankLayout) -> dict[str, list[list[int]]]:
    """The global ranks of every process group `mesh_groups` creates, by dimension (`GROUP_DIMS`):
    every group of each dimension whose groups have more than one rank, but pp when it is the world."""
    return {
        dim: layout.groups(dim)
        for dim in GROUP_DIMS
        if layout.size(dim) > 1 and not (dim == "pp" and layout.size(dim) == layout.world)
    }


def mesh_groups(layout: RankLayout) -> MeshPlace:
    """This process's place in `layout`, creating the process groups of `group_ranks` (every rank
    calls this with the same layout: every rank creates every group, in the same order)."""
    rank = dist.get_rank()
    mine: dict[str, dist.ProcessGroup | None] = {}
    for dim, ranks in group_ranks(layout).items():
        mine[dim], _ = dist.new_subgroups_by_enumeration(ranks)
    at = layout.coordinate(rank)
    return MeshPlace(
        pp_rank=at["pp"],
        dp_rank=at["dp"],
        tp_rank=at["tp"],
        ep_rank=at["ep"],
        pp_group=mine.get("pp"),
        dp_group=mine.get("dp_cp"),
        tp_group=mine.get("tp"),
        ep_group=mine.get("ep"),
        edp_group=mine.get("edp"),
    )


def _check_launch(tr: TrainingConfig, world: int) -> None:
    """What depends on the launch itself: the degrees this executor runs, and torchrun's process count."""
    if tr.cp != 1 or tr.dp % tr.ep or (tr.ep > 1 and tr.tp > 1):
        raise RuntimeError(
            f"the plan has tp = {tr.tp}, cp = {tr.cp}, ep = {tr.ep}: this executor runs pp x dp x tp, or pp x dp"
            " with ep dividing dp"
        )
    if tr.pp * tr.dp * tr.tp != world:
        raise RuntimeError(
            f"the plan has pp x dp x tp = {tr.pp} x {tr.dp} x {tr.tp} but torchrun started {world} processes"
        )


def _parallel(
    rt: RankRuntime, tr: TrainingConfig, place: MeshPlace, args: argparse.Namespace
) -> tuple[TensorParallel | None, DataParallel | ExpertDataParallel]:
    """The rank's tensor- and data-parallel dimensions over its stages (experts sharded with ep > 1);
    the data-parallel one hooked into the runtime's parameters."""
    tpx = (
        TensorParallel(
            rt.named_parameters(), {k: v for st in rt.stages.values() for k, v in st.tp_layout.items()}, place.tp_group
        )
        if place.tp_group is not None
        else None
    )
    dpx: DataParallel | ExpertDataParallel
    if tr.ep > 1:  # experts sharded over ep of the dp ranks (`expertparallel`)
        from adaptis_plan.executor.expertparallel import ExpertParallel

        epx = ExpertParallel(
            ep=tr.ep, ep_rank=place.ep_rank, group=place.ep_group, edp_group=place.edp_group, dp_group=place.dp_group
        )
        epx.shard(rt.stages)
        dpx = epx.data_parallel(rt.stages, zero=tr.zero, optimizer=args.optimizer, lr=args.lr)
    else:
        dpx = DataParallel(rt.stages, group=place.dp_group, zero=tr.zero, optimizer=args.optimizer, lr=args.lr)
    rt.params_hook = dpx
    return tpx, dpx


def run_job(
    args: argparse.Namespace,
    plan_path: str,
    model_path: str,
    out: Path,
    device: torch.device,
    index: int = 0,
    p2p_order: str | None = None,
    steps: int | None = None,
    dtype: str | None = None,
) -> None:
    """One plan of the launch: `index`, its number in launch order (what a `Fault` may name); `p2p_order`,
    its own order of sends and receives (None: `--p2p-order`); `steps`, `dtype`: its own measured steps and
    compute dtype (None: `--steps`, `--dtype`)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # the launcher checked this pair (fingerprint, head chunks, layer count) and lowered the plan
    # before it started anything; here only what depends on the launch itself is checked
    plan = PlanFile.model_validate_json(Path(plan_path).read_text())
    model = ModelSpec.model_validate_json(Path(model_path).read_text())
    tr = plan.training
    _check_launch(tr, world)
    place = mesh_groups(RankLayout.of(tr))
    pp_group, pp_rank, dp_rank = place.pp_group, place.pp_rank, place.dp_rank
    if device.type == "cuda" and pp_group is not None:
        warm_up_pairs(tr.pp, pp_rank, device, pp_group)
    if place.tp_group is not None:  # NCCL creates the tp communicator lazily: here, not mid-step
        all_reduce_(torch.zeros(1, device=device), place.tp_group)
    lowered = lower(plan_layout(plan), plan_programs(plan), tr.num_microbatches)
    torch_dtype = DTYPES[args.dtype if dtype is None else dtype]
    order = p2p_order or args.p2p_order
    order = order if order != "auto" else ("global" if device.type == "cuda" else "ahead")
    rt = RankRuntime(
        rank=pp_rank,
        group=pp_group,
        global_rank=rank,
        model=model,
        lowered=lowered,
        micro_batch_size=tr.micro_batch_size,
        seq_len=tr.seq_len,
        seed=args.seed,
        device=device,
        dtype=torch_dtype,
        timeout_s=args.timeout_s,
        p2p_order=order,
        recompute=[st.recompute for st in plan.stages],
        tp=(place.tp_rank, tr.tp, place.tp_group) if place.tp_group is not None else None,
    )
    tpx, dpx = _parallel(rt, tr, place, args)
    fault = Fault.from_env(index)
    has_last = plan.stages[-1].device == pp_rank
    mbs = tr.micro_batch_size
    step_times: list[float] = []
    comm: list[dict[str, float]] = []
    losses: list[float] = []
    timeline: list = []
    for step in range(args.warmup + (args.steps if steps is None else steps)):
        inputs, labels = synthetic_batch(
            model.vocab_size, tr.num_microbatches, tr.dp * mbs, tr.seq_len, seed=args.seed, step=step
        )  # the global batch; this replica's slice of every micro-batch:
        inputs = inputs[:, dp_rank * mbs : (dp_rank + 1) * mbs].contiguous().to(device)
        labels = labels[:, dp_rank * mbs : (dp_rank + 1) * mbs].contiguous().to(device)
        rt.zero_grad()
        dpx.zero_grad()
        dpx.start_step()
        dist.barrier()
        t0 = time.perf_counter()
        FLOPS.reset()
        TP_COMM.reset()
        res = rt.run_step(inputs, labels, fault=fault, step=step)
        flops = {"forward": FLOPS.forward, "input_grad": FLOPS.input_grad, "weight_grad": FLOPS.weight_grad}
        rt.sync_tied_grads()
        if tpx is not None:
            tpx.sync_grads()  # the partial gradients of replicated parameters, before the dp average
        tp_comm = {"tp": TP_COMM.seconds, "tp_bytes": TP_COMM.bytes}
        dpx.sync_grads()  # after the rank's last backward / W of the step
        if args.verify and step == 0:
            grads = dpx.full_grads() if tpx is None else tpx.full(dpx.full_grads())
            save_tensors(out / f"grads.rank{rank}.pt", grads, loss=res.loss)
        t_opt = time.perf_counter()
        dpx.step()
        opt_s = time.perf_counter() - t_opt
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        step_times.append(time.perf_counter() - t0)
        comm.append({**dpx.comm_s, **tp_comm, "optimizer_step": opt_s})
        if args.verify and step == 0:
            params = dpx.full_params() if tpx is None else tpx.full(dpx.full_params())
            save_tensors(out / f"params.rank{rank}.pt", params)
        if has_last and res.loss is not None:
            losses.append(res.loss)
        timeline = res.actions
    measured = step_times[args.warmup :]
    _write_json(
        out / f"rank{rank}.json",
        {
            "rank": rank,
            "pp_rank": pp_rank,
            "dp_rank": dp_rank,
            "tp_rank": place.tp_rank,
            "step_times_s": measured,
            # per measured step, seconds this rank spent in dp collectives (`DataParallel.start_step`),
            # in tp collectives ("tp", with "tp_bytes" all-reduced; `tpcomm.TP_COMM`) and in the
            # optimizer step (ZeRO-1's broadcasts of updated parameters inside)
            "comm_s": comm[args.warmup :],
            "held_elements": dpx.held_elements(),  # after the last step (`DataParallel.held_elements`)
            "warmup_times_s": step_times[: args.warmup],
            "median_step_time_s": statistics.median(measured) if measured else None,
            "losses": losses,
            "timeline": [list(a) for a in timeline],
            "gemm_flops": flops,
            "cpu_core": pinned_core(),
            "p2p_order": order,
        },
    )


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    out = Path(args.out)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    jobs = (
        json.loads(Path(args.jobs).read_text())
        if args.jobs
        else [{"name": ".", "plan": args.plan, "model": args.model}]
    )
    job_out = out
    try:
        start_lifeline(out, rank)
        timeout = timedelta(seconds=args.timeout_s)
        if args.device == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            dist.init_process_group("nccl", timeout=timeout, device_id=device)
            warm_up_pairs(dist.get_world_size(), rank, device)
        else:
            device = torch.device("cpu")
            enter_cpu_rank(*local_position())  # pinned one rank per core, before gloo starts its threads
            dist.init_process_group("gloo", timeout=timeout)
        for index, job in enumerate(jobs):
            job_out = out / job["name"]
            job_out.mkdir(parents=True, exist_ok=True)
            run_job(
                args, job["plan"], job["model"], job_out, device, index,
                p2p_order=job.get("p2p_order"), steps=job.get("steps"), dtype=job.get("dtype"),
            )  # fmt: skip
            dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - every failure must reach the launcher as a file
        tb = traceback.format_exc()
        line = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "rank": rank,
            "time": time.time(),
            "line": line,
            "comm": _is_comm(e),
            "job": str(job_out),
            "traceback": tb,
        }
        _write_json(out / f"error.rank{rank}.json", record)
        _log(tb)
        sys.stderr.flush()
        os._exit(1)


def _is_comm(e: BaseException) -> bool:
    if isinstance(e, CommError):
        return True
    text = str(e).lower()
    signs = ("connection closed by peer", "connection reset", "timed out", "broken pipe")
    return isinstance(e, dist.DistBackendError) or any(s in text for s in signs)


if __name__ == "__main__":
    main()
