"""Hardware profiles: find, read and validate them (built-in names or files).

Data flow: `--hardware HW` (CLI) -> `load_hardware` -> `HardwareProfile` -> the cost model
(`cost.analytic`, per device type) and `cost.table.build_cost_table` (rank slots, links).
Built-ins are the `profiles/*.json` files shipped inside the package (`adaptis_plan/profiles`
is a link to the top-level `profiles/` folder); a file there is a hardware profile when it has
a `device_types` key (measured layer-cost profiles live in the same folder).

Files are read by the one boundary reader (`spec.read`). Imports only the spec and the errors:
no torch, no ortools, no rich/click. Never prints.
"""

from __future__ import annotations

import difflib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from adaptis_plan.errors import InputError
from adaptis_plan.spec.hardware import HardwareProfile
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
    return read_boundary_file(path, HardwareProfile, "hardware profile", fix=_FIX)


__all__ = ["builtin_hardware_names", "list_hardware", "load_hardware"]
