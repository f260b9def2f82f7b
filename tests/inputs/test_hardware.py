"""Built-in hardware profiles and `load_hardware` / `list_hardware` (adaptis_plan/hardware.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adaptis_plan.errors import InputError
from adaptis_plan.inputs.hardware import builtin_hardware_names, cluster, list_hardware, load_hardware

PROFILES = Path(__file__).resolve().parents[2] / "profiles"
REQUIRED = ("a100", "h100", "h200", "cpu", "h100-a100-mixed")


def _h200_dict() -> dict:
    return json.loads((PROFILES / "h200.json").read_text())


def test_builtins_listed_with_descriptions() -> None:
    rows = dict(list_hardware())
    for name in REQUIRED:
        assert name in rows, name
        assert rows[name], f"{name} has no description"
    assert builtin_hardware_names() == sorted(rows)


@pytest.mark.parametrize("name", REQUIRED)
def test_builtin_loads_and_cites_sources(name: str) -> None:
    hw = load_hardware(name)
    assert hw.name == name  # file stem == profile name
    for dt in hw.device_types.values():
        assert len(dt.source) > 20
    assert hw.intra_node.source and hw.inter_node.source
    assert hw.intra_node.bandwidth_gbps > hw.inter_node.bandwidth_gbps


def test_datasheet_numbers() -> None:
    a100 = load_hardware("a100").device_types["a100-sxm4-80gb"]
    h100 = load_hardware("h100").device_types["h100-sxm5-80gb"]
    h200 = load_hardware("h200").device_types["h200-sxm-141gb"]
    assert (a100.peak_bf16_tflops, a100.hbm_bytes, a100.hbm_bandwidth_gbps) == (312, 80e9, 2039)
    assert (h100.peak_bf16_tflops, h100.hbm_bytes, h100.hbm_bandwidth_gbps) == (989, 80e9, 3350)
    assert (h200.peak_bf16_tflops, h200.hbm_bytes, h200.hbm_bandwidth_gbps) == (989, 141e9, 4800)
    for dt in (a100, h100, h200):
        assert 0.6 <= dt.matmul_efficiency <= 0.75
    assert load_hardware("h200").inter_node.bandwidth_gbps == 50  # NDR 400 Gb/s
    assert load_hardware("a100").inter_node.bandwidth_gbps == 25  # HDR 200 Gb/s


KERNEL_FIELDS = (
    "kernel_overhead_s",
    "gemm_half_mn",
    "gemm_half_k",
    "attention_half_head_dim",
    "scan_efficiency",
    "sustained_efficiency",
    "layer_overhead_s",
)


def test_kernel_model_parameters() -> None:
    """GPU profiles set the kernel-level refinements of the roofline (cost/analytic.py), each explained."""
    sms = {"h200-sxm-141gb": 132, "h100-sxm5-80gb": 132, "a100-sxm4-80gb": 108}
    builtin = {}
    for name in ("a100", "h100", "h200"):
        builtin.update(load_hardware(name).device_types)
    for key, dt in builtin.items():
        assert 4e-6 <= dt.kernel_overhead_s <= 8e-6  # CUDA launch + tail + host dispatch of a short kernel
        assert dt.gemm_half_mn == pytest.approx(sms[key] / 2 * 128 * 128, rel=0.02)  # half a wave of 128x128 tiles
        assert dt.gemm_half_k == 128
        assert 16 <= dt.attention_half_head_dim <= 64
        assert dt.scan_efficiency is not None and dt.scan_efficiency < 0.2 * dt.matmul_efficiency
        assert len(dt.kernel_model_source) > 200
    # Hopper's tensor cores outrun its softmax (special-function) units twice as far as Ampere's
    assert builtin["h100-sxm5-80gb"].attention_half_head_dim == 2 * builtin["a100-sxm4-80gb"].attention_half_head_dim
    for key, dt in load_hardware("h100-a100-mixed").device_types.items():
        assert all(getattr(dt, f) == getattr(builtin[key], f) for f in KERNEL_FIELDS + ("matmul_efficiency",))
    cpu = load_hardware("cpu").device_types["cpu-core"]  # a guess to be replaced by a measured profile: plain roofline
    assert (cpu.kernel_overhead_s, cpu.gemm_half_mn, cpu.gemm_half_k, cpu.attention_half_head_dim) == (0, 0, 0, 0)
    assert cpu.scan_efficiency is None


def test_h200_fits_paper_cases() -> None:
    hw = load_hardware("h200")
    assert hw.groups[0].devices_per_node == 8
    assert len({node for _, node in hw.rank_slots(16, 1)}) == 2
    assert len({node for _, node in hw.rank_slots(16, 8)}) == 16


def test_mixed_cluster_is_a_list_of_groups() -> None:
    hw = load_hardware("h100-a100-mixed")
    slots = hw.rank_slots(16, 1)
    assert [dt for dt, _ in slots] == ["h100-sxm5-80gb"] * 8 + ["a100-sxm4-80gb"] * 8
    assert [node for _, node in slots] == [0] * 8 + [1] * 8


def test_load_from_json_and_yaml_path(tmp_path: Path) -> None:
    data = _h200_dict()
    data["name"] = "mine"
    (tmp_path / "mine.json").write_text(json.dumps(data))
    assert load_hardware(str(tmp_path / "mine.json")).name == "mine"
    yaml = pytest.importorskip("yaml")
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(data))
    assert load_hardware(str(tmp_path / "mine.yaml")).fingerprint() == load_hardware("h200").fingerprint()


def _error(arg: str) -> str:
    with pytest.raises(InputError) as info:
        load_hardware(arg)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.json")
    message = _error(path)
    assert message.startswith(path) and "no such hardware profile file" in message


def test_malformed_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x",\n  "groups": [}\n')
    message = _error(str(path))
    assert message.startswith(f"{path}: not valid JSON (line 2, column 14")


def test_validation_error_names_field_and_value(tmp_path: Path) -> None:
    data = _h200_dict()
    data["groups"][0]["num_nodes"] = 0
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(data))
    message = _error(str(path))
    assert message == f"{path}: groups[0].num_nodes = 0: out of range; allowed: 1..100,000"


def test_typo_field_is_unknown(tmp_path: Path) -> None:
    data = _h200_dict()
    data["intra_node"]["bandwith_gbps"] = data["intra_node"].pop("bandwidth_gbps")
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(data))
    message = _error(str(path))
    assert f"{path}: intra_node.bandwith_gbps = 450.0: unknown field; did you mean 'bandwidth_gbps'?" == message


def test_unknown_device_type_reference(tmp_path: Path) -> None:
    data = _h200_dict()
    data["groups"][0]["device_type"] = "h300"
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(data))
    assert "groups[0].device_type 'h300' is not one of: h200-sxm-141gb" in _error(str(path))


def test_unknown_name_suggests() -> None:
    message = _error("h10")
    assert "hardware 'h10'" in message and "did you mean 'h100'?" in message and "h200" in message
    assert "did you mean" not in _error("zzzzzz")


def test_cluster_sizes_the_profile_and_refuses_partial_nodes() -> None:
    hw = load_hardware("h100")
    assert cluster(hw, 1024).num_devices == 1024
    assert cluster(hw, 4).groups[0].devices_per_node == 4
    with pytest.raises(InputError, match="multiple of 8"):
        cluster(hw, 12)


def test_layering_no_heavy_imports() -> None:
    code = (
        "import sys, adaptis_plan.inputs.hardware, adaptis_plan.cost.analytic, adaptis_plan.cost.table;"
        "bad = [m for m in ('torch', 'ortools', 'rich', 'click') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
