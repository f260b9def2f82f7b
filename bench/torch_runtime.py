"""One pipeline rank running torch.distributed.pipelining's own schedules and adaptis' executor side by side.

Run (`bench/real.py` writes the config and launches this for you):

    python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 0 \
        -m bench.torch_runtime --config CONFIG.json --out RESULTS/

Data flow: config (model spec file, a list of runs: `{"name", "runtime": "torch" | "torch-csv" |
"ours", "plan", "schedule"?, "csv"?}`, warm-up and measured rounds, `save_grads`, optional
`profile_models`: model spec files to profile in the launch) -> per run,
this rank's part of
- "torch": `PipelineStage`s over the plan's own stages (same layers, same rank: the plan's
  `stages[*].device` is checked against torch's loop / V stage-to-rank mapping) and torch's
  schedule class (`ScheduleGPipe`, `Schedule1F1B`, `ScheduleInterleaved1F1B`,
  `ScheduleZBVZeroBubble`), stepped by torch's runtime;
- "torch-csv": the same `PipelineStage`s under torch's `_PipelineScheduleRuntime`, whose
  per-rank orders come from the plan's exported CSV (`adaptis export --format torch-csv`): any
  plan torch can express, adaptive ones included, run by torch's own runtime;
- "ours": the executor's `RankRuntime` on the plan file (`adaptis run`'s interpreter), with the
  plan's per-stage recomputation.
Then rounds: every run takes one step per round, in config order on even rounds and in reverse
order on odd rounds (A B C C B A ...), so slow drift of the machine's load hits every run
alike (with `profile_models`, one more item of the rotation profiles those models,
`InRunProfile`); rank 0 also records, per round, the share of the machine's CPU time that processes
other than the two ranks used (`bench.real.others_share`), so the parent can drop rounds that
other jobs disturbed. Output: `<out>/rank{r}.json` with per-run step times (rank 0's wall time
from a barrier to a barrier), the per-round loss on the rank that holds the last stage, and
for "ours" the busy time per rank and op letter (summed action spans) and per op letter and
stage (`stage_busy_s`), with `record_actions` in the config every action's (name, start, end) from
the step's start in this rank's program order (`action_spans_s`, per measured round; for
`experiments/actions.py`), the minor page faults of every run's step on this rank (`minor_faults`, from
getrusage: memory touched afresh), the in-launch profiles
(`profiles`, one CostProfile JSON per model, this rank's medians; `profile_rounds`, the same per
measured round, for predictions paired with that round's steps); with `save_grads`, the first
round's gradients of every run as `<out>/grads.{run index}.rank{r}.pt` (names
`{layer index}.{name in layer}` in both runtimes). On failure `<out>/error.rank{r}.json` and
exit 1.

Same math in both runtimes: every layer is `adaptis_plan.executor.layers.build_layer(model,
i, seed)` (weights from (seed, i) alone), the same seeded token batch per round
(`executor.data.synthetic_batch`), and the same loss: torch's last stage outputs the logits of
the head (final norm + LM head) and its `loss_fn` is the head's cross-entropy times
1 / num_microbatches (`scale_grads=False`), which is exactly what our head layer computes and
how our runtime scales it. One difference, on purpose: torch's stage modules call plain
`F.linear` / `F.embedding` instead of the executor's deferrable-weight-gradient functions
(`wgrad.linear`), whose custom backward cannot tell that torch's input-only backward
(`stage_backward_input`, ZBV's I) does not need the weight gradient: with them torch would do
the weight GEMMs twice. The forward values are bitwise the same.

Timed: the pipeline step only (all forwards and backwards with their P2P traffic); gradients
are reset before the first barrier, and no optimizer step is taken (weights stay fixed, so
every round computes the same function on new data). One intra-op thread per rank, gloo.
Imports torch, torch.distributed.pipelining, the adaptis executor and `bench.real`'s /proc
helpers; nothing imports this.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
import traceback
import types
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from adaptis_plan.executor import layers as L
from adaptis_plan.executor.cpu import enter_cpu_rank, local_position, pinned_core
from adaptis_plan.executor.data import synthetic_batch
from adaptis_plan.executor.lowering import lower
from adaptis_plan.executor.profile import profile_model
from adaptis_plan.executor.runtime import RankRuntime
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.planfile.io import plan_layout, plan_programs
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile
from bench.real import combine_profiles, machine_ticks, others_share, process_ticks

#: the name of the in-launch profile's pseudo-run (`InRunProfile`) in the round rotation
IN_RUN_PROFILE = "profile"
#: timed repeats per round of the in-launch profile (after one warm-up): a large-vocabulary head's
#: first pass after other work can take 1.5x its steady time (its logits land on fresh pages), and
#: a pipeline runs it back to back
IN_RUN_REPEATS = 3

#: torch's schedule class and stage-to-rank style for each classic strategy we compare.
TORCH_SCHEDULES = {
    "GPipe": ("ScheduleGPipe", "loop"),
    "1F1B": ("Schedule1F1B", "loop"),
    "Interleaved1F1B": ("ScheduleInterleaved1F1B", "loop"),
    "ZBVZeroBubble": ("ScheduleZBVZeroBubble", "v"),
}


def _plain_linear(self: L.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, self.weight, self.bias)


def _plain_embedding(self: L.EmbeddingLayer, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, self.weight)


def plain_autograd(module: nn.Module) -> nn.Module:
    """Route `module`'s projections and embedding through plain torch ops (see the module docstring)."""
    for sub in module.modules():
        if isinstance(sub, L.Linear):
            sub.forward = types.MethodType(_plain_linear, sub)
        elif isinstance(sub, L.EmbeddingLayer):
            sub.forward = types.MethodType(_plain_embedding, sub)
    return module


class TorchStage(nn.Module):
    """Layers [start, stop) for torch's `PipelineStage`; a head layer stops at its logits."""

    def __init__(self, model: ModelSpec, start: int, stop: int, *, seed: int) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({str(i): build(model, i, seed) for i in range(start, stop)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            if isinstance(layer, L.HeadLayer):
                x = F.linear(layer.norm(x), layer.lm_weight)  # HeadLayer.forward up to the cross-entropy
            else:
                x = layer(x)
        return x


def build(model: ModelSpec, index: int, seed: int) -> nn.Module:
    if L.is_head_chunk(model, index):
        raise ValueError("torch's runtime is run on unsplit heads only (classic plans)")
    return plain_autograd(L.build_layer(model, index, seed=seed))


def head_loss(num_microbatches: int):  # noqa: ANN201
    """`HeadLayer`'s cross-entropy, scaled as our runtime scales each micro-batch's loss."""
    scale = 1.0 / num_microbatches

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1)) * scale

    return loss_fn


class _TorchRuntimeRun:
    """This rank's stages under one of torch's schedule objects (set up by the subclasses)."""

    modules: list[TorchStage]
    schedule: object
    first: bool
    last: bool

    def zero_grad(self) -> None:
        for mod in self.modules:
            for p in mod.parameters():
                p.grad = None

    def named_grads(self) -> dict[str, torch.Tensor | None]:
        """`{layer index}.{name in layer}` -> gradient, the executor's naming (`Stage.named_layer_parameters`)."""
        return {
            name.removeprefix("layers."): (None if p.grad is None else p.grad.detach().clone())
            for mod in self.modules
            for name, p in mod.named_parameters()
        }

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> float | None:
        """One step over [M, B, S] inputs / labels; the summed scaled loss on the last stage's rank."""
        args = (inputs.reshape(-1, inputs.shape[-1]),) if self.first else ()
        kw: dict = {"return_outputs": False}
        losses: list[torch.Tensor] = []
        if self.last:
            kw.update(target=labels.reshape(-1, labels.shape[-1]), losses=losses)
        self.schedule.step(*args, **kw)
        if not self.last:
            return None
        total = losses[0].detach()
        for loss in losses[1:]:  # in micro-batch order, as our runtime sums them
            total = total + loss.detach()
        return float(total)

    def _build_stages(self, plan: PlanFile, model: ModelSpec, seed: int) -> list:
        from torch.distributed.pipelining import PipelineStage

        rank = dist.get_rank()
        num_stages = len(plan.stages)
        self.num_microbatches = plan.training.num_microbatches
        self.first = plan.stages[0].device == rank
        self.last = plan.stages[-1].device == rank
        self.modules = []
        stages = []
        for st in plan.stages:
            if st.device != rank:
                continue
            mod = TorchStage(model, st.layers[0], st.layers[1], seed=seed)
            self.modules.append(mod)
            stages.append(PipelineStage(mod, st.stage, num_stages, torch.device("cpu")))
        return stages


class TorchRun(_TorchRuntimeRun):
    """This rank's stages of one classic plan under torch's own schedule class."""

    def __init__(self, plan: PlanFile, model: ModelSpec, strategy: str, seed: int) -> None:
        from torch.distributed.pipelining import schedules
        from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

        cls_name, style = TORCH_SCHEDULES[strategy]
        mapping = generate_stage_to_rank_mapping(dist.get_world_size(), len(plan.stages), style=style)
        ours = {st.stage: st.device for st in plan.stages}
        if ours != mapping:
            raise RuntimeError(f"{strategy}: plan stage->device {ours} differs from torch's {style} mapping {mapping}")
        stages = self._build_stages(plan, model, seed)
        cls = getattr(schedules, cls_name)
        single = issubclass(cls, schedules.PipelineScheduleSingle)
        self.schedule = cls(
            stages[0] if single else stages,
            self.num_microbatches,
            loss_fn=head_loss(self.num_microbatches),
            scale_grads=False,
        )


class TorchCsvRun(_TorchRuntimeRun):
    """This rank's stages of any plan under torch's `_PipelineScheduleRuntime`, the per-device orders
    loaded from the CSV `adaptis export --format torch-csv` wrote for the plan (torch infers the
    stage -> rank map from it)."""

    def __init__(self, plan: PlanFile, model: ModelSpec, csv_path: str, seed: int) -> None:
        from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

        stages = self._build_stages(plan, model, seed)
        self.schedule = _PipelineScheduleRuntime(
            stages, self.num_microbatches, loss_fn=head_loss(self.num_microbatches), scale_grads=False
        )
        self.schedule._load_csv(csv_path)


class OursRun:
    """This rank's part of a plan under the adaptis executor (`RankRuntime`)."""

    def __init__(self, plan: PlanFile, model: ModelSpec, seed: int, timeout_s: float) -> None:
        if plan.model.head_chunks > 1 and model.num_head_chunks == 1:
            model = split_head(model, plan.model.head_chunks)
        tr = plan.training
        self.rt = RankRuntime(
            rank=dist.get_rank(),
            model=model,
            lowered=lower(plan_layout(plan), plan_programs(plan), tr.num_microbatches),
            micro_batch_size=tr.micro_batch_size,
            seq_len=tr.seq_len,
            seed=seed,
            device=torch.device("cpu"),
            dtype=torch.float32,
            timeout_s=timeout_s,
            p2p_order="ahead",  # what `adaptis run` picks on CPU
            recompute=[st.recompute for st in plan.stages],
        )
        self.busy_s: list[dict[str, float]] = []  # per step: op letter -> summed action spans
        self.stage_busy_s: list[dict[str, float]] = []  # per step: "F3" (op letter, stage) -> summed spans
        self.spans: list[list[tuple[str, float, float]]] = []  # per step: (action, start, end), program order

    def zero_grad(self) -> None:
        self.rt.zero_grad()

    def named_grads(self) -> dict[str, torch.Tensor | None]:
        return {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in self.rt.named_parameters()}

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> float | None:
        res = self.rt.run_step(inputs, labels)
        busy = dict.fromkeys("FIWB", 0.0)
        by_stage: dict[str, float] = {}
        for _name, stage, _mb, op, t0, t1 in res.actions:
            busy[op] += t1 - t0
            by_stage[f"{op}{stage}"] = by_stage.get(f"{op}{stage}", 0.0) + t1 - t0
        self.busy_s.append(busy)
        self.stage_busy_s.append(by_stage)
        self.spans.append([(name, t0, t1) for name, *_, t0, t1 in res.actions])
        return res.loss


class InRunProfile:
    """`adaptis profile` of whole models taken inside the launch, a few repeats per round.

    A pseudo-run in the round rotation: both ranks time every distinct layer of each model at
    once (`IN_RUN_REPEATS` repeats after a warm-up, their median; one profile round, `rounds=1`: the
    launch's rotation already spreads the profile over its rounds), between the plans' steps, so
    the profile sees the same machine, processes, allocator state and moment as the steps it is
    compared with. Rank 1 walks the layers last to first, so
    the two ranks never time the same layer at the same moment, as no two pipeline ranks run
    the same layer. `merged()`: per model, each field's median over the measured rounds (its `repeats`
    and `rounds` say so).
    """

    def __init__(self, specs: list[ModelSpec], seq_len: int, micro_batch_size: int, seed: int) -> None:
        self.specs, self.seq_len, self.micro_batch_size, self.seed = specs, seq_len, micro_batch_size, seed
        self.rounds: list[list[dict]] = []  # per round, per model: the CostProfile as JSON
        self.keep: dict = {}  # the layers, built once and timed again every round

    def zero_grad(self) -> None:
        pass

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> float | None:
        self.rounds.append(
            [
                profile_model(
                    spec, seq_len=self.seq_len, micro_batch_size=self.micro_batch_size,
                    repeats=IN_RUN_REPEATS, rounds=1, warmup=1, seed=self.seed, reverse=dist.get_rank() % 2 == 1,
                    keep=self.keep,
                ).model_dump(mode="json")
                for spec in self.specs
            ]
        )  # fmt: skip
        return None

    def merged(self, first: int) -> list[dict]:
        kept = self.rounds[first:] or self.rounds
        return [
            # each field the median of the rounds' own medians: IN_RUN_REPEATS repeats in each of len(kept) rounds
            {
                **combine_profiles([r[k] for r in kept], statistics.median),
                "repeats": IN_RUN_REPEATS * len(kept),
                "rounds": len(kept),
            }
            for k in range(len(self.specs))
        ]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.torch_runtime", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="JSON: model, runs, warmup, rounds, seed, timeout_s")
    p.add_argument("--out", required=True, help="results folder")
    return p.parse_args(argv)


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def run(cfg: dict, out: Path) -> None:
    rank = dist.get_rank()
    model = ModelSpec.model_validate_json(Path(cfg["model"]).read_text())
    seed, timeout_s = int(cfg.get("seed", 0)), float(cfg.get("timeout_s", 120.0))
    runs: dict[str, TorchRun | OursRun] = {}
    tr = None
    for r in cfg["runs"]:
        plan = PlanFile.model_validate_json(Path(r["plan"]).read_text())
        if plan.model.fingerprint != model.fingerprint():
            raise RuntimeError(f"{r['plan']} was made for model '{plan.model.name}', not '{model.name}'")
        if tr is None:
            tr = plan.training
        elif (plan.training.num_microbatches, plan.training.micro_batch_size, plan.training.seq_len) != (
            tr.num_microbatches,
            tr.micro_batch_size,
            tr.seq_len,
        ):
            raise RuntimeError(f"{r['plan']}: every run of one launch needs the same training shape")
        if r["runtime"] == "torch":
            runs[r["name"]] = TorchRun(plan, model, r["schedule"], seed)
        elif r["runtime"] == "torch-csv":
            runs[r["name"]] = TorchCsvRun(plan, model, r["csv"], seed)
        else:
            runs[r["name"]] = OursRun(plan, model, seed, timeout_s)
    assert tr is not None
    profiled = [ModelSpec.model_validate_json(Path(m).read_text()) for m in cfg.get("profile_models", [])]
    in_run = InRunProfile(profiled, tr.seq_len, tr.micro_batch_size, seed) if profiled else None
    if in_run is not None:
        runs[IN_RUN_PROFILE] = in_run  # type: ignore[assignment]
    names = list(runs)
    warmup, rounds = int(cfg["warmup"]), int(cfg["rounds"])
    times: dict[str, list[float]] = {n: [] for n in names}
    faults: dict[str, list[int]] = {n: [] for n in names}  # minor page faults per step (first touch of memory)
    losses: dict[str, list[float | None]] = {n: [] for n in names}
    pids: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    shares: list[float] = []  # rank 0: other processes' share of the machine per round

    def sample() -> tuple[int, int, int]:
        return (*machine_ticks(), sum(process_ticks(p) for p in pids))

    for rnd in range(warmup + rounds):
        before = sample() if rank == 0 else None
        inputs, labels = synthetic_batch(
            model.vocab_size, tr.num_microbatches, tr.micro_batch_size, tr.seq_len, seed=seed, step=rnd
        )
        for name in names if rnd % 2 == 0 else reversed(names):
            job = runs[name]
            job.zero_grad()
            dist.barrier()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            loss = job.step(inputs, labels)
            dist.barrier()
            times[name].append(time.perf_counter() - t0)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            losses[name].append(loss)
            if rnd == 0 and cfg.get("save_grads"):
                torch.save(job.named_grads(), out / f"grads.{names.index(name)}.rank{rank}.pt")
        if before is not None:
            shares.append(others_share(before, sample()))
    _write_json(
        out / f"rank{rank}.json",
        {
            "rank": rank,
            "warmup": warmup,
            "step_times_s": {n: t[warmup:] for n, t in times.items()},
            "warmup_times_s": {n: t[:warmup] for n, t in times.items()},
            "minor_faults": {n: f[warmup:] for n, f in faults.items()},
            "losses": losses,
            "busy_s": {n: j.busy_s[warmup:] for n, j in runs.items() if isinstance(j, OursRun)},
            "stage_busy_s": {n: j.stage_busy_s[warmup:] for n, j in runs.items() if isinstance(j, OursRun)},
            "action_spans_s": (
                {n: j.spans[warmup:] for n, j in runs.items() if isinstance(j, OursRun)}
                if cfg.get("record_actions")
                else {}
            ),
            "others_share": shares[warmup:],
            "profiles": in_run.merged(warmup) if in_run is not None else [],
            # per measured round, per model: this rank's profile of that round alone (paired with its steps)
            "profile_rounds": in_run.rounds[warmup:] if in_run is not None else [],
            "num_threads": torch.get_num_threads(),
            "cpu_core": pinned_core(),
            "torch_version": torch.__version__,
        },
    )


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg = json.loads(Path(args.config).read_text())
        enter_cpu_rank(*local_position())  # as the executor's ranks: one core each, before gloo starts
        dist.init_process_group("gloo", timeout=timedelta(seconds=float(cfg.get("timeout_s", 120.0))))
        run(cfg, out)
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - the parent reads the failure from this file
        line = f"{type(e).__name__}: {e}".splitlines()[0]
        _write_json(out / f"error.rank{rank}.json", {"rank": rank, "line": line, "traceback": traceback.format_exc()})
        print(traceback.format_exc(), file=sys.stderr, flush=True)
        os._exit(1)


if __name__ == "__main__":
    main()
