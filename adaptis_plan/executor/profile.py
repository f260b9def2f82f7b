"""Measure per-layer F / I / W / B times and activation memory on a real device (`adaptis profile`).

Use from Python (the CLI's `adaptis profile --model M -o PROFILE.json` calls this):

    from adaptis_plan.executor.profile import profile_model
    profile = profile_model(model_spec, seq_len=256, micro_batch_size=1)

Data flow: `ModelSpec` -> one torch layer per *distinct* layer spec (identical specs are
measured once; `layers` lists all their indices) -> `CostProfile` (spec/cost_profile.py), which
`plan --costs` and `simulate --costs` read instead of the analytic numbers. `profile_recompute`
measures the same layers under selective and full recomputation (`layers.set_recompute`).
Imports torch, the executor's layers and `wgrad`, and the profile spec; never a plan, a
builder or the simulator. Measured elsewhere: the gloo link (`executor.link`), what a profile
will ask of the machine before it starts (`executor.profile_estimate`), and the runtime's time
per action (the `adaptis profile` use case, which builds the probe plan and runs it through
`launch.run_plan`).

Rounds (`rounds`, default `ROUNDS`): each round times every distinct layer (and head chunk) in
turn, its share of the `repeats` (`spread_repeats`), the layers kept built from one round to the
next; each field is the median of a layer's repeats pooled over all rounds (memory is measured
once, when the first round reaches the layer). A slowdown of the host for a second or two then
moves a few repeats of every layer, not one layer's whole sample; a host slower for a whole
profile moves all of it, which rounds do not undo.

Steady state: per distinct layer, round and repeat (each of the three passes below after
`warmup` untimed repeats, in every round), `IN_FLIGHT` earlier micro-batches' graphs are alive
at every timing, and each backward is that of the oldest of them, as in a pipeline stage: F
writes its activations into memory the others do not leave free and hot, and I / B read
activations written `IN_FLIGHT` forwards before:
- F: forward of one micro-batch ([micro_batch_size, seq_len] tokens), building the graph;
- I: backward to the layer input with weight GEMMs deferred (`WeightGradStore.deferring`);
- W, twice, as a schedule that splits the backward runs it: `w_s`, the deferred weight GEMMs of
  the I `W_DEFERRED` repeats before, right after this repeat's I (a W placed after other actions
  reads a stash no longer in cache); `w_hot_s`, in a pass of its own, the W right after its own
  I, as a schedule that places it there runs it. The simulator charges each W by where it sits;
- B (a pass of its own): a new forward (untimed), then the fused full backward of the oldest; the
  simulator charges it to a fused B (`CostTable.b_fused_s`).
A timed repeat during which the process took more than `FAULT_PAGES` minor page faults is taken
again (at most `FAULT_RETRIES` times per pass): the allocator touched fresh memory, which a stage
in its steady state does not.
How much the op times vary within a round is kept too (`CostProfile.time_spread`, `_Spread`): the
standard deviation of log seconds about each (layer, op, round)'s own mean, pooled over all of them,
so the host's drift from round to round does not count, only the repeat-to-repeat variation that
a pipeline's hand-offs pay (`judge.simulate.expected_step`).
A body layer whose weights fit the rank's cache (`cache_bytes`) is timed in a chain of copies, each
with its own weights, that fill twice the cache (`stage_copies`), and its times and bytes are the
chain's per copy: in a stage of several layers each op finds the layer's weights evicted by the
others', which a layer timed over and over alone never does.
Weight gradients accumulate across repeats (warm-up repeats allocate them), as they do for all
but the first micro-batch of a step; memory is measured in an untimed pass before (below).
A head split into vocabulary chunks is profiled chunk by chunk (`distinct_layers` says which
chunks share an entry): a later chunk gets a packed [b, s, h + 2] float32 input, and only the
last chunk's output is a loss (the others are backpropagated from a seeded output gradient).
`head_chunks` = (2, 3, 4, ...) also measures an unsplit model's head split that many ways
(`CostProfile.head_chunks`), so a plan that splits the head is costed with its chunks' own times.
Memory: `act_bytes` = distinct storages autograd saves during F and still holds after it
(`saved_bytes`: a saved-tensor hook, in its own untimed pass, since the hook's Python work per
saved tensor is not the executor's; parameters excluded); `act_w_bytes` = what the W stash keeps
after I (its inputs and output gradients, distinct storages; capped at `act_bytes`, since the
cost model's memory semantics only let I free memory). On CPU everything runs as an executor
rank computes (`cpu.cpu_rank`: one intra-op thread, denormal floats flushed to zero).

Known limits: a layer timed alone, even in the steady state and in a chain, is not the layer
inside a running pipeline; the profile's times approach the in-launch ones, they do not equal
them. What these choices measured on the 2-core CPU bench is in experiments/findings-executor.md.
"""

from __future__ import annotations

import math
import resource
import statistics
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

import torch

from adaptis_plan.errors import AdaptisError, InputError
from adaptis_plan.executor.cpu import cpu_rank
from adaptis_plan.executor.layers import build_layer, set_recompute
from adaptis_plan.executor.wgrad import WeightGradStore
from adaptis_plan.spec.cost_profile import CostProfile, HeadChunkProfile, LayerCostEntry, ProfiledModel
from adaptis_plan.spec.model import ModelSpec

T = TypeVar("T")

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: micro-batches whose forward graphs stay alive while a layer is timed (module docstring)
IN_FLIGHT = 2
#: later micro-batches' I that run between a micro-batch's I and its timed (deferred) W
W_DEFERRED = 1
#: at most this many copies of a layer are timed in a chain (`stage_copies`)
MAX_STAGE_COPIES = 8
#: rounds the timed repeats are spread over by default, each round timing every layer (module docstring)
ROUNDS = 3
#: the timed ops: F, I, W after later I's, W right after its own I, fused B
_OPS = ("f", "i", "w", "w_hot", "b")
#: a timed repeat during which the process took more minor page faults than this (4 KiB each) is
#: taken again (module docstring): the allocator touched fresh memory, which a stage in its steady state does not
FAULT_PAGES = 256
#: at most this many repeats per pass are taken again for page faults (then a faulting one counts)
FAULT_RETRIES = 8


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def cache_bytes(device: torch.device) -> int:
    """The cache one rank's layers compete for: on CPU the core's own (level 2) cache, on a GPU its L2.
    0 when unknown (then no layer is timed in a chain)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                size = (index / "size").read_text().strip().upper()
                scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
                return int(size.rstrip("KMG")) * scale
        except (OSError, ValueError):
            return 0
    return 0


def stage_copies(model: ModelSpec, index: int, param_bytes: int, cache: int) -> int:
    """Copies of layer `index` timed one after another in a chain, each with its own weights (the
    times are the chain's over the copies): a stage of several layers runs each after the others,
    so unless one layer's weights alone fill the cache, the next op of a layer finds them evicted,
    which a layer timed over and over alone never does. Enough copies that the chain's weights are
    twice the cache, at most `MAX_STAGE_COPIES`; 1 for the embedding, the head and its chunks (one
    of each per model), and for a layer whose weights alone are over the cache."""
    if model.layers[index].kind in ("embedding", "head") or cache <= 0 or param_bytes <= 0 or param_bytes >= cache:
        return 1
    return min(MAX_STAGE_COPIES, max(1, math.ceil(2 * cache / param_bytes)))


class _Chain(torch.nn.Module):
    """`copies` of a body layer, each with its own weights, run one after another as in a stage."""

    def __init__(self, layers: list[torch.nn.Module]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def distinct_layers(model: ModelSpec) -> list[list[int]]:
    """Groups of layer indices with identical specs (the optional `name` label ignored), in first-seen order.

    The chunks of a split head group by (role, vocabulary slice size): the first chunk (with the
    final norm, hidden-state input), the last (the loss) and the middle ones (packed input and
    output) compute different things; middle chunks of equal size share an entry.
    """
    groups: dict[str, list[int]] = {}
    k = model.num_head_chunks
    for i, layer in enumerate(model.layers):
        if layer.kind == "head" and k > 1 and layer.vocab_range is not None:
            c = i - (model.num_layers - k)
            role = "first" if c == 0 else "last" if c == k - 1 else "middle"
            key = f"head-chunk:{role}:{layer.vocab_range[1] - layer.vocab_range[0]}"
        else:
            key = layer.model_dump_json(exclude={"name"})
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saved_bytes(fn: Callable[[], T], exclude: set[int]) -> tuple[T, int]:
    """`fn()` and the bytes autograd keeps for its backward: the distinct storages of the tensors
    saved during `fn` and still saved when it returns (storages whose data pointer is in `exclude`,
    the parameters', left out).

    Only tensors still held at the end count: a branch of the graph that `fn` drops (an SSD scan's
    state after its last chunk) frees its saved tensors, and their memory may be reused within `fn`
    for another one, so tensors are tracked by weak reference and told apart by storage only among
    the live ones."""
    saved: list[weakref.ref] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    live: dict[int, int] = {}
    for ref in saved:
        t = ref()
        if t is not None:
            st = t.untyped_storage()
            if st.data_ptr() not in exclude:
                live[st.data_ptr()] = st.nbytes()
    return out, sum(live.values())


def backward(out: torch.Tensor, grad: torch.Tensor | None, store: WeightGradStore, key: object | None) -> None:
    """The backward of `out`: fused (input and weight gradients at once) when `key` is None, else the
    input gradient only, its weight GEMMs deferred into `store` under `key` (an I)."""
    if key is None:
        torch.autograd.backward(out, grad)
    else:
        with store.deferring(key):
            torch.autograd.backward(out, grad)


def layer_inputs(
    model: ModelSpec,
    index: int,
    seq_len: int,
    micro_batch_size: int,
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded (token ids, labels, input hidden states) a profiled layer `index` is timed on."""
    g = torch.Generator().manual_seed(seed + 1000 + index)
    shape = (micro_batch_size, seq_len)
    ids = torch.randint(0, model.vocab_size, shape, generator=g).to(device)
    labels = torch.randint(0, model.vocab_size, shape, generator=g).to(device)
    hidden = torch.randn(*shape, model.hidden_size, generator=g).to(device=device, dtype=dtype)
    if model.layers[index].kind == "head" and index > 0 and model.layers[index - 1].kind == "head":
        # a later head chunk reads the packed (normed hidden, running lse, running target) tensor
        y = torch.randn(*shape, model.hidden_size, generator=g).to(dtype).float()
        lse = math.log(model.vocab_size) + torch.randn(*shape, 1, generator=g)
        hidden = torch.cat([y, lse, torch.randn(*shape, 1, generator=g)], dim=-1).to(device)
    return ids, labels, hidden


class _LayerTimer:
    """Layer `index` of `model` (under recomputation `recompute`) set up to be timed round after round.

    Built once (or taken from `keep`), with its seeded inputs; its memory is measured once, in an
    untimed pass of its own when it is set up (`act_bytes`, `act_w_bytes`: the same every time).
    `time(repeats, warmup)` runs its three timed passes once more: one round's samples."""

    def __init__(
        self,
        model: ModelSpec,
        index: int,
        *,
        seq_len: int,
        micro_batch_size: int,
        device: torch.device,
        dtype: torch.dtype,
        seed: int,
        recompute: str = "none",
        keep: dict | None = None,
    ) -> None:
        def one(copy: int) -> torch.nn.Module:
            return set_recompute(build_layer(model, index, seed=seed + 7919 * copy), recompute).to(
                device=device, dtype=dtype
            )

        def build() -> torch.nn.Module:
            first = one(0)
            nbytes = sum(p.numel() * p.element_size() for p in first.parameters())
            copies = stage_copies(model, index, nbytes, cache_bytes(device))
            return first if copies == 1 else _Chain([first] + [one(c) for c in range(1, copies)])

        if keep is None:
            layer = build()
        else:
            # the whole spec, not `fingerprint()`: that one is the same for the model with its head split
            key = (model.model_dump_json(), index, recompute, str(device), dtype, seed)
            cached = keep.get(key)
            if cached is None:
                cached = keep[key] = build()
            layer = cached
        self.model, self.index, self.device, self.layer = model, index, device, layer
        self.copies = len(layer.layers) if isinstance(layer, _Chain) else 1
        self.kind = model.layers[index].kind
        self.inputs = layer_inputs(model, index, seq_len, micro_batch_size, device, dtype, seed)
        self.store = WeightGradStore()
        params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
        # memory, in a pass of its own: the saved-tensor hooks cost Python work per saved tensor,
        # which the executor's forward and backward do not pay
        (out, _), act_bytes = saved_bytes(self.forward, params)
        self.grad = None if index == model.num_layers - 1 else torch.ones_like(out) / out.numel()
        with self.store.deferring("p"):
            torch.autograd.backward(out, self.grad)
        act_w_bytes = self.store.pending_bytes("p")
        self.store.discard("p")
        del out
        for p in layer.parameters():
            p.grad = None
        self.act_bytes, self.act_w_bytes = act_bytes // self.copies, act_w_bytes // self.copies

    def forward(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        ids, labels, hidden = self.inputs
        if self.kind == "embedding":
            return self.layer(ids), None
        x = hidden.detach().requires_grad_()
        out = self.layer(x, labels) if self.kind == "head" else self.layer(x)
        return out, x

    def time(self, repeats: int, warmup: int) -> dict[str, list[float]]:
        """One round: {op: seconds per copy of each of `repeats` timed repeats} (f, i, w, w_hot, b).

        Gradients accumulate from one repeat to the next (the warm-up ones allocate them), as they
        do for all but the first micro-batch of a step, and are dropped at the end of the round.
        `IN_FLIGHT` micro-batches stay alive between a forward and its backward, as on a pipeline
        stage (module docstring)."""
        device, store, grad = self.device, self.store, self.grad
        times: dict[str, list[float]] = {op: [] for op in _OPS}
        # from this repeat on, IN_FLIGHT graphs are alive at every timing and a deferred W has its later I's
        steady = warmup + IN_FLIGHT + W_DEFERRED

        def steady_pass(mode: str) -> None:
            """F of a new micro-batch, then the backward of the oldest held: `split`: I, then the W of
            the I `W_DEFERRED` repeats before (F, I and that W timed); `hot`: I, then its own W at once
            (the W timed); `fused`: B (timed)."""
            held: deque[tuple[int, torch.Tensor]] = deque()
            stashed: deque[int] = deque()  # keys whose I ran and whose W has not
            lag = W_DEFERRED if mode == "split" else 0
            kept, retries, rep = 0, FAULT_RETRIES, -1
            while kept < repeats:
                rep += 1
                _sync(device)
                n0 = _minor_faults()
                t0 = time.perf_counter()
                out, _ = self.forward()
                _sync(device)
                t1 = time.perf_counter()
                n1 = _minor_faults()
                held.append((rep, out))
                del out
                if len(held) <= IN_FLIGHT:
                    continue
                key, old = held.popleft()
                _sync(device)
                n2 = _minor_faults()
                t2 = time.perf_counter()
                backward(old, grad, store, None if mode == "fused" else key)
                if mode != "fused":
                    stashed.append(key)
                _sync(device)
                t3 = time.perf_counter()
                n3 = _minor_faults()
                if len(stashed) > lag:
                    store.run(stashed.popleft())
                    _sync(device)
                t4 = time.perf_counter()
                n4 = _minor_faults()
                del old
                if rep >= steady:
                    # page faults while a timed op ran: F, I and W / the hot W / B
                    faults = {"split": n1 - n0 + n4 - n2, "hot": n4 - n3, "fused": n3 - n2}[mode]
                    if faults > FAULT_PAGES and retries > 0:
                        retries -= 1
                        continue
                    kept += 1
                    spans = {
                        "split": {"f": t1 - t0, "i": t3 - t2, "w": t4 - t3},
                        "hot": {"w_hot": t4 - t3},
                        "fused": {"b": t3 - t2},
                    }[mode]
                    for k, v in spans.items():
                        times[k].append(v)
            while stashed:  # untimed: the pass leaves no stash behind
                store.run(stashed.popleft())

        for mode in ("split", "hot", "fused"):
            steady_pass(mode)
        for p in self.layer.parameters():
            p.grad = None
        return {op: [t / self.copies for t in ts] for op, ts in times.items()}

    def entry(self, times: dict[str, list[float]]) -> LayerCostEntry:
        """The layer's entry from its samples pooled over all rounds (`times`, as `time` returns them): medians."""
        med = {op: statistics.median(ts) for op, ts in times.items()}
        act_bytes, act_w_bytes = self.act_bytes, self.act_w_bytes
        return LayerCostEntry(
            layers=[self.index],
            kind=self.kind,
            f_s=med["f"],
            i_s=med["i"],
            w_s=med["w"],
            w_hot_s=med["w_hot"],
            b_s=med["b"],
            act_bytes=act_bytes,
            act_w_bytes=min(act_w_bytes, act_bytes) if act_bytes else act_w_bytes,
            stage_copies=self.copies if self.copies > 1 else None,
        )


def spread_repeats(repeats: int, rounds: int) -> list[int]:
    """Timed repeats per round: `repeats` spread over `rounds` rounds, the last ones taking one more
    (the first round meets every layer cold, the process's memory not yet touched); at most
    `repeats` rounds, since each round times every op at least once."""
    if repeats < 1 or rounds < 1:
        raise AdaptisError(f"profiling with {repeats} repeats in {rounds} rounds: both must be 1 or more")
    rounds = min(rounds, repeats)
    return [repeats // rounds + (r >= rounds - repeats % rounds) for r in range(rounds)]


class _Spread:
    """The within-round variation of op times (`CostProfile.time_spread`): the pooled standard deviation
    of log seconds about each (item, op, round) sample's own mean, over the degrees of freedom."""

    def __init__(self) -> None:
        self.squares, self.dof = 0.0, 0

    def add(self, seconds: list[float]) -> None:
        logs = [math.log(t) for t in seconds if t > 0]
        if len(logs) >= 2:
            mean = statistics.fmean(logs)
            self.squares += sum((x - mean) ** 2 for x in logs)
            self.dof += len(logs) - 1

    @property
    def sigma(self) -> float | None:
        return math.sqrt(self.squares / self.dof) if self.dof else None


def _measure(
    items: list[tuple[ModelSpec, int, str]], *, repeats: int, rounds: int, warmup: int, **setup: object
) -> tuple[list[LayerCostEntry], float | None]:
    """The entry of each (model, layer index, recompute mode) of `items`, measured in rounds, and the
    op times' spread within a round (`_Spread`; None with one repeat per round).

    Each round times every item's three passes, in `items`' order, `spread_repeats(repeats,
    rounds)` repeats each (after `warmup` in every pass); each field is the median of the item's
    repeats pooled over all rounds. An item is built, and its memory measured, when the first round
    reaches it, and stays built until the last (`setup`: `_LayerTimer`'s other arguments)."""
    timers: list[_LayerTimer] = []
    pooled: list[dict[str, list[float]]] = [{op: [] for op in _OPS} for _ in items]
    spread = _Spread()
    for r, n in enumerate(spread_repeats(repeats, rounds)):
        for k, (model, index, mode) in enumerate(items):
            if r == 0:
                timers.append(_LayerTimer(model, index, recompute=mode, **setup))  # type: ignore[arg-type]
            for op, got in timers[k].time(n, warmup).items():
                pooled[k][op] += got
                spread.add(got)
    return [t.entry(p) for t, p in zip(timers, pooled, strict=True)], spread.sigma


def profile_model(
    model: ModelSpec,
    *,
    seq_len: int,
    micro_batch_size: int,
    device: str = "cpu",
    dtype: str = "fp32",
    repeats: int = 5,
    rounds: int = ROUNDS,
    warmup: int = 2,
    seed: int = 0,
    head_chunks: tuple[int, ...] = (),
    reverse: bool = False,
    keep: dict | None = None,
) -> CostProfile:
    """Measured F / I / W / B seconds and activation bytes per distinct layer (see the module docstring).

    `repeats` timed repeats per op in all, spread over `rounds` rounds (at most `repeats`; the
    profile records how many), each round timing every distinct layer and head chunk: a slowdown
    of the machine for a second or two then moves a few repeats of every layer, not one layer's
    whole sample. `head_chunks`: chunk counts to measure the head split into (ignored for a tied or
    already split head). `reverse`: measure, in every round, the distinct layers last to first,
    the head's chunks before them (the entries and chunks keep their order):
    two processes profiling at once, one each way, do not run the same layer at the same time,
    as no two pipeline ranks do (a large-vocabulary head timed on both cores at once shares the
    memory bandwidth that, in a pipeline, only one rank uses for it). `keep`: a dict that holds the
    built layers from one call to the next (a process that profiles again and again, between
    pipeline steps, then times the same modules instead of allocating new ones each time; within
    a call, the layers stay built from the first round to the last either way). The
    gloo link (`link.measure_link`) and the runtime's time per action are measured separately (the
    `adaptis profile` use case adds them to the profile).
    """
    per_round = spread_repeats(repeats, rounds)
    with _measuring(device) as dev:
        groups = distinct_layers(model)
        timed, splits, work = _timed_layers(model, head_chunks)
        items = [(m, index, "none") for m, index in timed]
        # reversed, the head's chunks come first, so that they too meet other layers in a forward copy
        got, spread = _measure(
            items[::-1] if reverse else items, repeats=repeats, rounds=rounds, warmup=warmup, seq_len=seq_len,
            micro_batch_size=micro_batch_size, device=dev, dtype=_DTYPES[dtype], seed=seed, keep=keep,
        )  # fmt: skip
        measured = got[::-1] if reverse else got
        entries = [e.model_copy(update={"layers": g}) for e, g in zip(measured, groups, strict=False)]
        chunked = _chunk_profiles(splits, work, measured[len(groups) :])
        threads = torch.get_num_threads()
    return CostProfile(
        model=ProfiledModel(name=model.name, fingerprint=model.fingerprint(), head_chunks=model.num_head_chunks),
        device="cpu" if dev.type == "cpu" else f"cuda: {torch.cuda.get_device_name(dev)}",
        torch_version=torch.__version__,
        num_threads=threads,
        seq_len=seq_len,
        micro_batch_size=micro_batch_size,
        dtype=dtype,
        repeats=repeats,
        rounds=len(per_round),
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        entries=entries,
        head_chunks=chunked,
        time_spread=spread,
    )


def _timed_layers(
    model: ModelSpec, head_chunks: tuple[int, ...]
) -> tuple[list[tuple[ModelSpec, int]], dict[int, ModelSpec], list[tuple[int, list[int]]]]:
    """What `profile_model` times, in order: (model, layer index) of each distinct layer, then of each
    distinct head chunk of `_head_chunk_work`, whose (splits, work) come with it."""
    splits, work = _head_chunk_work(model, head_chunks)
    items = [(model, g[0]) for g in distinct_layers(model)] + [(splits[k], g[0]) for k, g in work]
    return items, splits, work


def _head_chunk_work(
    model: ModelSpec, counts: tuple[int, ...]
) -> tuple[dict[int, ModelSpec], list[tuple[int, list[int]]]]:
    """The head split into each of `counts` chunks ({count: split model}), and the (count, distinct
    chunk group) to measure, in measuring order; none for a tied or already split head."""
    from adaptis_plan.inputs.models.transform import split_head

    if model.tie_word_embeddings or model.num_head_chunks != 1:
        return {}, []
    splits = {k: split_head(model, k) for k in sorted({c for c in counts if 2 <= c <= model.vocab_size})}
    work = [(k, g) for k, split in splits.items() for g in distinct_layers(split) if g[0] >= split.num_layers - k]
    return splits, work


def _chunk_profiles(
    splits: dict[int, ModelSpec], work: list[tuple[int, list[int]]], measured: list[LayerCostEntry]
) -> list[HeadChunkProfile]:
    """The head's chunk profiles from `_head_chunk_work`'s work and its entries (in that order); `layers` = chunk numbers."""
    out = []
    for k, split in splits.items():
        first = split.num_layers - k
        entries = [
            e.model_copy(update={"layers": [i - first for i in g]})
            for (c, g), e in zip(work, measured, strict=True)
            if c == k
        ]
        out.append(HeadChunkProfile(num_chunks=k, entries=entries))
    return out


def profile_recompute(
    model: ModelSpec,
    *,
    seq_len: int,
    micro_batch_size: int,
    modes: tuple[str, ...] = ("selective", "full"),
    device: str = "cpu",
    dtype: str = "fp32",
    repeats: int = 5,
    rounds: int = ROUNDS,
    warmup: int = 2,
    seed: int = 0,
) -> dict[str, list[LayerCostEntry]]:
    """{mode: entries}: the distinct layers that `mode` changes, measured as they run under it.

    The same measurement as `profile_model` with the layer built by `layers.set_recompute(layer,
    mode)`: `act_bytes` is what the forward keeps (full: the block input; selective: all but the
    attention core's internals), I and B include the forward they rerun. "full" lists every decoder
    block, "selective" only blocks with attention (it changes nothing in the others); the embedding
    and the head never recompute. Every round times every mode's layers. What `adaptis profile
    --recompute` reports, so the cost model's recompute figures can be checked against a real run.
    """
    with _measuring(device) as dev:
        work = [(mode, g) for mode in modes for g in distinct_layers(model) if _changes(model, g[0], mode)]
        got, _ = _measure(
            [(model, g[0], mode) for mode, g in work], repeats=repeats, rounds=rounds, warmup=warmup,
            seq_len=seq_len, micro_batch_size=micro_batch_size, device=dev, dtype=_DTYPES[dtype], seed=seed,
        )  # fmt: skip
    out: dict[str, list[LayerCostEntry]] = {mode: [] for mode in modes}
    for (mode, g), e in zip(work, got, strict=True):
        out[mode].append(e.model_copy(update={"layers": g}))
    return out


def _changes(model: ModelSpec, index: int, mode: str) -> bool:
    """Whether recompute `mode` changes what layer `index` keeps (see `layers.set_recompute`)."""
    layer = model.layers[index]
    if layer.kind in ("embedding", "head") or mode == "none":
        return False
    return mode == "full" or layer.attention is not None


@contextmanager
def _measuring(device: str) -> Iterator[torch.device]:
    """The device to measure on; on CPU set up meanwhile as each executor rank runs (`cpu.cpu_rank`)."""
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError(
            f"--device = cuda: this torch ({torch.__version__}) sees no CUDA device; use --device cpu,"
            " or profile on a machine with a GPU"
        )
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    if dev.type != "cpu":
        yield dev
        return
    with cpu_rank():
        yield dev
