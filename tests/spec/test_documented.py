"""Every field of every file format is documented (STYLE.md habit 2), and the schemas say so.

The formats are the pydantic models behind `schemas/` (`spec.schemas.SCHEMAS`); every model
reachable from them, through lists, dicts, tuples and optionals, is checked. A new field without
`Field(description=...)` fails here with its dotted name.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from adaptis_plan.spec.schemas import SCHEMAS

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            found += _models_in(arg)
    return found


def _undocumented() -> list[str]:
    missing: list[str] = []
    seen: set[type[BaseModel]] = set()
    todo = [(cls, name) for name, cls in SCHEMAS.items()]
    while todo:
        cls, path = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for field, info in cls.model_fields.items():
            if not (info.description or "").strip():
                missing.append(f"{path}: {cls.__name__}.{field}")
            todo += [(sub, f"{path}.{field}") for sub in _models_in(info.annotation)]
    return sorted(missing)


def test_every_field_of_every_file_format_has_a_description() -> None:
    missing = _undocumented()
    assert not missing, "fields without Field(description=...): " + ", ".join(missing)


def test_an_undocumented_nested_field_is_named(monkeypatch) -> None:
    from pydantic import Field

    class Inner(BaseModel):
        size_bytes: int

    class Outer(BaseModel):
        items: dict[str, list[Inner | None]] = Field(description="documented")

    monkeypatch.setitem(SCHEMAS, "new-format", Outer)
    assert "new-format.items: Inner.size_bytes" in _undocumented()


def test_the_walk_reaches_nested_models() -> None:
    reached = {name.split(": ")[0] for name in _all_fields()}
    assert {"plan.devices.actions", "hardware.device_types", "model.layers.attention", "costs.entries"} <= reached


def _all_fields() -> list[str]:
    out = []
    seen: set[type[BaseModel]] = set()
    todo = [(cls, name) for name, cls in SCHEMAS.items()]
    while todo:
        cls, path = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        out += [f"{path}: {f}" for f in cls.model_fields]
        for field, info in cls.model_fields.items():
            todo += [(sub, f"{path}.{field}") for sub in _models_in(info.annotation)]
    return out


def test_committed_schemas_carry_every_description() -> None:
    """The generated schemas show the descriptions (so `schemas/` documents the formats too)."""
    for name in SCHEMAS:
        schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
        blocks = [schema, *schema.get("$defs", {}).values()]
        for block in blocks:
            for field, prop in block.get("properties", {}).items():
                assert prop.get("description"), f"{name}.schema.json: {block.get('title', name)}.{field}"
