"""torch runtime parity: the CSV `adaptis export --format torch-csv` writes, run by
torch.distributed.pipelining's own `_PipelineScheduleRuntime` (2 gloo ranks on CPU), computes
the same loss and every gradient as our executor on the same plan, seed and data.

Covers every classic strategy, the search's own adaptive plan, and adaptive plans with irregular
placement (3 stages on one device, 2 on the other), V placement and unequal stages. One torchrun
launch runs all of them (`bench/torch_runtime.py`, which also times torch's runtime against ours).
Plans torch cannot run are refused by the exporter (tested in `tests/planfile/test_targets.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from adaptis_plan.executor.verify import compare, tolerance
from tests.conftest import run_adaptis
from tests.helpers_interop import all_plans, parity_model

REPO = Path(__file__).resolve().parents[2]


def _launch(config: Path, out: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--max-restarts", "0",
        "-m", "bench.torch_runtime", "--config", str(config), "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    errors = sorted(out.glob("error.rank*.json"))
    detail = json.loads(errors[0].read_text())["line"] if errors else proc.stderr[-2000:]
    assert proc.returncode == 0 and not errors, detail


@pytest.mark.slow
def test_torch_runtime_from_our_csv_matches_our_executor(tmp_path: Path) -> None:
    plans = all_plans(tmp_path)
    model = parity_model()
    model_file = tmp_path / "model.json"
    model_file.write_text(json.dumps(model.model_dump(mode="json")))
    runs = []
    for name, plan in plans.items():
        csv = tmp_path / f"{name}.csv"
        r = run_adaptis("export", plan, "--format", "torch-csv", "-o", csv)
        assert r.exit_code == 0, (name, r.stderr)
        runs.append({"name": f"ours:{name}", "runtime": "ours", "plan": str(plan)})
        runs.append({"name": f"torch:{name}", "runtime": "torch-csv", "plan": str(plan), "csv": str(csv)})
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"model": str(model_file), "runs": runs, "warmup": 0, "rounds": 1, "seed": 3, "save_grads": True})
    )
    out = tmp_path / "out"
    _launch(config, out)

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    rtol, atol = tolerance("cpu", "fp32")
    placements = set()
    for k, name in enumerate(plans):
        ours_k, torch_k = 2 * k, 2 * k + 1
        grads = {}
        for which, index in (("ours", ours_k), ("torch", torch_k)):
            merged: dict = {}
            for r in range(2):
                part = torch.load(out / f"grads.{index}.rank{r}.pt")
                assert not set(part) & set(merged), "a parameter on two ranks"
                merged.update(part)
            grads[which] = merged
        losses = {
            which: [x for rank in ranks for x in rank["losses"][f"{which}:{name}"] if x is not None]
            for which in ("ours", "torch")
        }
        assert len(losses["ours"]) == len(losses["torch"]) == 1, losses
        assert set(grads["ours"]) == set(grads["torch"]) and len(grads["ours"]) > 10
        result = compare(losses["torch"][0], grads["torch"], losses["ours"][0], grads["ours"], rtol=rtol, atol=atol)
        assert result.verified, (name, result)
        assert all(g is not None and float(g.abs().max()) > 0 for g in grads["torch"].values())
        plan = json.loads(plans[name].read_text())
        placements.add(tuple(s["device"] for s in plan["stages"]))
    # irregular, V and unequal placements were among them, besides the classic loop / V ones
    assert {(0, 0, 1, 0, 1), (0, 1, 1, 0), (0, 1)} <= placements
