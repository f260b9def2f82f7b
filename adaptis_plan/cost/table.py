"""Cost table assembly: model + hardware + training config (+ measured profile) -> `CostTable`.

Data flow: `ModelSpec`, `HardwareProfile`, `TrainingConfig` and optionally a measured
`CostProfile` -> here -> `core.CostTable` -> the schedule builders, the search and the
simulator. Per-layer numbers come from `costmodel` (each distinct layer and device type is
computed once); pipeline rank r runs on the device type and node that
`HardwareProfile.rank_slots(pp, tp)` gives it.

- Times are per device row: a rank's row uses its device type's speed.
- `mem_limit_bytes[r]` = that device's `hbm_bytes * memory_fraction`.
- Links: ranks on the same node use `intra_node`, others `inter_node`; the bandwidth is per
  pipeline rank pair; a rank to itself costs nothing (infinite bandwidth, zero latency).
  With TP t, `out_bytes` is the 1/t sequence-parallel shard that each of a rank's t GPUs sends
  over its own link, so the per-GPU link bandwidth applies to it unchanged.
- Recomputation is per layer (`recompute=`, one of none / selective / full per layer; default:
  `training.recompute` for every layer): `cost.recompute` changes each layer's I work and bytes.
- A measured profile replaces F / I / W seconds and `act_bytes` / `act_w_bytes` of the layers
  it lists, on every device row: it was measured on one device type and is taken to hold for
  all ranks (heterogeneous clusters need the analytic model or a profile per type). Its link,
  when measured, replaces every off-diagonal link. Parameters, `static_bytes` and
  `out_bytes` stay analytic. The profile must be of this model (fingerprint) and step shape
  (sequence length, micro-batch size); its dtype and TP degree are taken as the planned ones.
  It is measured without recomputation: a recomputed layer's measured I grows by the analytic
  share of F that its mode reruns, and its bytes change as `cost.recompute.measured_recompute` says.

Imports the specs, `costmodel`, `params`, `core` and `errors` only. Never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from adaptis_plan.core import CostTable
from adaptis_plan.cost.analytic import LayerWork, layer_work, op_seconds
from adaptis_plan.cost.params import layer_params
from adaptis_plan.cost.recompute import check_modes, measured_recompute, recompute_work, recomputes, uniform_modes
from adaptis_plan.errors import InputError
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile, LinkSpec
from adaptis_plan.spec.model import LayerSpec, ModelSpec
from adaptis_plan.spec.training import TrainingConfig


def _layer_key(layer: LayerSpec) -> tuple[Any, ...]:
    """Layers with equal shapes share costs, whatever their `name`."""
    return (layer.kind, layer.attention, layer.mlp, layer.moe, layer.mamba, layer.vocab_range)


def _works(model: ModelSpec, training: TrainingConfig, modes: Sequence[str] | None = None) -> list[LayerWork]:
    """Per-layer work under `modes` (None: no recomputation); equal layers share one object."""
    cache: dict[tuple[Any, ...], LayerWork] = {}
    works = []
    for n, layer in enumerate(model.layers):
        mode = modes[n] if modes is not None and recomputes(layer.kind) else "none"
        plain_key = (_layer_key(layer), "none")
        plain = cache.get(plain_key)
        if plain is None:
            plain = cache[plain_key] = layer_work(model, layer, training)
        key = (_layer_key(layer), mode)
        work = cache.get(key)
        if work is None:
            work = cache[key] = recompute_work(plain, layer, model, training, mode)
        works.append(work)
    return works


def _slots(hardware: HardwareProfile, pp: int, tp: int) -> list[tuple[str, int]]:
    try:
        return hardware.rank_slots(pp, tp)
    except ValueError as e:
        raise InputError(str(e)) from None


def _times(works: list[LayerWork], hardware: HardwareProfile, device_type: str) -> np.ndarray:
    """[3, num_layers] F / I / W seconds of every layer on one device type."""
    device = hardware.device_types[device_type]
    link = hardware.intra_node
    per_work: dict[int, tuple[float, float, float]] = {}
    out = np.empty((3, len(works)))
    for col, work in enumerate(works):
        times = per_work.get(id(work))
        if times is None:
            times = per_work[id(work)] = op_seconds(work, device, link)
        out[:, col] = times
    return out


def _link_matrices(nodes: list[int], intra: LinkSpec, inter: LinkSpec) -> tuple[np.ndarray, np.ndarray]:
    node = np.asarray(nodes)
    same = node[:, None] == node[None, :]
    bw = np.where(same, intra.bandwidth_gbps, inter.bandwidth_gbps) * 1e9
    latency = np.where(same, intra.latency_s, inter.latency_s).astype(float)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(latency, 0.0)
    return bw, latency


def _check_profile(profile: CostProfile, model: ModelSpec, training: TrainingConfig, source: str) -> None:
    if profile.model.fingerprint != model.fingerprint():
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
    for n, entry in enumerate(profile.entries):
        for index in entry.layers:
            if index >= model.num_layers:
                raise InputError(
                    f"{source}: entries[{n}].layers = {index}: model '{model.name}' has layers 0..{model.num_layers - 1};"
                    " re-run adaptis profile on this model"
                )


def _profile_targets(profile: CostProfile, model: ModelSpec):
    """(layer index, scale, entry) for every measured layer. A profile measured on the unsplit
    model applies its head to each vocabulary chunk in proportion to the chunk's share of the
    vocabulary (logits GEMM and cross-entropy are linear in it); a profile of the split model
    applies as measured."""
    k = model.num_head_chunks
    measured_layers = 1 + max(i for e in profile.entries for i in e.layers)
    unsplit_head = model.num_layers - k
    for entry in profile.entries:
        for index in entry.layers:
            if k > 1 and measured_layers == unsplit_head + 1 and index == unsplit_head:
                for j in range(unsplit_head, model.num_layers):
                    lo, hi = model.layers[j].vocab_range
                    yield j, (hi - lo) / model.vocab_size, entry
            else:
                yield index, 1.0, entry


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
    when the cluster is too small for pp x tp or the profile does not fit the model / step shape.
    """
    modes = list(recompute) if recompute is not None else uniform_modes(model.layers, training)
    check_modes(modes, model.num_layers)
    slots = _slots(hardware, training.pp, training.tp)
    works = _works(model, training, modes)
    num_devices = len(slots)
    by_type = {dt: _times(works, hardware, dt) for dt in dict.fromkeys(dt for dt, _ in slots)}
    times = np.stack([by_type[dt] for dt, _ in slots], axis=1)  # [3, devices, layers]
    f_s, i_s, w_s = times[0], times[1], times[2]
    act = np.array([w.act_bytes for w in works], dtype=float)
    act_w = np.array([w.act_w_bytes for w in works], dtype=float)
    bw, latency = _link_matrices([node for _, node in slots], hardware.intra_node, hardware.inter_node)
    if profile is not None:
        _check_profile(profile, model, training, profile_source)
        plain_works = _works(model, training)
        if any(w.recompute != "none" for w in works):
            plain_times = np.stack([_times(plain_works, hardware, dt) for dt, _ in slots], axis=1)
            # the analytic seconds each layer's recomputation adds to I, per second of its F
            # (taken before the measured numbers overwrite `times`)
            f0 = plain_times[0]
            share = np.where(f0 > 0, (times[1] - plain_times[1]) / np.maximum(f0, 1e-300), 0.0)
        for idx, scale, entry in _profile_targets(profile, model):
            f_s[:, idx], i_s[:, idx], w_s[:, idx] = entry.f_s * scale, entry.i_s * scale, entry.w_s * scale
            act[idx], act_w[idx] = entry.act_bytes * scale, min(entry.act_w_bytes, entry.act_bytes) * scale
            if works[idx].recompute != "none":
                i_s[:, idx], act[idx], act_w[idx] = measured_recompute(
                    plain_works[idx], works[idx], share[:, idx], f_s[:, idx], i_s[:, idx], act[idx], act_w[idx]
                )
        if profile.link is not None:
            if profile.link.bandwidth_gbps <= 0:
                raise InputError(
                    f"{profile_source}: link.bandwidth_gbps = {profile.link.bandwidth_gbps}: must be positive;"
                    " re-run adaptis profile or remove the link section"
                )
            off = ~np.eye(num_devices, dtype=bool)
            bw[off] = profile.link.bandwidth_gbps * 1e9
            latency[off] = profile.link.latency_s
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
    )


def layer_cost_rows(model: ModelSpec, hardware: HardwareProfile, training: TrainingConfig) -> list[dict[str, Any]]:
    """Per-layer costs on the first pipeline rank's device type, for `adaptis model show --hardware`.

    Keys: index, kind, name, parameters (model-card count, see params.py), f_s, i_s, w_s,
    act_bytes, act_w_bytes, static_bytes, out_bytes.
    """
    device_type, _ = _slots(hardware, 1, training.tp)[0]
    works = _works(model, training, uniform_modes(model.layers, training))
    times = _times(works, hardware, device_type)
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


__all__ = ["build_cost_table", "layer_cost_rows"]
