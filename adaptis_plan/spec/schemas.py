"""JSON Schemas of every file format, generated from the pydantic models (never hand-edited).

`adaptis schema` writes them to `schemas/`; `adaptis schema --check` (and a test) fails when
the committed files drift from the models.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfileFile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile

SCHEMAS: dict[str, type[BaseModel]] = {
    "model": ModelSpec,
    "hardware": HardwareProfileFile,  # a profile file: the profile and the keys `hardware show --json` adds
    "plan": PlanFile,
    "costs": CostProfile,
}


def render_schemas() -> dict[str, str]:
    """File name -> schema text."""
    out = {}
    for name, cls in SCHEMAS.items():
        schema = cls.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        out[f"{name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write_schemas(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for fname, text in render_schemas().items():
        p = folder / fname
        p.write_text(text)
        written.append(p)
    return written


def check_schemas(folder: Path) -> list[str]:
    """Names of schema files that are missing or differ from the models."""
    stale = []
    for fname, text in render_schemas().items():
        p = folder / fname
        if not p.is_file() or p.read_text() != text:
            stale.append(fname)
    return stale
