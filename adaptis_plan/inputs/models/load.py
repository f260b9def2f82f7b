"""Resolve a MODEL argument to a `ModelSpec`: built-in name, HF `config.json` (or its folder), or native spec.

Data flow: inputs. The CLI (and the tests) call `load_model`; it dispatches to the zoo, to the
HF importers, or validates a native JSON/YAML spec against `ModelSpec`. Every failure is an
`InputError` with one line naming the file, the field, the value and the fix. Imports the spec,
the errors, `hf` and `zoo`, plus pyyaml: no torch, no ortools, no rich/click.

Resolution order: a built-in name wins (so the answer does not depend on the working
directory; write `./NAME` for a folder of that name), then an existing file or folder, then an
error: "file not found" where the argument looks like a path, else "unknown model" with the
nearest built-in name.

A file is a native spec when its top level has `layers`, a Hugging Face config when it has
`model_type`. A native spec's name is its `name` field; an HF config is named after its
folder (`.../llama-2-7b/config.json` -> `llama-2-7b`) or, for any other file name, its stem.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from adaptis_plan.errors import InputError
from adaptis_plan.inputs.models import zoo
from adaptis_plan.inputs.models.hf import from_hf_config
from adaptis_plan.spec.model import ModelSpec

_YAML_SUFFIXES = (".yaml", ".yml")


def list_models() -> list[tuple[str, str]]:
    """(name, one-line description) of every built-in model, in listing order."""
    return [(name, zoo.entry(name).description) for name in zoo.names()]


def load_model(arg: str | Path, *, include_mtp: bool = False) -> ModelSpec:
    """The model named by `arg`: a built-in name, a `config.json` / its folder, or a native spec file.

    `include_mtp` adds DeepSeek-V3's multi-token-prediction modules as layers (HF configs and
    built-ins only). Raises `InputError` (one line: file, field, value, fix) on any bad input.
    """
    text = str(arg)
    if not text.strip():
        raise InputError(
            "model '': empty; give a built-in name, a config.json or a spec file (`adaptis models` lists them)"
        )
    if text in zoo.names():
        return zoo.build(text, include_mtp=include_mtp)
    path = Path(text).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise InputError(
                f"{path}: no config.json in this folder; pass a Hugging Face config.json, "
                "a native spec (.json/.yaml) or a built-in name (`adaptis models` lists them)"
            )
        path = config
    if path.is_file():
        return load_file(path, include_mtp=include_mtp)
    if _looks_like_path(text):
        raise InputError(
            f"{text}: file not found; check the path, or use a built-in name (`adaptis models` lists them)"
        )
    close = difflib.get_close_matches(text, zoo.names(), n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise InputError(f"unknown model '{text}'; {hint}`adaptis models` lists them")


def load_file(path: str | Path, *, include_mtp: bool = False) -> ModelSpec:
    """Read one JSON/YAML file that is either a Hugging Face config or a native `ModelSpec`."""
    path = Path(path)
    data = _read_mapping(path)
    if "layers" in data:
        return parse_native_spec(data, where=str(path))
    if "model_type" in data:
        name = path.resolve().parent.name if path.name == "config.json" else path.stem
        return from_hf_config(
            data, name=name or path.stem, source=f"hf:{data['model_type']}", where=str(path), include_mtp=include_mtp
        )
    raise InputError(
        f"{path}: neither 'model_type' (a Hugging Face config.json) nor 'layers' (a native model spec) "
        "at the top level; add the one this file should have"
    )


def parse_native_spec(data: Mapping[str, Any], *, where: str) -> ModelSpec:
    """Validate a native spec dict as `ModelSpec` (extra fields forbidden), errors as one line."""
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise InputError(_validation_message(where, exc, ModelSpec)) from None


# ---------------------------------------------------------------- helpers


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.endswith((".json", *_YAML_SUFFIXES)) or text.startswith(".")


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the file ({exc.__class__.__name__}: {exc}); check it") from None
    if path.suffix.lower() in _YAML_SUFFIXES:
        data = _parse_yaml(path, text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path}: line {exc.lineno} col {exc.colno}: malformed JSON: {exc.msg}; fix the syntax"
            ) from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level is {type(data).__name__}, not an object; a model file is one object")
    return data


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1} col {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path}: {at}malformed YAML: {problem}; fix the syntax") from None


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the field at the end of `loc`."""
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        info = current.model_fields.get(part)
        if info is None:
            return None
        current = _unwrap(info.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """list[X] / X | None -> X (the model class a nested location points into)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in (list, tuple):
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if len(args) == 1 else annotation
            if len(args) != 1:
                return annotation
        else:
            return annotation


def _validation_message(where: str, exc: ValidationError, root: type[BaseModel]) -> str:
    # An unknown field usually is a misspelt one, and it also shows up as the real field
    # "missing": report the unknown field (with the suggestion) and drop the echo.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = tuple(err["loc"])
    field = _format_loc(loc) or "(top level)"
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    msg = str(err["msg"])
    if kind == "missing":
        line = f"{where}: {field}: field required; add it"
    elif kind == "extra_forbidden":
        owner = _model_at(root, loc[:-1])
        allowed = sorted(owner.model_fields) if owner else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        fix = f"did you mean '{close[0]}'?" if close else f"remove it (allowed: {', '.join(allowed)})"
        if close:
            errors = [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) == (*loc[:-1], close[0]))]
        line = f"{where}: {field} = {_short(value)}: unknown field; {fix}"
    elif kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        op = ">" if kind == "greater_than" else ">="
        line = f"{where}: {field} = {_short(value)}: must be {op} {bound}; use a positive size"
    elif kind == "value_error":
        at = f"{where}: {field}: " if loc else f"{where}: "
        line = f"{at}{msg.removeprefix('Value error, ')}; fix the spec"
    else:
        line = f"{where}: {field} = {_short(value)}: {msg}; fix the value"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return line


__all__ = ["list_models", "load_file", "load_model", "parse_native_spec"]
