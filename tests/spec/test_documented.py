"""Every field of every file format is documented (typed, constrained, with its unit in its name), and the schemas say so.

The formats are the pydantic models behind `schemas/` (`spec.schemas.SCHEMAS`); every model
reachable from them, through lists, dicts, tuples and optionals, is checked. A new field without
`Field(description=...)` fails here with its dotted name.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from adaptis_plan.spec.plan_file import PlanActionRecord
from adaptis_plan.spec.schemas import SCHEMAS

pytestmark = pytest.mark.unit

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    if typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType):
        for arg in typing.get_args(annotation):
            found += _models_in(arg)
    return found


# Models a format reads that its annotations do not name: the plan's actions are stored as strings
# and parsed by a validator, which also reads the documented object form of an action.
EXTRA_ROOTS = {"plan.devices.actions": PlanActionRecord}


def _walk() -> list[tuple[str, type[BaseModel], str]]:
    """(dotted path, model, field) for every field of every format, each format walked on its own
    (a plan embeds the model spec and the hardware profile: their fields count under both names); a
    model reached along several paths is listed under each."""
    out: list[tuple[str, type[BaseModel], str]] = []
    roots = [[(cls, name)] for name, cls in SCHEMAS.items()] + [[(cls, path)] for path, cls in EXTRA_ROOTS.items()]
    for todo in roots:
        while todo:
            cls, path = todo.pop()
            assert path.count(".") < 12, f"{path}: a self-referencing model? the walk went too deep"
            for field, info in cls.model_fields.items():
                out.append((path, cls, field))
                todo += [(sub, f"{path}.{field}") for sub in _models_in(info.annotation)]
    return out


def _undocumented() -> list[str]:
    missing = {
        f"{path}: {cls.__name__}.{field}"
        for path, cls, field in _walk()
        if not (cls.model_fields[field].description or "").strip()
    }
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
    expected = {"plan.devices", "plan.devices.actions", "plan.costs.stages", "plan.model.spec.layers.attention"}
    assert expected | {"hardware.device_types", "model.layers.attention", "costs.entries"} <= reached


def _all_fields() -> list[str]:
    return [f"{path}: {field}" for path, _, field in _walk()]


def test_committed_schemas_carry_every_description() -> None:
    """The generated schemas show the descriptions (so `schemas/` documents the formats too)."""
    for name in SCHEMAS:
        schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
        blocks = [schema, *schema.get("$defs", {}).values()]
        for block in blocks:
            for field, prop in block.get("properties", {}).items():
                assert prop.get("description"), f"{name}.schema.json: {block.get('title', name)}.{field}"
