"""The real-execution bench's planning profile: its concurrent copies sit on the cores the ranks do.

Run: `pytest tests/bench/test_bench_real_profile.py` (a second: the copies are stand-ins that only
report the cores they may run on).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from adaptis_plan.executor.cpu import PIN_ENV  # noqa: E402
from bench import real  # noqa: E402

# writes, as a one-entry profile at the -o path, the cores this process may run on (f_s = the lowest)
_STAND_IN = (
    "import json, os, sys; cores = sorted(os.sched_getaffinity(0)); out = sys.argv[sys.argv.index('-o') + 1];"
    " json.dump({'entries': [{'f_s': float(cores[0]), 'cores': cores}]}, open(out, 'w'))"
)


def _copies_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    popen = real.subprocess.Popen

    def stand_in(cmd, **kw):  # noqa: ANN001, ANN202 - the copy's command with its own flags kept
        return popen([sys.executable, "-c", _STAND_IN, *cmd[3:]], **kw)

    monkeypatch.setattr(real.subprocess, "Popen", stand_in)
    out = tmp_path / "profile.json"
    real.profile("tiny-llama", real.ModelCase("tiny-llama", 32, 2), real.QUICK, out)
    return [json.loads(out.with_name(f"profile.proc{k}.json").read_text())["entries"][0]["cores"] for k in range(2)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two usable cores")
def test_profile_copy_k_runs_on_local_rank_ks_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usable = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv(PIN_ENV, raising=False)
    assert _copies_cores(tmp_path, monkeypatch) == [[usable[0]], [usable[1]]]
    assert sorted(os.sched_getaffinity(0)) == usable  # the bench itself stays unpinned


def test_profile_copies_stay_unpinned_when_pinning_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usable = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv(PIN_ENV, "0")
    assert _copies_cores(tmp_path, monkeypatch) == [usable, usable]
