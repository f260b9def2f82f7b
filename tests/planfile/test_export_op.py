"""A plan recomputed with `--recompute op` (torchtitan's per-op selective checkpointing) reaches the
one runtime that has it and is refused, in one line, by the ones that do not: torchtitan's export
asks for its per-op `SelectiveAC`, Megatron-LM's exports and `adaptis run` name the mode and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_cli import leftovers, one_line_error

from tests.conftest import run_adaptis


@pytest.fixture(scope="module")
def op_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("op") / "op.json"
    r = run_adaptis(
        "plan", "--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4",
        "--seq-len", "64", "--strategy", "1F1B", "--recompute", "op", "--target", "torchtitan", "-o", out,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    return out


@pytest.mark.parametrize("fmt", ["megatron-args", "megatron-launch"])
def test_megatron_exports_refuse_op_in_one_line(op_plan: Path, tmp_path: Path, fmt: str) -> None:
    r = run_adaptis("export", op_plan, "--format", fmt, "-o", tmp_path / "out.txt")
    one_line_error(r, 2, "recompute = 'op'", "--recompute none, selective or full")
    assert leftovers(tmp_path) == []


def test_torchtitan_export_runs_op_as_its_per_op_selective_ac(op_plan: Path, tmp_path: Path) -> None:
    out = tmp_path / "adaptis_pipeline.py"
    r = run_adaptis(
        "export", op_plan, "--format", "torchtitan", "--torchtitan-config", "llama3:llama3_debugmodel", "-o", out
    )
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert "ACTIVATION_CHECKPOINT = 'op'" in text
    assert '"op": SelectiveAC.Config()' in text and "per-op" in text


def test_run_refuses_op_before_launching(op_plan: Path) -> None:
    r = run_adaptis("run", op_plan)
    one_line_error(r, 2, "recompute = 'op'", "torchtitan")
