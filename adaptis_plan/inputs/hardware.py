"""Hardware profiles: find, read and validate them (built-in names or files).

Data flow: `--hardware HW` (CLI) -> `load_hardware` -> `HardwareProfile` -> the cost model
(`costmodel`, per device type) and `costs.build_cost_table` (rank slots, links).
Built-ins are the `profiles/*.json` files shipped inside the package (`adaptis_plan/profiles`
is a link to the top-level `profiles/` folder); a file there is a hardware profile when it has
a `device_types` key (measured layer-cost profiles live in the same folder).

Imports only the spec and the errors: no torch, no ortools, no rich/click. Never prints.
"""

from __future__ import annotations

import difflib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from adaptis_plan.errors import InputError
from adaptis_plan.spec.hardware import HardwareProfile

_SUFFIXES = (".json", ".yaml", ".yml")


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
        profile = _parse(entry.read_text(encoding="utf-8"), f"built-in hardware '{name}'", ".json")
        rows.append((name, profile.description))
    return rows


def load_hardware(arg: str) -> HardwareProfile:
    """A built-in profile by name (`h200`) or a profile file (`.json`, `.yaml`).

    Raises InputError with one line naming the file, field, value and fix.
    """
    builtins = _builtin_files()
    if arg in builtins:
        return _parse(builtins[arg].read_text(encoding="utf-8"), f"built-in hardware '{arg}'", ".json")
    path = Path(arg)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"{arg}: cannot read the hardware profile: {e.strerror or e}") from None
        return _parse(text, str(path), path.suffix.lower())
    names = sorted(builtins)
    if path.suffix.lower() in _SUFFIXES or "/" in arg or "\\" in arg:
        raise InputError(
            f"{arg}: no such hardware profile file; give an existing path or a built-in name ({', '.join(names)})"
        )
    close = difflib.get_close_matches(arg, names, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise InputError(
        f"hardware '{arg}': not a built-in profile nor a file; {hint}built-ins: {', '.join(names)} (see 'adaptis hardware')"
    )


def _parse(text: str, where: str, suffix: str) -> HardwareProfile:
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
            raise InputError(f"{where}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(data, dict):
        raise InputError(
            f"{where}: a hardware profile is a JSON object with name, device_types, groups, intra_node, inter_node"
        )
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where}: {_first_error(e)}") from None


def _dotted(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _first_error(e: ValidationError) -> str:
    """'groups[0].num_nodes = 0: Input should be greater than 0 (+1 more error)'.

    An unknown field (a typo) is reported first, with the missing field it likely meant.
    """
    errors = e.errors(include_url=False)
    errors.sort(key=lambda err: err.get("type") != "extra_forbidden")
    err = errors[0]
    loc = tuple(err.get("loc", ()))
    path = _dotted(loc)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if err.get("type") == "missing":
        text = f"{path}: field required"
    elif err.get("type") == "extra_forbidden":
        missing = [str(x["loc"][-1]) for x in errors if x.get("type") == "missing" and tuple(x["loc"][:-1]) == loc[:-1]]
        close = difflib.get_close_matches(str(loc[-1]), missing, n=1, cutoff=0.6) if loc else []
        text = f"{path}: unknown field" + (f"; did you mean '{close[0]}'?" if close else " (typo?)")
    else:
        value = err.get("input")
        shown = (
            json.dumps(value) if isinstance(value, str | int | float | bool) or value is None else type(value).__name__
        )
        text = f"{path} = {shown}: {msg}" if path else msg
    more = len(errors) - 1
    if more:
        text += f" (+{more} more error{'s' if more > 1 else ''})"
    return text


__all__ = ["builtin_hardware_names", "list_hardware", "load_hardware"]
