"""Assertions on what `adaptis` prints and leaves behind, shared by the CLI and fuzz tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def one_line_error(r, code: int, *needles: str) -> str:
    """Exit `code`, nothing on stdout, no traceback, and ONE `error:` line on stderr naming every needle."""
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert r.stdout == "", r.stdout
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def run_reader_gone(closed: str, *args: str | Path) -> subprocess.CompletedProcess:
    """`adaptis ARGS` in a fresh process whose `closed` stream ("stdout" or "stderr") is a pipe with its
    reader already gone (`| head` that has exited); the other stream is captured as text."""
    read, write = os.pipe()
    os.close(read)
    other = "stderr" if closed == "stdout" else "stdout"
    cmd = [sys.executable, "-m", "adaptis_plan.cli", *map(str, args)]
    try:
        return subprocess.run(cmd, **{closed: write, other: subprocess.PIPE}, text=True, timeout=120)
    finally:
        os.close(write)


def leftovers(folder: Path) -> list[str]:
    """Every name in `folder` (temporary files of an atomic write included), sorted."""
    return sorted(p.name for p in folder.iterdir())


def tiny_cost_profile() -> dict:
    """A valid measured-cost profile (JSON data) of tiny-llama at seq 128, micro-batch size 1,
    with the analytic model's numbers on the `cpu` profile."""
    from adaptis_plan.cost.table import layer_cost_rows
    from adaptis_plan.inputs.hardware import load_hardware
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.spec.training import TrainingConfig

    model = load_model("tiny-llama")
    rows = layer_cost_rows(model, load_hardware("cpu"), TrainingConfig(num_microbatches=1, seq_len=128, pp=1))
    return {
        "model": {"name": model.name, "fingerprint": model.fingerprint()},
        "device": "cpu",
        "torch_version": "test",
        "num_threads": 1,
        "seq_len": 128,
        "micro_batch_size": 1,
        "dtype": "fp32",
        "repeats": 1,
        "measured_at": "2025-01-01T00:00:00",
        "entries": [analytic_entry(r) for r in rows],
    }


def analytic_entry(row: dict, **override: object) -> dict:
    """A measured-profile entry (JSON data) with the analytic numbers of one `layer_cost_rows` row:
    F / I / W seconds, B = I + W (no hot W), its bytes; `override` replaces fields (e.g. layers, kind)."""
    entry = {
        "layers": [row["index"]],
        "kind": row["kind"],
        "f_s": row["f_s"],
        "i_s": row["i_s"],
        "w_s": row["w_s"],
        "b_s": row["i_s"] + row["w_s"],
        "act_bytes": row["act_bytes"],
        "act_w_bytes": row["act_w_bytes"],
    }
    return entry | override
