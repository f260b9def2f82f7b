"""Benchmark records: one JSON file per suite, with the provenance of the run that made it.

A suite runs, then hands its results to `write`; `bench/report.py` renders BENCHMARKS.md, the
SVG pictures and the README's results block from the records alone. Nothing is ever read back
out of markdown.

A record is one JSON object:

    {"suite": NAME, "format": 1,
     "provenance": {"commit", "clean", "machine", "python", "versions", "date", "command", "wall_s"},
     "settings": {...what the suite ran: cost model, TP, memory limit, cases...},
     "data": {...the suite's results, plain JSON...}}

`provenance.clean` is False when the checkout had uncommitted changes (tracked or untracked,
excluding `GENERATED`: bench/results/, BENCHMARKS.md, docs/img and README.md, the files a run
itself writes); `make bench` refuses to write such a
record unless `--allow-dirty` is given, and the renderer marks it plainly.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import REPO, machine

FORMAT = 1
RESULTS = REPO / "bench" / "results"
#: paths that a benchmark run itself writes: they do not make a checkout dirty
GENERATED = ("bench/results", "BENCHMARKS.md", "docs/img", "README.md")


class DirtyTree(RuntimeError):
    """The checkout has uncommitted changes: a committed record must come from a clean commit."""


def checkout(repo: Path = REPO) -> tuple[str, bool]:
    """(short commit, clean) of `repo`; ("unknown", False) outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", *(f":!{p}" for p in GENERATED)],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return head, not status.strip()


def versions() -> dict[str, str]:
    """Versions of the packages a figure may depend on (absent ones are skipped)."""
    from importlib import metadata

    out = {}
    for name in ("adaptis", "ortools", "numpy", "torch"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def provenance(command: str, wall_s: float | None = None, repo: Path = REPO) -> dict[str, Any]:
    commit, clean = checkout(repo)
    return {
        "commit": commit,
        "clean": clean,
        "machine": machine(),
        "python": platform.python_version(),
        "versions": versions(),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "wall_s": None if wall_s is None else round(float(wall_s), 1),
    }


def record(suite: str, settings: Mapping[str, Any], data: Any, command: str, wall_s: float | None = None) -> dict:
    return {
        "suite": suite,
        "format": FORMAT,
        "provenance": provenance(command, wall_s),
        "settings": dict(settings),
        "data": data,
    }


def write(rec: Mapping[str, Any], out_dir: Path = RESULTS, allow_dirty: bool = False) -> Path:
    """Write `rec` to `out_dir/<suite>.json` (1-space indent, newline at the end). Keys stay in the order
    the suite made them: some dicts' order carries meaning (a case's strategies in the order planned).

    Raises DirtyTree for a record from a dirty checkout unless `allow_dirty`."""
    if not rec["provenance"]["clean"] and not allow_dirty:
        raise DirtyTree(
            f"suite {rec['suite']}: the checkout at {rec['provenance']['commit']} has uncommitted changes;"
            " commit them first, or pass --allow-dirty (the record is then marked dirty)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{rec['suite']}.json"
    path.write_text(json.dumps(rec, indent=1) + "\n")
    return path


def load(suite: str, out_dir: Path = RESULTS) -> dict | None:
    path = out_dir / f"{suite}.json"
    if not path.exists():
        return None
    rec = json.loads(path.read_text())
    if rec.get("format") != FORMAT or rec.get("suite") != suite:
        raise ValueError(f"{path}: not a format-{FORMAT} record of suite {suite}")
    return rec


def load_all(out_dir: Path = RESULTS) -> dict[str, dict]:
    """Every record in `out_dir`, by suite name."""
    if not out_dir.is_dir():
        return {}
    return {p.stem: rec for p in sorted(out_dir.glob("*.json")) if (rec := load(p.stem, out_dir)) is not None}


def reproduce_line(rec: Mapping[str, Any]) -> str:
    """The line under a section's heading: the command, the commit (dirty said plainly), machine and date."""
    p = rec["provenance"]
    commit = f"`{p['commit']}`" if p["clean"] else f"`{p['commit']}` **with uncommitted changes (not reproducible)**"
    wall = f" · wall time {p['wall_s']:g} s" if p.get("wall_s") is not None else ""
    return f"_Reproduce: `{p['command']}` at commit {commit} · machine: {p['machine']} · date: {p['date']}{wall}_"


# ----------------------------------------------------------------------------- dataclasses <-> plain JSON


def to_json(obj: Any) -> Any:
    """Plain JSON of a suite's result objects: dataclasses as dicts of their fields, tuples as lists,
    dict keys as strings; floats and everything else as they are (non-finite floats as strings)."""
    import dataclasses
    import math

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return to_json(obj.item())
    raise TypeError(f"{type(obj).__name__} is not a plain result: give its suite a JSON form for it")


def from_json(tp: Any, data: Any) -> Any:
    """The inverse of `to_json` for type `tp` (a dataclass, or a typing form of one): nested dataclasses,
    tuples, lists, dicts (keys converted back to int where the annotation says int), optionals."""
    import dataclasses
    import types
    import typing

    if data is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return from_json(options[0], data)
        for a in options:  # the first form the data fits
            try:
                return from_json(a, data)
            except (TypeError, ValueError, KeyError):
                continue
        return data
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kw = {f.name: from_json(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kw)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], v) for v in data)
        if args:
            return tuple(from_json(a, v) for a, v in zip(args, data, strict=True))
        return tuple(data)
    if origin is list:
        return [from_json(args[0], v) for v in data] if args else list(data)
    if origin is dict or origin is Mapping:
        kt, vt = args if args else (str, Any)
        return {from_json(kt, k): from_json(vt, v) for k, v in data.items()}
    if tp is float:
        return float(data)
    if tp is int and isinstance(data, str):
        return int(data)
    return data
