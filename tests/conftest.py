"""Shared fixtures: run `adaptis` in-process through its real entry point, and small plan files.

`adaptis(*args)` calls `adaptis_plan.cli.main()` (the one place errors become messages and exit
codes) with click's CliRunner isolating stdin/stdout/stderr, so exit codes and the stdout/stderr
split are the ones a user sees, at in-process speed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from adaptis_plan.cli import main

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
    r = run_adaptis("plan", *_TINY, "--time-limit", "1", *extra, "-o", path)
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
