"""Cost table assembly: model + hardware + training config (+ measured profile) -> `CostTable`.

Data flow: `ModelSpec`, `HardwareProfile`, `TrainingConfig` and optionally a measured
`CostProfile` -> here -> `core.CostTable` -> the schedule builders, the search and the
simulator. Per-layer numbers come from `cost.analytic` (each distinct layer and device type is
computed once); pipeline rank r runs on the device type and node that
`HardwareProfile.rank_slots(pp, tp)` gives it.

- Times are per device row: a rank's row uses its device type's speed.
- `mem_limit_bytes[r]` = that device's `hbm_bytes * memory_fraction`.
- Links: ranks on the same node use `intra_node`, others `inter_node`; the bandwidth is per
  pipeline rank pair; a rank to itself costs nothing (infinite bandwidth, zero latency). A
  pipeline send/recv uses the link's `p2p_bandwidth_gbps` / `p2p_latency_s` when the profile
  gives them (NCCL point-to-point reaches far less than NVLink's nominal rate), else its
  `bandwidth_gbps` / `latency_s`, which the tensor-parallel collectives always use.
  With TP t, `out_bytes` is the 1/t sequence-parallel shard that each of a rank's t GPUs sends
  over its own link, so the per-GPU link bandwidth applies to it unchanged.
- Recomputation is per layer (`recompute=`, one of none / selective / full per layer; default:
  `training.recompute` for every layer): `cost.recompute` changes each layer's I work and bytes.
- A measured profile replaces F / I / W seconds (the hot W and the fused B too: `CostTable.w_hot_s`,
  `b_fused_s`) and `act_bytes` / `act_w_bytes` of every layer, on every device row. It lists each layer
  once, under the model's kind for it, and leaves none to the analytic model (measured and analytic
  costs are never mixed); only a split head's chunks may come from the unsplit head (below).
  It was measured on one device type and is taken to hold for
  all ranks (heterogeneous clusters need the analytic model or a profile per type). Its link,
  when measured, replaces every off-diagonal link. A profile of the unsplit model costs a head split
  into vocabulary chunks from the chunks it measured (`CostProfile.head_chunks`, `adaptis profile
  --head-chunks`), else by each chunk's share of the whole head. Parameters, `static_bytes` and
  `out_bytes` stay analytic. The profile must be of this model (fingerprint) and step shape
  (sequence length, micro-batch size); its dtype and TP degree are taken as the planned ones.
  It is measured without recomputation: a recomputed layer's measured I (and fused B) grows by the
  analytic share of F that its mode reruns, and its bytes change as `cost.recompute.measured_recompute` says.

Imports the specs, `analytic`, `params`, `core`, `errors` and (for split heads) `inputs.models.transform`
only. Never prints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.cost.analytic import LayerWork, layer_work, op_seconds, zero3_collectives
from adaptis_plan.cost.comm import GroupLinks, placement
from adaptis_plan.cost.params import layer_params
from adaptis_plan.cost.recompute import check_modes, measured_recompute, recompute_work, recomputes, uniform_modes
from adaptis_plan.errors import InputError
from adaptis_plan.spec.cost_profile import CostProfile, LayerCostEntry
from adaptis_plan.spec.hardware import HardwareProfile, LinkSpec
from adaptis_plan.spec.model import LayerSpec, ModelSpec
from adaptis_plan.spec.training import TrainingConfig


def _layer_key(layer: LayerSpec) -> tuple[Any, ...]:
    """Layers with equal shapes share costs, whatever their `name`."""
    return (layer.kind, layer.attention, layer.mlp, layer.moe, layer.mamba, layer.vocab_range)


#: What is computed once per model object (`_per_model`), for the models last seen: a configuration
#: search builds the cost tables of hundreds of points of one model, and walking or hashing its layers'
#: specs costs more than their work
_MODELS_KEPT = 8
_GROUPS: dict[tuple[int, int], tuple[ModelSpec, Any]] = {}
_TP_SIZES: dict[tuple[int, int], tuple[ModelSpec, Any]] = {}


def _per_model(
    cache: dict[tuple[int, int], tuple[ModelSpec, Any]], model: ModelSpec, compute: Callable[[ModelSpec], Any]
) -> Any:
    """`compute(model)`, kept in `cache` by model object and layer count (specs are frozen) for the last
    `_MODELS_KEPT` models."""
    key = (id(model), len(model.layers))
    got = cache.get(key)
    if got is not None and got[0] is model:
        return got[1]
    value = compute(model)
    if len(cache) >= _MODELS_KEPT:
        cache.pop(next(iter(cache)))
    cache[key] = (model, value)
    return value


def _layer_groups(model: ModelSpec) -> list[int]:
    """Per layer of `model`, the index of the first layer with its `_layer_key` (equal shapes, equal
    costs); computed once per model object."""
    return _per_model(_GROUPS, model, _compute_layer_groups)


def _compute_layer_groups(model: ModelSpec) -> list[int]:
    first: dict[tuple[Any, ...], int] = {}
    by_id: dict[int, int] = {}
    groups = []
    for n, layer in enumerate(model.layers):
        g = by_id.get(id(layer))
        if g is None:
            g = by_id[id(layer)] = first.setdefault(_layer_key(layer), n)
        groups.append(g)
    return groups


def _works(model: ModelSpec, training: TrainingConfig, modes: Sequence[str] | None = None) -> list[LayerWork]:
    """Per-layer work under `modes` (None: no recomputation); equal layers share one object."""
    cache: dict[tuple[int, str], LayerWork] = {}
    works = []
    for n, (layer, layer_key) in enumerate(zip(model.layers, _layer_groups(model), strict=True)):
        mode = modes[n] if modes is not None and recomputes(layer.kind) else "none"
        plain_key = (layer_key, "none")
        plain = cache.get(plain_key)
        if plain is None:
            plain = cache[plain_key] = layer_work(model, layer, training)
        key = (layer_key, mode)
        work = cache.get(key)
        if work is None:
            work = cache[key] = recompute_work(plain, layer, model, training, mode)
        works.append(work)
    return works


def _slots(hardware: HardwareProfile, pp: int, tp: int, width: int | None = None) -> list[tuple[str, int]]:
    """Pipeline ranks' (device type, node). A profile too small for every data- and context-parallel
    replica (a plan made without --gpus) places one replica, tp-wide ranks, as `rank_slots(pp, tp)`."""
    try:
        if width is not None and width > tp:
            try:
                return hardware.rank_slots(pp, tp, width)
            except ValueError:
                pass
        return hardware.rank_slots(pp, tp)
    except ValueError as e:
        raise InputError(str(e)) from None


def device_types(hardware: HardwareProfile, training: TrainingConfig) -> tuple[str, ...]:
    """The device type of each pipeline rank of `training` on `hardware` (`CostTable.device_names`)."""
    width = training.tp * training.cp * training.dp
    return tuple(dt for dt, _ in _slots(hardware, training.pp, training.tp, width))


def _times(works: list[LayerWork], hardware: HardwareProfile, device_type: str, place: GroupLinks) -> np.ndarray:
    """[3, num_layers] F / I / W seconds of every layer on one device type."""
    device = hardware.device_types[device_type]
    link = hardware.intra_node
    per_work: dict[int, tuple[float, float, float]] = {}
    out = np.empty((3, len(works)))
    for col, work in enumerate(works):
        times = per_work.get(id(work))
        if times is None:
            times = per_work[id(work)] = op_seconds(work, device, link, place)
        out[:, col] = times
    return out


def _p2p(link: LinkSpec) -> tuple[float, float]:
    """(bandwidth GB/s, latency s) of one pipeline send/recv over `link`."""
    bw = link.p2p_bandwidth_gbps if link.p2p_bandwidth_gbps is not None else link.bandwidth_gbps
    latency = link.p2p_latency_s if link.p2p_latency_s is not None else link.latency_s
    return bw, latency


def _link_matrices(nodes: list[int], intra: LinkSpec, inter: LinkSpec) -> tuple[np.ndarray, np.ndarray]:
    node = np.asarray(nodes)
    same = node[:, None] == node[None, :]
    (intra_bw, intra_lat), (inter_bw, inter_lat) = _p2p(intra), _p2p(inter)
    bw = np.where(same, intra_bw, inter_bw) * 1e9
    latency = np.where(same, intra_lat, inter_lat).astype(float)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(latency, 0.0)
    return bw, latency


def _check_profile(profile: CostProfile, model: ModelSpec, training: TrainingConfig, source: str) -> None:
    if profile.model.fingerprint != model.fingerprint():
        if profile.model.name == model.name:  # same name, other layers or sizes: say what differs
            raise InputError(
                f"{source}: model.fingerprint = '{_short(profile.model.fingerprint)}': profile was measured on another"
                f" shape of model '{model.name}' (its layers or sizes differ; this one's fingerprint is"
                f" '{_short(model.fingerprint())}'); re-run adaptis profile --model {model.name}"
            )
        raise InputError(
            f"{source}: model.fingerprint: profile was measured on model '{profile.model.name}', not '{model.name}';"
            f" re-run adaptis profile --model {model.name}"
        )
    for field, measured, planned, flag in (
        ("seq_len", profile.seq_len, training.seq_len, "--seq-len"),
        ("micro_batch_size", profile.micro_batch_size, training.micro_batch_size, "--micro-batch-size"),
    ):
        if measured != planned:
            raise InputError(
                f"{source}: {field} = {measured}: the plan asks for {planned};"
                f" plan with {flag} {measured} or profile again at {field} {planned}"
            )
    chunks = profile.model.head_chunks
    if chunks is not None and chunks not in (1, model.num_head_chunks):
        planned = model.num_head_chunks
        raise InputError(
            f"{source}: model.head_chunks = {chunks}: the profile measured the head split into {chunks} chunks,"
            f" and this plan's head is {'one layer' if planned == 1 else f'in {planned} chunks'}; plan with"
            f" --head-chunks {chunks}, or profile the model with its head whole (it costs every split)"
        )
    for n, entry in enumerate(profile.entries):
        for index in entry.layers:
            if index >= model.num_layers:
                raise InputError(
                    f"{source}: entries[{n}].layers = {index}: model '{model.name}' has layers 0..{model.num_layers - 1};"
                    " re-run adaptis profile on this model"
                )
    _check_entries(profile, model, source)
    _check_head_chunks(profile, source)


#: a device type slower than this (peak bf16 TFLOP/s) is a CPU core (the `cpu` profile says 0.1); every
#: accelerator a profile describes has tens to thousands
CPU_CLASS_TFLOPS = 5.0
#: a device model's token in a profile's `device` or a device type's name: h200, a100, mi300x, l40s
_MODEL_TOKEN = re.compile(r"(?<![a-z0-9])([a-z]{1,3}\d{2,4}[a-z]?)(?![a-z0-9])")


def _model_tokens(text: str) -> set[str]:
    return set(_MODEL_TOKEN.findall(text.lower()))


def profile_device_mismatch(profile: CostProfile, hw: HardwareProfile) -> list[str]:
    """The hardware's device types that `profile` was plainly not measured on: a CPU profile for an
    accelerator or the reverse (by the type's peak rate), or another accelerator model (a model token
    such as `h200` in the profile's `device` that the type's name lacks). Names are free text, so this
    only says what it can tell; empty when it cannot tell or all agree."""
    measured = profile.device.strip().lower()
    on_cpu = measured.startswith("cpu")
    tokens = _model_tokens(measured)
    out = []
    for name, spec in hw.device_types.items():
        cpu_type = spec.peak_bf16_tflops < CPU_CLASS_TFLOPS
        named = _model_tokens(name)
        other_model = bool(tokens) and bool(named) and not tokens & named
        if cpu_type != on_cpu or (not cpu_type and other_model):
            out.append(name)
    return out


def _short(fingerprint: str) -> str:
    """The first 12 characters, escaped (the file's text, not the terminal's controls)."""
    head = ascii(fingerprint[:12])[1:-1]
    return head if len(fingerprint) <= 12 else f"{head}..."


def _spans(indices: Sequence[int]) -> str:
    """Sorted layer indices as runs: [1, 2, 3, 8] -> '1..3, 8'."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs)


def _check_entries(profile: CostProfile, model: ModelSpec, source: str) -> None:
    """Each layer in one entry, under its own kind (the profiler writes `model.layers[i].kind`).

    The entries may describe the unsplit model of a head split into vocabulary chunks: its head
    (the first chunk's index) is a `head` layer either way, so the kinds compare index by index.
    """
    fix = f"re-run adaptis profile --model {model.name}"
    owner: dict[int, int] = {}
    for n, entry in enumerate(profile.entries):
        for index in entry.layers:
            _list_once(owner, index, n, "", "layer", source, fix)
        wrong: dict[str, list[int]] = {}
        for index in entry.layers:
            kind = model.layers[index].kind
            if kind != entry.kind:
                wrong.setdefault(kind, []).append(index)
        if wrong:
            other, indices = next(iter(wrong.items()))
            what = "layer" if len(indices) == 1 else "layers"
            raise InputError(
                f"{source}: entries[{n}].kind = '{entry.kind}': {what} {_spans(indices)} of model '{model.name}'"
                f" {'is' if len(indices) == 1 else 'are'} of kind '{other}'; {fix}"
            )


def _list_once(owner: dict[int, int], index: int, n: int, at: str, noun: str, source: str, fix: str) -> None:
    """Record that entry `n` (of `{at}entries`) lists `noun` `index` in `owner`; refuse a second listing."""
    if index in owner:
        where = (
            f"{at}entries[{n}].layers lists {noun} {index} twice"
            if owner[index] == n
            else f"{at}entries[{owner[index]}] and {at}entries[{n}] both list {noun} {index}"
        )
        raise InputError(f"{source}: {where}: each {noun} has one measured cost; list it once, or {fix}")
    owner[index] = n


def _check_head_chunks(profile: CostProfile, source: str) -> None:
    """Each measured head split: `num_chunks` once, every chunk 0..num_chunks-1 in one `head` entry."""
    fix = "re-run adaptis profile (--head-chunks)"
    seen: dict[int, int] = {}
    for h, hp in enumerate(profile.head_chunks):
        at = f"head_chunks[{h}]"
        if hp.num_chunks in seen:
            raise InputError(
                f"{source}: head_chunks[{seen[hp.num_chunks]}] and {at} both measure num_chunks = {hp.num_chunks};"
                f" keep one, or {fix}"
            )
        seen[hp.num_chunks] = h
        owner: dict[int, int] = {}
        for n, entry in enumerate(hp.entries):
            if entry.kind != "head":
                raise InputError(f"{source}: {at}.entries[{n}].kind = '{entry.kind}': head chunks are 'head'; {fix}")
            for c in entry.layers:
                if c >= hp.num_chunks:
                    raise InputError(
                        f"{source}: {at}.entries[{n}].layers = {c}: a head in {hp.num_chunks} chunks has chunks"
                        f" 0..{hp.num_chunks - 1}; {fix}"
                    )
                _list_once(owner, c, n, f"{at}.", "chunk", source, fix)
        missing = sorted(set(range(hp.num_chunks)) - owner.keys())
        if missing:
            what = "chunk" if len(missing) == 1 else "chunks"
            raise InputError(
                f"{source}: {at}: {what} {_spans(missing)} of {hp.num_chunks}"
                f" {'is' if len(missing) == 1 else 'are'} not measured; {fix}"
            )


def _check_coverage(covered: set[int], model: ModelSpec, source: str) -> None:
    """Every layer measured: a profile that leaves some out would mix measured and analytic costs."""
    missing = sorted(set(range(model.num_layers)) - covered)
    if missing:
        what = "layer" if len(missing) == 1 else "layers"
        raise InputError(
            f"{source}: entries: {what} {_spans(missing)} of model '{model.name}' {'is' if len(missing) == 1 else 'are'}"
            f" not measured: every layer needs its measured cost; re-run adaptis profile --model {model.name}"
        )


_CHUNK_FIELDS = ("f_s", "i_s", "w_s", "b_s", "act_bytes", "act_w_bytes", "w_hot")


def _vocab_span(layer: LayerSpec) -> tuple[int, int]:
    """A head chunk's vocabulary rows [lo, hi)."""
    if layer.vocab_range is None:
        raise ValueError(f"layer kind '{layer.kind}' has no vocab_range: not a head chunk")
    return layer.vocab_range


def _chunk_role(chunk: int, num_chunks: int) -> str:
    return "first" if chunk == 0 else "last" if chunk == num_chunks - 1 else "middle"


def _head_chunk_entries(profile: CostProfile, model: ModelSpec) -> dict[int, LayerCostEntry] | None:
    """Costs of each head chunk of `model` from the chunks the profile measured (`head_chunks`): as
    measured when it measured this many chunks, else per role (the first chunk holds the final norm,
    the last the loss) a straight line in the chunk's share of the vocabulary through the measured
    chunks of that role: a role measured at one share takes the last (or first) role's slope through
    its point (proportional when no role was measured at two shares), and the middle role the last's
    line when no middle chunk was measured. None when the profile measured no chunks."""
    from adaptis_plan.inputs.models.transform import split_head

    if not profile.head_chunks:
        return None
    k = model.num_head_chunks
    first = model.num_layers - k
    by_count = {hp.num_chunks: hp for hp in profile.head_chunks}
    if k in by_count:
        exact = {first + c: e for e in by_count[k].entries for c in e.layers if c < k}
        if len(exact) == k:
            return {j: e.model_copy(update={"layers": [j]}) for j, e in exact.items()}
    unsplit = model.model_copy(update={"layers": [*model.layers[:first], LayerSpec(kind="head")]})
    points: dict[str, list[tuple[float, np.ndarray]]] = {"last": [], "first": [], "middle": []}
    for n, hp in by_count.items():
        ranges = [_vocab_span(layer) for layer in split_head(unsplit, n).layers[-n:]]
        for e in hp.entries:
            for c in e.layers:
                if c < n:
                    lo, hi = ranges[c]
                    values = np.array([float(getattr(e, f)) for f in _CHUNK_FIELDS])
                    points[_chunk_role(c, n)].append(((hi - lo) / model.vocab_size, values))
    if not points["middle"]:
        points["middle"] = points["last"]
    lines: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for role, pts in points.items():
        x = np.array([p[0] for p in pts])
        y = np.array([p[1] for p in pts])
        if len(set(x.tolist())) >= 2:
            slope, intercept = np.polyfit(x, y, 1)
            lines[role] = (slope, intercept)
        else:  # one share measured: another role's slope (the per-vocabulary cost is the same) through it
            other = next((lines.get(r) for r in ("last", "first") if lines.get(r) is not None), None)
            slope = other[0] if other is not None else y.mean(axis=0) / float(x.mean())
            lines[role] = (slope, y.mean(axis=0) - slope * float(x.mean()))
    out = {}
    hot_measured = any(e.w_hot_s is not None for hp in profile.head_chunks for e in hp.entries)
    for c in range(k):
        lo, hi = _vocab_span(model.layers[first + c])
        slope, intercept = lines[_chunk_role(c, k)]
        values = np.maximum(intercept + slope * (hi - lo) / model.vocab_size, 0.0)
        f, i, w, b, act, act_w, w_hot = values.tolist()
        out[first + c] = LayerCostEntry(
            layers=[first + c], kind="head", f_s=f, i_s=i, w_s=w, b_s=b,
            act_bytes=int(round(act)), act_w_bytes=int(round(min(act_w, act))),
            w_hot_s=w_hot if hot_measured else None,
        )  # fmt: skip
    return out


def _profile_targets(profile: CostProfile, model: ModelSpec):
    """(layer index, scale, entry) for every measured layer. A profile measured on the unsplit
    model gives a split head's chunks the costs of the chunks it measured (`_head_chunk_entries`),
    or, when it measured none, each chunk the whole head's in proportion to the chunk's share of the
    vocabulary (logits GEMM and cross-entropy are linear in it; the chunks' own fixed costs are
    then missed); a profile of the split model applies as measured."""
    k = model.num_head_chunks
    unsplit_head = model.num_layers - k
    if profile.model.head_chunks is not None:
        chunked = k > 1 and profile.model.head_chunks == 1
    else:  # written before profiles recorded their head's chunks: a profile of the unsplit model ends at its head
        chunked = k > 1 and 1 + max(i for e in profile.entries for i in e.layers) == unsplit_head + 1
    chunks = _head_chunk_entries(profile, model) if chunked else None
    for entry in profile.entries:
        for index in entry.layers:
            if chunked and index == unsplit_head:
                for j in range(unsplit_head, model.num_layers):
                    if chunks is not None:
                        yield j, 1.0, chunks[j]
                    else:
                        lo, hi = _vocab_span(model.layers[j])
                        yield j, (hi - lo) / model.vocab_size, entry
            else:
                yield index, 1.0, entry


def tensor_parallel_sizes(model: ModelSpec) -> list[tuple[str, int]]:
    """(what, size) of every count tensor parallelism splits evenly, in layer order, once each.

    Megatron-style TP (what the analytic model divides by t): attention heads and KV heads (GQA
    groups) per rank, the inner sizes of MLPs and of every expert (experts are split like the
    MLP, there is no expert parallelism), and Mamba heads and B/C groups.
    """
    return list(_per_model(_TP_SIZES, model, _tensor_parallel_sizes))  # every cost table checks its TP degree


def _tensor_parallel_sizes(model: ModelSpec) -> list[tuple[str, int]]:
    found: dict[tuple[str, int], None] = {}
    for index, layer in enumerate(model.layers):
        at = f"layers[{index}]"
        a, mlp, moe, m = layer.attention, layer.mlp, layer.moe, layer.mamba
        if a is not None:
            found.setdefault((f"attention heads ({at}.attention.num_heads)", a.num_heads))
            if a.type == "gqa":
                found.setdefault((f"KV heads ({at}.attention.num_kv_heads)", a.num_kv_heads))
        if mlp is not None:
            found.setdefault((f"MLP inner size ({at}.mlp.intermediate_size)", mlp.intermediate_size))
        if moe is not None:
            found.setdefault((f"expert inner size ({at}.moe.expert_intermediate_size)", moe.expert_intermediate_size))
            if moe.num_shared_experts and moe.shared_intermediate_size:
                found.setdefault(
                    (f"shared-expert inner size ({at}.moe.shared_intermediate_size)", moe.shared_intermediate_size)
                )
        if m is not None:
            found.setdefault((f"Mamba heads ({at}.mamba.num_heads)", m.num_heads))
            if m.version == 2:
                found.setdefault((f"Mamba groups ({at}.mamba.num_groups)", m.num_groups))
    # one entry per distinct (kind of count, value): a 96-layer model names its first layer once
    seen: dict[tuple[str, int], str] = {}
    for what, size in found:
        seen.setdefault((what.split(" (")[0], size), what)
    return [(what, size) for (_, size), what in seen.items()]


def check_tensor_parallel(model: ModelSpec, tp: int) -> None:
    """Refuse a TP degree that does not split the model evenly, listing the degrees that do."""
    if tp == 1:
        return
    sizes = tensor_parallel_sizes(model)
    bad = next(((what, n) for what, n in sizes if n % tp), None)
    if bad is None:
        return
    g = 0
    for _, n in sizes:
        g = math.gcd(g, n)
    allowed = sorted({d for k in range(1, math.isqrt(g) + 1) if g % k == 0 for d in (k, g // k)})
    what, n = bad
    raise InputError(
        f"--tp = {tp}: {model.name}'s {what} = {n} is not divisible by {tp}; tensor parallelism splits every"
        f" head count and inner size evenly: use --tp {', '.join(map(str, allowed[:12]))}"
        + (" ..." if len(allowed) > 12 else "")
    )


def check_sequence_length(model: ModelSpec, seq_len: int) -> None:
    """Refuse a sequence longer than a learned position table (GPT-2, OPT): it has no row for the
    later positions (rotary and ALiBi have no table; how far they extrapolate is the user's call)."""
    rows = model.max_position_embeddings
    if rows is not None and seq_len > rows:
        raise InputError(
            f"--seq-len = {seq_len}: {model.name} learns positions 0..{rows - 1} (max_position_embeddings"
            f" {rows}) and has no embedding for the later ones: use --seq-len {rows} or less"
        )


def build_cost_table(
    model: ModelSpec,
    hardware: HardwareProfile,
    training: TrainingConfig,
    profile: CostProfile | None = None,
    *,
    profile_source: str = "costs.json",
    recompute: Sequence[str] | None = None,
) -> CostTable:
    """The cost table of `training.pp` pipeline ranks (see the module docstring).

    `recompute`: one mode per layer (none / selective / full; the embedding's and the head's are
    ignored: they never recompute); None applies `training.recompute` to every layer (ValueError
    for "auto", which is a per-stage choice: pass the list, `cost.recompute.plan_layer_recompute`
    for a plan). `profile_source` names the profile file in error messages. Raises InputError
    when tp does not split the model evenly, the cluster is too small for pp x tp or the profile
    does not fit the model / step shape.
    """
    check_tensor_parallel(model, training.tp)
    check_sequence_length(model, training.seq_len)
    modes = list(recompute) if recompute is not None else uniform_modes(model.layers, training)
    check_modes(modes, model.num_layers)
    slots = _slots(hardware, training.pp, training.tp, training.tp * training.cp * training.dp)
    works = _works(model, training, modes)
    num_devices = len(slots)
    place = placement(hardware, training)
    by_type = {dt: _times(works, hardware, dt, place) for dt in dict.fromkeys(dt for dt, _ in slots)}
    times = np.stack([by_type[dt] for dt, _ in slots], axis=1)  # [3, devices, layers]
    f_s, i_s, w_s = times[0], times[1], times[2]
    act = np.array([w.act_bytes for w in works], dtype=float)
    act_w = np.array([w.act_w_bytes for w in works], dtype=float)
    bw, latency = _link_matrices([node for _, node in slots], hardware.intra_node, hardware.inter_node)
    host = (0.0, 0.0)  # host time per message end: fixed, per byte (measured CPU profiles only)
    w_hot_s = None  # W right after its own I: measured profiles that time it only (`CostTable.w_hot_s`)
    b_fused_s = None  # a fused B timed as one: measured profiles only (`CostTable.b_fused_s`)
    if profile is not None:
        _check_profile(profile, model, training, profile_source)
        plain_works = _works(model, training)
        if any(w.recompute != "none" for w in works):
            plain_times = np.stack([_times(plain_works, hardware, dt, place) for dt, _ in slots], axis=1)
            # the analytic seconds each layer's recomputation adds to I, per second of its F
            # (taken before the measured numbers overwrite `times`)
            f0 = plain_times[0]
            share = np.where(f0 > 0, (times[1] - plain_times[1]) / np.maximum(f0, 1e-300), 0.0)
        targets = list(_profile_targets(profile, model))
        _check_coverage({idx for idx, _, _ in targets}, model, profile_source)
        if any(entry.w_hot_s is not None for _, _, entry in targets):
            w_hot_s = w_s.copy()
        # a fused B as the profile timed it (every layer is measured: `_check_coverage`)
        b_fused_s = i_s + (w_s if w_hot_s is None else w_hot_s)
        for idx, scale, entry in targets:
            f_s[:, idx], i_s[:, idx], w_s[:, idx] = entry.f_s * scale, entry.i_s * scale, entry.w_s * scale
            b_fused_s[:, idx] = entry.b_s * scale
            if w_hot_s is not None:
                w_hot_s[:, idx] = entry.w_hot * scale
            act[idx], act_w[idx] = entry.act_bytes * scale, min(entry.act_w_bytes, entry.act_bytes) * scale
            if works[idx].recompute != "none":
                i_plain = i_s[:, idx].copy()
                i_s[:, idx], act[idx], act_w[idx] = measured_recompute(
                    plain_works[idx], works[idx], share[:, idx], f_s[:, idx], i_s[:, idx], act[idx], act_w[idx]
                )
                b_fused_s[:, idx] += i_s[:, idx] - i_plain  # the recomputed forward runs in B as in I
        if profile.link is not None:
            if profile.link.bandwidth_gbps <= 0:
                raise InputError(
                    f"{profile_source}: link.bandwidth_gbps = {profile.link.bandwidth_gbps}: must be positive;"
                    " re-run adaptis profile or remove the link section"
                )
            off = ~np.eye(num_devices, dtype=bool)
            bw[off] = profile.link.bandwidth_gbps * 1e9
            latency[off] = profile.link.latency_s
            host = (profile.link.host_s_per_message or 0.0, profile.link.host_s_per_byte or 0.0)
    return CostTable(
        f_s=f_s,
        i_s=i_s,
        w_s=w_s,
        act_bytes=act,
        act_w_bytes=act_w,
        static_bytes=np.array([w.static_bytes for w in works], dtype=float),
        out_bytes=np.array([w.out_bytes for w in works], dtype=float),
        mem_limit_bytes=np.array(
            [hardware.device_types[dt].hbm_bytes * hardware.memory_fraction for dt, _ in slots], dtype=float
        ),
        link_bw_bytes_per_s=bw,
        link_latency_s=latency,
        layer_kinds=tuple(layer.kind for layer in model.layers),
        device_names=tuple(dt for dt, _ in slots),
        action_overhead_s=float(
            profile.action_overhead_s
            if profile is not None and profile.action_overhead_s is not None
            else hardware.action_overhead_s
        ),
        transfer_host_s=float(host[0]),
        transfer_host_s_per_byte=float(host[1]),
        w_hot_s=w_hot_s,
        b_fused_s=b_fused_s,
        time_spread=float(profile.time_spread or 0.0) if profile is not None else 0.0,
    )


def layer_param_shares(model: ModelSpec, training: TrainingConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, the (dense, routed-expert) parameters one rank holds (after TP and EP sharding)."""
    works = _works(model, training)
    return (
        np.array([w.dense_params for w in works], dtype=float),
        np.array([w.expert_params for w in works], dtype=float),
    )


def layer_comm_seconds(
    model: ModelSpec,
    hardware: HardwareProfile,
    training: TrainingConfig,
    group: str,
    modes: Sequence[str] | None = None,
) -> np.ndarray:
    """Per layer, the collectives of `group` ("tp", "cp" or "ep") in one micro-batch's F and I (with its
    recomputed forward), in seconds on `placement(hardware, training)`, before any overlap."""
    place = placement(hardware, training)
    out = np.zeros(model.num_layers)
    if place.group(group).size == 1:
        return out
    for n, w in enumerate(_works(model, training, modes)):
        ops = (w.f, w.i, w.recompute_i)
        out[n] = sum(
            place.group(group).seconds(c.kind, c.nbytes) for op in ops for c in op.collectives if c.group == group
        )
    return out


def zero3_seconds(
    model: ModelSpec, hardware: HardwareProfile, training: TrainingConfig, modes: Sequence[str] | None = None
) -> np.ndarray:
    """Per layer, ZeRO-3's collectives of one micro-batch: the parameter all-gather before F and before
    I (and before the recomputed forward) and the gradient reduce-scatter after W (`cost.comm`)."""
    place = placement(hardware, training)
    out = np.zeros(model.num_layers)
    for n, w in enumerate(_works(model, training, modes)):
        gather, scatter = zero3_collectives(w, place)
        out[n] = (3 if w.recompute == "full" else 2) * gather + scatter
    return out


def layer_cost_rows(model: ModelSpec, hardware: HardwareProfile, training: TrainingConfig) -> list[dict[str, Any]]:
    """Per-layer costs on the first pipeline rank's device type, for `adaptis model show --hardware`.

    Keys: index, kind, name, parameters (model-card count, see `cost.params`), f_s, i_s, w_s,
    act_bytes, act_w_bytes, static_bytes, out_bytes.
    """
    check_tensor_parallel(model, training.tp)
    check_sequence_length(model, training.seq_len)
    device_type, _ = _slots(hardware, 1, training.tp)[0]
    works = _works(model, training, uniform_modes(model.layers, training))
    times = _times(works, hardware, device_type, placement(hardware, training))
    rows = []
    for index, (layer, work) in enumerate(zip(model.layers, works, strict=True)):
        rows.append(
            {
                "index": index,
                "kind": layer.kind,
                "name": layer.name,
                "parameters": layer_params(model, layer).total,
                "f_s": float(times[0, index]),
                "i_s": float(times[1, index]),
                "w_s": float(times[2, index]),
                "act_bytes": int(round(work.act_bytes)),
                "act_w_bytes": int(round(work.act_w_bytes)),
                "static_bytes": int(round(work.static_bytes)),
                "out_bytes": int(round(work.out_bytes)),
            }
        )
    return rows


__all__ = [
    "build_cost_table",
    "check_sequence_length",
    "check_tensor_parallel",
    "layer_cost_rows",
    "tensor_parallel_sizes",
]
