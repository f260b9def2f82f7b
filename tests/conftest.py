"""Shared fixtures: run `adaptis` in-process through its real entry point, and small plan files.

`adaptis(*args)` calls `adaptis_plan.cli.main()` (the one place errors become messages and exit
codes) with click's CliRunner isolating stdin/stdout/stderr, so exit codes and the stdout/stderr
split are the ones a user sees, at in-process speed.

Tests marked `unit` (`make test-unit`) run under a guard: starting a subprocess, planning
(`app.plan.make_plan_for`, `search.generator.search_plan`) or a CP-SAT solve raises in them, and
so does asking for a planning fixture, so a test wrongly marked unit fails instead of slowing
the tier down. A test is either `unit` or `slow`, never both.

Property tests (hypothesis) draw the same examples on every run (profile "ci", derandomized), so a
fresh clone's `.ci/run` passes or fails the same way each time; `ADAPTIS_HYPOTHESIS=explore` draws new
ones (random seeds, as hypothesis does by default) to look for counterexamples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import settings

from adaptis_plan.cli import main

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("ADAPTIS_HYPOTHESIS", "ci"))

_ROOT = str(Path(__file__).resolve().parent.parent)
# fixtures that plan (run a search) when first asked for: a unit test may not depend on them
_PLANNING_FIXTURES = frozenset({"tiny_plan", "zbv_plan"})

# The smallest planning input: tiny model, CPU profile, 2 ranks, 4 micro-batches.
_TINY = ("--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "128")


@dataclass(frozen=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> object:
        """The whole stdout as one JSON document (fails if anything else is printed there)."""
        return json.loads(self.stdout)


def run_adaptis(*args: object) -> CliResult:
    """`adaptis ARGS` in-process: `cli.main()` with sys.argv set and the streams captured."""
    saved_argv = sys.argv
    with CliRunner().isolation() as (out, err, _mixed):
        sys.argv = ["adaptis", *map(str, args)]
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = saved_argv
            sys.stdout.flush()
            sys.stderr.flush()
        return CliResult(code, out.getvalue().decode(), err.getvalue().decode())


@pytest.fixture
def adaptis() -> Callable[..., CliResult]:
    return run_adaptis


def _plan(folder: Path, name: str, *extra: str) -> Path:
    path = folder / name
    r = run_adaptis("plan", *_TINY, "--time-limit", "1", "--no-hard-stop", *extra, "-o", path)
    assert r.exit_code == 0, r.stderr
    return path


@pytest.fixture(scope="session")
def tiny_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adaptive plan of tiny-llama on 2 CPU ranks (read-only: copy it before editing)."""
    return _plan(tmp_path_factory.mktemp("plans"), "adaptive.json")


@pytest.fixture(scope="session")
def zbv_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ZBVZeroBubble plan (V placement, split I/W backward) of the same input (read-only)."""
    return _plan(tmp_path_factory.mktemp("plans"), "zbv.json", "--strategy", "ZBVZeroBubble")


class _NotUnit(AssertionError):
    """Raised by the unit guard: the test does something a `unit` test may not."""


def _forbid(what: str) -> Callable[..., object]:
    def refuse(*_args: object, **_kwargs: object) -> object:
        raise _NotUnit(f"a test marked unit called {what}: drop its `unit` mark (see CONTRIBUTING.md)")

    return refuse


def _install_unit_guard(mp: pytest.MonkeyPatch) -> None:
    """Make subprocesses, plan searches and CP-SAT solves raise, wherever the names are bound."""
    from ortools.sat.python import cp_model

    import adaptis_plan.app.plan as app_plan
    import adaptis_plan.search.generator as generator

    mp.setattr(subprocess.Popen, "__init__", _forbid("subprocess.Popen"))
    for name in ("solve", "Solve"):
        if hasattr(cp_model.CpSolver, name):
            mp.setattr(cp_model.CpSolver, name, _forbid(f"CpSolver.{name}"))
    originals = {id(app_plan.make_plan_for): "make_plan_for", id(generator.search_plan): "search_plan"}
    # `from ... import search_plan` copies the name into the importing module: patch every copy
    for module in list(sys.modules.values()):
        if not (getattr(module, "__file__", None) or "").startswith(_ROOT):
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in originals:
                mp.setattr(module, attr, _forbid(originals[id(value)]))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("unit") is None:
            continue
        if item.get_closest_marker("slow") is not None:
            raise pytest.UsageError(f"{item.nodeid} is marked both unit and slow: keep one")
        planning = _PLANNING_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if planning:
            raise pytest.UsageError(f"{item.nodeid} is marked unit but uses the planning fixture(s) {sorted(planning)}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if item.get_closest_marker("unit") is None:
        yield
        return
    mp = pytest.MonkeyPatch()
    _install_unit_guard(mp)
    try:
        yield
    finally:
        mp.undo()
