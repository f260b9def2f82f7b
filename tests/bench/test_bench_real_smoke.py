"""Smoke run of the real-execution bench (`bench/real.py` + `bench/torch_runtime.py`), CI-sized.

The same path as `python -m bench.real` on one tiny model at tiny sizes: profile, plan (four
classic strategies on the uniform split + adaptive), one torchrun launch with 2 gloo ranks that
steps torch.distributed.pipelining's own schedules and our executor side by side. Checks the
record's section (rendered after a round trip through JSON) and that every number parses (never a
fixed timing), and the correctness
cross-check: on the same model, data, schedule and split, torch's runtime and ours compute the
same loss (within 1e-5) on the first step.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from pathlib import Path

import pytest
from helpers_common import once_per_session
from helpers_common import table_after as _table_after

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

pytest.importorskip("torch.distributed.pipelining")

from adaptis_plan.executor.cpu import PIN_ENV  # noqa: E402
from bench import real, records  # noqa: E402

pytestmark = pytest.mark.slow  # profiles and one torchrun launch: minutes on 2 loaded cores

SMOKE = real.RealConfig(
    cases=(real.ModelCase("tiny-llama", 32, 2),),
    warmup=1,
    rounds=2,
    time_limit_s=0.5,
    profile_repeats=1,
    # one copy of `adaptis profile` per profile (~3.5 s of CPU each, four in all with two): the copies' cores
    # and their averaging are tested in test_bench_real_profile.py and below (`average_profiles`)
    profile_procs=1,
    profile_sessions=1,  # one session (~25 s of both cores); the median over sessions is tested below
    profile_runtime=False,  # no time per action (~25 s of torchrun launches): tests/executor/test_profile.py's
    launches=1,  # one launch (~17 s of CPU each); rounds split over launches and merged: the last two tests
    link_samples=0,  # the cpu profile's link (~20 s of CPU to measure): tests/executor/test_profile.py measures it
    timeout_s=240.0,
    quiet_wait_s=0.0,  # CI shares the machine with the other tests: measure, do not wait
    label="smoke",
)
NUM = r"[-+]?\d+(\.\d+)?"


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, real.RealResults]:
    """The smoke bench's folder and results, one run for the whole session (every worker reads it)."""
    return once_per_session(tmp_path_factory, "real-smoke", lambda work: (work, real.run_bench(SMOKE, work_dir=work)))


@pytest.fixture(scope="module")
def work(launched: tuple[Path, real.RealResults]) -> Path:
    return launched[0]


@pytest.fixture(scope="module")
def results(launched: tuple[Path, real.RealResults]) -> real.RealResults:
    return launched[1]


def test_every_action_span_is_recorded_in_program_order(results: real.RealResults, work: Path) -> None:
    """The launch records each of our actions' spans (`record_actions`): the plan's actions, in its
    programs' order, one list per measured round and rank."""
    from adaptis_plan.usecases import simulate_plan_file

    case = SMOKE.cases[0].model
    outs = sorted((work / case).glob("out.part*"))
    assert len(outs) == SMOKE.launches
    ranks = [real.merge_launches([json.loads((o / f"rank{r}.json").read_text()) for o in outs]) for r in range(2)]
    assert [len(rank["action_spans_s"]["ours:1F1B"]) for rank in ranks] == [SMOKE.rounds] * 2
    for strategy in real.STRATEGIES:
        run, plan = f"ours:{strategy}", str(work / case / f"plan-{strategy}.json")
        programs = simulate_plan_file(plan).programs
        for d, rank in enumerate(ranks):
            for spans in rank["action_spans_s"][run]:
                assert [name for name, _, _ in spans] == [str(a) for a in programs[d]]
                assert all(s <= e <= s2 for (_, s, e), (_, s2, _) in zip(spans, spans[1:], strict=False))


@pytest.mark.slow
def test_same_loss_in_both_runtimes_on_the_first_step(results: real.RealResults) -> None:
    (m,) = results.models
    for strategy in real.CLASSIC:
        p = m.plans[strategy]
        assert p.torch_losses is not None and len(p.torch_losses) == SMOKE.launches * SMOKE.warmup + SMOKE.rounds
        assert abs(p.ours_losses[0] - p.torch_losses[0]) <= real.LOSS_TOL, strategy
        assert 0 < p.ours_losses[0] < 20  # a cross-entropy over an 8K vocabulary, not garbage


@pytest.mark.slow
def test_torch_runs_the_plans_own_split(results: real.RealResults) -> None:
    (m,) = results.models
    assert [d for _, _, d in m.plans["Interleaved1F1B"].stages] == [0, 1, 0, 1]  # torch's loop mapping
    assert [d for _, _, d in m.plans["ZBVZeroBubble"].stages] == [0, 1, 1, 0]  # torch's V mapping
    for strategy in real.STRATEGIES:
        p = m.plans[strategy]
        assert p.stages[0][0] == 0 and p.stages[-1][1] >= 10  # every layer, in order
        assert all(a[1] == b[0] for a, b in zip(p.stages, p.stages[1:], strict=False))


@pytest.mark.slow
def test_report_has_the_tables_and_parseable_numbers(results: real.RealResults) -> None:
    rec = records.record(real.SUITE, real.settings(SMOKE), records.to_json(results), "python -m bench.real")
    again = json.loads(json.dumps(rec))  # as written to and read from bench/results/real.json
    text = real.render(again)
    assert text == real.render(rec)  # the results round-trip
    assert text.startswith(real.HEADING + "\n\n" + records.reproduce_line(rec))
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) >= 2 and os.environ.get(PIN_ENV) != "0":  # the runtime's ranks, one core each
        assert results.models[0].cpu_cores == usable[:2]
        assert f"each rank pinned to a core of its own (cores {usable[0]}, {usable[1]};" in text
    targets = _table_after(text, "### Targets")
    judged = [r for r in targets if r[3] != "context"]
    # ours / torch, prediction with the planning profile, prediction with the layers as run, the
    # recompute plan's prediction; tiny-gemma's speed-up target is not part of this run
    assert len(judged) == 4
    assert all(r[3] in ("PASS", "MISS") for r in judged)
    assert all(re.match(NUM, r[1]) for r in targets)

    rows = _table_after(text, "### Per model")
    assert [r[2].split(" ")[0] for r in rows] == list(real.RUNS)
    for r in rows:
        assert r[0] == "tiny-llama"
        assert float(r[5]) > 0 and float(r[7]) > 0  # ours ms, predicted ms
        # errors: the planning profile's, the in-launch profile's (paired by round, then unpaired), the after-run one's
        assert all(re.fullmatch(NUM + "%", r[k]) for k in (8, 10))
        assert re.fullmatch(NUM + r"% \(" + NUM + r"%\)", r[9])
        if r[2].split(" ")[0] in real.CLASSIC:
            assert float(r[4]) > 0 and float(r[6]) > 0  # torch ms, ours / torch
    (noise,) = _table_after(text, "### Other jobs on the machine")
    assert re.fullmatch(r"\d+ of \d+", noise[2]) and noise[1].endswith("%")
    (speed,) = _table_after(text, "### Adaptive vs the best torch schedule")
    assert speed[2] in real.CLASSIC and float(speed[5].removesuffix("x")) > 0
    spent = _table_after(text, "### Where our runtime's time goes")
    assert len(spent) == len(real.RUNS)
    assert all(re.fullmatch(r"\d+", r[12]) for r in spent)  # page faults per step
    # per stage: every stage of each plan that splits the backward (ZBV's four at least), F / I / W
    per_stage = _table_after(text, "### Per stage")
    zbv = [r for r in per_stage if r[1] == "ZBVZeroBubble"]
    assert [r[2] for r in zbv] == ["0", "1", "2", "3"] and [r[4] for r in zbv] == ["d0", "d1", "d1", "d0"]
    assert all(re.fullmatch(NUM + "%", c) for r in zbv for c in r[5:8])
    assert {r[1] for r in per_stage} <= {"ZBVZeroBubble", "adaptive"}
    assert "max |difference|" in text and "torch 2." in text and "set_num_threads(1)" in text


def test_every_plan_is_also_simulated_with_its_layers_profiled_inside_the_launch(
    results: real.RealResults,
) -> None:
    (m,) = results.models
    for strategy, p in m.plans.items():
        assert p.predicted_in_run_s is not None and p.predicted_in_run_s > 0, strategy
        assert p.in_run_median_error == pytest.approx((p.predicted_in_run_s - p.ours) / p.ours)
        # paired: every kept round's step against the plan simulated with that round's profile
        assert len(p.predicted_in_run_rounds_s) == len(p.ours_s) and min(p.predicted_in_run_rounds_s) > 0
        per_round = [(q - s) / s for q, s in zip(p.predicted_in_run_rounds_s, p.ours_s, strict=True)]
        assert p.in_run_error == pytest.approx(statistics.median(per_round))
    # the ranks' medians are averaged like the profiler's concurrent copies
    a = {"entries": [{"f_s": 1.0, "i_s": 2.0, "w_s": 3.0, "b_s": 5.0}], "head_chunks": []}
    b = {"entries": [{"f_s": 3.0, "i_s": 2.0, "w_s": 1.0, "b_s": 3.0}], "head_chunks": []}
    assert real.average_profiles([a, b])["entries"] == [{"f_s": 2.0, "i_s": 2.0, "w_s": 2.0, "b_s": 4.0}]
    assert a["entries"][0]["f_s"] == 1.0  # the inputs are left as they were


def test_the_host_speed_factor_scales_the_planning_profile_to_the_in_launch_one(results: real.RealResults) -> None:
    (m,) = results.models
    assert m.host_speed is not None and m.host_speed > 0
    p = m.plans["GPipe"]
    assert m.host_error(p) == pytest.approx((p.predicted_s * m.host_speed - p.ours) / p.ours)
    # the layers' work summed: a layer twice as slow that is half the work is a host 1.5x slower
    planning = {
        "entries": [
            {"layers": [0], "f_s": 1.0, "i_s": 1.0, "w_s": 0.0},
            {"layers": [1, 2], "f_s": 0.5, "i_s": 0.5, "w_s": 0.0},
        ]
    }
    launch = {
        "entries": [
            {"layers": [0], "f_s": 2.0, "i_s": 2.0, "w_s": 0.0},
            {"layers": [1, 2], "f_s": 0.5, "i_s": 0.5, "w_s": 0.0},
        ]
    }
    assert real.host_speed(launch, planning) == pytest.approx(1.5)
    assert real.host_speed(planning, planning) == pytest.approx(1.0)


def test_the_recompute_plan_runs_recomputation_on_every_stage(results: real.RealResults) -> None:
    (m,) = results.models
    p = m.plans[real.RECOMPUTE]
    assert p.torch_s is None and p.ours > 0 and p.predicted_s > 0
    assert [s[:2] for s in p.stages] == [s[:2] for s in m.plans["1F1B"].stages]  # the same split
    # charged one more forward per block: predicted slower than the same plan without recomputation
    assert p.predicted_s > m.plans["1F1B"].predicted_s
    assert abs(p.ours_losses[0] - m.plans["1F1B"].ours_losses[0]) <= real.LOSS_TOL  # the same math


def test_noisy_rounds_are_dropped_but_never_all() -> None:
    assert real.kept_rounds([0.0, 0.5, 0.05, 0.2], 0.10) == [0, 2]
    assert real.kept_rounds([0.9, 0.5, 0.7], 0.10) == [1, 2]  # the quieter half, in round order
    assert real.others_share((100, 1000, 40), (300, 2000, 190)) == pytest.approx(0.05)
    assert real.others_share((0, 0, 0), (0, 0, 0)) == 0.0
    busy, total = real.machine_ticks()
    assert 0 <= busy <= total


def test_the_planning_profile_is_the_per_layer_median_of_its_sessions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A slowdown of the whole host during one profiling session (the other processes' share does
    not see it) does not move the planning profile: each layer's times are the sessions' median."""
    sessions = iter([1.0, 1.6, 1.1])  # the second session ran 1.6x slow

    def one(model_arg, case, cfg, out, runtime=True):  # noqa: ANN001, ANN202
        k = next(sessions)
        return {"entries": [{"f_s": k, "i_s": 2 * k, "w_s": 3 * k, "b_s": 5 * k}], "head_chunks": []}

    monkeypatch.setattr(real, "profile", one)
    monkeypatch.setattr(real, "wait_quiet", lambda *a: 0.0)
    cfg = real.RealConfig(cases=(), quiet_wait_s=0.0)
    ((got, share),) = real._quiet_profiles(
        [("m", real.ModelCase("m", 16, 2), tmp_path / "p.json")], cfg, cfg.profile_sessions
    )
    assert cfg.profile_sessions == 3
    assert got["entries"] == [{"f_s": 1.1, "i_s": 2 * 1.1, "w_s": 3 * 1.1, "b_s": 5 * 1.1}]
    assert json.loads((tmp_path / "p.json").read_text()) == got and 0.0 <= share <= 1.0


def test_rounds_split_evenly_over_the_launches() -> None:
    assert real.part_rounds(21, 2) == [11, 10]
    assert real.FULL.launch_rounds == [11, 10] and real.QUICK.launch_rounds == [real.QUICK.rounds]
    assert real.RealConfig(cases=(), rounds=1, launches=2).launch_rounds == [1]
    assert real.part_rounds(3, 3) == [1, 1, 1]
    assert real.part_rounds(5, 1) == [5]
    assert sum(real.part_rounds(22, 4)) == 22


def test_launches_merge_round_by_round_and_the_in_launch_profile_is_the_median_of_all_rounds() -> None:
    def rank(times: list[float], fs: list[float], warm: float) -> dict:
        per_round = {"ours:1F1B": times}
        return {
            "rank": 0,
            "warmup": 1,
            "step_times_s": per_round,
            "warmup_times_s": {"ours:1F1B": [warm]},
            "minor_faults": {"ours:1F1B": [0] * len(times)},
            "losses": {"ours:1F1B": [warm, *times]},
            "busy_s": per_round,
            "stage_busy_s": per_round,
            "action_spans_s": per_round,
            "others_share": [0.01] * len(times),
            "profiles": [
                {
                    "entries": [{"f_s": sorted(fs)[len(fs) // 2]}],
                    "head_chunks": [],
                    "repeats": 3 * len(fs),
                    "rounds": len(fs),
                }
            ],
            "profile_rounds": [[{"entries": [{"f_s": f}], "head_chunks": []}] for f in fs],
        }

    a, b = rank([1.0, 2.0], [1.0, 1.0], 9.0), rank([3.0], [5.0], 8.0)
    got = real.merge_launches([a, b])
    assert got["step_times_s"] == {"ours:1F1B": [1.0, 2.0, 3.0]}
    assert got["warmup_times_s"] == {"ours:1F1B": [9.0, 8.0]}
    assert got["losses"] == {"ours:1F1B": [9.0, 1.0, 2.0, 8.0, 3.0]}
    assert got["others_share"] == [0.01] * 3 and len(got["profile_rounds"]) == 3
    assert got["profiles"][0]["entries"] == [{"f_s": 1.0}]  # median of 1, 1, 5
    assert (got["profiles"][0]["repeats"], got["profiles"][0]["rounds"]) == (9, 3)
    assert real.merge_launches([a]) is a


def test_a_profile_taken_again_measures_the_layers_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The after-run and split-head profiles (`runtime_from`) run `profile --no-runtime` and carry the
    planning profile's link and time per action: the host's costs are measured once per run."""
    asked: list[bool] = []

    def one(model_arg, case, cfg, out, runtime=True):  # noqa: ANN001, ANN202
        asked.append(runtime)
        return {"entries": [{"f_s": 1.0}], "head_chunks": [], **({"action_overhead_s": 9.0} if runtime else {})}

    monkeypatch.setattr(real, "profile", one)
    monkeypatch.setattr(real, "wait_quiet", lambda *a: 0.0)
    cfg = real.RealConfig(cases=(), quiet_wait_s=0.0)
    case = real.ModelCase("tiny-llama", 32, 2)
    planning = {"link": {"latency_s": 1e-4}, "action_overhead_s": 2e-5}
    ((got, _),) = real._profiles_with_link([("m", case, tmp_path / "a.json")], cfg, None, runtime_from=planning)
    assert asked == [False]
    assert got["action_overhead_s"] == 2e-5 and got["link"] == planning["link"]
    assert json.loads((tmp_path / "a.json").read_text()) == got
    ((got, _),) = real._profiles_with_link([("m", case, tmp_path / "b.json")], cfg, {"latency_s": 2e-4})
    assert asked == [False, True] and got["action_overhead_s"] == 9.0 and got["link"] == {"latency_s": 2e-4}


def test_profiling_sessions_go_round_the_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Model 1, model 2, model 1, model 2, ...: each model's sessions spread over the profiling phase."""
    order: list[str] = []

    def one(model_arg, case, cfg, out, runtime=True):  # noqa: ANN001, ANN202
        order.append(str(model_arg))
        return {"entries": [{"f_s": float(len(order))}], "head_chunks": []}

    monkeypatch.setattr(real, "profile", one)
    monkeypatch.setattr(real, "wait_quiet", lambda *a: 0.0)
    cfg = real.RealConfig(cases=(), quiet_wait_s=0.0)
    items = [(m, real.ModelCase(m, 16, 2), tmp_path / f"{m}.json") for m in ("a", "b")]
    got = real._quiet_profiles(items, cfg, 3)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert [g[0]["entries"][0]["f_s"] for g in got] == [3.0, 4.0]  # medians of (1, 3, 5) and (2, 4, 6)
