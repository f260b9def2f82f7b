"""Your cluster on the command line: `hardware show --json` round trips, the hardware overrides of
`plan`, tensor parallelism across nodes, and the messages about cluster size, batch and memory
(docs/clusters.md)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from adaptis_plan.inputs.hardware import builtin_hardware_names
from tests.helpers_cli import leftovers, one_line_error

DOCS = Path(__file__).resolve().parents[2] / "docs" / "clusters.md"
CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
TINY = ("--model", "tiny-llama", "--pp", "2", "--microbatches", "4", "--seq-len", "128", "--strategy", "1F1B")


def _doc_command(output: str) -> list[str]:
    """The `adaptis plan` command docs/clusters.md shows for the plan file `output`, as arguments."""
    lines = [line[2:] for line in DOCS.read_text().splitlines() if line.startswith("$ adaptis plan ")]
    found = [line for line in lines if line.endswith(f"-o {output}")]
    assert len(found) == 1, (output, lines)
    return shlex.split(found[0])[1:]


@pytest.mark.parametrize("name", builtin_hardware_names())
def test_hardware_show_json_loads_back_as_hardware_file(adaptis, tmp_path: Path, name: str) -> None:
    shown = adaptis("hardware", "show", name, "--json")
    assert shown.exit_code == 0, shown.stderr
    data = shown.json()
    assert data["num_devices"] >= 1  # the keys that were there stay
    mine = tmp_path / "mine.json"
    mine.write_text(shown.stdout)
    again = adaptis("hardware", "show", mine, "--json")
    assert again.exit_code == 0, again.stderr
    assert again.json() == data
    plan = tmp_path / "plan.json"
    r = adaptis("plan", *TINY, "--hardware", mine, "-o", plan)
    assert r.exit_code == 0, r.stderr
    assert json.loads(plan.read_text())["hardware"]["profile"]["name"] == name


def test_hardware_show_states_units_and_scope(adaptis) -> None:
    r = adaptis("hardware", "show", "a100")
    text = " ".join(r.stderr.split())
    assert "network 1,600 Gb/s per node per direction" in text
    assert "usable memory: 67.1 GiB per GPU (90% of 80 GB HBM); memory_fraction 0.9" in text
    assert "inter-node link: 25 GB/s per GPU per direction = 200 Gb/s" in text
    assert "intra-node link: 300 GB/s per GPU per direction" in text


def test_a_stale_derived_key_in_a_profile_file_is_ignored_with_a_note(adaptis, tmp_path: Path) -> None:
    data = adaptis("hardware", "show", "h100", "--json").json()
    data["groups"][0]["num_nodes"] = 4
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(data))
    plan = tmp_path / "plan.json"
    r = adaptis("plan", *TINY, "--hardware", mine, "-o", plan)
    assert r.exit_code == 0, r.stderr
    assert f"note: {mine}: num_devices = 128 is read-only and ignored: groups give 32; change groups" in r.stderr
    assert json.loads(plan.read_text())["hardware"]["profile"]["groups"][0]["num_nodes"] == 4
    shown = adaptis("hardware", "show", mine, "--json")
    assert shown.json()["num_devices"] == 32 and "num_devices = 128 is read-only and ignored" in shown.stderr


def test_a_derived_key_of_the_wrong_type_is_one_line(adaptis, tmp_path: Path) -> None:
    data = adaptis("hardware", "show", "h100", "--json").json()
    data["num_devices"] = "many"
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(data))
    r = adaptis("plan", *TINY, "--hardware", mine, "-o", tmp_path / "plan.json")
    one_line_error(r, 2, str(mine), "num_devices", '"many"')
    assert leftovers(tmp_path) == ["mine.json"]


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (("--gpus-per-node", "0"), ("--gpus-per-node = 0",)),
        (("--nic-gbit-per-node", "4y200"), ("--nic-gbit-per-node = '4y200'", "4x200")),
        (("--nic-gbit-per-gpu", "-5"), ("--nic-gbit-per-gpu = -5", "Gb/s")),
        (("--nic-gbit-per-gpu", "inf"), ("--nic-gbit-per-gpu = inf",)),
        (("--nic-gbit-per-node", "800", "--nic-gbit-per-gpu", "100"), ("both given", "keep one")),
        (("--memory-fraction", "2"), ("--memory-fraction = 2.0", "(0, 1]")),
        (("--memory-fraction", "0.9", "--usable-memory-gib", "60"), ("both given",)),
        (("--usable-memory-gib", "0"), ("--usable-memory-gib = 0",)),
        (("--usable-memory-gib", "1000"), ("--usable-memory-gib = 1000", "at most")),
        (("--nic-gbit-per-gpu", "1e12"), ("--nic-gbit-per-gpu", "GB/s per GPU is outside")),
    ],
)
def test_bad_hardware_override_is_one_line_and_no_file(adaptis, tmp_path: Path, flags, needles) -> None:
    plan = tmp_path / "plan.json"
    r = adaptis("plan", *TINY, "--hardware", "h100", *flags, "-o", plan)
    one_line_error(r, 2, *needles)
    assert leftovers(tmp_path) == []


def test_overrides_are_recorded_in_the_plan_and_simulate_reproduces_it(adaptis, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    flags = ("--gpus-per-node", "4", "--nic-gbit-per-gpu", "100", "--usable-memory-gib", "6")
    r = adaptis("plan", *TINY, "--hardware", "cpu", *flags, "-o", plan, "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["usable_memory_bytes"] == {"cpu-core": 6 * 2**30}
    hw = json.loads(plan.read_text())["hardware"]["profile"]
    assert hw["groups"][0]["devices_per_node"] == 4
    assert hw["inter_node"]["bandwidth_gbps"] == 12.5 and "--nic-gbit-per-gpu 100" in hw["inter_node"]["source"]
    assert "Command line: --gpus-per-node 4 --nic-gbit-per-gpu 100 --usable-memory-gib 6." in hw["description"]
    sim = adaptis("simulate", plan, "--json")
    assert sim.exit_code == 0, sim.stderr
    assert sim.json()["stored_differs"] is False
    assert "memory limit 6.0 GiB per GPU" in sim.json()["cost_source"]


def test_every_report_states_its_usable_memory(adaptis, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    r = adaptis("plan", *TINY, "--hardware", "h100", "--memory-fraction", "0.8", "-o", plan)
    assert r.exit_code == 0, r.stderr
    assert "planned with usable memory 59.6 GiB per GPU (80% of 80 GB HBM)." in " ".join(r.stderr.split())
    sim = adaptis("simulate", plan)
    assert "memory limit 59.6 GiB per GPU (80% of 80 GB HBM)" in " ".join(sim.stderr.split())


def test_gpus_beyond_the_profile_scale_it_with_a_note(adaptis, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    args = ("--model", "tiny-llama", "--hardware", "cpu", "--gpus", "16", "--global-batch-size", "16")
    r = adaptis("plan", *args, "--seq-len", "128", "--pp", "2", "--time-limit", "1", "--no-hard-stop", "-o", plan)
    assert r.exit_code == 0, r.stderr
    line = "note: --gpus 16: hardware 'cpu' holds 8 GPUs (1 node of 8); planned on 2 such nodes"
    assert line in r.stderr


def test_a_batch_coprime_with_the_gpus_says_dp_is_1_and_which_batch_opens_it(adaptis, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    args = ("--model", "tiny-llama", "--hardware", "cpu", "--gpus", "8", "--global-batch-size", "7")
    r = adaptis(
        "plan", *args, "--seq-len", "128", "--pp", "2", "--time-limit", "1", "--no-hard-stop", "-o", plan, "--json"
    )
    assert r.exit_code == 0, r.stderr
    assert r.json()["configuration"]["dp"] == 1
    assert (
        "note: --global-batch-size 7 shares no factor with --gpus 8: dp divides both, so every configuration searched"
        " is dp 1 (the 8 GPUs split one model replica); --global-batch-size 8 opens dp up to 8"
    ) in r.stderr


def test_a_fixed_micro_batch_count_that_cannot_work_names_its_own_flag(adaptis, tmp_path: Path) -> None:
    args = ("--model", "llama-2-7b", "--hardware", "h100", "--gpus", "16", "--global-batch-size", "64")
    line = one_line_error(
        adaptis("plan", *args, "--microbatches", "3", "-o", tmp_path / "p.json"),
        2,
        "with --microbatches 3",
        "dp x micro-batch size x micro-batches must equal --global-batch-size 64",
    )
    assert "--num-microbatches" not in line


def test_a_tp_that_neither_divides_a_node_nor_fills_nodes_names_the_rule(adaptis, tmp_path: Path) -> None:
    args = ("--model", "llama-2-7b", "--hardware", "h100", "--gpus", "48", "--global-batch-size", "48")
    one_line_error(
        adaptis("plan", *args, "--gpus-per-node", "6", "--tp", "4", "-o", tmp_path / "p.json"),
        2,
        "tp x cp = 4 neither divides a node's 6 GPUs nor fills whole nodes",
        "use a tp x cp of 1, 2, 3, 6 or a multiple of 6",
    )
    assert leftovers(tmp_path) == []


def test_a_model_whose_state_alone_overflows_says_how_many_gpus_it_needs(adaptis, tmp_path: Path) -> None:
    args = ("--model", CONFIGS / "llama-3.1-405b.json", "--hardware", "h100", "--gpus", "8")
    line = one_line_error(adaptis("plan", *args, "--global-batch-size", "8", "-o", tmp_path / "p.json"), 3)
    assert "need at least 102 GPUs of 67.1 GiB usable" in line
    assert "a shorter sequence or a smaller batch cannot help: use --gpus 104 (13 nodes of 8) or more" in line
    assert leftovers(tmp_path) == []


def test_seq_len_beyond_a_rotary_models_context_is_planned_with_a_warning(adaptis, tmp_path: Path) -> None:
    args = ("--model", CONFIGS / "llama-2-7b.json", "--hardware", "h100", "--pp", "2", "--tp", "4")
    plan = tmp_path / "p.json"
    r = adaptis("plan", *args, "--microbatches", "4", "--strategy", "1F1B", "--seq-len", "8192", "-o", plan)
    assert r.exit_code == 0, r.stderr
    assert re.search(
        r"note: --seq-len 8192 is beyond llama-2-7b's max_position_embeddings 4096 \(.*llama-2-7b.json\): its rotary"
        r" positions past 4096 were never trained",
        r.stderr,
    )
    r = adaptis("plan", *args, "--microbatches", "4", "--strategy", "1F1B", "--seq-len", "4096", "-o", plan)
    assert r.exit_code == 0 and "max_position_embeddings" not in r.stderr


def test_a_point_that_does_not_fit_says_by_how_much() -> None:
    from adaptis_plan.inputs.hardware import cluster, load_hardware
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.search.screen import Considered, _margin_reason
    from adaptis_plan.search.space import Point, Request

    model = load_model("llama-3.1-70b")
    hw = cluster(load_hardware("h100"), 16)
    req = Request(gpus=16, global_batch_size=16, seq_len=4096)
    row = Considered(Point(1, 1, 16, 1, 1, 1, 1, 1), 1.0, "not_screened")
    reason = _margin_reason(model, hw, req, row)
    assert re.fullmatch(
        r"does not fit: [0-9.]+ GiB over the memory limit \(1F1B with full recomputation, uniform partition\)", reason
    )
    assert "inf" not in reason


@pytest.mark.slow
def test_tp_across_nodes_is_planned_when_asked(adaptis, tmp_path: Path) -> None:
    plan = tmp_path / "tp16.json"
    args = ("--model", "llama-2-7b", "--hardware", "h100", "--gpus", "16", "--global-batch-size", "16")
    r = adaptis(
        "plan", *args, "--seq-len", "2048", "--tp", "16", "--time-limit", "1", "--no-hard-stop", "-o", plan, "--json"
    )
    assert r.exit_code == 0, r.stderr
    assert r.json()["configuration"]["tp"] == 16
    assert (
        "note: tp 16 spans 2 nodes of 8 GPUs: its collectives run on the network at 400 GB/s bus bandwidth (8 GPUs"
        " of a node x 50 GB/s network each) with 10 us latency, against NVLink's 450 GB/s inside a node: expect them"
        " to be slow"
    ) in r.stderr
    assert adaptis("simulate", plan, "--json").json()["stored_differs"] is False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("output", "gpu", "gbps", "usable_gib", "configuration"),
    [
        ("dgx-h100.json", "h100-sxm5-80gb", 50.0, 72e9 / 2**30, "tp 1 pp 1 dp 64 cp 1 ep 1 zero 2 mbs 2 x 2"),
        ("a100-4x200.json", "a100-sxm4-80gb", 12.5, 72.0, "tp 1 pp 1 dp 32 cp 1 ep 1 zero 2 mbs 2 x 1"),
    ],
)
def test_the_worked_examples_of_docs_clusters_md(
    adaptis, tmp_path: Path, monkeypatch, output, gpu, gbps, usable_gib, configuration
) -> None:
    monkeypatch.chdir(tmp_path)
    r = adaptis(*_doc_command(output))
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert configuration in text
    assert f"planned with usable memory {usable_gib:.1f} GiB per GPU" in text
    assert f"planned with usable memory {usable_gib:.1f} GiB per GPU" in DOCS.read_text().replace("\n", " ")
    assert configuration in " ".join(DOCS.read_text().split())
    hw = json.loads((tmp_path / output).read_text())["hardware"]["profile"]
    assert hw["inter_node"]["bandwidth_gbps"] == gbps
    assert hw["device_types"][gpu]["hbm_bytes"] * hw["memory_fraction"] == pytest.approx(usable_gib * 2**30)
