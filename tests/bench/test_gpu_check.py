"""`make gpu-check` (bench/gpu_check.py) exercised on CPU with a tiny model, so the GPU path cannot rot.

The one real run profiles tiny-gemma through `adaptis profile`, plans and runs a one-device plan with
`adaptis run --verify`, and writes the record and the page rendered from it; the paper comparison is
checked on a record with a profile of a paper model built here (the real profile of gemma-s is GPU-sized).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from bench import gpu_check, records  # noqa: E402


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "gpu-check.md"
    code = gpu_check.main(
        [
            "--device", "cpu", "--models", "tiny-gemma", "--seqs", "64", "--dtype", "fp32", "--hardware", "cpu",
            "--repeats", "1", "--run-seq", "64", "--work", str(tmp_path / "work"), "--out", str(out),
            "--out-dir", str(tmp_path / "results"), "--allow-dirty",
        ]
    )  # fmt: skip
    text = out.read_text()
    assert code == 0, text
    rec = records.load("gpu_check", tmp_path / "results")
    assert rec is not None and rec["settings"]["device"] == "cpu" and rec["settings"]["models"] == ["tiny-gemma"]
    assert text == gpu_check.render_page(rec)  # the page comes from the record alone
    assert text.startswith("# GPU check") and "Result: PASS" in text and records.reproduce_line(rec) in text
    for heading in ("## Measured vs analytic (cpu profile, TP 1)", "## Against the paper's profile", "## Run"):
        assert heading in text
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| tiny-gemma | 64 |")]
    kinds = [r[2].strip() for r in rows[:3]]
    assert kinds == ["embedding", "decoder", "head"]
    head = rows[2]
    measured = [float(x) for x in head[3].split("/")]
    ratio = [float(x) for x in head[5].split("/")]
    assert all(m > 0 for m in measured) and all(r > 0 for r in ratio)
    run_row = next(line for line in text.splitlines() if line.startswith("| tiny-llama |"))
    assert "| True |" in run_row


def _args(**kw: object) -> argparse.Namespace:
    base = dict(
        device="cuda", dtype="bf16", hardware="h200", repeats=5, run_model="tiny-llama", run_seq=128,
        models=["gemma-s"], seqs=[2048],
    )  # fmt: skip
    base.update(kw)
    return argparse.Namespace(**base)


def test_report_compares_a_paper_model_with_the_paper_row() -> None:
    """A made-up gemma-s profile at seq 2048: decoder F 1 ms, I 1.6 ms, W 0.2 ms; head F 4 ms."""
    from adaptis_plan.inputs.models.load import load_model

    model = load_model("gemma-s")
    entry = dict(act_bytes=1, act_w_bytes=1, b_s=0.0)
    prof = {
        "dtype": "bf16",
        "entries": [
            dict(layers=[0], kind="embedding", f_s=1e-4, i_s=0.0, w_s=1e-3, **entry),
            dict(layers=list(range(1, model.num_layers - 1)), kind="decoder", f_s=1e-3, i_s=1.6e-3, w_s=2e-4, **entry),
            dict(layers=[model.num_layers - 1], kind="head", f_s=4e-3, i_s=1e-3, w_s=5e-4, **entry),
        ],
    }
    res = gpu_check.CheckResult(device="cuda: test", torch_version="x", profiles={("gemma-s", 2048): prof})
    rows = gpu_check.against_paper(res)
    assert ["gemma-s", "2048", "decoder", "1.00 / 1.60 / 0.20", "1.00 / 1.61 / 0.20"] in rows
    assert ["gemma-s", "2048", "head", "4.00 / 1.00 / 0.50", "4.17 / 0.65 / 0.40"] in rows
    analytic = gpu_check.measured_vs_analytic(res, "h200")
    assert [r[2] for r in analytic] == ["embedding", "decoder", "head"]
    rec = records.record(
        gpu_check.SUITE, gpu_check.settings(_args()), gpu_check.check_to_json(res), "python -m bench.gpu_check"
    )
    rec = json.loads(json.dumps(rec))  # as read back from bench/results/gpu_check.json
    assert gpu_check.results_from_record(rec).profiles == res.profiles
    text = gpu_check.render(rec)
    assert text.startswith("## GPU check") and "### Against the paper's profile" in text
    assert "| gemma-s | 2048 | decoder | 1.00 / 1.60 / 0.20 | 1.00 / 1.61 / 0.20 |" in text
    assert "Result: FAIL" in text and "_not run_" in text  # no run: not a pass
    page = gpu_check.render_page(rec)
    assert page.startswith("# GPU check") and "## Run" in page
