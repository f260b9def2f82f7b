"""The command line contract (frozen in tests/cli/cli_surface.json): command names, `--json` keys,
stdout/stderr split, exit codes, one-line errors, and the plan -> simulate -> export flow.

Everything runs in-process through `adaptis_plan.cli.main` (the `adaptis` fixture), except one
subprocess check that the console entry point really exits with the codes.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from adaptis_plan.schedules import STRATEGIES

TINY = ("--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "128")
FAST = ("--time-limit", "1", "--no-hard-stop")

SIM_KEYS = {"strategy", "step_time_s", "bubble_ratio", "bubble_ratio_per_device", "peak_memory_bytes", "lower_bound_s"}
PLAN_KEYS = SIM_KEYS | {"plan_time_s", "baselines"}
ACTION = re.compile(r"^\d+[FBIW]\d+$")


def one_line_error(r, code: int, *needles: str, grid: bool = False) -> str:
    """Assert exit `code`, nothing on stdout, no traceback, and ONE message line naming `needles`.

    With `grid`, the message may be followed by the device x step grid (the torch-style error
    grid) whose marked row says `<-- ERROR`.
    """
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines and lines[0].startswith("error: "), r.stderr
    if grid:
        assert "<-- ERROR" in r.stderr, r.stderr
    else:
        assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def edited(src: Path, dst: Path, edit) -> Path:
    data = load(src)
    edit(data)
    dst.write_text(json.dumps(data))
    return dst


# ----------------------------------------------------------------------------- surface
def test_help_lists_every_contract_command(adaptis) -> None:
    r = adaptis("--help")
    assert r.exit_code == 0
    for cmd in ("models", "model", "hardware", "plan", "simulate", "export", "run", "profile", "schema"):
        assert re.search(rf"^\s+{cmd}\s", r.stdout, re.M), cmd


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (
            "plan",
            "--model --hardware --pp --microbatches --seq-len --micro-batch-size --tp --strategy --costs"
            " --time-limit --seed --output --json",
        ),
        ("simulate", "--json --trace --svg"),
        ("export", "--format --output"),
        ("run", "--steps --verify --json --trace"),
        ("profile", "--model --device --output"),
        ("schema", "--check"),
    ],
)
def test_contract_options(adaptis, command: str, options: str) -> None:
    r = adaptis(command, "--help")
    assert r.exit_code == 0
    for opt in options.split():
        assert opt in r.stdout, (command, opt)
    if command == "export":
        assert "torch-csv|megatron-layout|megatron-args|megatron-launch|torchtitan" in r.stdout  # docs/design.md order


# ----------------------------------------------------------------------------- catalogues
def test_models_json(adaptis) -> None:
    r = adaptis("models", "--json")
    assert r.exit_code == 0
    rows = r.json()["models"]
    names = {m["name"] for m in rows}
    assert all(set(m) >= {"name", "description"} for m in rows)
    contract = "llama-2-7b gemma-7b deepseek-v2-lite nemotron-h-8b tiny-llama tiny-gemma tiny-deepseek tiny-nemotron-h"
    families = [f"{f}-{s}" for f in ("gemma", "deepseek", "nemotron-h", "llama-2") for s in "sml"]
    assert set(contract.split()) | set(families) <= names


def test_hardware_json(adaptis) -> None:
    r = adaptis("hardware", "--json")
    assert r.exit_code == 0
    assert {"a100", "h100", "h200", "cpu"} <= {h["name"] for h in r.json()["hardware"]}


def test_hardware_show_json(adaptis) -> None:
    r = adaptis("hardware", "show", "h200", "--json")
    assert r.exit_code == 0
    hw = r.json()
    assert hw["name"] == "h200"
    assert {"device_types", "groups", "intra_node", "inter_node", "memory_fraction", "num_devices"} <= set(hw)
    assert hw["num_devices"] >= 16


def test_model_show_json(adaptis) -> None:
    r = adaptis("model", "show", "tiny-llama", "--json")
    assert r.exit_code == 0
    m = r.json()
    assert {"name", "parameters", "num_layers", "layers"} <= set(m)
    assert m["name"] == "tiny-llama"
    assert len(m["layers"]) == m["num_layers"]
    assert [row["index"] for row in m["layers"]] == list(range(m["num_layers"]))
    assert all({"index", "kind", "parameters"} <= set(row) for row in m["layers"])
    assert m["layers"][0]["kind"] == "embedding" and m["layers"][-1]["kind"] == "head"
    # untied embedding and head: the layers' parameters add up to the total
    assert sum(row["parameters"] for row in m["layers"]) == m["parameters"]


def test_model_show_costs_json(adaptis) -> None:
    r = adaptis("model", "show", "gemma-s", "--hardware", "h200", "--seq-len", "4096", "--json")
    assert r.exit_code == 0
    for row in r.json()["layers"]:
        assert {"f_s", "i_s", "w_s"} <= set(row)
        assert row["f_s"] > 0 and row["i_s"] >= 0 and row["w_s"] >= 0


# ----------------------------------------------------------------------------- plan / simulate
def _check_sim_keys(out: dict, pp: int) -> None:
    assert SIM_KEYS <= set(out)
    assert out["step_time_s"] > 0
    assert out["lower_bound_s"] <= out["step_time_s"] * (1 + 1e-9)
    assert len(out["bubble_ratio_per_device"]) == pp and len(out["peak_memory_bytes"]) == pp
    assert all(0 <= b <= 1 for b in out["bubble_ratio_per_device"])
    assert math.isclose(out["bubble_ratio"], sum(out["bubble_ratio_per_device"]) / pp, rel_tol=1e-9, abs_tol=1e-12)
    assert all(m > 0 for m in out["peak_memory_bytes"])


@pytest.mark.parametrize("strategy", ["adaptive", *(s.lower() for s in STRATEGIES)])
def test_plan_and_simulate_json(adaptis, tmp_path: Path, strategy: str) -> None:
    plan_path = tmp_path / "p.json"
    r = adaptis("plan", *TINY, *FAST, "--strategy", strategy, "-o", plan_path, "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()  # the whole stdout is one JSON object
    assert isinstance(out, dict)
    assert PLAN_KEYS <= set(out)
    expected = "adaptive" if strategy == "adaptive" else next(s for s in STRATEGIES if s.lower() == strategy)
    assert out["strategy"] == expected
    _check_sim_keys(out, pp=2)
    assert out["plan_time_s"] > 0
    # every classic strategy is feasible for this tiny input, under torch's spelling
    assert set(STRATEGIES) <= set(out["baselines"])
    for b in out["baselines"].values():
        assert {"step_time_s", "bubble_ratio"} <= set(b) and b["step_time_s"] > 0

    plan = load(plan_path)
    assert plan["strategy"] == expected
    assert plan["predicted"]["step_time_s"] == pytest.approx(out["step_time_s"], rel=1e-12)
    last_end = max(a["end_s"] for d in plan["devices"] for a in d["actions"])
    assert plan["predicted"]["step_time_s"] == pytest.approx(last_end, rel=1e-6)

    s = adaptis("simulate", plan_path, "--json")
    assert s.exit_code == 0, s.stderr
    sim = s.json()
    _check_sim_keys(sim, pp=2)
    assert sim["strategy"] == expected
    assert sim["step_time_s"] == pytest.approx(out["step_time_s"], rel=1e-9)
    assert sim["peak_memory_bytes"] == pytest.approx(out["peak_memory_bytes"], rel=1e-9)


def test_human_output_goes_to_stderr(adaptis, tmp_path: Path) -> None:
    plan_path = tmp_path / "p.json"
    r = adaptis("plan", *TINY, *FAST, "--strategy", "1F1B", "-o", plan_path)
    assert r.exit_code == 0 and r.stdout == "" and "1F1B" in r.stderr
    r = adaptis("simulate", plan_path)
    assert r.exit_code == 0 and r.stdout == "" and "dev 0" in r.stderr
    for args in (("models",), ("hardware",), ("model", "show", "tiny-llama")):
        r = adaptis(*args)
        assert r.exit_code == 0 and r.stdout == "" and r.stderr, args


def test_simulate_trace_and_svg(adaptis, tmp_path: Path, tiny_plan: Path) -> None:
    trace, svg = tmp_path / "out" / "t.json", tmp_path / "out" / "t.svg"
    r = adaptis("simulate", tiny_plan, "--trace", trace, "--svg", svg, "--json")
    assert r.exit_code == 0, r.stderr
    assert SIM_KEYS <= set(r.json())
    events = load(trace)["traceEvents"]
    assert events and all("ph" in e for e in events)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert sorted(p.name for p in svg.parent.iterdir()) == ["t.json", "t.svg"]  # no temporary files left


def test_design_done_when(adaptis, tmp_path: Path) -> None:
    """The Makefile's demo (`make demo`): plan Interleaved1F1B for gemma-s on h200, then simulate with trace and SVG."""
    p, t, s = tmp_path / "p.json", tmp_path / "t.json", tmp_path / "t.svg"
    args = "--strategy Interleaved1F1B --model gemma-s --hardware h200 --pp 4 --microbatches 16".split()
    r = adaptis("plan", *args, "-o", p)
    assert r.exit_code == 0, r.stderr
    r = adaptis("simulate", p, "--trace", t, "--svg", s)
    assert r.exit_code == 0, r.stderr
    plan = load(p)
    assert plan["strategy"] == "Interleaved1F1B"
    assert plan["training"]["pp"] == 4 and plan["training"]["num_microbatches"] == 16
    assert [st["device"] for st in plan["stages"]] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert "traceEvents" in load(t)
    ET.parse(s)


def test_classic_plan_report_does_not_claim_a_search(adaptis, tmp_path: Path) -> None:
    args = "--strategy Interleaved1F1B --model gemma-s --hardware h200 --pp 4 --microbatches 16".split()
    r = adaptis("plan", *args, "-o", tmp_path / "p.json")
    assert r.exit_code == 0, r.stderr
    text = " ".join(r.stderr.split())  # rich wraps lines at the console width
    assert "is kept" not in text and "anything found" not in text
    assert "classic Interleaved1F1B plan" in text
    own_rows = [ln for ln in r.stderr.splitlines() if re.match(r"^\W*Interleaved1F1B\s+[│|]", ln)]
    assert len(own_rows) == 1, own_rows  # the plan's row, not also a baseline row


def test_a_classic_plan_on_another_partition_is_named_as_its_baseline(adaptis, tmp_path: Path) -> None:
    """1F1B on the balanced partition is the report's "1F1B/balanced" row at 1.00x, beside the uniform
    "1F1B" baseline (it was a second "1F1B" row); the plan file keeps the strategy name."""
    args = "--strategy 1F1B --partition balanced --model gemma-s --hardware h200 --pp 4 --microbatches 8".split()
    r = adaptis("plan", *args, "-o", tmp_path / "p.json")
    assert r.exit_code == 0, r.stderr
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\W*(1F1B\S*)\s+[│|].*?([\d.]+x)", r.stderr, re.M)}
    assert rows == {"1F1B": rows["1F1B"], "1F1B/balanced": "1.00x"}, rows
    assert load(tmp_path / "p.json")["strategy"] == "1F1B"


def test_a_balanced_partition_equal_to_the_uniform_one_is_one_row(adaptis, tmp_path: Path) -> None:
    """At pp 1 a one-stage-per-device strategy's balanced partition is its uniform one: the report lists it
    once and says why; the plan's `--json` keeps both names (every feasible classic strategy is a
    contract). Loop strategies (two stages on the device) still differ and keep both rows."""
    args = (*"--model tiny-llama --hardware h100 --pp 1 --microbatches 4".split(), "-o", tmp_path / "p.json")
    r = adaptis("plan", *args, "--json")
    assert {"1F1B/balanced", "GPipe/balanced"} <= set(json.loads(r.stdout)["baselines"])
    r = adaptis("plan", *args)
    assert r.exit_code == 0, r.stderr
    for name in ("1F1B", "GPipe"):
        assert re.search(rf"^\W*{name}\s+[│|]", r.stderr, re.M) and f"{name}/balanced" not in r.stderr
    assert "balanced partition is its uniform one here has one row" in " ".join(r.stderr.split())


# ----------------------------------------------------------------------------- export
def test_export_torch_csv_matches_plan(adaptis, tiny_plan: Path) -> None:
    r = adaptis("export", tiny_plan, "--format", "torch-csv")
    assert r.exit_code == 0, r.stderr
    rows = [line.split(",") for line in r.stdout.splitlines()]
    plan = load(tiny_plan)
    assert len(rows) == plan["training"]["pp"]
    for row, dev in zip(rows, plan["devices"], strict=True):
        assert all(ACTION.match(a) for a in row)
        assert row == [f"{a['stage']}{a['op']}{a['mb']}" for a in dev["actions"]]


def test_export_exact_outputs(adaptis, tmp_path: Path) -> None:
    """Golden outputs of the classic plans on the tiny input (uniform partition: 3, 2, 2, 3 layers)."""
    gpipe, i1f1b = tmp_path / "gpipe.json", tmp_path / "i1f1b.json"
    assert adaptis("plan", *TINY, "--strategy", "gpipe", "-o", gpipe).exit_code == 0
    assert adaptis("plan", *TINY, "--strategy", "interleaved1f1b", "-o", i1f1b).exit_code == 0
    r = adaptis("export", gpipe, "--format", "torch-csv")
    assert r.stdout == "0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F0,1F1,1F2,1F3,1B0,1B1,1B2,1B3\n"
    r = adaptis("export", i1f1b, "--format", "megatron-layout")
    assert (r.exit_code, r.stdout) == (0, "Ett|tt|tt|ttL\n")
    config = tmp_path / "tt" / "adaptis_i1f1b.py"
    r = adaptis("export", i1f1b, "--format", "torchtitan", "--torchtitan-config", "llama3:llama3_8b", "-o", config)
    assert r.exit_code == 0, r.stderr
    assert config.with_suffix(".csv").read_text() == adaptis("export", i1f1b, "--format", "torch-csv").stdout
    fqns = [
        ["tok_embeddings", "layers.0", "layers.1"],
        ["layers.2", "layers.3"],
        ["layers.4", "layers.5"],
        ["layers.6", "layers.7", "norm", "lm_head"],
    ]
    assert f'"module_fqns_per_model_part": {fqns!r}' in config.read_text()
    out = tmp_path / "sub" / "layout.txt"
    r = adaptis("export", i1f1b, "--format", "megatron-layout", "-o", out)
    assert r.exit_code == 0 and r.stdout == "" and out.read_text() == "Ett|tt|tt|ttL\n"


def test_export_megatron_args_whole_configuration(adaptis, tmp_path: Path) -> None:
    """A tp 2 plan with full recomputation, then its training edited to dp 4, cp 2, ZeRO 2: the
    arguments carry each, and a shell reads them as the arguments the parser was given."""
    from helpers_megatron import argv_of, parse_megatron_args

    plan_path = tmp_path / "tp2.json"
    args = (*TINY, "--tp", "2", "--recompute", "full", "--strategy", "interleaved1f1b", "-o", plan_path)
    assert adaptis("plan", *args).exit_code == 0
    r = adaptis("export", plan_path, "--format", "megatron-args")
    assert r.exit_code == 0, r.stderr
    ns = parse_megatron_args(r.stdout)
    assert (ns.tensor_model_parallel_size, ns.sequence_parallel, ns.pipeline_model_parallel_size) == (2, True, 2)
    assert (ns.recompute_granularity, ns.recompute_method, ns.recompute_num_layers) == ("full", "uniform", 1)
    assert (
        ns.pipeline_model_parallel_layout == adaptis("export", plan_path, "--format", "megatron-layout").stdout.strip()
    )
    assert (ns.global_batch_size, ns.micro_batch_size, ns.seq_length) == (4, 1, 128)

    plan = load(plan_path)
    plan["training"].update(dp=4, cp=2, zero=2)
    edited = tmp_path / "dp4.json"
    edited.write_text(json.dumps(plan))
    out = tmp_path / "megatron.args"
    r = adaptis("export", edited, "--format", "megatron-args", "-o", out)
    assert r.exit_code == 0 and r.stdout == "", r.stderr
    text = out.read_text()
    ns = parse_megatron_args(text)
    assert (ns.context_parallel_size, ns.global_batch_size) == (2, 4 * 1 * 4)
    assert (ns.use_distributed_optimizer, ns.use_megatron_fsdp, ns.data_parallel_sharding_strategy) == (
        True,
        True,
        "optim_grads",
    )
    assert "world size = tp 2 x pp 2 x cp 2 x dp 4 = 32 GPUs" in text
    # pasted after a command, as a script would: bash sees exactly these arguments
    shell = subprocess.run(["bash", "-c", "printf '%s\\n' \\\n" + text], capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0 and shell.stdout.splitlines() == argv_of(text), shell.stderr


def test_export_megatron_refuses_v_placement(adaptis, tmp_path: Path, zbv_plan: Path) -> None:
    r = adaptis("export", zbv_plan, "--format", "megatron-layout")
    one_line_error(r, 2, "megatron-layout", "rank s % 2", "--target megatron")
    out = tmp_path / "megatron.args"
    r = adaptis("export", zbv_plan, "--format", "megatron-args", "-o", out)
    one_line_error(r, 2, "megatron-args", "rank s % 2", "--target megatron")
    assert not out.exists()
    config = tmp_path / "zbv_pipeline.py"
    r = adaptis("export", zbv_plan, "--format", "torchtitan", "--torchtitan-config", "llama3:llama3_8b", "-o", config)
    assert r.exit_code == 0, r.stderr  # a V of 2 stages per rank: torchtitan's ZBV stage-to-rank style
    assert "'ZBVZeroBubble'" in config.read_text()


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--model", "tiny-lama"), ("tiny-lama", "did you mean 'tiny-llama'")),
        (("--hardware", "h2000"), ("h2000", "h200")),
        (("--model", "no/such/model.json"), ("no/such/model.json", "not found")),
        (("--pp", "0"), ("--pp", "0")),
        (("--microbatches", "0"), ("--microbatches", "0")),
        (("--time-limit", "0"), ("--time-limit", "0")),
        (("--seq-len", "-1"), ("--seq-len", "-1")),
        (("--pp", "64"), ("--pp", "64", "layers")),
        (("--strategy", "bogus"), ("--strategy", "bogus", "adaptive", "Interleaved1F1B")),
        (("--search", "partition,bogus"), ("--search", "bogus", "placement")),
        (("--strategy", "GPipe", "--stages-per-device", "2"), ("GPipe", "2")),
        (("--partition", "balanced"), ("--partition",)),
    ],
)
def test_plan_bad_input(adaptis, tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    out = tmp_path / "p.json"
    opts = dict(zip(TINY[::2], TINY[1::2], strict=True)) | {"--time-limit": "1"}
    opts.update(dict(zip(args[::2], args[1::2], strict=True)))
    r = adaptis("plan", *[x for kv in opts.items() for x in kv], "--no-hard-stop", "-o", out, "--json")
    one_line_error(r, 2, *needles)
    assert not out.exists()


def test_plan_malformed_model_spec(adaptis, tmp_path: Path) -> None:
    spec = tmp_path / "broken.json"
    spec.write_text('{"name": "x", "layers": [')
    out = tmp_path / "p.json"
    r = adaptis("plan", *TINY[2:], "--model", spec, "-o", out)
    one_line_error(r, 2, "broken.json", "JSON")
    assert not out.exists()


def test_plan_usage_error_is_exit_2(adaptis, tmp_path: Path) -> None:
    r = adaptis("plan", *TINY[:-2], "--seq-len", "lots", "-o", tmp_path / "p.json")
    assert r.exit_code == 2 and "Traceback" not in r.stderr and "lots" in r.stderr


def test_plan_unwritable_output(adaptis, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = adaptis("plan", *TINY, "--strategy", "1F1B", "-o", blocker / "p.json")
    one_line_error(r, 2, "p.json", "cannot write")


def test_failed_plan_keeps_existing_output(adaptis, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    out.write_text("previous")
    r = adaptis("plan", *TINY[:4], "--pp", "64", *TINY[6:], "-o", out)
    assert r.exit_code == 2 and out.read_text() == "previous"


def _tiny_hbm_profile(adaptis, tmp_path: Path, hbm_bytes: int) -> Path:
    """The built-in `cpu` profile with `hbm_bytes` of memory per device, as a user file."""
    hw = adaptis("hardware", "show", "cpu", "--json").json()
    hw.pop("num_devices")
    hw["name"] = "tiny-hbm"
    for d in hw["device_types"].values():
        d["hbm_bytes"] = hbm_bytes
    path = tmp_path / "tiny-hbm.json"
    path.write_text(json.dumps(hw))
    return path


@pytest.mark.parametrize("strategy", ["adaptive", "1F1B", "ZBVZeroBubble"])
def test_infeasible_memory_exit_3(adaptis, tmp_path: Path, strategy: str) -> None:
    hw = _tiny_hbm_profile(adaptis, tmp_path, 20_000_000)  # 18 MB usable: less than the embedding alone needs
    out = tmp_path / "p.json"
    r = adaptis("plan", *TINY[:2], "--hardware", hw, *TINY[4:], *FAST, "--strategy", strategy, "-o", out)
    line = one_line_error(r, 3, "device", "GiB", "fits memory", "try")
    need, have, over = (float(x) for x in re.findall(r"([\d.]+) GiB", line)[:3])
    assert need > have > 0 and over == pytest.approx(need - have, rel=0.05)
    assert "--pp 4" in line and "--recompute" in line
    assert not out.exists()


def test_infeasible_big_model_on_cpu(adaptis, tmp_path: Path) -> None:
    args = "--model llama-2-7b --hardware cpu --pp 2 --microbatches 4 --seq-len 512".split()
    r = adaptis("plan", *args, *FAST, "-o", tmp_path / "p.json")
    one_line_error(r, 3, "llama-2-7b", "device 0", "GiB", "over", "try")


# ----------------------------------------------------------------------------- bad plan files
def test_truncated_plan(adaptis, tmp_path: Path, tiny_plan: Path) -> None:
    text = tiny_plan.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    for cmd in (("simulate", cut), ("export", cut, "--format", "torch-csv")):
        one_line_error(adaptis(*cmd), 2, "cut.json", "not valid JSON", "truncated")


def test_missing_plan_file(adaptis, tmp_path: Path) -> None:
    one_line_error(adaptis("simulate", tmp_path / "nope.json", "--json"), 2, "nope.json", "no such plan file")
    one_line_error(adaptis("export", tmp_path / "nope.json", "--format", "torch-csv"), 2, "nope.json")


def test_plan_action_on_wrong_device(adaptis, tmp_path: Path, zbv_plan: Path) -> None:
    def move(plan: dict) -> None:
        plan["devices"][1]["actions"].insert(0, plan["devices"][0]["actions"].pop(0))

    bad = edited(zbv_plan, tmp_path / "moved.json", move)
    one_line_error(adaptis("simulate", bad), 2, "moved.json", "device 1", "0F0", grid=True)


def test_plan_missing_w(adaptis, tmp_path: Path, zbv_plan: Path) -> None:
    def drop_w(plan: dict) -> None:
        dev = plan["devices"][0]
        dev["actions"].remove(next(a for a in dev["actions"] if a["op"] == "W"))

    bad = edited(zbv_plan, tmp_path / "now.json", drop_w)
    one_line_error(adaptis("simulate", bad), 2, "now.json", "W", grid=True)
    one_line_error(adaptis("export", bad, "--format", "torch-csv"), 2, "now.json", grid=True)


def test_plan_stage_without_layers(adaptis, tmp_path: Path, zbv_plan: Path) -> None:
    def empty(plan: dict) -> None:
        plan["stages"][1]["layers"][1] = plan["stages"][1]["layers"][0]

    bad = edited(zbv_plan, tmp_path / "empty.json", empty)
    line = one_line_error(adaptis("simulate", bad), 2, "empty.json", "stages[1].layers", "no layer")
    assert "Value error" not in line


def test_plan_for_another_model(adaptis, tiny_plan: Path) -> None:
    for cmd in (("simulate", tiny_plan), ("export", tiny_plan, "--format", "torch-csv")):
        line = one_line_error(adaptis(*cmd, "--model", "tiny-gemma"), 2, "fingerprint", "tiny-llama", "tiny-gemma")
        assert "re-plan" in line


def test_plan_with_tampered_fingerprints(adaptis, tmp_path: Path, tiny_plan: Path) -> None:
    def model_fp(plan: dict) -> None:
        plan["model"]["fingerprint"] = "0" * 64

    def hardware_fp(plan: dict) -> None:
        plan["hardware"]["fingerprint"] = "0" * 64

    one_line_error(adaptis("simulate", edited(tiny_plan, tmp_path / "m.json", model_fp)), 2, "m.json", "fingerprint")
    r = adaptis("simulate", edited(tiny_plan, tmp_path / "h.json", hardware_fp))
    one_line_error(r, 2, "h.json", "hardware.profile does not match hardware.fingerprint", "re-plan")


def test_plan_of_unknown_model_name(adaptis, tmp_path: Path, tiny_plan: Path) -> None:
    """The plan carries its model: a name no catalogue knows simulates and exports from the plan alone."""

    def rename(plan: dict) -> None:
        plan["model"]["name"] = plan["model"]["spec"]["name"] = "my-private-model"

    renamed = edited(tiny_plan, tmp_path / "renamed.json", rename)
    assert adaptis("simulate", renamed, "--json").exit_code == 0
    assert adaptis("export", renamed, "--format", "torch-csv").exit_code == 0
    assert adaptis("simulate", renamed, "--model", "tiny-llama", "--json").exit_code == 0


# ----------------------------------------------------------------------------- reproducibility
@pytest.mark.slow
def test_same_inputs_and_seed_give_the_same_plan(adaptis, tmp_path: Path) -> None:
    # the work of --time-limit 10 (about 2 s here), without its wall-clock abort: a machine loaded enough
    # to stretch it past 10 s (seen in a full suite beside other jobs) must not change the plan
    args = "plan --model tiny-gemma --hardware h200 --pp 3 --microbatches 6 --seq-len 512 --time-limit 10 --seed 7"
    args += " --no-hard-stop"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert adaptis(*args.split(), "-o", a).exit_code == 0
    assert adaptis(*args.split(), "-o", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    pa, pb = load(a), load(b)
    assert not pa["search"]["aborted"]
    assert pa.pop("search")["source"] == pb.pop("search")["source"]
    assert pa["stages"] == pb["stages"]
    assert pa["devices"] == pb["devices"]
    assert pa == pb


def test_a_search_the_hard_stop_cut_says_so_on_stderr_in_json_mode(adaptis, tmp_path: Path) -> None:
    # 10 ms: the limit has passed before the search starts (it counts from the command's start)
    args = "plan --model deepseek-s --hardware h200 --pp 4 --microbatches 8 --seq-len 1024 --time-limit 0.01"
    r = adaptis(*args.split(), "-o", tmp_path / "p.json", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["search"]["aborted"]
    notes = [line for line in r.stderr.splitlines() if "--no-hard-stop" in line]
    assert len(notes) == 1 and notes[0].startswith("note: --time-limit cut the search short")


# ----------------------------------------------------------------------------- the real entry point
@pytest.mark.slow
def test_console_entry_point_exit_codes(tmp_path: Path, tiny_plan: Path) -> None:
    """Exit codes and stderr through `python -m adaptis_plan.cli` (what the `adaptis` script runs)."""
    shutil.copy(tiny_plan, tmp_path / "p.json")
    cmd = [sys.executable, "-m", "adaptis_plan.cli"]
    ok = subprocess.run(
        [*cmd, "export", "p.json", "--format", "torch-csv"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0 and ok.stdout.count("\n") == 2
    bad = subprocess.run(
        [*cmd, "plan", *TINY[:4], "--pp", "0", "--microbatches", "4", "-o", "x.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "error: --pp = 0: must be a positive number; pass --pp 1 or more\n"
    assert not (tmp_path / "x.json").exists()


# ----------------------------------------------------------------------------- head split
def test_head_chunks_plan_simulate_export(adaptis, tmp_path: Path) -> None:
    p = tmp_path / "split.json"
    args = "--model gemma-s --hardware h200 --pp 4 --microbatches 8 --seq-len 1024 --time-limit 1".split()
    r = adaptis("plan", *args, "--head-chunks", "3", "-o", p, "--json")
    assert r.exit_code == 0, r.stderr
    plan = load(p)
    assert plan["model"]["head_chunks"] == 3
    assert plan["model"]["num_layers"] == 34 + 2  # gemma-s: embedding + 32 blocks + head, head in 3 chunks
    assert plan["stages"][-1]["layers"][1] == 36
    r = adaptis("simulate", p, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["step_time_s"] == pytest.approx(plan["predicted"]["step_time_s"])
    for fmt in ("torch-csv", "megatron-layout", "megatron-args"):  # only the adaptis executor runs a split head
        r = adaptis("export", p, "--format", fmt)
        assert r.exit_code == 2 and "vocabulary chunks" in r.stderr and "--target" in r.stderr


def test_head_chunks_bad_values(adaptis, tmp_path: Path) -> None:
    base = "--hardware h200 --pp 2 --microbatches 4 --seq-len 512 --time-limit 1".split()
    r = adaptis("plan", "--model", "gemma-s", *base, "--head-chunks", "zero", "-o", tmp_path / "a.json")
    assert r.exit_code == 2 and "--head-chunks" in r.stderr
    r = adaptis("plan", "--model", "gemma-7b", *base, "--head-chunks", "2", "-o", tmp_path / "b.json")
    assert r.exit_code == 2 and "ties its embeddings" in r.stderr
    assert not (tmp_path / "b.json").exists()


def test_a_profile_with_measured_variation_gives_an_expected_step(adaptis, tmp_path: Path) -> None:
    from helpers_cli import tiny_cost_profile

    plain, varied = tmp_path / "plain.json", tmp_path / "varied.json"
    plain.write_text(json.dumps(tiny_cost_profile()))
    varied.write_text(json.dumps(tiny_cost_profile() | {"time_spread": 0.2}))
    r = adaptis("plan", *TINY, *FAST, "--strategy", "1F1B", "--costs", plain, "-o", tmp_path / "a.json", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["expected_step_time_s"] is None
    assert "expected_step_time_s" not in load(tmp_path / "a.json")["predicted"]
    r = adaptis("plan", *TINY, *FAST, "--strategy", "1F1B", "--costs", varied, "-o", tmp_path / "b.json", "--json")
    assert r.exit_code == 0, r.stderr
    out, plan = r.json(), load(tmp_path / "b.json")
    assert out["expected_step_time_s"] > out["step_time_s"]  # 1F1B's hand-offs wait for the later of two
    assert plan["predicted"]["expected_step_time_s"] == out["expected_step_time_s"]
    s = adaptis("simulate", tmp_path / "b.json", "--json")
    assert s.exit_code == 0, s.stderr
    assert s.json()["expected_step_time_s"] == pytest.approx(out["expected_step_time_s"], rel=1e-12)
    s = adaptis("simulate", tmp_path / "b.json")
    assert s.exit_code == 0 and "expected step" in s.stderr, s.stderr


def test_reports_name_the_runtime_settings_the_costs_assumed(adaptis, tmp_path: Path) -> None:
    """A plan made with runtime settings other than the defaults says so in its report and in
    `simulate`'s costs line (the plan file's training block holds them)."""
    path = tmp_path / "p.json"
    args = "--model tiny-llama --hardware h100 --pp 2 --microbatches 4 --seq-len 256 --tp 2 --time-limit 1".split()
    r = adaptis("plan", *args, "--attention", "cudnn", "--tp-comm-overlap", "-o", path)
    assert r.exit_code == 0, r.stderr
    head = " ".join((r.stdout + r.stderr).split())  # the title may wrap
    assert "h100, attention cudnn, TP comm overlap" in head
    sim = adaptis("simulate", path)
    assert sim.exit_code == 0, sim.stderr
    assert "attention cudnn, TP comm overlap" in " ".join((sim.stdout + sim.stderr).split())
    plain = adaptis("plan", *args, "-o", tmp_path / "q.json")
    title = " ".join((plain.stdout + plain.stderr).split()).split("strategy")[0]
    assert "h100" in title and "attention" not in title
