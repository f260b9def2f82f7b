"""Small helpers several test modules share (imported like `helpers_executor`): tiny model specs
and training settings, textbook programs, markdown table reading, SIGINT for child processes, bench
records with a fixed provenance, and a result computed once per test session across workers."""

from __future__ import annotations

import fcntl
import os
import pickle
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from adaptis_plan.core import Action, Programs
from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MlpSpec, ModelSpec
from adaptis_plan.spec.training import TrainingConfig

T = TypeVar("T")


def once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[Path], T]) -> T:
    """`compute(folder)`, run by one process of the test session and shared with the others.

    A module-scoped fixture runs once per xdist worker that runs one of its tests, and the workers
    share tests out one by one: an expensive fixture (a torchrun launch, a bench) would run on every
    worker. Here the first worker to ask computes under a file lock in the session's shared temporary
    folder and pickles the result; the others wait on the lock and read it back. `folder` is shared
    too: files the tests read beside the result. A `compute` that raises leaves nothing behind, so the
    next worker to ask computes again (and fails the same way). Read-only for the tests, like any
    shared fixture."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # xdist: <session>/<worker id>; the session's folder is shared
        base = base.parent
    folder, done = base / f"once-{name}", base / f"once-{name}.pickle"
    with open(base / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if done.exists():
            return pickle.loads(done.read_bytes())
        folder.mkdir(exist_ok=True)
        result = compute(folder)
        done.write_bytes(pickle.dumps(result))
        return result


#: the two ends every model spec has
EMB, HEAD = LayerSpec(kind="embedding"), LayerSpec(kind="head")


def train_config(seq_len: int = 4096, **kw: object) -> TrainingConfig:
    """8 micro-batches at `seq_len`, PP 1 unless `pp=` says otherwise, the rest as given."""
    return TrainingConfig(num_microbatches=8, pp=kw.pop("pp", 1), seq_len=seq_len, **kw)  # type: ignore[arg-type]


def llama_like(num_blocks: int, name: str = "llama-like") -> ModelSpec:
    """LLaMA-2-7B's shapes (hidden 4096, 32 MHA heads of 128, SwiGLU 11008, vocab 32000), `num_blocks` decoders."""
    a = AttentionSpec(num_heads=32, num_kv_heads=32, head_dim=128)
    block = LayerSpec(kind="decoder", attention=a, mlp=MlpSpec(activation="swiglu", intermediate_size=11008))
    return ModelSpec(name=name, hidden_size=4096, vocab_size=32000, layers=[EMB] + [block] * num_blocks + [HEAD])


def default_sigint() -> None:
    """`preexec_fn` for a child a test will Ctrl-C: SIGINT back to its default action. A test suite
    started as a background job of a non-interactive shell (`cmd &`) inherits SIGINT ignored, and
    Python then keeps it ignored, as a user's background job should; the tests mean a terminal's
    Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def one_f_one_b(num_devices: int, m: int, split: bool = False) -> Programs:
    """Textbook 1F1B (PipeDream-flush) with one stage per device; I + W instead of B when `split`."""
    programs = []
    for d in range(num_devices):
        warmup = min(num_devices - d - 1, m)
        prog = [Action(d, "F", mb) for mb in range(warmup)]
        f = warmup
        for b in range(m):
            if f < m:
                prog.append(Action(d, "F", f))
                f += 1
            prog += [Action(d, "I", b), Action(d, "W", b)] if split else [Action(d, "B", b)]
        programs.append(prog)
    return programs


def table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (cells) of the first markdown table after `heading`."""
    lines = text[text.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def bench_record(suite: str, data: dict, settings: dict | None = None, command: str | None = None) -> dict[str, Any]:
    """A bench record (`bench.records`) of `suite` holding `data`, with a fixed provenance: a clean commit
    abc1234 on a machine named test, so what renders from it never depends on where the test runs."""
    from bench import records  # `bench` is a top-level folder: importable where the bench tests run

    provenance = {
        "commit": "abc1234", "clean": True, "machine": "test", "python": "3.11", "versions": {},
        "date": "2026-12-07 08:00 UTC", "command": command or f"python -m bench.run --suites {suite}", "wall_s": 1.0,
    }  # fmt: skip
    return {"suite": suite, "format": records.FORMAT, "provenance": provenance, "settings": settings or {},
            "data": data}  # fmt: skip
