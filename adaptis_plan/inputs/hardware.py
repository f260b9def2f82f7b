"""Hardware profiles: find, read and validate them (built-in names or files).

Data flow: `--hardware HW` (CLI) -> `load_hardware` -> `HardwareProfile` -> the cost model
(`cost.analytic`, per device type) and `cost.table.build_cost_table` (rank slots, links).
Built-ins are the `profiles/*.json` files shipped inside the package (`adaptis_plan/profiles`
is a link to the top-level `profiles/` folder); a file there is a hardware profile when it has
a `device_types` key (measured layer-cost profiles live in the same folder). The command line's
changes to a profile: `apply_overrides` (GPUs per node, NIC bandwidth, usable memory) and `cluster`
(the profile cut to `adaptis plan --gpus N`, the whole-configuration search's cluster).

Files are read by the one boundary reader (`spec.read`). Imports only the spec and the errors:
no torch, no ortools, no rich/click. Never prints.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from adaptis_plan.errors import InputError
from adaptis_plan.spec.hardware import DeviceGroupSpec, HardwareProfile, HardwareProfileFile
from adaptis_plan.spec.limits import MAX_DEVICES_PER_NODE, MAX_GBPS, MAX_NODES, MIN_GBPS
from adaptis_plan.spec.read import path_kind, read_boundary_file

_SUFFIXES = (".json", ".yaml", ".yml")
_FIX = "compare it with `adaptis hardware show h200 --json`"


def _builtin_files() -> dict[str, Any]:
    """name -> resource of every built-in hardware profile, by file stem."""
    root = resources.files("adaptis_plan") / "profiles"
    found: dict[str, Any] = {}
    if not root.is_dir():
        return found
    for entry in root.iterdir():
        if not entry.name.endswith(".json"):
            continue
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "device_types" in data:
            found[entry.name[: -len(".json")]] = entry
    return found


def builtin_hardware_names() -> list[str]:
    """Sorted names of the built-in hardware profiles."""
    return sorted(_builtin_files())


def list_hardware() -> list[tuple[str, str]]:
    """(name, description) of every built-in hardware profile, sorted by name."""
    rows = []
    for name, entry in sorted(_builtin_files().items()):
        with resources.as_file(entry) as path:
            rows.append((name, _read(path).description))
    return rows


def load_hardware(arg: str) -> HardwareProfile:
    """A built-in profile by name (`h200`) or a profile file (`.json`, `.yaml`).

    Raises InputError with one line naming the file, field, value and fix.
    """
    builtins = _builtin_files()
    if arg in builtins:
        with resources.as_file(builtins[arg]) as path:
            return _read(path)
    names = sorted(builtins)
    if not arg.strip():  # before the path: Path('') is the current folder
        raise InputError(f"hardware '': empty; give a built-in name ({', '.join(names)}) or a profile file")
    path = Path(arg)
    if path_kind(path) is not None:  # a regular file, or something the reader refuses by name (a FIFO)
        return _read(path)
    if path.suffix.lower() in _SUFFIXES or "/" in arg or "\\" in arg:
        raise InputError(
            f"{arg}: no such hardware profile file; give an existing path or a built-in name ({', '.join(names)})"
        )
    close = difflib.get_close_matches(arg, names, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise InputError(
        f"hardware '{arg}': not a built-in profile nor a file; {hint}built-ins: {', '.join(names)} (see 'adaptis hardware')"
    )


def _read(path: Path) -> HardwareProfile:
    """A profile file; the read-only keys `hardware show --json` adds are dropped (`hardware_notes`)."""
    return read_boundary_file(path, HardwareProfileFile, "hardware profile", fix=_FIX).profile()


def hardware_notes(arg: str) -> list[str]:
    """Notes on a profile file `load_hardware(arg)` reads: its read-only keys (`hardware show --json`'s) that
    disagree with the fields they derive from, so were ignored (`HardwareProfileFile.stale`). None for a
    built-in name."""
    if arg in _builtin_files():
        return []
    path = Path(arg)
    lines = read_boundary_file(path, HardwareProfileFile, "hardware profile", fix=_FIX).stale()
    return [f"{path}: {line}" for line in lines]


# ----------------------------------------------------------------------------- command-line overrides
@dataclass(frozen=True)
class HardwareOverrides:
    """What differs between clusters, given on the command line (`adaptis plan`); None = the profile's.

    `nic_gbit_per_node` / `nic_gbit_per_gpu` are Gb/s per direction (gigabits, as NICs are sold; the
    profile's `inter_node.bandwidth_gbps` is GB/s per GPU); `usable_memory_gib` is GiB per GPU.
    """

    gpus_per_node: int | None = None
    nic_gbit_per_node: str | None = None  # "800" or "4x200": NICs x Gb/s each
    nic_gbit_per_gpu: float | None = None
    memory_fraction: float | None = None
    usable_memory_gib: float | None = None

    @property
    def given(self) -> bool:
        return any(v is not None for v in dataclasses.astuple(self))

    def flags(self) -> str:
        """The overrides as the command line gave them: '--gpus-per-node 4 --nic-gbit-per-node 4x200'."""
        return " ".join(
            f"--{f.name.replace('_', '-')} {getattr(self, f.name):g}"
            if isinstance(getattr(self, f.name), float)
            else f"--{f.name.replace('_', '-')} {getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        )


_NIC = re.compile(r"^\s*(?:(\d+)\s*[x*]\s*)?(\d+(?:\.\d+)?)\s*$", re.IGNORECASE)


def parse_nic_gbit(text: str, flag: str = "--nic-gbit-per-node") -> float:
    """'800' or '4x200' (NICs x Gb/s each) -> Gb/s. Raises InputError for anything else."""
    m = _NIC.match(text)
    total = int(m.group(1) or 1) * float(m.group(2)) if m else math.nan
    if not (math.isfinite(total) and total > 0):
        raise InputError(
            f"{flag} = {text!r}: not a bandwidth; give Gb/s per node as one number (800) or NICs x Gb/s each (4x200)"
        )
    return total


def check_overrides(o: HardwareOverrides) -> None:
    """Each override on its own (before any file is read): one line naming the flag, the value and the fix."""
    if o.gpus_per_node is not None and not 1 <= o.gpus_per_node <= MAX_DEVICES_PER_NODE:
        raise InputError(
            f"--gpus-per-node = {o.gpus_per_node}: must be 1..{MAX_DEVICES_PER_NODE}; pass e.g. --gpus-per-node 8"
        )
    if o.nic_gbit_per_node is not None and o.nic_gbit_per_gpu is not None:
        raise InputError("--nic-gbit-per-node and --nic-gbit-per-gpu both given: they set the same link; keep one")
    if o.nic_gbit_per_node is not None:
        parse_nic_gbit(o.nic_gbit_per_node)
    if o.nic_gbit_per_gpu is not None and not (math.isfinite(o.nic_gbit_per_gpu) and o.nic_gbit_per_gpu > 0):
        raise InputError(
            f"--nic-gbit-per-gpu = {o.nic_gbit_per_gpu}: must be a positive number of Gb/s; pass e.g."
            " --nic-gbit-per-gpu 400 (one 400 Gb/s NIC per GPU)"
        )
    if o.memory_fraction is not None and o.usable_memory_gib is not None:
        raise InputError("--memory-fraction and --usable-memory-gib both given: they set the same limit; keep one")
    if o.memory_fraction is not None and not (math.isfinite(o.memory_fraction) and 0 < o.memory_fraction <= 1):
        raise InputError(
            f"--memory-fraction = {o.memory_fraction}: must be in (0, 1], the share of each GPU's memory the plan"
            " may fill; pass e.g. --memory-fraction 0.9"
        )
    if o.usable_memory_gib is not None and not (math.isfinite(o.usable_memory_gib) and o.usable_memory_gib > 0):
        raise InputError(
            f"--usable-memory-gib = {o.usable_memory_gib}: must be a positive number of GiB per GPU; pass e.g."
            " --usable-memory-gib 70"
        )


def apply_overrides(hardware: HardwareProfile, o: HardwareOverrides) -> HardwareProfile:
    """`hardware` with the command line's overrides (`HardwareOverrides`); unchanged when none is given.

    The changed fields' `source` and the profile's description name the flags, so the plan file, which
    embeds the profile, records the hardware it was planned on. Raises InputError for an override the
    profile cannot take (one line: the flag, the value, the rule, the fix).
    """
    check_overrides(o)
    if not o.given:
        return hardware
    update: dict = {}
    groups = hardware.groups
    if o.gpus_per_node is not None:
        groups = [DeviceGroupSpec(device_type=g.device_type, num_nodes=g.num_nodes, devices_per_node=o.gpus_per_node)
                  for g in groups]  # fmt: skip
        update["groups"] = groups
    per_node = {g.devices_per_node for g in groups}
    gbit_per_gpu, said = None, ""
    if o.nic_gbit_per_node is not None:
        if len(per_node) > 1:
            raise InputError(
                f"--nic-gbit-per-node {o.nic_gbit_per_node}: hardware '{hardware.name}' has nodes of"
                f" {' and '.join(map(str, sorted(per_node)))} GPUs, so a node's bandwidth is no one GPU's share;"
                " give --nic-gbit-per-gpu instead"
            )
        total, n = parse_nic_gbit(o.nic_gbit_per_node), per_node.pop()
        gbit_per_gpu = total / n
        said = f"--nic-gbit-per-node {o.nic_gbit_per_node}: {total:g} Gb/s per node over {n} GPUs"
    elif o.nic_gbit_per_gpu is not None:
        gbit_per_gpu, said = o.nic_gbit_per_gpu, f"--nic-gbit-per-gpu {o.nic_gbit_per_gpu:g}"
    if gbit_per_gpu is not None:
        gbps = gbit_per_gpu / 8
        if not MIN_GBPS <= gbps <= MAX_GBPS:
            raise InputError(
                f"{said.split(':')[0]}: {gbps:g} GB/s per GPU is outside {MIN_GBPS:g}..{MAX_GBPS:g} GB/s; give the"
                " network bandwidth in Gb/s (gigabits per second, e.g. 400 for NDR InfiniBand)"
            )
        inter = hardware.inter_node
        link = {"bandwidth_gbps": gbps, "source": f"command line, {said} = {gbit_per_gpu:g} Gb/s = {gbps:g} GB/s"
                " per GPU per direction; nominal"}  # fmt: skip
        if inter.p2p_bandwidth_gbps is not None and inter.p2p_bandwidth_gbps > gbps:
            link["p2p_bandwidth_gbps"] = gbps  # a send/recv is no faster than its NIC
        update["inter_node"] = inter.model_copy(update=link)
    if o.usable_memory_gib is not None:
        sizes = {d.hbm_bytes for d in hardware.device_types.values()}
        if len(sizes) > 1:
            raise InputError(
                f"--usable-memory-gib {o.usable_memory_gib:g}: hardware '{hardware.name}' mixes GPUs of"
                f" {len(sizes)} memory sizes; give --memory-fraction (the share of each GPU's memory) instead"
            )
        hbm = sizes.pop()
        fraction = o.usable_memory_gib * 2**30 / hbm
        if fraction > 1:
            raise InputError(
                f"--usable-memory-gib = {o.usable_memory_gib:g}: more than the {hbm / 2**30:.1f} GiB each GPU of"
                f" hardware '{hardware.name}' has; give at most {math.floor(hbm / 2**30 * 10) / 10:g}"
            )
        update["memory_fraction"] = fraction
    elif o.memory_fraction is not None:
        update["memory_fraction"] = o.memory_fraction
    update["description"] = f"{hardware.description} Command line: {o.flags()}.".strip()
    return HardwareProfile.model_validate(hardware.model_copy(update=update).model_dump())


def cluster(hardware: HardwareProfile, gpus: int, source: str = "--gpus") -> HardwareProfile:
    """`hardware` sized to `gpus` GPUs: its one device group's node count (a slice of one node when
    gpus < devices per node). Raises InputError for a size the profile cannot be cut to."""
    if gpus < 1:
        raise InputError(f"{source} = {gpus}: must be at least 1")
    if len(hardware.groups) != 1:
        if gpus == hardware.num_devices:
            return hardware
        raise InputError(
            f"{source} = {gpus}: hardware '{hardware.name}' mixes {len(hardware.groups)} device groups"
            f" ({hardware.num_devices} GPUs); a mixed cluster is planned at its own size: use {source}"
            f" {hardware.num_devices}"
        )
    g = hardware.groups[0]
    if gpus > MAX_NODES * g.devices_per_node:
        raise InputError(
            f"{source} = {gpus:,}: more than {MAX_NODES:,} nodes of {g.devices_per_node} GPUs; use at most"
            f" {MAX_NODES * g.devices_per_node:,}"
        )
    if gpus <= g.devices_per_node:
        group = DeviceGroupSpec(device_type=g.device_type, num_nodes=1, devices_per_node=gpus)
    elif gpus % g.devices_per_node:
        raise InputError(
            f"{source} = {gpus}: not a whole number of {hardware.name} nodes ({g.devices_per_node} GPUs each);"
            f" use a multiple of {g.devices_per_node}"
        )
    else:
        group = DeviceGroupSpec(device_type=g.device_type, num_nodes=gpus // g.devices_per_node,
                                devices_per_node=g.devices_per_node)  # fmt: skip
    return hardware.model_copy(update={"groups": [group]})


__all__ = [
    "HardwareOverrides",
    "apply_overrides",
    "builtin_hardware_names",
    "check_overrides",
    "cluster",
    "hardware_notes",
    "list_hardware",
    "load_hardware",
    "parse_nic_gbit",
]
