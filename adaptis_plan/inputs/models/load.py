"""Resolve a MODEL argument to a `ModelSpec`: built-in name, HF `config.json` (or its folder), or native spec.

Data flow: inputs. The CLI (and the tests) call `load_model`; it dispatches to the zoo, to the
HF importers, or validates a native JSON/YAML spec against `ModelSpec`; files are read by the
one boundary reader, `spec.read`. Every failure is an `InputError` with one line naming the
file, the field, the value and the fix. Imports the spec, the errors, `hf` and `zoo`: no
torch, no ortools, no rich/click.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adaptis_plan.errors import InputError
from adaptis_plan.inputs.models import zoo
from adaptis_plan.inputs.models.hf import from_hf_config
from adaptis_plan.spec.model import ModelSpec, sense_problem
from adaptis_plan.spec.read import path_kind, read_data, validate

_YAML_SUFFIXES = (".yaml", ".yml")
_MODEL_FIX = "give a Hugging Face config.json, a native spec (.json/.yaml) or a built-in name (`adaptis models`)"


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
    if path_kind(path) == "a folder":
        config = path / "config.json"
        if path_kind(config) is None:
            raise InputError(
                f"{path}: no config.json in this folder; pass a Hugging Face config.json, "
                "a native spec (.json/.yaml) or a built-in name (`adaptis models` lists them)"
            )
        path = config
    if path_kind(path) is not None:  # a regular file, or something the reader refuses by name (a FIFO, /dev/zero)
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
    data = read_data(path, "model file", fix=_MODEL_FIX)
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: the top level is not an object; a model file is one object (a Hugging Face config.json"
            " or a native spec with 'layers')"
        )
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
    """Validate a native spec dict as `ModelSpec` (extra fields forbidden, attention heads that
    make sense), errors as one line."""
    model = validate(data, ModelSpec, where, "model spec")
    problem = sense_problem(model)
    if problem is not None:
        raise InputError(f"{where}: {problem}")
    return model


# ---------------------------------------------------------------- helpers


def _looks_like_path(text: str) -> bool:
    return "/" in text or "\\" in text or text.endswith((".json", *_YAML_SUFFIXES)) or text.startswith(".")


__all__ = ["list_models", "load_file", "load_model", "parse_native_spec"]
