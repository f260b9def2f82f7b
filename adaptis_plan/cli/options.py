"""Command-line options declared where their settings are: `field_option(Section, "name")` is the
click option a `spec.config` section's field carries in its `metadata["cli"]` (plain data: the
declarations, help and click keywords), so a setting, its default, its help and its flag live in one
place. The option's parameter is the field's name (`--microbatches` fills `num_microbatches`), and
`section_values` collects a command's parameters back into the section's fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click


def _click_type(spec: dict[str, Any]) -> click.ParamType | type | None:
    if "choices" in spec:
        return click.Choice(list(spec.pop("choices")), case_sensitive=spec.pop("case_sensitive", True))
    if "int_range" in spec:
        return click.IntRange(*spec.pop("int_range"))
    return spec.pop("type", None)


def field_option(section: type, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The click option of `section`'s field `name` (`spec.config`)."""
    [fld] = [f for f in dataclasses.fields(section) if f.name == name]
    spec = dict(fld.metadata["cli"])
    decls = spec.pop("decls")
    kind = _click_type(spec)
    if kind is not None:
        spec["type"] = kind
    return click.option(name, *decls, **spec)


def section_values(section: type, params: dict[str, Any]) -> dict[str, Any]:
    """The command's parameters of `section`'s fields that carry an option, taken out of `params` (by the
    fields' names); a field without one keeps its default."""
    return {f.name: params.pop(f.name) for f in dataclasses.fields(section) if "cli" in f.metadata}
