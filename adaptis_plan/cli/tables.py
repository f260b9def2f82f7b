"""The tables the catalogue, `model show`, `hardware show` and `profile` commands print (rich, on the
stderr console); `simulate` and `plan` print theirs through `render.report`. Imports rich lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adaptis_plan.cli.streams import console, emit_json
from adaptis_plan.text import MAX_SHOWN, shown
from adaptis_plan.units import fmt_bytes, fmt_time

if TYPE_CHECKING:
    from adaptis_plan.cost.params import ParamCount
    from adaptis_plan.spec.cost_profile import CostProfile, LayerCostEntry
    from adaptis_plan.spec.hardware import HardwareProfile
    from adaptis_plan.spec.model import ModelSpec


def print_catalogue(key: str, title: str, rows: list[tuple[str, str]], as_json: bool) -> None:
    """A (name, description) list: `{key: [...]}` with --json, else a table."""
    if as_json:
        emit_json({key: [{"name": n, "description": d} for n, d in rows]})
        return
    from rich.table import Table

    t = Table(title=title)
    t.add_column("name")
    t.add_column("description")
    for n, d in rows:
        t.add_row(shown(n), shown(d, 4 * MAX_SHOWN))
    console().print(t)


def print_model(spec: ModelSpec, rows: list[dict], total: ParamCount, timed: bool) -> None:
    """`model show`: one row per layer (`rows`, with F / I / W ms and activation bytes when `timed`),
    then the parameter totals."""
    from rich.table import Table

    t = Table(title=f"{shown(spec.name)}: {spec.num_layers} layers")
    t.add_column("index", justify="right")
    t.add_column("kind")
    t.add_column("parameters", justify="right")
    if timed:
        for c in ("F ms", "I ms", "W ms", "act"):
            t.add_column(c, justify="right")
    for r in rows:
        cells = [str(r["index"]), shown(r["kind"]), f"{r['parameters']:,}"]
        if timed:
            cells += [
                fmt_time(r["f_s"], "ms", suffix=False),
                fmt_time(r["i_s"], "ms", suffix=False),
                fmt_time(r["w_s"], "ms", suffix=False),
                fmt_bytes(r["act_bytes"]),
            ]
        t.add_row(*cells)
    console().print(t)
    line = f"total parameters: {total.total:,} ({total.total / 1e9:.2f}B), active per token: {total.active / 1e9:.2f}B"
    if spec.extra_parameters:
        line += f"; outside the pipeline (vision tower): {spec.extra_parameters / 1e9:.2f}B"
    console().print(line)


def print_hardware(hw: HardwareProfile) -> None:
    """`hardware show`: the device types, the groups and the links of one profile, each figure with its
    unit and scope (per GPU, per node, per direction; GB/s are gigabytes, Gb/s gigabits per second)."""
    from rich.table import Table

    from adaptis_plan.spec.hardware import nic_gbit_per_node, usable_memory_text

    t = Table(title=f"{shown(hw.name)}: {shown(hw.description, 4 * MAX_SHOWN)}")
    for c in ("device type", "bf16 TFLOP/s per GPU", "matmul eff.", "HBM per GPU", "HBM GB/s per GPU"):
        t.add_column(c)
    for n, d in hw.device_types.items():
        t.add_row(
            shown(n),
            f"{d.peak_bf16_tflops:g}",
            f"{d.matmul_efficiency:g}",
            fmt_bytes(d.hbm_bytes),
            f"{d.hbm_bandwidth_gbps:g}",
        )
    console().print(t)
    for g, node_gbit in zip(hw.groups, nic_gbit_per_node(hw), strict=True):
        console().print(
            f"group: {g.num_nodes} node(s) x {g.devices_per_node} {shown(g.device_type)}"
            f" = {g.num_nodes * g.devices_per_node:,} GPUs; network {node_gbit:,g} Gb/s per node per direction"
        )
    console().print(
        f"usable memory: {usable_memory_text(hw)}; memory_fraction {hw.memory_fraction:g} (plan --memory-fraction"
        " / --usable-memory-gib override it)"
    )
    for label, link in (("intra-node", hw.intra_node), ("inter-node", hw.inter_node)):
        gbit = f" = {link.bandwidth_gbps * 8:,g} Gb/s" if link is hw.inter_node else ""
        console().print(
            f"{label} link: {link.bandwidth_gbps:g} GB/s per GPU per direction{gbit}, {link.latency_s * 1e6:g} us"
            f" ({shown(link.source, 4 * MAX_SHOWN)})"
        )


def print_profile(spec: ModelSpec, prof: CostProfile, seq_len: int, recompute: dict[str, list[LayerCostEntry]]) -> None:
    """`profile`: the measured entries and, with `recompute`, the same layers under each recomputation mode."""
    from rich.table import Table

    t = Table(title=f"{shown(spec.name)} on {shown(prof.device)} (torch {shown(prof.torch_version)}, seq {seq_len})")
    for c in ("layers", "kind", "F ms", "I ms", "W ms", "W after its I ms", "B ms", "act"):
        t.add_column(c)
    for e in prof.entries:
        t.add_row(
            _shown_layers(e.layers),
            shown(e.kind),
            fmt_time(e.f_s, "ms", suffix=False),
            fmt_time(e.i_s, "ms", suffix=False),
            fmt_time(e.w_s, "ms", suffix=False),
            fmt_time(e.w_hot, "ms", suffix=False),
            fmt_time(e.b_s, "ms", suffix=False),
            fmt_bytes(e.act_bytes),
        )
    console().print(t)
    if recompute:
        base = {tuple(e.layers): e for e in prof.entries}
        r = Table(title="with recomputation (I and B include the recomputed forward)")
        for c in ("layers", "kind", "mode", "I ms", "B ms", "act", "act kept"):
            r.add_column(c)
        for mode, entries in recompute.items():
            for e in entries:
                kept = e.act_bytes / base[tuple(e.layers)].act_bytes if base[tuple(e.layers)].act_bytes else 1.0
                r.add_row(
                    _shown_layers(e.layers),
                    shown(e.kind),
                    mode,
                    fmt_time(e.i_s, "ms", suffix=False),
                    fmt_time(e.b_s, "ms", suffix=False),
                    fmt_bytes(e.act_bytes),
                    f"{kept * 100:.0f}%",
                )
        console().print(r)


def _shown_layers(layers: list[int]) -> str:
    return ",".join(map(str, layers[:6])) + ("..." if len(layers) > 6 else "")
