"""The one boundary reader (`spec.read`): every hostile or broken file is one `InputError` line.

Each case is a file a user could hand us by mistake or on purpose: special files, huge or
deeply nested data, integers Python refuses to parse, other encodings, malformed JSON / YAML,
duplicate keys, non-finite numbers, out-of-range values, misspelt fields.
"""

from __future__ import annotations

import json
import math
import os
import socket
import stat
from pathlib import Path

import pytest

from adaptis_plan.errors import InputError
from adaptis_plan.spec import read
from adaptis_plan.spec.hardware import HardwareProfile, LinkSpec
from adaptis_plan.spec.read import MAX_DEPTH, read_boundary_file, read_data, validate

pytestmark = pytest.mark.unit

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def _refused(path: Path, *needles: str, model=HardwareProfile) -> str:
    with pytest.raises(InputError) as info:
        read_boundary_file(path, model, "hardware profile")
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith(str(path)) or message.startswith(repr(str(path))), message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def _h200() -> dict:
    return json.loads((PROFILES / "h200.json").read_text())


def test_reads_a_real_profile() -> None:
    hw = read_boundary_file(PROFILES / "h200.json", HardwareProfile, "hardware profile")
    assert hw.name == "h200"


# ----------------------------------------------------------------------------- not a regular file
def test_folder(tmp_path: Path) -> None:
    _refused(tmp_path, "a folder, not a hardware profile file")


def test_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    _refused(fifo, "a FIFO (named pipe)", "regular")


def test_character_device() -> None:
    _refused(Path("/dev/zero"), "a character device")


def test_own_character_device(tmp_path: Path) -> None:
    node = tmp_path / "null.json"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    _refused(node, "a character device")


def test_socket(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert read.path_kind(path) == "a socket"


def test_missing_and_impossible_names(tmp_path: Path) -> None:
    _refused(tmp_path / "nope.json", "no such file")
    assert read.path_kind(tmp_path / ("x" * 5000)) is None
    assert read.path_kind("a\0b") is None


# ----------------------------------------------------------------------------- size and shape
def test_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps(_h200()))
    monkeypatch.setattr(read, "MAX_FILE_BYTES", 100)
    _refused(path, "bytes; a hardware profile is at most 100 bytes")


def test_recursion_deep_nesting(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _refused(path, f"nested deeper than {MAX_DEPTH} levels")


def test_moderate_nesting_past_the_depth_limit(tmp_path: Path) -> None:
    data = _h200()
    nested: object = 1
    for _ in range(MAX_DEPTH + 5):
        nested = [nested]
    data["description"] = nested
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(data))
    _refused(path, "description[0][0]", f"nested deeper than {MAX_DEPTH} levels")


def test_yaml_alias_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read, "MAX_VALUES", 100_000)
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    _refused(path, "more than 100,000 values")


def test_top_level_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    _refused(path, "the top level is a list, not an object")


# ----------------------------------------------------------------------------- numbers
def test_huge_integer_names_its_field(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    text = json.dumps(_h200()).replace('"num_nodes": 16', '"num_nodes": ' + "9" * 5000)
    assert "9" * 5000 in text
    path.write_text(text)
    _refused(path, "groups[0].num_nodes = an integer of 5000 digits")


def test_huge_integer_in_yaml(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: x\nhbm: " + "7" * 6000 + "\n")
    with pytest.raises(InputError, match="hbm = an integer of 6000 digits"):
        read_data(path, "hardware profile")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_number_names_its_field(tmp_path: Path, literal: str) -> None:
    data = _h200()
    path = tmp_path / "inf.json"
    path.write_text(json.dumps(data).replace('"bandwidth_gbps": 450.0', f'"bandwidth_gbps": {literal}', 1))
    assert literal in path.read_text()
    _refused(path, "intra_node.bandwidth_gbps", "allowed: 0.001..1e+06")


def test_range_error_gives_the_allowed_range(tmp_path: Path) -> None:
    data = _h200()
    data["groups"][0]["num_nodes"] = 10**9
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(data))
    message = _refused(path)
    assert message == f"{path}: groups[0].num_nodes = 1000000000: out of range; allowed: 1..100,000"


def test_measured_link_bandwidth_is_positive_in_its_type() -> None:
    from adaptis_plan.spec.cost_profile import MeasuredLink

    schema = MeasuredLink.model_json_schema()["properties"]["bandwidth_gbps"]
    assert schema.get("exclusiveMinimum") == 0
    with pytest.raises(Exception, match="greater than 0"):
        MeasuredLink(latency_s=0.0, bandwidth_gbps=0.0, backend="gloo")


def test_inf_is_refused_by_the_type_not_only_by_files() -> None:
    with pytest.raises(Exception, match="finite"):
        LinkSpec(bandwidth_gbps=math.inf, latency_s=0.0, source="x")


# ----------------------------------------------------------------------------- text
def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.json"
    path.write_bytes(bytes(range(256)))
    _refused(path, "not UTF-8 text (byte 0x80 at offset 128)", "re-save it as UTF-8")


def test_utf16_export(tmp_path: Path) -> None:
    path = tmp_path / "u16.json"
    path.write_text(json.dumps(_h200()), encoding="utf-16")
    _refused(path, "not UTF-8 text")


def test_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_h200()).encode())
    assert read_boundary_file(path, HardwareProfile, "hardware profile").name == "h200"


def test_malformed_json_and_truncation(tmp_path: Path) -> None:
    text = json.dumps(_h200(), indent=1)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    _refused(path, "not valid JSON (line", "truncated")


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ngroups: [1, 2\nintra_node: 3\n")
    _refused(path, "not valid YAML (line 3")


def test_yaml_scalar_that_cannot_be_built(tmp_path: Path) -> None:
    path = tmp_path / "date.yaml"
    path.write_text("name: 2021-13-45\n")
    _refused(path, "not valid YAML")


@pytest.mark.parametrize(("name", "text"), [("d.json", '{"name": "a", "name": "b"}'), ("d.yaml", "name: a\nname: b\n")])
def test_duplicate_key(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    _refused(path, "key 'name' appears twice")


# ----------------------------------------------------------------------------- validation messages
def test_misspelt_field_gets_a_suggestion(tmp_path: Path) -> None:
    data = _h200()
    data["intra_node"]["bandwith_gbps"] = data["intra_node"].pop("bandwidth_gbps")
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data))
    assert _refused(path).endswith("intra_node.bandwith_gbps = 450.0: unknown field; did you mean 'bandwidth_gbps'?")


def test_misspelt_field_inside_a_dict_of_models(tmp_path: Path) -> None:
    data = _h200()
    device = next(iter(data["device_types"].values()))
    device["hbm_byte"] = device.pop("hbm_bytes")
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data))
    assert "did you mean 'hbm_bytes'?" in _refused(path)


def test_validate_names_the_file_it_is_given() -> None:
    with pytest.raises(InputError, match=r"^where\.json: the top level is a string"):
        validate("text", HardwareProfile, "where.json", "hardware profile")
