"""schemas/ is generated from the pydantic boundary models and must not drift.

`adaptis schema --check` passes on the committed folder and fails (exit 2, one line naming the
file and the fix) as soon as one file is edited, missing, or the folder is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import adaptis_plan
from adaptis_plan.spec.schemas import SCHEMAS, render_schemas

pytestmark = pytest.mark.unit

SCHEMA_DIR = Path(adaptis_plan.__file__).parent.parent / "schemas"
FILES = sorted(f"{name}.schema.json" for name in SCHEMAS)


@pytest.fixture
def schema_copy(tmp_path: Path) -> Path:
    """Freshly generated schemas (independent of whether the committed ones are current)."""
    folder = tmp_path / "schemas"
    folder.mkdir()
    for fname, text in render_schemas().items():
        (folder / fname).write_text(text)
    return folder


def test_fresh_schemas_pass_the_check(adaptis, schema_copy: Path) -> None:
    assert sorted(p.name for p in schema_copy.iterdir()) == FILES
    r = adaptis("schema", "--check", "--dir", schema_copy)
    assert r.exit_code == 0 and r.stdout == "", r.stderr


def test_committed_schemas_are_up_to_date(adaptis) -> None:
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json")) == FILES
    r = adaptis("schema", "--check", "--dir", SCHEMA_DIR)
    assert r.exit_code == 0, f"{r.stderr.strip()} -- a spec/*.py model changed: run `make schemas` and commit schemas/"
    assert "up to date" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("fname", FILES)
def test_edited_schema_fails_the_check(adaptis, schema_copy: Path, fname: str) -> None:
    path = schema_copy / fname
    data = json.loads(path.read_text())
    data["title"] = data.get("title", "") + " (hand-edited)"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    r = adaptis("schema", "--check", "--dir", schema_copy)
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert fname in lines[0] and "adaptis schema" in lines[0]
    assert not any(other in lines[0] for other in FILES if other != fname)


def test_whitespace_change_fails_the_check(adaptis, schema_copy: Path) -> None:
    path = schema_copy / "plan.schema.json"
    path.write_text(path.read_text() + "\n")
    r = adaptis("schema", "--check", "--dir", schema_copy)
    assert r.exit_code == 2 and "plan.schema.json" in r.stderr


def test_missing_schema_fails_the_check(adaptis, schema_copy: Path) -> None:
    (schema_copy / "hardware.schema.json").unlink()
    r = adaptis("schema", "--check", "--dir", schema_copy)
    assert r.exit_code == 2 and "hardware.schema.json" in r.stderr


def test_regenerating_repairs_the_folder(adaptis, schema_copy: Path) -> None:
    (schema_copy / "plan.schema.json").write_text("{}\n")
    (schema_copy / "model.schema.json").unlink()
    r = adaptis("schema", "--dir", schema_copy)
    assert r.exit_code == 0, r.stderr
    assert adaptis("schema", "--check", "--dir", schema_copy).exit_code == 0


@pytest.mark.parametrize("fname", FILES)
def test_boundary_objects_forbid_unknown_fields(fname: str) -> None:
    """Habit 1: every boundary object is `extra="forbid"`, so a typo in a JSON field fails loudly."""
    schema = json.loads(render_schemas()[fname])
    objects = [schema, *schema.get("$defs", {}).values()]
    open_objects = [o.get("title") for o in objects if "properties" in o and o.get("additionalProperties") is not False]
    assert open_objects == []


def test_check_of_a_missing_folder_names_it(adaptis, tmp_path: Path) -> None:
    r = adaptis("schema", "--check", "--dir", tmp_path / "nowhere")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1
    assert "nowhere" in r.stderr and "no such folder" in r.stderr
