"""`bench.megatron_check`'s record and its section: the record written by `--out` (against a stand-in
`megatron.training.arguments` that refuses tensor parallelism, so one plan passes and one fails), the
refusals before anything is written, and `bench.report` rendering a failing plan as failing and
counting the headline from the record."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers_common import bench_record

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import megatron_check, records, report  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHA = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"

#: a stand-in for Megatron-LM's arguments.py: every `--flag value` / `--switch` into a namespace, the
#: parallel sizes Megatron derives, and one check of its own kind (an assert) that refuses tp > 1
FAKE_ARGUMENTS = """
import argparse, os, sys

def get_device_arch_version():
    raise RuntimeError("no GPU: the checker must answer this")

def parse_args():
    words, ns = sys.argv[1:], argparse.Namespace()
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
            setattr(ns, word[2:].replace("-", "_"), int(value) if str(value).isdigit() else value)
    return ns

def validate_args(ns):
    assert get_device_arch_version() == 9.0
    for name in ("tensor_model", "pipeline_model", "context", "expert_model"):
        setattr(ns, f"{name}_parallel_size", getattr(ns, f"{name}_parallel_size", 1))
    ns.virtual_pipeline_model_parallel_size = None
    tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size
    ns.data_parallel_size = int(os.environ["WORLD_SIZE"]) // (tp * pp * cp)
    assert tp == 1, "stand-in: tensor parallelism refused"
"""

TWO_PLANS = (
    ("pp2", "--model tiny-llama --hardware cpu --seq-len 64 --pp 2 --microbatches 4 --strategy 1F1B"),
    ("tp2", "--model tiny-llama --hardware cpu --seq-len 64 --pp 2 --tp 2 --microbatches 4 --strategy 1F1B"),
)


@pytest.fixture
def fake_megatron(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "megatron-lm"
    (folder / "megatron" / "training").mkdir(parents=True)
    (folder / "megatron" / "__init__.py").write_text("")
    (folder / "megatron" / "training" / "__init__.py").write_text("")
    (folder / "megatron" / "training" / "arguments.py").write_text(FAKE_ARGUMENTS)
    monkeypatch.setattr(megatron_check, "SIX_PLANS", TWO_PLANS)
    monkeypatch.setattr(sys, "path", list(sys.path))
    installed = {m: mod for m, mod in sys.modules.items() if m == "megatron" or m.startswith("megatron.")}
    yield folder
    # the check swapped the installed megatron for the stand-in: put the installed modules back, so that
    # later tests in this process compare megatron-core's enums with the same classes they imported
    for name in [m for m in sys.modules if m == "megatron" or m.startswith("megatron.")]:
        del sys.modules[name]
    sys.modules.update(installed)


def test_record_is_well_formed(fake_megatron: Path, tmp_path: Path) -> None:
    out = tmp_path / "results" / "megatron_check.json"
    argv = ["--megatron", str(fake_megatron), "--megatron-commit", SHA, "--out", str(out), "--allow-dirty"]
    assert megatron_check.main(argv) == 1  # one plan fails
    rec = records.load("megatron_check", out.parent)
    assert rec is not None
    other = records.load("torchcsv", FIXTURES / "clean")
    assert set(rec["provenance"]) == set(other["provenance"])
    assert rec["provenance"]["command"] == "python -m bench.megatron_check " + " ".join(argv)
    assert rec["settings"]["megatron_commit"] == SHA and rec["settings"]["arch"] == 9.0
    assert "get_device_arch_version" in rec["settings"]["mocked"][0]
    ok, bad = rec["data"]["plans"]
    assert (ok["name"], ok["passed"], ok["world"], ok["message"]) == ("pp2", True, 2, None)
    assert ok["command"] == "adaptis plan " + TWO_PLANS[0][1] + " --time-limit 1 --no-hard-stop"
    assert ok["degrees"]["pp"] == 2 and ok["degrees"]["dp"] == 1
    assert isinstance(ok["env"], dict)
    assert (bad["name"], bad["passed"], bad["world"]) == ("tp2", False, 4)
    assert bad["message"] == "validate_args refused: stand-in: tensor parallelism refused"


def test_record_refused_from_a_dirty_tree_or_without_the_commit(
    fake_megatron: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "megatron_check.json"
    assert megatron_check.main(["--megatron", str(fake_megatron), "--out", str(out)]) == 2
    assert "pass --megatron-commit SHA" in capsys.readouterr().err
    monkeypatch.setattr(records, "checkout", lambda repo=records.REPO: ("abc1234", False))
    assert megatron_check.main(["--megatron", str(fake_megatron), "--megatron-commit", SHA, "--out", str(out)]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    assert not out.exists()


def _record(plans: list[dict]) -> dict:
    settings = {
        "megatron_commit": SHA,
        "arch": 9.0,
        "mocked": ["get_device_arch_version() -> 9"],
        "added_arguments": "the plan's model size",
        "cost_model": "analytic",
    }
    command = f"python -m bench.megatron_check --megatron /m --megatron-commit {SHA} --record"
    return bench_record("megatron_check", {"plans": plans}, settings, command)


PASSED = {
    "plan": "a.json", "world": 16, "passed": True, "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    "degrees": {"dp": 4, "tp": 2, "pp": 2, "cp": 1, "ep": 1, "vpp": None}, "message": None,
    "name": "dense", "command": "adaptis plan --model llama-2-7b --pp 2",
}  # fmt: skip
FAILED = {
    "plan": "b.json", "world": 16, "passed": False, "env": {"CUDA_DEVICE_MAX_CONNECTIONS": None},
    "degrees": None, "message": "validate_args refused: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.",
    "name": "fsdp", "command": "adaptis plan --model llama-2-7b --zero 3",
}  # fmt: skip


def test_section_shows_a_failing_plan_as_failing_and_headline_counts() -> None:
    rec = _record([PASSED, FAILED])
    recs = {**records.load_all(FIXTURES / "clean"), "megatron_check": rec}
    text = report.render_benchmarks(recs)
    section = text[text.index(megatron_check.HEADING) :]
    assert records.reproduce_line(rec) in section and SHA in section
    rows = [line for line in section.splitlines() if line.startswith("| dense") or line.startswith("| fsdp")]
    assert rows == [
        "| dense | 16 = dp 4 x tp 2 x pp 2 | pass | `CUDA_DEVICE_MAX_CONNECTIONS=1` |",
        "| fsdp | 16 | **fail**: validate_args refused: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset."
        " | `CUDA_DEVICE_MAX_CONNECTIONS` unset |",
    ]
    assert "1 of 2 plans pass" in section and f"`{FAILED['command']}`" in section
    head = text[text.index("## Headline") : text.index("## Headline") + 20000].split("\n\n")[1]
    row = next(line for line in head.splitlines() if "validate_args" in line)
    assert row.endswith("| 1 of 2 plans at Megatron-LM `d98e8a64ddf3` |")
    assert f"]({report.anchor(megatron_check.HEADING)})" in row
    assert report.anchor(megatron_check.HEADING) == "#megatron-lms-own-argument-checks"
    all_pass = report.render_benchmarks({**recs, "megatron_check": _record([PASSED, PASSED])})
    assert "| 2 of 2 plans at Megatron-LM `d98e8a64ddf3` |" in all_pass


def test_other_sections_do_not_change_with_the_record() -> None:
    recs = records.load_all(FIXTURES / "clean")
    without = report.sections(recs)
    with_it = report.sections({**recs, "megatron_check": _record([PASSED])})
    assert list(with_it) == [*without, "megatron_check"]
    assert {k: with_it[k] for k in without} == without
    assert "validate_args" not in report.render_benchmarks(recs)
