"""Hostile and broken input, class by class: every case is exit 2 (3 for memory, 130 for Ctrl-C)
with one line naming the right file, never a traceback, never a partial or misplaced output file.

1. pathological JSON (deep nesting, huge integers, binary files) in every boundary file;
2. non-finite and absurd numbers; 3. semantic model checks (TP, head_dim, vocabulary);
4. corrupted plan indices and sizes; 6. outputs and signals; 7. messages.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_cli import leftovers, one_line_error, run_reader_gone, tiny_cost_profile
from helpers_common import default_sigint

from adaptis_plan.inputs.models.load import load_model

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "configs"
TINY = ("--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "128")
CLASSIC = ("--strategy", "1F1B")


def _opts(**override: str) -> list[str]:
    opts = dict(zip(TINY[::2], TINY[1::2], strict=True)) | {f"--{k.replace('_', '-')}": v for k, v in override.items()}
    return [x for kv in opts.items() for x in kv]


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


def _cpu_profile() -> dict:
    return json.loads((ROOT / "profiles" / "cpu.json").read_text())


# ----------------------------------------------------------------------------- 1. pathological JSON
PATHOLOGICAL = {
    "deep": ("[" * 50_000 + "]" * 50_000, "nested deeper than"),
    "bigint": ('{"name": ' + "9" * 5000 + "}", "an integer of 5000 digits"),
    "binary": (bytes(range(256)), "not UTF-8 text"),
}


def _pathological(tmp_path: Path, kind: str) -> tuple[Path, str]:
    content, needle = PATHOLOGICAL[kind]
    path = tmp_path / f"{kind}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path, needle


@pytest.mark.parametrize("kind", sorted(PATHOLOGICAL))
@pytest.mark.parametrize("role", ["model", "hardware", "costs", "plan"])
def test_pathological_json_in_every_boundary_file(adaptis, tmp_path: Path, role: str, kind: str) -> None:
    bad, needle = _pathological(tmp_path, kind)
    out = tmp_path / "out.json"
    if role == "plan":
        r = adaptis("simulate", bad, "--json")
    else:
        r = adaptis("plan", *_opts(**{role: str(bad)}), *CLASSIC, "-o", out)
    one_line_error(r, 2, str(bad), needle)
    assert not out.exists()


# ----------------------------------------------------------------------------- 2. numbers
def _hw_edit(tmp_path: Path, edit) -> Path:
    data = _cpu_profile()
    edit(data)
    return _write(tmp_path / "hw.json", data)


def _device(d: dict) -> dict:
    return next(iter(d["device_types"].values()))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: _device(d).update(peak_bf16_tflops=float("inf")), "peak_bf16_tflops = inf: not a finite number"),
        (lambda d: _device(d).update(hbm_bytes=float("inf")), "hbm_bytes = inf"),
        (lambda d: _device(d).update(hbm_bandwidth_gbps=float("nan")), "hbm_bandwidth_gbps = nan"),
        (lambda d: d["intra_node"].update(bandwidth_gbps=float("inf")), "intra_node.bandwidth_gbps = inf"),
        (lambda d: d["inter_node"].update(latency_s=float("inf")), "inter_node.latency_s = inf"),
        (lambda d: d.update(action_overhead_s=float("inf")), "action_overhead_s = inf"),
        (lambda d: _device(d).update(kernel_overhead_s=1e9), "kernel_overhead_s = 1000000000.0: out of range"),
        (lambda d: d["groups"][0].update(num_nodes=10**9), "groups[0].num_nodes = 1000000000: out of range"),
        (lambda d: d["groups"][0].update(devices_per_node=-1), "devices_per_node = -1"),
        # positive but absurd: the step's arithmetic would overflow (1e298 s steps, numpy warnings)
        (lambda d: _device(d).update(peak_bf16_tflops=1e-300), "peak_bf16_tflops = 1e-300: out of range"),
        (lambda d: _device(d).update(matmul_efficiency=1e-300), "matmul_efficiency = 1e-300: out of range"),
        (lambda d: d["intra_node"].update(bandwidth_gbps=1e-300), "intra_node.bandwidth_gbps = 1e-300: out of range"),
    ],
)
def test_non_finite_and_absurd_hardware_numbers(adaptis, tmp_path: Path, edit, needle: str) -> None:
    hw = _hw_edit(tmp_path, edit)
    out = tmp_path / "p.json"
    r = adaptis("plan", *_opts(hardware=str(hw)), "--time-limit", "1", "--no-hard-stop", "-o", out)
    one_line_error(r, 2, "hw.json", needle, "allowed")
    assert not out.exists()


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("hidden_size", 1e30, "hidden_size = 1e+30: out of range; allowed: 1..1,000,000"),
        ("num_hidden_layers", 1e9, "num_hidden_layers = 1000000000.0: out of range; allowed: 1..99,998"),
        ("vocab_size", 10**12, "vocab_size = 1000000000000: out of range"),
    ],
)
def test_absurd_model_sizes(adaptis, tmp_path: Path, key: str, value: float, needle: str) -> None:
    data = json.loads((CONFIGS / "mixtral-8x7b.json").read_text()) | {key: value}
    config = _write(tmp_path / "config.json", data)
    t0 = time.perf_counter()
    r = adaptis("plan", *_opts(model=str(config)), "--time-limit", "1", "--no-hard-stop", "-o", tmp_path / "p.json")
    one_line_error(r, 2, "config.json", needle)
    assert time.perf_counter() - t0 < 30  # refused up front, not after building a billion layers


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--time-limit", "nan"), ("--time-limit = nan", "finite")),
        (("--time-limit", "inf"), ("--time-limit = inf",)),
        (("--time-limit", "-1"), ("--time-limit = -1",)),
        (("--head-chunks", "1000"), ("--head-chunks = '1000'", "1 to 64")),
        (("--head-chunks", "٣"), ("--head-chunks",)),
        (("--pp", "5000"), ("--pp = 5000", "1..1024")),
        (("--microbatches", "1000000000000"), ("--microbatches = 1,000,000,000,000", "8192")),
        (("--microbatches", "5000", "--pp", "8"), ("--pp 8 x --microbatches 5000 = 40000", "more than 32768")),
        (("--seq-len", "1000000000"), ("--seq-len",)),
        (("--micro-batch-size", "99999999"), ("--micro-batch-size",)),
        (("--tp", "100000"), ("--tp",)),
        (("--strategy", "Interleaved1F1B", "--stages-per-device", "100000"), ("--stages-per-device",)),
    ],
)
def test_absurd_option_values(adaptis, tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    out = tmp_path / "p.json"
    one_line_error(adaptis("plan", *TINY, *args, "-o", out), 2, *needles)
    assert not out.exists()


@pytest.mark.parametrize("seed", ["2147483648", "-1", "99999999999999999999999"])
def test_seed_outside_32_bits(adaptis, tmp_path: Path, seed: str) -> None:
    r = adaptis("plan", *TINY, "--time-limit", "1", "--no-hard-stop", "--seed", seed, "-o", tmp_path / "p.json")
    assert r.exit_code == 2 and "Traceback" not in r.stderr and "--seed" in r.stderr, r.stderr
    assert "2147483647" in r.stderr


def test_largest_seed_is_fine(adaptis, tmp_path: Path) -> None:
    r = adaptis(
        "plan", *TINY, "--time-limit", "1", "--no-hard-stop", "--seed", str(2**31 - 1), "-o", tmp_path / "p.json"
    )
    assert r.exit_code == 0, r.stderr


def test_cost_profile_numbers(adaptis, tmp_path: Path) -> None:
    data = tiny_cost_profile()
    data["entries"][1]["f_s"] = float("inf")
    costs = _write(tmp_path / "measured.json", data)
    r = adaptis("plan", *TINY, *CLASSIC, "--costs", costs, "-o", tmp_path / "p.json")
    one_line_error(r, 2, "measured.json", "entries[1].f_s = inf: not a finite number")
    data = tiny_cost_profile() | {"link": {"latency_s": 0.0, "bandwidth_gbps": 0.0, "backend": "gloo"}}
    r = adaptis("plan", *TINY, *CLASSIC, "--costs", _write(costs, data), "-o", tmp_path / "p.json")
    one_line_error(r, 2, "measured.json", "link.bandwidth_gbps = 0.0: out of range; allowed: > 0")


def test_cost_profile_rounds(adaptis, tmp_path: Path) -> None:
    """A profile written before profiles were measured in rounds (no `rounds`) still plans; a bad one is refused."""
    data = tiny_cost_profile()
    assert "rounds" not in data
    costs = _write(tmp_path / "measured.json", data)
    ok = adaptis("plan", *TINY, *CLASSIC, "--costs", costs, "-o", tmp_path / "p.json")
    assert ok.exit_code == 0, ok.stderr
    r = adaptis("plan", *TINY, *CLASSIC, "--costs", _write(costs, data | {"rounds": 0}), "-o", tmp_path / "q.json")
    one_line_error(r, 2, "measured.json", "rounds = 0")
    assert not (tmp_path / "q.json").exists()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--rounds", "0"), ("--rounds = 0", "positive")),
        (("--rounds", "-2"), ("--rounds = -2", "positive")),
        (("--repeats", "0"), ("--repeats = 0", "positive")),
        (("--repeats", "3", "--rounds", "5"), ("--rounds = 5", "more than --repeats (3)", "--rounds 1..3")),
    ],
)
def test_bad_profile_repeats_and_rounds(
    adaptis, tmp_path: Path, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    out = tmp_path / "costs.json"
    one_line_error(adaptis("profile", "--model", "tiny-llama", *args, "-o", out), 2, *needles)
    assert not out.exists()


# ----------------------------------------------------------------------------- 3. semantic model checks
def test_tp_that_does_not_divide_the_heads(adaptis, tmp_path: Path) -> None:
    args = ("--hardware", "h100", "--pp", "4", "--microbatches", "8", *CLASSIC, "-o", tmp_path / "p.json")
    line = one_line_error(adaptis("plan", "--model", "llama-2-7b", "--tp", "3", *args), 2, "--tp = 3", "heads")
    assert "use --tp 1, 2, 4, 8, 16, 32" in line
    r = adaptis("plan", "--model", CONFIGS / "mixtral-8x7b.json", "--tp", "5", *args)
    one_line_error(r, 2, "--tp = 5", "mixtral-8x7b", "use --tp 1, 2, 4, 8")
    r = adaptis("model", "show", "tiny-nemotron-h", "--hardware", "h100", "--tp", "4")
    one_line_error(r, 2, "Mamba groups", "use --tp 1, 2")
    assert adaptis("plan", "--model", "llama-2-7b", "--tp", "8", *args).exit_code in (0, 3)


def test_head_dim_and_vocabulary_that_make_no_sense(adaptis, tmp_path: Path) -> None:
    spec = load_model("tiny-llama").model_dump(mode="json", exclude_none=True)
    for layer in spec["layers"]:
        if "attention" in layer:
            layer["attention"]["head_dim"] = 3
    r = adaptis("model", "show", _write(tmp_path / "narrow.json", spec))
    one_line_error(r, 2, "narrow.json", "layers[1].attention.head_dim = 3", "narrower than 8")
    config = json.loads((CONFIGS / "mixtral-8x7b.json").read_text()) | {"vocab_size": 1}
    r = adaptis("model", "show", _write(tmp_path / "config.json", config))
    one_line_error(r, 2, "config.json", "vocab_size = 1", "nothing to predict")


# ----------------------------------------------------------------------------- 4. corrupted plans
@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda p: p["devices"][0]["actions"][0].update(mb=1e30), "devices[0].actions[0].mb = 1e+30"),
        (lambda p: p["devices"][0]["actions"][0].update(stage=2**63), "devices[0].actions[0].stage = 9223372"),
        (lambda p: p["devices"][0]["actions"][0].update(mb=999), "mb 999 is outside 0..3"),
        (lambda p: p["training"].update(num_microbatches=10**12), "training.num_microbatches = 1000000000000"),
        (lambda p: p["training"].update(pp=2**40), "training.pp"),
        (lambda p: p["stages"][0].update(device=-1), "stages[0].device = -1"),
        (lambda p: p["predicted"].update(step_time_s=float("nan")), "predicted.step_time_s = nan"),
        (lambda p: p["model"].update(num_layers=10**9), "model.num_layers"),
    ],
)
def test_corrupted_plan_indices_and_sizes(adaptis, tmp_path: Path, tiny_plan: Path, edit, needle: str) -> None:
    plan = json.loads(tiny_plan.read_text())
    edit(plan)
    bad = _write(tmp_path / "bad.json", plan)
    for cmd in (("simulate", bad, "--json"), ("export", bad, "--format", "torch-csv")):
        one_line_error(adaptis(*cmd), 2, "bad.json", needle)


def test_deadlocking_plan_names_the_file(adaptis, tmp_path: Path) -> None:
    plan_path = tmp_path / "gpipe.json"
    args = ("--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "2", "--seq-len", "128")
    assert adaptis("plan", *args, "--strategy", "GPipe", "-o", plan_path).exit_code == 0
    plan = json.loads(plan_path.read_text())
    for dev, order in zip(plan["devices"], (("0F0", "0B0", "0F1", "0B1"), ("1F1", "1F0", "1B0", "1B1")), strict=True):
        dev["actions"] = list(order)  # an order that can never finish (the short form: times are optional)
    bad = _write(tmp_path / "dead.json", plan)
    r = adaptis("simulate", bad)
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"error: {bad}: ") and "circular wait" in first, first
    assert "<-- ERROR" in r.stderr  # followed by the device x step grid


# ----------------------------------------------------------------------------- 6. outputs and signals
def _char_device(path: Path) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_run_refuses_context_parallelism_and_tp_it_cannot_split(adaptis, tmp_path: Path) -> None:
    """The executor runs the pipeline, data- and tensor-parallel dimensions: a CP plan, or a TP plan of a
    model with MoE blocks, is refused, never run as something else."""
    plan = tmp_path / "tp2.json"
    moe = ("--model", "tiny-deepseek", *TINY[2:])
    assert adaptis("plan", *moe, *CLASSIC, "--tp", "2", "-o", plan).exit_code == 0
    one_line_error(adaptis("run", plan, "--steps", "1"), 2, str(plan), "training.tp = 2", "MoE block", "--tp 1")
    data = json.loads(plan.read_text())
    data["training"] |= {"tp": 1, "dp": 2, "cp": 2}
    one_line_error(adaptis("run", _write(tmp_path / "cp2.json", data), "--steps", "1"), 2, "training.cp = 2", "--cp 1")


def test_output_character_device_is_left_alone(adaptis, tmp_path: Path) -> None:
    node = _char_device(tmp_path / "null")
    r = adaptis("plan", *TINY, *CLASSIC, "-o", node)
    one_line_error(r, 2, str(node), "a character device, not a regular file")
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert leftovers(tmp_path) == ["null"]


def test_output_character_device_behind_a_symlink(adaptis, tmp_path: Path) -> None:
    node = _char_device(tmp_path / "null")
    link = tmp_path / "plan.json"
    link.symlink_to(node)
    one_line_error(adaptis("plan", *TINY, *CLASSIC, "-o", link), 2, "a character device")
    assert stat.S_ISCHR(os.lstat(node).st_mode) and link.is_symlink()


def test_output_through_a_symlink_writes_its_target(adaptis, tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "plan.json"
    link.symlink_to(target)
    assert adaptis("plan", *TINY, *CLASSIC, "-o", link).exit_code == 0
    assert link.is_symlink() and json.loads(target.read_text())["strategy"] == "1F1B"


@pytest.mark.parametrize("what", ["fifo", "folder", "empty"])
def test_output_fifo_folder_or_empty(adaptis, tmp_path: Path, what: str) -> None:
    if what == "fifo":
        out = tmp_path / "pipe"
        os.mkfifo(out)
        needle = "a FIFO (named pipe), not a regular file"
    elif what == "folder":
        out, needle = tmp_path, "a folder, not a regular file"
    else:
        out, needle = "", "-o '': empty path"
    before = leftovers(tmp_path)
    one_line_error(adaptis("plan", *TINY, *CLASSIC, "-o", out), 2, needle)
    assert leftovers(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("simulate", "{plan}", "--trace", "{out}"), "--trace"),
        (("simulate", "{plan}", "--svg", "{out}"), "--svg"),
        (("export", "{plan}", "--format", "torch-csv", "-o", "{out}"), "-o"),
        (("profile", "--model", "tiny-llama", "-o", "{out}"), "-o"),
        (("run", "{plan}", "--trace", "{out}"), "--trace"),
    ],
)
def test_every_output_option_refuses_a_device(adaptis, tmp_path: Path, tiny_plan: Path, args, flag: str) -> None:
    node = _char_device(tmp_path / "null")
    argv = [a.format(plan=tiny_plan, out=node) for a in args]
    one_line_error(adaptis(*argv), 2, str(node), "a character device", flag)
    assert stat.S_ISCHR(os.lstat(node).st_mode)


@pytest.mark.parametrize(
    ("args", "flag", "victim"),
    [
        (("export", "{plan}", "--format", "torch-csv", "-o", "{plan}"), "-o", "plan"),
        (("simulate", "{plan}", "--svg", "{plan}"), "--svg", "plan"),
        (("simulate", "{plan}", "--trace", "{plan}"), "--trace", "plan"),
        (("run", "{plan}", "--trace", "{plan}"), "--trace", "plan"),
        (("plan", "--model", "{spec}", *TINY[2:], *CLASSIC, "-o", "{spec}"), "-o", "spec"),
        (("plan", *TINY, *CLASSIC, "--costs", "{costs}", "-o", "{costs}"), "-o", "costs"),
        (("profile", "--model", "{spec}", "-o", "{spec}"), "-o", "spec"),
    ],
)
def test_an_output_that_is_an_input_file_is_refused(
    adaptis, tmp_path: Path, tiny_plan: Path, args, flag: str, victim: str
) -> None:
    files = {
        "plan": tmp_path / "plan.json",
        "spec": _write(tmp_path / "spec.json", load_model("tiny-llama").model_dump(mode="json")),
        "costs": _write(tmp_path / "costs.json", tiny_cost_profile()),
    }
    files["plan"].write_bytes(tiny_plan.read_bytes())
    before = files[victim].read_bytes()
    argv = [a.format(**files) for a in args]
    one_line_error(adaptis(*argv), 2, flag, "the input file", "pass another output path")
    assert files[victim].read_bytes() == before


def test_a_failed_write_to_stdout_is_one_line_not_a_bug(tiny_plan: Path) -> None:
    cmd = [sys.executable, "-m", "adaptis_plan.cli", "simulate", str(tiny_plan), "--json"]
    with open("/dev/full", "w") as full:
        r = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        "error: standard output: the write failed (No space left on device); the output is incomplete"
    ]


def test_a_reader_that_went_away_ends_the_command_quietly_with_141() -> None:
    """`adaptis ... --json | head -1`: stdout's pipe closed before the output is written ends the command
    as any Unix filter ends (128 + SIGPIPE), with nothing on stderr; exit 1 is for bugs."""
    r = run_reader_gone("stdout", "model", "show", "llama-3.1-70b", "--json")
    assert (r.returncode, r.stderr) == (141, "")


def test_a_reader_of_the_report_that_went_away_ends_the_command_quietly_with_141(tiny_plan: Path) -> None:
    """`adaptis simulate P 2>&1 | head -3`: the human reports go to stderr, and a closed stderr ends the
    command as a closed stdout does (141, nothing said); with --json, stdout still gets its JSON; bad
    input keeps its exit code 2 with nobody to read its error line."""
    bad = (["simulate", str(tiny_plan.parent / "missing.json")], None)
    for args, json_out in ((["simulate", str(tiny_plan)], False), (["simulate", str(tiny_plan), "--json"], True), bad):
        r = run_reader_gone("stderr", *args)
        if json_out is None:
            assert (r.returncode, r.stdout) == (2, "")
        elif json_out:  # nothing to say on stderr: the command ends normally with its JSON
            assert r.returncode == 0 and "step_time_s" in json.loads(r.stdout)
        else:
            assert (r.returncode, r.stdout) == (141, "")


def test_profile_on_cuda_without_a_gpu_is_bad_input(adaptis, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "p.json"
    one_line_error(
        adaptis("profile", "--model", "tiny-llama", "--device", "cuda", "-o", out), 2, "--device = cuda", "--device cpu"
    )
    assert not out.exists()


def test_schema_dir_refuses_a_file(adaptis, tmp_path: Path) -> None:
    blocker = tmp_path / "schemas"
    blocker.write_text("")
    one_line_error(adaptis("schema", "--dir", blocker), 2, "not a folder")


def test_absurd_micro_batch_counts_are_refused_up_front(adaptis, tmp_path: Path) -> None:
    """The plan's size is bounded, so the classic baselines and the plan file cannot outgrow the time limit."""
    args = (
        "--model",
        "gemma-s",
        "--hardware",
        "h200",
        "--time-limit",
        "1",
        "--no-hard-stop",
        "-o",
        tmp_path / "p.json",
    )
    t0 = time.perf_counter()
    for pp, m, limit in ((32, 2048, "32768"), (4, 100_000, "8192"), (1024, 64, "32768")):
        one_line_error(adaptis("plan", *args, "--pp", pp, "--microbatches", m), 2, limit)
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize("interrupted", [True, False])
def test_a_ctrl_c_inside_an_import_is_a_ctrl_c_and_an_import_error_a_bug(tmp_path: Path, interrupted: bool) -> None:
    """A C extension whose initialisation a Ctrl-C interrupts (ortools' solver, imported mid-search) raises
    `ImportError: initialization failed` from the KeyboardInterrupt: exit 130 as for any Ctrl-C, no plan.
    The same error without a Ctrl-C behind it is a bug: exit 1 with its traceback."""
    code = f"""
import sys
import adaptis_plan.app.plan as plan
import adaptis_plan.cli.commands as c
def solve(*args, **kwargs):
    try:
        if {interrupted}:
            raise KeyboardInterrupt
        raise RuntimeError("stand-in")
    except BaseException as e:
        raise ImportError("initialization failed") from e
plan.make_plan_for = solve
sys.argv = ["adaptis", "plan", "--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "-o", "p.json"]
c.main()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert not (tmp_path / "p.json").exists() and leftovers(tmp_path) == []
    if interrupted:
        assert p.returncode == 130 and p.stderr.strip() == "interrupted (Ctrl-C); no file is left half-written", p
    else:
        assert p.returncode == 1 and "ImportError: initialization failed" in p.stderr and "internal error" in p.stderr


@pytest.mark.slow
def test_ctrl_c_while_cp_sat_solves(tmp_path: Path) -> None:
    """SIGINT in the middle of the adaptive search: exit 130 at once, no plan, no temporary file."""
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "adaptis_plan.cli", "plan", "--model", "gemma-s", "--hardware", "h200"]
    cmd += ["--pp", "8", "--microbatches", "32", "--time-limit", "60", "-o", str(out)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, preexec_fn=default_sigint
    )
    time.sleep(4.0)  # loading, costing and the baselines take ~1 s here; then the search runs up to 60 s
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    t0 = time.perf_counter()
    _, err = proc.communicate(timeout=60)
    waited = time.perf_counter() - t0
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert waited < 10, waited
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_ctrl_c_while_a_ranking_run_works_in_a_worker(tmp_path: Path) -> None:
    """A big pipeline ranks its candidates in a forked worker beside the classic baselines: Ctrl-C (to the
    whole process group, as a terminal sends it) exits 130 at once and leaves no worker behind holding
    the terminal, no plan and no temporary file."""
    out = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "adaptis_plan.cli", "plan", "--model", "gemma-s", "--hardware", "h200"]
    cmd += ["--pp", "16", "--microbatches", "1024", "--no-hard-stop", "-o", str(out)]
    env = {**os.environ, "ADAPTIS_WORKERS": "2"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
        preexec_fn=default_sigint, start_new_session=True,
    )  # fmt: skip
    deadline = time.perf_counter() + 20
    while len(_group(proc.pid)) < 2:  # the ranking worker has started
        assert proc.poll() is None and time.perf_counter() < deadline, proc.communicate()
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.perf_counter()
    _, err = proc.communicate(timeout=60)  # returns once every holder of its pipes is gone
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert time.perf_counter() - t0 < 10
    time.sleep(0.5)
    assert _group(proc.pid) == []
    assert leftovers(tmp_path) == []


def _group(pgid: int) -> list[str]:
    """The processes of process group `pgid`."""
    return subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True).stdout.split()


@pytest.mark.slow
def test_cp_sat_solve_is_interrupted_at_once(tmp_path: Path) -> None:
    """The solver wrapper: SIGINT during `solve` raises KeyboardInterrupt at once, and Python's
    SIGINT handler survives the solve (OR-Tools' own handler resets SIGINT to the default)."""
    script = tmp_path / "solve.py"
    script.write_text(
        "import os, signal, sys, threading, time\n"
        "from ortools.sat.python import cp_model\n"
        "from adaptis_plan.search._cpsat import new_solver\n"
        "m = cp_model.CpModel()\n"
        "xs = [m.new_int_var(0, 600, f'x{i}') for i in range(60)]\n"
        "m.add_all_different(xs)\n"
        "for i in range(59):\n"
        "    m.add(xs[i] + xs[i + 1] != 3 * (i % 7))\n"
        "m.minimize(sum((i % 5 + 1) * x for i, x in enumerate(xs)))\n"
        "s = new_solver(30.0, 2, 0)\n"
        "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "t0 = time.perf_counter()\n"
        "try:\n"
        "    s.solve(m)\n"
        "    print('finished')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted after', round(time.perf_counter() - t0, 1))\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(2)\n"
        "except KeyboardInterrupt:\n"
        "    print('handler kept')\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, preexec_fn=default_sigint
    )
    lines = proc.stdout.split("\n")
    assert lines[0].startswith("interrupted after"), proc.stdout + proc.stderr
    assert float(lines[0].split()[-1]) < 10
    assert lines[1] == "handler kept", proc.stdout


# ----------------------------------------------------------------------------- 7. messages
def test_cost_profile_errors_name_the_real_file(adaptis, tmp_path: Path) -> None:
    costs = _write(tmp_path / "my-costs.json", tiny_cost_profile() | {"seq_len": 256})
    r = adaptis("plan", *TINY, *CLASSIC, "--costs", costs, "-o", tmp_path / "p.json")
    line = one_line_error(r, 2, f"{costs}: seq_len = 256")
    assert "costs.json" not in line.replace("my-costs.json", "")
    data = tiny_cost_profile()
    data["model"]["fingerprint"] = "0" * 64
    r = adaptis("plan", *TINY, *CLASSIC, "--costs", _write(costs, data), "-o", tmp_path / "p.json")
    one_line_error(r, 2, f"{costs}: model.fingerprint")
    ok = adaptis("plan", *TINY, *CLASSIC, "--costs", _write(costs, tiny_cost_profile()), "-o", tmp_path / "p.json")
    assert ok.exit_code == 0, ok.stderr


@pytest.mark.parametrize("what", ["fifo", "dev-zero"])
def test_special_file_as_model(adaptis, tmp_path: Path, what: str) -> None:
    if what == "fifo":
        path = tmp_path / "model.json"
        os.mkfifo(path)
        needle = "a FIFO (named pipe), not a model file"
    else:
        path, needle = Path("/dev/zero"), "a character device, not a model file"
    one_line_error(adaptis("model", "show", path), 2, str(path), needle)
    one_line_error(adaptis("plan", *_opts(model=str(path)), *CLASSIC, "-o", tmp_path / "p.json"), 2, needle)


def test_special_file_as_hardware_costs_and_plan(adaptis, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for args, what in (
        (("plan", *_opts(hardware=str(fifo)), *CLASSIC, "-o", tmp_path / "p.json"), "hardware profile"),
        (("plan", *TINY, *CLASSIC, "--costs", fifo, "-o", tmp_path / "p.json"), "cost profile"),
        (("simulate", fifo), "plan"),
    ):
        one_line_error(adaptis(*args), 2, str(fifo), f"a FIFO (named pipe), not a {what} file")


def test_export_and_schema_take_json(adaptis, tmp_path: Path, tiny_plan: Path) -> None:
    r = adaptis("export", tiny_plan, "--format", "torch-csv", "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["format"] == "torch-csv" and out["output"] is None and out["text"].count("\n") == 2
    csv = tmp_path / "s.csv"
    r = adaptis("export", tiny_plan, "--format", "torch-csv", "-o", csv, "--json")
    assert r.exit_code == 0 and r.json()["output"] == str(csv) and csv.read_text() == out["text"]
    r = adaptis("schema", "--dir", tmp_path / "schemas", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["schemas"] == ["costs.schema.json", "hardware.schema.json", "model.schema.json", "plan.schema.json"]
    r = adaptis("schema", "--check", "--dir", tmp_path / "schemas", "--json")
    assert r.exit_code == 0 and r.json()["up_to_date"] is True


# ----------------------------------------------------------------------------- 7b. names shown in reports
HOSTILE_NAME = "[/]evil[bold]\x1b]0;TITLE\x07\x1b[2J"


def _clean_report(r) -> None:  # noqa: ANN001
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr  # no escape sequence reaches the terminal
    assert "[/]evil[bold]" in r.stderr  # the name is shown as written, not read as markup


def test_markup_and_control_characters_in_a_plan_are_shown_not_obeyed(adaptis, tmp_path: Path, tiny_plan: Path) -> None:
    plan = json.loads(tiny_plan.read_text())
    plan["model"]["name"] = HOSTILE_NAME
    path = _write(tmp_path / "plan.json", plan)
    _clean_report(adaptis("simulate", path))


def test_markup_and_control_characters_in_model_and_hardware_files(adaptis, tmp_path: Path) -> None:
    spec = load_model("tiny-llama").model_dump(mode="json") | {"name": HOSTILE_NAME}
    spec_path = _write(tmp_path / "spec.json", spec)
    _clean_report(adaptis("model", "show", spec_path))
    hw = _cpu_profile() | {"name": "cpu", "description": HOSTILE_NAME}
    hw_path = _write(tmp_path / "hw.json", hw)
    _clean_report(adaptis("hardware", "show", hw_path))
    out = tmp_path / "a[/]b.json"  # an output path is shown too
    r = adaptis("plan", "--model", spec_path, "--hardware", hw_path, *TINY[4:], *CLASSIC, "-o", out)
    _clean_report(r)
    assert "wrote " + str(out) in r.stderr.replace("\n", "")


def test_symbolic_link_loops_and_empty_names_are_named_as_such(adaptis, tmp_path: Path) -> None:
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    loop = tmp_path / "a.json"
    one_line_error(adaptis("simulate", loop), 2, str(loop), "Too many levels of symbolic links")
    one_line_error(adaptis("model", "show", loop), 2, str(loop), "Too many levels of symbolic links")
    one_line_error(adaptis("plan", *_opts(hardware=""), "-o", tmp_path / "p.json"), 2, "hardware '': empty")
    line = one_line_error(adaptis("simulate", tmp_path), 2, "a folder, not a plan file")
    assert "file file" not in line


@pytest.mark.parametrize(
    ("where", "edit", "needle"),
    [
        ("plan", lambda d: d["training"].update(seq_len=True), "training.seq_len = true"),
        ("plan", lambda d: d["training"].update(pp=True), "training.pp = true"),
        ("hardware", lambda d: _device(d).update(peak_bf16_tflops=True), "peak_bf16_tflops = true"),
        ("costs", lambda d: d["entries"][0].update(f_s=False), "entries[0].f_s = false"),
    ],
)
def test_true_or_false_where_a_number_belongs(
    adaptis, tmp_path: Path, tiny_plan: Path, where: str, edit, needle: str
) -> None:
    """pydantic would read true as 1: a plan of "seq_len": true would be a plan of one token."""
    if where == "plan":
        data = json.loads(tiny_plan.read_text())
        edit(data)
        r = adaptis("simulate", _write(tmp_path / "plan.json", data))
    elif where == "hardware":
        r = adaptis("plan", *_opts(hardware=str(_hw_edit(tmp_path, edit))), *CLASSIC, "-o", tmp_path / "p.json")
    else:
        data = tiny_cost_profile()
        edit(data)
        r = adaptis("plan", *TINY, *CLASSIC, "--costs", _write(tmp_path / "c.json", data), "-o", tmp_path / "p.json")
    one_line_error(r, 2, needle, "a number is expected, not true / false")
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("plan", "--seed", "-1"), "Invalid value for '--seed'"),
        (("plna",), "No such command 'plna'"),
        (("plan", "--model", "tiny-llama"), "Missing option '--hardware'"),
    ],
)
def test_usage_errors_are_one_line_too(adaptis, args: tuple[str, ...], needle: str) -> None:
    line = one_line_error(adaptis(*args), 2, needle, "--help`")
    assert "Usage:" not in line


def test_no_command_shows_the_help_not_an_error_line(adaptis) -> None:
    r = adaptis()
    assert r.exit_code == 2 and r.stderr.startswith("Usage: ") and "Commands:" in r.stderr
    assert "error:" not in r.stderr
