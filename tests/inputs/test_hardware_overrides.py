"""Command-line overrides of a hardware profile: GPUs per node, NIC bandwidth, usable memory
(adaptis_plan/inputs/hardware.py `apply_overrides`)."""

from __future__ import annotations

import pytest

from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import HardwareOverrides, apply_overrides, load_hardware, parse_nic_gbit

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "gbit"), [("800", 800.0), ("4x200", 800.0), ("8X400", 3200.0), (" 2 * 100 ", 200.0)])
def test_nic_bandwidth_as_vendors_state_it(text: str, gbit: float) -> None:
    assert parse_nic_gbit(text) == gbit


@pytest.mark.parametrize("text", ["", "4y200", "0", "0x400", "x400", "-800", "fast"])
def test_nic_bandwidth_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"--nic-gbit-per-node = .*: not a bandwidth; give Gb/s per node"):
        parse_nic_gbit(text)


def test_four_200_gbit_nics_per_8_gpu_node_give_each_gpu_12_5_gb_s() -> None:
    hw = apply_overrides(load_hardware("a100"), HardwareOverrides(nic_gbit_per_node="4x200"))
    assert hw.inter_node.bandwidth_gbps == 12.5
    assert "--nic-gbit-per-node 4x200" in hw.inter_node.source and "12.5 GB/s per GPU" in hw.inter_node.source
    assert "Command line: --nic-gbit-per-node 4x200." in hw.description
    assert hw.intra_node == load_hardware("a100").intra_node


def test_gpus_per_node_then_the_node_bandwidth_is_shared_by_them() -> None:
    hw = apply_overrides(load_hardware("h100"), HardwareOverrides(gpus_per_node=4, nic_gbit_per_node="800"))
    assert hw.groups[0].devices_per_node == 4 and hw.groups[0].num_nodes == 16
    assert hw.inter_node.bandwidth_gbps == 25.0  # 800 Gb/s / 4 GPUs / 8 bits


def test_nic_per_gpu_and_a_p2p_rate_no_faster_than_it() -> None:
    base = load_hardware("h100")
    slow = base.model_copy(update={"inter_node": base.inter_node.model_copy(update={"p2p_bandwidth_gbps": 40.0})})
    hw = apply_overrides(slow, HardwareOverrides(nic_gbit_per_gpu=200))
    assert hw.inter_node.bandwidth_gbps == 25.0 and hw.inter_node.p2p_bandwidth_gbps == 25.0


def test_usable_memory() -> None:
    hw = apply_overrides(load_hardware("h100"), HardwareOverrides(usable_memory_gib=70))
    assert hw.device_types["h100-sxm5-80gb"].hbm_bytes * hw.memory_fraction == pytest.approx(70 * 2**30)
    assert apply_overrides(load_hardware("h100"), HardwareOverrides(memory_fraction=0.8)).memory_fraction == 0.8


def test_no_override_leaves_the_profile_alone() -> None:
    hw = load_hardware("h200")
    assert apply_overrides(hw, HardwareOverrides()) is hw


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        (HardwareOverrides(gpus_per_node=0), ("--gpus-per-node = 0", "must be 1..")),
        (HardwareOverrides(nic_gbit_per_node="800", nic_gbit_per_gpu=100), ("both given", "keep one")),
        (HardwareOverrides(nic_gbit_per_gpu=-1), ("--nic-gbit-per-gpu = -1", "positive number of Gb/s")),
        (HardwareOverrides(nic_gbit_per_gpu=float("nan")), ("--nic-gbit-per-gpu = nan",)),
        (HardwareOverrides(memory_fraction=1.5), ("--memory-fraction = 1.5", "(0, 1]")),
        (HardwareOverrides(memory_fraction=0.9, usable_memory_gib=70), ("both given", "keep one")),
        (HardwareOverrides(usable_memory_gib=0), ("--usable-memory-gib = 0", "positive number of GiB")),
        (HardwareOverrides(usable_memory_gib=80), ("--usable-memory-gib = 80", "74.5 GiB", "at most 74.5")),
        (HardwareOverrides(nic_gbit_per_gpu=1e9), ("--nic-gbit-per-gpu", "GB/s per GPU is outside")),
    ],
)
def test_bad_overrides_are_one_line_naming_flag_value_and_fix(overrides: HardwareOverrides, needles) -> None:
    with pytest.raises(InputError) as e:
        apply_overrides(load_hardware("h100"), overrides)
    text = str(e.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, (needle, text)


def test_mixed_profile_takes_what_is_per_gpu_only() -> None:
    mixed = load_hardware("h100-a100-mixed")
    two_sizes = mixed.model_copy(
        update={"groups": [mixed.groups[0], mixed.groups[1].model_copy(update={"devices_per_node": 4})]}
    )
    with pytest.raises(InputError, match="nodes of 4 and 8 GPUs.*give --nic-gbit-per-gpu instead"):
        apply_overrides(two_sizes, HardwareOverrides(nic_gbit_per_node="800"))
    assert apply_overrides(two_sizes, HardwareOverrides(nic_gbit_per_gpu=400)).inter_node.bandwidth_gbps == 50.0
