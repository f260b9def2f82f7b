"""The plan file (schemas/plan.schema.json, adaptis_plan/spec/plan_file.py): the contract core, the embedded inputs, the compact
action encoding, round trip, atomic writes, and one clear line for every structural problem
`spec/plan_file.py` and the judge's program checks catch when a plan is read.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from adaptis_plan.errors import InputError
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.planfile import io as io_module
from adaptis_plan.planfile.io import (
    check_model_matches,
    plan_layout,
    plan_programs,
    read_plan,
    write_json_atomic,
    write_plan,
    write_text_atomic,
)
from adaptis_plan.spec.plan_file import PlanFile

CORE_KEYS = {"schema_version", "strategy", "model", "hardware", "training", "stages", "devices", "predicted"}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ----------------------------------------------------------------------------- round trip
def test_plan_file_carries_the_contract_core(tiny_plan: Path) -> None:
    data = json.loads(tiny_plan.read_text())
    assert CORE_KEYS <= set(data)
    assert data["schema_version"] == 2
    assert {"name", "fingerprint", "num_layers", "spec"} <= set(data["model"])
    assert {"name", "fingerprint", "profile"} <= set(data["hardware"])
    assert {"num_microbatches", "micro_batch_size", "seq_len", "pp", "tp"} <= set(data["training"])
    assert {"step_time_s", "bubble_ratio_per_device", "peak_memory_bytes"} <= set(data["predicted"])
    assert all(set(s) == {"stage", "device", "layers", "recompute"} for s in data["stages"])
    for dev in data["devices"]:
        # the documented form: one object per action
        assert all(set(a) == {"op", "stage", "mb", "start_s", "end_s"} for a in dev["actions"])
        assert all(a["start_s"] <= a["end_s"] for a in dev["actions"])
    # ... each on one line of the file
    lines = [line.strip().rstrip(",") for line in tiny_plan.read_text().splitlines()]
    for dev in data["devices"]:
        assert all(json.dumps(a, separators=(", ", ": ")) in lines for a in dev["actions"])
    assert [c["stage"] for c in data["costs"]["stages"]] == list(range(len(data["stages"])))
    model = load_model("tiny-llama")
    assert data["model"]["fingerprint"] == model.fingerprint()
    # the planner may split the LM head into vocabulary chunks: one more layer per extra chunk
    assert data["model"]["num_layers"] == model.num_layers + data["model"].get("head_chunks", 1) - 1


def test_round_trip(tmp_path: Path, tiny_plan: Path) -> None:
    plan = read_plan(tiny_plan)
    out = tmp_path / "again.json"
    write_plan(plan, out)
    assert out.read_bytes() == tiny_plan.read_bytes()
    again = read_plan(out)
    assert again == plan
    assert plan_layout(again) == plan_layout(plan)
    assert plan_programs(again) == plan_programs(plan)
    assert _leftovers(tmp_path) == []


def test_layout_and_programs_follow_the_file(zbv_plan: Path) -> None:
    plan = read_plan(zbv_plan)
    layout = plan_layout(plan)
    assert layout.num_devices == plan.training.pp == 2
    assert layout.stage_device == (0, 1, 1, 0)  # V placement
    assert layout.bounds[0] == 0 and layout.bounds[-1] == plan.model.num_layers
    programs = plan_programs(plan)
    assert [len(p) for p in programs] == [len(d.actions) for d in plan.devices]
    ops = {a.op for prog in programs for a in prog}
    assert ops == {"F", "I", "W"}  # zero-bubble: split backward


def test_written_files_get_the_usual_mode(tmp_path: Path, tiny_plan: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    out = tmp_path / "p.json"
    write_plan(read_plan(tiny_plan), out)
    assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)


# ----------------------------------------------------------------------------- atomic writes
def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file opened by the atomic writer takes half of what is written, then the disk "fails"."""
    real_fdopen = os.fdopen

    class HalfFile:
        def __init__(self, f) -> None:
            self.f = f

        def __enter__(self) -> HalfFile:
            return self

        def __exit__(self, *exc) -> bool:
            self.f.close()
            return False

        def write(self, text: str) -> int:
            self.f.write(text[: len(text) // 2])
            self.f.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(io_module.os, "fdopen", lambda fd, *a, **k: HalfFile(real_fdopen(fd, *a, **k)))


def test_failed_write_leaves_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_plan: Path) -> None:
    plan = read_plan(tiny_plan)
    _full_disk(monkeypatch)
    out = tmp_path / "p.json"
    with pytest.raises(InputError, match="No space left on device"):
        write_plan(plan, out)
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_failed_write_keeps_the_old_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_plan: Path) -> None:
    out = tmp_path / "p.json"
    out.write_bytes(tiny_plan.read_bytes())
    plan = read_plan(tiny_plan)
    _full_disk(monkeypatch)
    with pytest.raises(InputError):
        write_plan(plan, out)
    assert out.read_bytes() == tiny_plan.read_bytes()
    assert _leftovers(tmp_path) == []


def test_interrupted_write_leaves_no_temp_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(data) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(io_module, "dumps", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic({"a": 1}, tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


def test_write_text_atomic(tmp_path: Path) -> None:
    out = tmp_path / "new" / "folder" / "t.svg"
    write_text_atomic("<svg/>", out)
    assert out.read_text() == "<svg/>"
    write_text_atomic("<svg></svg>", out)
    assert out.read_text() == "<svg></svg>"
    assert _leftovers(out.parent) == []


@pytest.mark.parametrize("writer", [lambda p: write_json_atomic({}, p), lambda p: write_text_atomic("", p)])
def test_unwritable_path_is_input_error(tmp_path: Path, writer: Callable[[Path], None]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write here"):
        writer(blocker / "p.json")
    with pytest.raises(InputError, match="cannot write here"):
        writer(tmp_path)  # a folder
    assert _leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- validation
def _as_strings(data: dict) -> None:
    """Rewrite every device's program in the short form (action strings, parallel time arrays)."""
    for dev in data["devices"]:
        acts = dev["actions"]
        dev["actions"] = [f"{a['stage']}{a['op']}{a['mb']}" for a in acts]
        dev["start_s"], dev["end_s"] = [a["start_s"] for a in acts], [a["end_s"] for a in acts]


def _bad(tmp_path: Path, src: Path, edit: Callable[[dict], None]) -> InputError:
    """Write an edited copy of `src`, read it, and return its InputError (checked: one line, names
    the file)."""
    data = json.loads(src.read_text())
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        read_plan(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert "\n" not in msg and "Value error" not in msg and "Traceback" not in msg
    return info.value


def _set(path: str, value) -> Callable[[dict], None]:
    """An edit that sets `a.b.0.c` to `value`."""

    def edit(data: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.split(".")]
        target = data
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return edit


def _swap_stage_ids(data: dict) -> None:
    data["stages"][0]["stage"], data["stages"][1]["stage"] = 1, 0


def _drop_last_stage(data: dict) -> None:
    data["stages"].pop()


def _drop_device(data: dict) -> None:
    data["devices"].pop()


def _swap_devices(data: dict) -> None:
    data["devices"].reverse()


def _first(op: str, device: int = 0) -> Callable[[dict], dict]:
    return lambda data: next(a for a in data["devices"][device]["actions"] if a["op"] == op)


def _move_first_action(data: dict) -> None:
    data["devices"][1]["actions"].insert(0, data["devices"][0]["actions"].pop(0))


def _drop_first_w(data: dict) -> None:
    data["devices"][0]["actions"].remove(_first("W")(data))


def _duplicate_first_f(data: dict) -> None:
    data["devices"][0]["actions"].append(copy.deepcopy(_first("F")(data)))


def _w_before_i(data: dict) -> None:
    acts = data["devices"][0]["actions"]
    i = acts.index(_first("I")(data))
    w = next(
        k for k, a in enumerate(acts) if a["op"] == "W" and (a["stage"], a["mb"]) == (acts[i]["stage"], acts[i]["mb"])
    )
    acts[i], acts[w] = acts[w], acts[i]


def _mb_out_of_range(data: dict) -> None:
    data["training"]["num_microbatches"] = 3


STRUCTURE = [
    # spec/plan_file.py PlanFile._check_structure, one case per rule
    ("stage ids out of order", _swap_stage_ids, ("stages[0].stage is 1", "in order")),
    ("stage without layers", _set("stages.1.layers", [3, 3]), ("stages[1].layers = [3, 3)", "no layer")),
    ("gap between stages", _set("stages.1.layers", [4, 5]), ("stages[1]", "starts at layer 4", "consecutive")),
    ("device out of range", _set("stages.1.device", 2), ("stages[1].device = 2", "0..1")),
    ("layers not all covered", _drop_last_stage, ("stages end at layer 7", "num_layers is 10")),
    ("fewer devices than pp", _drop_device, ("devices lists 1 devices", "training.pp is 2")),
    ("devices out of order", _swap_devices, ("devices[0].device is 1", "in order")),
    # field-level checks (pydantic), reported as file: field = value: problem
    ("unknown op", _set("devices.0.actions.0.op", "X"), ("devices[0].actions[0].op", '"X"')),
    ("negative mb", _set("devices.0.actions.0.mb", -1), ("devices[0].actions[0].mb", "-1")),
    ("unknown field", _set("predicted.step_time", 1.0), ("predicted.step_time", "unknown field")),
    ("missing field", lambda d: d.pop("predicted"), ("predicted", "field required")),
    ("future schema", _set("schema_version", 3), ("schema_version = 3", "newer adaptis")),
    ("older schema", _set("schema_version", 1), ("schema_version = 1", "re-plan with this version")),
    ("no schema version", lambda d: d.pop("schema_version"), ("schema_version: field required",)),
    ("micro-batch out of range", _mb_out_of_range, ("mb 3 is outside 0..2",)),
    (
        "absurd micro-batch count",
        _set("training.num_microbatches", 10**12),
        ("num_microbatches = 1000000000000", "1..8192"),
    ),
    (
        "stage out of range",
        _set("devices.0.actions.0.stage", 2**63),
        ("actions[0].stage = 9223372036854775808", "100000"),
    ),
    ("bad action string", lambda d: d["devices"][0].update(actions=["0F0", "0X1"]), ("actions[1] = '0X1'",)),
    ("times not parallel", lambda d: d["devices"][0].update(actions=["0F0"], start_s=[0.0], end_s=[]), ("end_s",)),
    ("edited model spec", _set("model.spec.hidden_size", 64), ("model.spec does not match model.fingerprint",)),
    ("edited hardware", _set("hardware.profile.memory_fraction", 0.5), ("hardware.profile does not match",)),
    ("no stages", _set("stages", []), ("stages",)),
    ("bad training", _set("training.pp", 0), ("training.pp = 0",)),
]

ORDERS = [
    # judge.semantics.check_programs on the plan's layout and programs
    ("action on the wrong device", _move_first_action, ("device 1 step 0", "0F0", "device 0")),
    ("missing W", _drop_first_w, ("3I0 has no matching 3W0",)),
    ("duplicate F", _duplicate_first_f, ("0F0 appears again", "remove the duplicate")),
    ("W before its I", _w_before_i, ("3W0 runs before 3I0",)),
]


@pytest.mark.parametrize(("case", "edit", "needles"), STRUCTURE, ids=[c[0] for c in STRUCTURE])
def test_structural_problem_is_one_clear_line(tmp_path: Path, zbv_plan: Path, case, edit, needles) -> None:
    msg = str(_bad(tmp_path, zbv_plan, edit))
    for needle in needles:
        assert needle in msg, (case, needle, msg)


@pytest.mark.parametrize(("case", "edit", "needles"), ORDERS, ids=[c[0] for c in ORDERS])
def test_order_problem_is_one_line_plus_grid(tmp_path: Path, zbv_plan: Path, case, edit, needles) -> None:
    err = _bad(tmp_path, zbv_plan, edit)
    for needle in needles:
        assert needle in str(err), (case, needle, str(err))
    grid = getattr(err, "grid", "")
    assert "device 0" in grid and "device 1" in grid and "<-- ERROR" in grid, grid


def test_structure_rules_live_in_the_spec(zbv_plan: Path) -> None:
    """The spec refuses a bad structure on its own, without plan IO (e.g. for library users)."""
    data = json.loads(zbv_plan.read_text())
    data["stages"][1]["layers"] = [3, 3]
    with pytest.raises(ValidationError, match="holds no layer"):
        PlanFile.model_validate(data)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "not valid JSON"),
        (b'{"schema_version": 1, "strat', "truncated"),
        (b"\xff\xfe\x00 not text", "not UTF-8"),
        (b"[]", "not an object"),
    ],
)
def test_unreadable_plan_file(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with pytest.raises(InputError, match=needle) as info:
        read_plan(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_missing_plan_and_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such plan file"):
        read_plan(tmp_path / "nope.json")
    with pytest.raises(InputError, match="a folder, not a plan file"):
        read_plan(tmp_path)


def test_model_mismatch_names_both_models(tiny_plan: Path) -> None:
    plan = read_plan(tiny_plan)
    check_model_matches(plan, load_model("tiny-llama"), tiny_plan)
    with pytest.raises(InputError) as info:
        check_model_matches(plan, load_model("tiny-gemma"), tiny_plan)
    msg = str(info.value)
    assert "model.fingerprint" in msg and "'tiny-llama'" in msg and "'tiny-gemma'" in msg and "\n" not in msg


def test_keeps_stored_order_and_times(tmp_path: Path, zbv_plan: Path) -> None:
    """Reading never reorders a device's program (it is the execution order)."""
    data = json.loads(zbv_plan.read_text())
    plan = read_plan(zbv_plan)
    for dev, raw in zip(plan.devices, data["devices"], strict=True):
        assert [(a.op, a.stage, a.mb, a.start_s, a.end_s) for a in dev.actions] == [
            (a["op"], a["stage"], a["mb"], a["start_s"], a["end_s"]) for a in raw["actions"]
        ]
    # the short form (action strings, parallel times) reads into the same plan
    _as_strings(data)
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    assert read_plan(short) == plan
    assert os.path.getsize(zbv_plan) > 0
