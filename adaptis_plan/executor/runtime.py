"""Stage runtime: one rank (= plan device) executes its action list for real.

Data flow: `worker.py` (one process per rank under torchrun) builds a `RankRuntime` from the
plan's layout, the lowered transfers (`lowering.py`) and the model spec; each step it calls
`run_step` with the step's token batch. Imports torch, `layers`, `wgrad`, `lowering`, `tensorparallel`.

Per action, in the rank's plan order:
- `F(s, m)`: take the stage input (token ids for stage 0; else the local handoff from stage
  s-1 when it lives on this rank, else the received activation), forward (every stage that
  holds a head layer or head chunk gets the micro-batch's labels), keep (input, output) for
  the backward, hand the output to stage s+1 (locally or by `isend`). The last stage's output
  is the micro-batch loss times 1 / num_microbatches; only the model's last layer (the head,
  or the last chunk of a split head) makes a loss. The tensor between stages s and s+1 is
  [b, s, h] in the model dtype, or [b, s, h + 2] float32 after a non-final head chunk
  (`layers.boundary_spec`); receive buffers and the gradients sent back have that shape.
- `I(s, m)` / `B(s, m)`: take the output gradient (none for the last stage: the loss itself;
  else the local handoff or the received gradient), run autograd backward to the stage input
  (`I` inside `WeightGradStore.deferring`: weight GEMMs stashed; `B`: everything), hand the
  input gradient to stage s-1. On a stage the plan marks for recomputation, F keeps only
  what `layers.set_recompute` lets it keep and the backward (I or B) reruns that forward
  first; nothing else changes.
- `W(s, m)`: run the stashed weight GEMMs of (s, m).
Gradients accumulate over the micro-batches in `.grad`; the worker then syncs the tied
embedding gradient (`sync_tied_grads`) and takes the optimizer step.

Why the point-to-point traffic cannot deadlock, for any order the dependency simulator accepts
------------------------------------------------------------------------------------------------
`lowering.lower` replays all programs with their dependencies and gets one global sequence G
of all actions that respects every device's order; it exists exactly when the simulator
accepts the plan (otherwise the launcher refuses the plan before starting anything). Transfers
are numbered by the position of their producing action in G. Each rank keeps its transfers in
*lines* in that numbering: one line per peer on gloo (`order="peer"`), one line for all peers
on NCCL (`order="global"`); on gloo, `order="ahead"` (the default on CPU) posts every receive of
the step when the step starts and keeps only the sends in the per-peer lines. `P2P.pump` posts
the head of each line as soon as it can: a
receive at once (non-blocking `irecv` into a fresh buffer), a send once its tensor has been
produced (non-blocking `isend`; the handle is kept and waited at the end of the step). A rank
blocks only when an action needs a received tensor (`P2P.recv` waits on that one `irecv`), and
at the end of the step on its own sends.
1. Posting: when a rank reaches action a that consumes transfer t, t's receive is already
   posted. Every transfer before t in its line is either a receive (posted on reaching the
   head) or a send whose producer precedes t's producer, hence a, in G; that producer is on
   this rank and G keeps each rank's order, so it has run and its send was posted.
2. Progress on gloo: messages match by (source, tag), tags are unique per (stage, mb,
   direction) within a step, and gloo's transport thread moves the data as soon as both sides
   are posted, without help from either main thread. By induction along G every action's
   producers ran earlier in G, their sends are posted (1 applied on the sender), so every wait
   returns.
3. Progress on NCCL: no tags; messages match in issue order per peer pair and run FIFO on
   NCCL's streams (one per pair or one per rank, depending on the torch version). The host
   never blocks on NCCL (a wait only orders the compute stream after the transfer), so every
   rank's host reaches the end of its program and posts every operation it owns. Each rank
   issues all its operations in increasing transfer number, so both halves of a transfer sit
   at the same rank in both lines, and the transfer with the smallest unfinished number is at
   the head of the stream on both ends: its send's data was computed by kernels that wait only
   on transfers with smaller numbers (already done). So some transfer always completes.
   NCCL communicators are created for all peer pairs at start-up in one fixed order
   (`warm_up_pairs`), so their lazy, blocking creation cannot interlock mid-step.
At the end of the step each rank waits on its sends; they complete because every rank runs its
whole program and so posts every receive. Receives posted early hold one activation-sized
buffer each; their number is bounded by the run of consecutive receives in a line, which the
schedule's own in-flight window bounds. Under "ahead" every receive of the step holds its buffer
from the step's start (one boundary tensor per incoming transfer), and point 2 holds unchanged
(gloo matches by tag, whatever the posting order).

Why "ahead" on gloo: posting a receive takes the peer connection's lock and writes a notice on
its socket. Posted mid-step, while the peer's messages arrive, that thread is often preempted by
gloo's own I/O thread, woken on the same core by the incoming data; the I/O thread then finds
the lock taken and polls again, for the rest of its time slice, at a few program points per
step (figures in experiments/findings-readme.md). Posted at the step's start, before any data
flows, the receives cost what their calls cost.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, cast

import torch
import torch.distributed as dist
from torch import nn

from adaptis_plan.core import Action
from adaptis_plan.executor.layers import boundary_spec, build_layer, set_recompute
from adaptis_plan.executor.lowering import P2P_ORDERS, Lowered, Transfer
from adaptis_plan.executor.tensorparallel import shard_layer
from adaptis_plan.executor.wgrad import WeightGradStore
from adaptis_plan.spec.model import ModelSpec


class CommError(RuntimeError):
    """A point-to-point operation failed (usually: a peer rank died)."""


class ParamsHook(Protocol):
    """`RankRuntime.params_hook`: told before every forward and backward of a stage."""

    def acquire(self, stage: int) -> None: ...


class Stage(nn.Module):
    """Layers [start, stop) of the model; parameters are named `{layer index}.{name in layer}`.

    `recompute` ("none", "selective", "full"): the plan's choice for this stage, applied to each of its
    decoder blocks (`layers.set_recompute`). `tp` (rank, size, group) with size > 1: each layer is built
    whole and cut to this tp rank's slice (`tensorparallel.shard_layer`); `tp_layout` records each
    parameter's layout entry (empty without tp)."""

    def __init__(
        self,
        model: ModelSpec,
        stage: int,
        start: int,
        stop: int,
        *,
        seed: int,
        recompute: str = "none",
        tp: tuple[int, int, dist.ProcessGroup | None] | None = None,
    ) -> None:
        super().__init__()
        self.stage = stage
        self.first = start == 0
        self.last = stop == model.num_layers
        self.recompute = recompute
        self.tp_layout: dict[str, int | str | None] = {}
        built = {}
        for i in range(start, stop):
            layer = build_layer(model, i, seed=seed)
            if tp is not None and tp[1] > 1:
                self.tp_layout.update({f"{i}.{n}": v for n, v in shard_layer(layer, *tp).items()})
            built[str(i)] = set_recompute(layer, recompute)
        self.layers = nn.ModuleDict(built)
        self.has_head = any(model.layers[i].kind == "head" for i in range(start, stop))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers.values():
            x = layer(x, labels) if getattr(layer, "kind", "") == "head" else layer(x)
        return x

    def named_layer_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(f"{i}.{n}", p) for i, layer in self.layers.items() for n, p in layer.named_parameters()]


@dataclass(frozen=True)
class Fault:
    """Test hook (env ADAPTIS_EXECUTOR_FAULT=kind:rank[:step[:job]], rank: the global rank): `exit` (os._exit(1)),
    `raise` or `hang` after the first action of `step`, or `skipw` (drop the first W's gradient: a silently
    wrong run); in every job of the launch, or in job number `job` alone (0-based, in launch order). Several
    faults, comma-separated, each in its own job: the first that applies to a job is its fault."""

    kind: str
    rank: int
    step: int = 0
    job: int | None = None

    @classmethod
    def from_env(cls, job: int = 0) -> Fault | None:
        """The fault set for this launch, if one applies to its job number `job`."""
        for text in os.environ.get("ADAPTIS_EXECUTOR_FAULT", "").split(","):
            if not text:
                continue
            parts = text.split(":")
            fault = cls(
                parts[0],
                int(parts[1]),
                int(parts[2]) if len(parts) > 2 else 0,
                int(parts[3]) if len(parts) > 3 else None,
            )
            if fault.job is None or fault.job == job:
                return fault
        return None


class P2P:
    """Posts this rank's sends and receives line by line in the global transfer order (module docstring).

    `boundaries[s]`: (shape, dtype) of the tensor between stages s and s+1, the activation
    ("act", s, m) and the gradient ("grad", s + 1, m) alike.
    `order`: "peer" (one line per peer: receives are posted earliest; gloo), "ahead" (as "peer",
    but every receive of the step is posted when it starts; gloo, the default on CPU) or
    "global" (one line for all peers: safe whatever NCCL's stream layout; the default on GPUs).
    `group`: the pipeline's process group (one dp index of the mesh; None: the default group, dp = 1);
    `rank` and every transfer's `src` / `dst` are ranks in it (= plan devices)."""

    def __init__(
        self,
        lowered: Lowered,
        rank: int,
        boundaries: dict[int, tuple[tuple[int, ...], torch.dtype]],
        device: torch.device,
        timeout_s: float,
        order: str = "peer",
        group: dist.ProcessGroup | None = None,
    ) -> None:
        if order not in P2P_ORDERS:
            raise ValueError(f"P2P order {order!r}: use one of {', '.join(P2P_ORDERS)}")
        self.rank = rank
        self.order = order
        self.group = group
        self._lowered = lowered
        self._boundaries, self._device = boundaries, device
        self._timeout = timedelta(seconds=timeout_s)
        self._queues: dict[int, deque[Transfer]] = {}
        self._recvs: dict[tuple[str, int, int], tuple[dist.Work, torch.Tensor, Transfer]] = {}
        self._ready: dict[tuple[str, int, int], torch.Tensor] = {}
        self._sends: list[tuple[dist.Work, torch.Tensor, Transfer]] = []

    def start_step(self) -> None:
        if self.order == "global":
            self._queues = {-1: deque(self._lowered.rank_queue(self.rank))}
        else:
            self._queues = {peer: deque(ts) for peer, ts in self._lowered.peer_queues(self.rank).items()}
            if self.order == "ahead":
                for peer, line in self._queues.items():
                    for t in line:
                        if t.dst == self.rank:
                            self._post_recv(t)
                    self._queues[peer] = deque(t for t in line if t.dst != self.rank)
        self.pump()

    def _post_recv(self, t: Transfer) -> None:
        shape, dtype = self._boundaries[t.stage if t.kind == "act" else t.stage - 1]
        buf = torch.empty(shape, dtype=dtype, device=self._device)
        work = cast(dist.Work, dist.irecv(buf, group=self.group, group_src=t.src, tag=t.tag))  # a member: never None
        self._recvs[t.key] = (work, buf, t)

    def pump(self) -> None:
        sent = False
        for q in self._queues.values():
            while q:
                t = q[0]
                if t.dst == self.rank:
                    self._post_recv(t)
                elif t.key in self._ready:
                    tensor = self._ready.pop(t.key)
                    work = cast(dist.Work, dist.isend(tensor, group=self.group, group_dst=t.dst, tag=t.tag))
                    self._sends.append((work, tensor, t))
                    sent = True
                else:
                    break
                q.popleft()
        if sent and self._device.type == "cpu":
            # give the core to gloo's I/O thread now: with every core computing (a rank per core), a
            # posted send otherwise waits until this rank next blocks, and its receiver with it
            os.sched_yield()

    def send(self, key: tuple[str, int, int], tensor: torch.Tensor) -> None:
        self._ready[key] = tensor.contiguous()
        self.pump()

    def recv(self, key: tuple[str, int, int]) -> torch.Tensor:
        if key not in self._recvs:
            raise RuntimeError(f"internal: receive {key} on rank {self.rank} was never posted")
        work, buf, t = self._recvs.pop(key)
        try:
            work.wait(self._timeout)
        except Exception as e:
            what = "activation" if t.kind == "act" else "gradient"
            raise CommError(f"receiving the {what} of stage {t.stage} mb {t.mb} from rank {t.src}: {e}") from e
        return buf

    def finish(self) -> None:
        for work, _, t in self._sends:
            try:
                work.wait(self._timeout)
            except Exception as e:
                raise CommError(f"sending {t.kind} of stage {t.stage} mb {t.mb} to rank {t.dst}: {e}") from e
        self._sends.clear()
        left = [k for q in self._queues.values() for k in q] + list(self._recvs)
        if left:
            raise RuntimeError(f"internal: rank {self.rank} ended the step with transfers left: {left[:4]}")


def warm_up_pairs(world_size: int, rank: int, device: torch.device, group: dist.ProcessGroup | None = None) -> None:
    """Create every pair's p2p channel in one global order (NCCL creates them lazily and blockingly).

    `world_size`, `rank`: of `group` (None: the default group)."""
    for i in range(world_size):
        for j in range(i + 1, world_size):
            if rank not in (i, j):
                continue
            t = torch.zeros(1, device=device)
            if rank == i:
                dist.send(t, group=group, group_dst=j)
            else:
                dist.recv(t, group=group, group_src=i)


class _Clock:
    """Action timestamps: perf_counter on CPU, CUDA events (resolved at the end of the step) on GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> object:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def seconds(self, origin: object, mark: object) -> float:
        if self.cuda:
            return origin.elapsed_time(mark) / 1000.0  # type: ignore[attr-defined]
        return float(mark) - float(origin)  # type: ignore[arg-type]


@dataclass
class StepResult:
    loss: float | None  # sum of the scaled micro-batch losses (= mean loss), on the rank holding the last stage
    actions: list[tuple[str, int, int, str, float, float]]  # (name, stage, mb, op, start_s, end_s) from step start


class RankRuntime:
    """One rank's stages and its action interpreter."""

    def __init__(
        self,
        *,
        rank: int,
        model: ModelSpec,
        lowered: Lowered,
        micro_batch_size: int,
        seq_len: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
        timeout_s: float,
        p2p_order: str = "peer",
        recompute: Sequence[str] | None = None,
        group: dist.ProcessGroup | None = None,
        global_rank: int | None = None,
        tp: tuple[int, int, dist.ProcessGroup | None] | None = None,
    ) -> None:
        """`rank`: this rank's plan device (its rank in the pipeline `group`; None: the default group,
        dp = 1); `global_rank`: its rank in the world (what `Fault` names; default `rank`).
        `recompute[s]`: stage s's recomputation (the plan's `stages[s].recompute`); None = none anywhere.
        `tp`: (tp rank, tp size, tp group) when the stages are tensor-parallel (`Stage`), else None.
        `params_hook` (set by the worker, optional): `acquire(stage)` before every forward and
        backward of a stage (ZeRO-3 gathers its parameters there, `dataparallel`)."""
        self.rank = rank
        self.group = group
        self.global_rank = rank if global_rank is None else global_rank
        self.params_hook: ParamsHook | None = None
        self.model = model
        self.lowered = lowered
        self.layout = lowered.layout
        self.program: list[Action] = lowered.programs[rank]
        self.num_microbatches = lowered.num_microbatches
        self.device, self.dtype = device, dtype
        self.stages: dict[int, Stage] = {}
        modes = list(recompute) if recompute is not None else ["none"] * self.layout.num_stages
        if len(modes) != self.layout.num_stages:
            raise ValueError(f"recompute lists {len(modes)} stages, the layout has {self.layout.num_stages}")
        for s in self.layout.stages_of(rank):
            b = self.layout.bounds
            stage = Stage(model, s, b[s], b[s + 1], seed=seed, recompute=modes[s], tp=tp)
            self.stages[s] = stage.to(device=device, dtype=dtype)
        self.store = WeightGradStore()
        b = self.layout.bounds
        boundaries = {
            s: boundary_spec(model, b[s + 1] - 1, micro_batch_size, seq_len, dtype)
            for s in range(self.layout.num_stages - 1)
        }
        self.comm = P2P(lowered, rank, boundaries, device, timeout_s, order=p2p_order, group=group)
        self._timeout = timedelta(seconds=timeout_s)
        self._clock = _Clock(device)

    def parameters(self) -> list[nn.Parameter]:
        return [p for st in self.stages.values() for p in st.parameters()]

    def named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [kv for st in self.stages.values() for kv in st.named_layer_parameters()]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def run_step(
        self, inputs: torch.Tensor, labels: torch.Tensor, *, fault: Fault | None = None, step: int = 0
    ) -> StepResult:
        """Run this rank's program once over all micro-batches (inputs/labels: [M, B, S], on device)."""
        dev = self.layout.stage_device
        last = self.layout.num_stages - 1
        scale = 1.0 / self.num_microbatches
        local: dict[tuple[str, int, int], torch.Tensor] = {}
        saved: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        loss_sum: torch.Tensor | None = None
        marks: list[tuple[Action, object, object]] = []
        skip_w = fault is not None and fault.kind == "skipw" and fault.rank == self.global_rank
        hook = self.params_hook
        origin = self._clock.mark()
        self.comm.start_step()
        for index, a in enumerate(self.program):
            s, m = a.stage, a.mb
            stage = self.stages[s]
            if a.op == "F":
                if stage.first:
                    x = inputs[m]
                else:
                    key = ("act", s - 1, m)
                    x = local.pop(key) if dev[s - 1] == self.rank else self.comm.recv(key)
                    x.requires_grad_()
                t0 = self._clock.mark()
                if hook is not None:
                    hook.acquire(s)
                out = stage(x, labels[m] if stage.has_head else None)
                if s == last:
                    out = out * scale
                    loss_sum = out.detach() if loss_sum is None else loss_sum + out.detach()
                else:
                    y = out.detach()
                    if dev[s + 1] == self.rank:
                        local[("act", s, m)] = y
                    else:
                        self.comm.send(("act", s, m), y)
                saved[(s, m)] = (x, out)
            elif a.op in ("I", "B"):
                x, out = saved.pop((s, m))
                grad = None
                if s != last:
                    key = ("grad", s + 1, m)
                    grad = local.pop(key) if dev[s + 1] == self.rank else self.comm.recv(key)
                t0 = self._clock.mark()
                if hook is not None:
                    hook.acquire(s)
                if a.op == "I":
                    with self.store.deferring((s, m)):
                        torch.autograd.backward(out, grad)
                else:
                    torch.autograd.backward(out, grad)
                del out
                if not stage.first:
                    g = x.grad if x.grad is not None else torch.zeros_like(x)
                    x.grad = None
                    if dev[s - 1] == self.rank:
                        local[("grad", s, m)] = g
                    else:
                        self.comm.send(("grad", s, m), g)
            else:
                t0 = self._clock.mark()
                if skip_w:
                    skip_w = False
                    self.store.discard((s, m))
                else:
                    self.store.run((s, m))
            marks.append((a, t0, self._clock.mark()))
            if fault is not None and fault.rank == self.global_rank and fault.step == step and index == 0:
                if fault.kind == "exit":
                    os._exit(1)
                if fault.kind == "raise":
                    raise RuntimeError(f"injected failure on rank {self.rank} at step {step} after {a}")
                if fault.kind == "hang":
                    time.sleep(3600)
        self.comm.finish()
        if saved or local or self.store.keys():
            raise RuntimeError(
                f"internal: rank {self.rank} ended the step with state left: {list(saved) + list(local)}"
            )
        if self._clock.cuda:
            torch.cuda.synchronize(self.device)
        actions = [
            (str(a), a.stage, a.mb, a.op, self._clock.seconds(origin, t0), self._clock.seconds(origin, t1))
            for a, t0, t1 in marks
        ]
        return StepResult(loss=None if loss_sum is None else float(loss_sum), actions=actions)

    def sync_tied_grads(self) -> None:
        """Give the embedding and the head's copy the sum of both gradients (see `layers.py`)."""
        if not self.model.tie_word_embeddings:
            return
        last_stage = self.layout.num_stages - 1
        e_rank, h_rank = self.layout.stage_device[0], self.layout.stage_device[last_stage]
        if self.rank not in (e_rank, h_rank):
            return
        mine: list[nn.Parameter] = []
        if self.rank == e_rank:
            mine.append(cast(nn.Parameter, self.stages[0].layers["0"].weight))
        if self.rank == h_rank:
            mine.append(cast(nn.Parameter, self.stages[last_stage].layers[str(self.model.num_layers - 1)].lm_weight))
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in mine]
        if e_rank == h_rank:
            total = grads[0] + grads[1]
        else:
            peer = h_rank if self.rank == e_rank else e_rank
            other = torch.empty_like(grads[0])
            tag = 2 * self.layout.num_stages * self.num_microbatches + 1
            # Lower rank sends first, higher rank receives first: the same order on both ends (NCCL).
            mine_first = grads[0].contiguous()
            ops = [
                lambda: dist.isend(mine_first, group=self.group, group_dst=peer, tag=tag),
                lambda: dist.irecv(other, group=self.group, group_src=peer, tag=tag),
            ]
            if self.rank > peer:
                ops.reverse()
            for post in ops:
                work = cast(dist.Work, post())  # a member of the group: never None
                try:
                    work.wait(self._timeout)
                except Exception as e:
                    raise CommError(f"exchanging the tied embedding gradient with rank {peer}: {e}") from e
            total = grads[0] + other
        for p in mine:
            p.grad = total.clone()
