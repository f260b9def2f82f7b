"""A hardware profile file: `hardware show --json`'s read-only keys, units in the field docs, and tensor
parallelism across nodes (adaptis_plan/spec/hardware.py)."""

from __future__ import annotations

import json

import pytest

from adaptis_plan.inputs.hardware import builtin_hardware_names, load_hardware
from adaptis_plan.spec.hardware import HardwareProfile, HardwareProfileFile, LinkSpec, nic_gbit_per_node

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", builtin_hardware_names())
def test_shown_profile_loads_back_as_the_same_profile(name: str) -> None:
    hw = load_hardware(name)
    shown = HardwareProfileFile.shown(hw)
    assert {"num_devices", "usable_memory_bytes", "nic_gbit_per_node"} <= set(shown)
    back = HardwareProfileFile.model_validate(shown).profile()
    assert back == hw
    assert back.fingerprint() == hw.fingerprint()


@pytest.mark.parametrize(
    ("key", "value", "source"),
    [
        ("num_devices", 64, "groups give 128; change groups"),
        ("usable_memory_bytes", {"h100-sxm5-80gb": 1}, 'give {"h100-sxm5-80gb": 72000000000}; change memory_fraction'),
        ("nic_gbit_per_node", [1600.0], "give [3200.0]; change inter_node.bandwidth_gbps"),
    ],
)
def test_a_stale_derived_key_is_ignored_and_named(key: str, value: object, source: str) -> None:
    hw = load_hardware("h100")
    data = HardwareProfileFile.shown(hw) | {key: value}
    got = HardwareProfileFile.model_validate(data)
    assert got.profile() == hw  # recomputed, never read
    (line,) = got.stale()
    assert line.startswith(f"{key} = ") and "is read-only and ignored" in line and source in line, line
    assert f"delete {key}" in line


def test_an_edited_profile_plans_as_edited() -> None:
    data = HardwareProfileFile.shown(load_hardware("h100"))
    data["groups"][0]["num_nodes"] = 4
    data["device_types"]["h100-sxm5-80gb"]["hbm_bytes"] = 40_000_000_000
    got = HardwareProfileFile.model_validate(data)
    assert got.profile().num_devices == 32
    assert got.profile().device_types["h100-sxm5-80gb"].hbm_bytes == 40_000_000_000
    assert [line.split(" = ")[0] for line in got.stale()] == ["num_devices", "usable_memory_bytes"]


def test_nic_per_node_is_gigabits() -> None:
    # DGX H100: 8 x 400 Gb/s per node = 3,200 Gb/s, 50 GB/s per GPU
    assert nic_gbit_per_node(load_hardware("h100")) == [3200.0]
    assert nic_gbit_per_node(load_hardware("a100")) == [1600.0]


def test_bandwidth_fields_state_unit_and_scope() -> None:
    bw = LinkSpec.model_fields["bandwidth_gbps"].description
    assert "GB/s" in bw
    assert "one GPU" in bw and "one direction" in bw and "gigabytes" in bw
    for name in ("intra_node", "inter_node"):
        text = HardwareProfile.model_fields[name].description
        assert "per GPU" in text and "per direction" in text, name
    assert "GPU" in HardwareProfile.model_fields["memory_fraction"].description


def test_tp_across_nodes_fills_whole_nodes() -> None:
    hw = load_hardware("h100")  # 16 nodes of 8
    assert hw.rank_slots(4, 16) == [("h100-sxm5-80gb", n) for n in (0, 2, 4, 6)]
    # with data parallelism the pipeline ranks are tp x dp = 32 GPUs apart (4 nodes)
    assert [node for _, node in hw.rank_slots(4, 16, 32)] == [0, 4, 8, 12]
    with pytest.raises(ValueError, match="room for 8 pipeline ranks of 16 GPUs"):
        hw.rank_slots(9, 16)


def test_tp_across_nodes_that_leaves_part_of_a_node_is_refused_naming_the_rule() -> None:
    hw = load_hardware("h100")
    with pytest.raises(ValueError, match="does not fill whole nodes.*divides 8 or a multiple of 8"):
        hw.rank_slots(2, 12)


def test_a_misspelt_derived_key_suggests_it_as_files_spell_it(tmp_path) -> None:
    from adaptis_plan.errors import InputError

    data = HardwareProfileFile.shown(load_hardware("a100"))
    data["num_device"] = data.pop("num_devices")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"num_device = 128: unknown field; did you mean 'num_devices'\?"):
        load_hardware(str(path))
