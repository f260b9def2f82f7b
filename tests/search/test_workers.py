"""Worker processes change how fast a plan is found, never which plan (`search.workers`)."""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

import pytest

from adaptis_plan.errors import InputError
from adaptis_plan.search import workers

#: two distinct points are planned here (dp8 x cp2 with 2 micro-batches, dp16 with 1)
CONFIG = ("--model", "llama-2-7b", "--hardware", "h100", "--seq-len", "2048", "--gpus", "16",
          "--global-batch-size", "128", "--time-limit", "2", "--no-hard-stop")  # fmt: skip


def test_pmap_keeps_the_order_with_any_number_of_workers(monkeypatch) -> None:  # noqa: ANN001
    items = list(range(1, 40))
    want = [math.factorial(x) for x in items]
    for n in ("1", "2", "3"):
        monkeypatch.setenv(workers.ENV, n)
        assert workers.workers() == int(n)
        assert workers.pmap(math.factorial, items) == want
    assert workers.pmap(math.factorial, []) == []


def _abort(deadline, where: str) -> int:  # noqa: ANN001
    if where:  # the first piece runs in the calling process (`Pool.map`): it aborts nothing
        deadline.abort(where)
    return 1


def _abort_nested(deadline, where: str) -> list[int]:  # noqa: ANN001
    return workers.pmap(functools.partial(_abort, deadline), ["", where])  # aborted by the worker's worker


def _abort_own(where: str) -> bool:
    from adaptis_plan.search.budget import Deadline

    mine = Deadline(math.inf)
    mine.abort(where)
    return mine.aborted


@pytest.mark.parametrize("fn", [_abort, _abort_nested])
def test_a_workers_abort_reaches_the_parents_deadline(monkeypatch, fn) -> None:  # noqa: ANN001
    """A forked worker aborts its copy of a deadline; the parent's own is aborted once the result is back,
    with the place that stopped (also from a worker's worker)."""
    from adaptis_plan.search.budget import Deadline

    monkeypatch.setenv(workers.ENV, "2")
    deadline, other = Deadline(math.inf), Deadline(math.inf)
    got = workers.pmap(functools.partial(fn, deadline), ["", "second"])
    assert got and deadline.aborted and deadline.where == "second"
    assert not other.aborted
    # a deadline made in the worker is its own: nothing of the parent's is touched
    fresh = Deadline(math.inf)
    assert workers.pmap(_abort_own, ["a", "b", "c"]) == [True] * 3
    assert not fresh.aborted and not other.aborted


def test_a_pool_maps_in_order_across_calls(monkeypatch) -> None:  # noqa: ANN001
    for n in ("1", "3"):
        monkeypatch.setenv(workers.ENV, n)
        with workers.Pool() as pool:
            assert pool.parallel == (n == "3")
            assert pool.map(math.factorial, range(1, 9)) == [math.factorial(x) for x in range(1, 9)]
            assert pool.map(math.factorial, [5]) == [120]
            assert pool.map(abs, [-3, 2, -1]) == [3, 2, 1]


@pytest.mark.parametrize("raw", ["0", "-2", "two"])
def test_a_bad_worker_count_is_one_clear_line(monkeypatch, adaptis, tmp_path, raw: str) -> None:  # noqa: ANN001
    monkeypatch.setenv(workers.ENV, raw)
    with pytest.raises(InputError, match=r"ADAPTIS_WORKERS = .*: use an integer >= 1"):
        workers.workers()
    out = tmp_path / "p.json"
    r = adaptis("plan", *CONFIG, "-o", out)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "ADAPTIS_WORKERS" in r.stderr
    assert not out.exists()
    # a plan that never needs a pool is refused too (a single pipeline, no --gpus)
    r = adaptis("plan", "--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "-o", out)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "ADAPTIS_WORKERS" in r.stderr
    assert not out.exists()


def _plan(adaptis, monkeypatch, path: Path, n: int, *args: str) -> dict:  # noqa: ANN001
    monkeypatch.setenv(workers.ENV, str(n))
    r = adaptis("plan", *args, "-o", path, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_planned_points_searched_side_by_side_give_the_same_plan(adaptis, monkeypatch, tmp_path) -> None:  # noqa: ANN001
    one = _plan(adaptis, monkeypatch, tmp_path / "one.json", 1, *CONFIG)
    two = _plan(adaptis, monkeypatch, tmp_path / "two.json", 2, *CONFIG)
    planned = [r["configuration"] for r in one["configurations"] if r["status"] == "planned"]
    assert len({(c["num_microbatches"], c["dp"]) for c in planned}) == 2  # two searches ran
    # the screen ran side by side too (pairs of points, decided in order)
    assert sum(r["status"] in ("screened", "planned") for r in one["configurations"]) >= 4
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()
    assert one["configurations"] == two["configurations"]


def _memory_bound_args(tmp_path: Path) -> tuple[str, ...]:
    """tiny-llama on CPU ranks of 100 MB: memory binds, and recompute auto searches both forced modes."""
    from importlib.resources import files

    data = json.loads(files("adaptis_plan.profiles").joinpath("cpu.json").read_text())
    for device in data["device_types"].values():
        device["hbm_bytes"] = 100_000_000
    hw = tmp_path / "cpu-100mb.json"
    hw.write_text(json.dumps(data))
    return ("--model", "tiny-llama", "--hardware", str(hw), "--pp", "4", "--microbatches", "16", "--seq-len", "1024",
            "--time-limit", "1", "--no-hard-stop")  # fmt: skip


def test_a_forced_mode_search_cut_short_in_a_worker_marks_the_plan_aborted(adaptis, monkeypatch, tmp_path) -> None:  # noqa: ANN001
    """A worker's hard stop happens on its copy of the deadline: the parent replays it, so the plan says
    the search was cut short (here the forced-mode searches abort their deadline as a worker's clock would)."""
    from adaptis_plan.search import driver

    forced, parent = driver._forced_search, os.getpid()

    def cut_short(shape, budget, job):  # noqa: ANN001, ANN202
        got = forced(shape, budget, job)
        if os.getpid() != parent:  # only the search a worker runs (the first runs in this process)
            shape.deadline.abort("test: a worker's clock")
        return got

    monkeypatch.setattr(driver, "_forced_search", cut_short)
    _plan(adaptis, monkeypatch, tmp_path / "p.json", 2, *_memory_bound_args(tmp_path))
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["search"]["aborted"] is True and "worker" in plan["search"]["abort_phase"], plan["search"]


def test_a_point_searched_in_a_worker_and_cut_short_marks_the_plan_aborted(adaptis, monkeypatch, tmp_path) -> None:  # noqa: ANN001
    """The planned points' searches run side by side: one cut short in its worker (its deadline aborted
    as its clock would) marks the plan, whichever point wins."""
    from adaptis_plan.search import plan_point

    search, parent = plan_point._search, os.getpid()

    def cut_short(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        got = search(*args, **kwargs)
        if os.getpid() != parent:  # only the search a worker runs (the first runs in this process)
            args[3].abort("test: a worker's clock")
        return got

    monkeypatch.setattr(plan_point, "_search", cut_short)
    _plan(adaptis, monkeypatch, tmp_path / "p.json", 2, *CONFIG)
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["search"]["aborted"] is True and "worker" in plan["search"]["abort_phase"], plan["search"]


def test_recompute_auto_searching_its_forced_modes_side_by_side_gives_the_same_plan(
    adaptis,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
    tmp_path,  # noqa: ANN001
) -> None:
    """tiny-llama on CPU ranks of 100 MB: memory binds, and both forced modes are searched."""
    args = _memory_bound_args(tmp_path)
    one = _plan(adaptis, monkeypatch, tmp_path / "one.json", 1, *args)
    _plan(adaptis, monkeypatch, tmp_path / "two.json", 2, *args)
    labels = {c["label"] for c in one["search"]["recompute"]["candidates"]}
    assert {"selective everywhere", "full everywhere"} <= labels
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


def test_a_worker_leaves_when_its_parent_is_gone(tmp_path) -> None:  # noqa: ANN001
    """A forked worker whose parent dies without shutting its pool down (killed, or its own parent
    ended it) leaves by itself, instead of waiting for work forever."""
    import os
    import subprocess
    import sys
    import time

    script = tmp_path / "orphan.py"
    script.write_text(
        "import os, sys, time\n"
        "from adaptis_plan.search.workers import Background\n"
        "bg = Background(lambda: time.sleep(60))\n"
        "time.sleep(0.5)\n"
        "print(bg._worker._process.pid, flush=True)\n"
        "os._exit(0)\n"  # no clean-up: the worker is orphaned
    )
    env = {**os.environ, workers.ENV: "2", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60)
    pids = [int(x) for x in out.stdout.split()]
    assert pids, out.stderr
    deadline = time.time() + 5
    while time.time() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
