"""bench/interop.py's tables from given rows and records (the runs themselves are `make bench`'s)."""

from __future__ import annotations

from pathlib import Path

from bench import interop, records

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _row(target: str, step: float, unrestricted: float, **extra) -> dict:
    return {
        "model": "gemma-s", "pp": 4, "seq_len": 4096, "num_microbatches": 16, "target": target,
        "step_time_s": step, "unrestricted_s": unrestricted, "unrestricted_placement": [0, 1, 2, 3, 0, 1, 2, 3],
        "unrestricted_head_chunks": 3, "exported": True, **extra,
    }  # fmt: skip


def test_targets_table_costs_against_the_best_unrestricted_plan() -> None:
    rows = [_row("torch", 1.2, 1.0), _row("torchtitan", 1.5, 1.1), _row("megatron", 0.9, 1.0, exported=False)]
    text = interop.targets_markdown(rows, 2.0)
    line = next(x for x in text.splitlines() if x.startswith("| gemma-s"))
    # a restricted plan is an unrestricted plan too: the best of all searches (0.9 s) is the reference
    assert "900.0 (loop x2, head in 3 chunks)" in line
    assert "1,200.0 (+33.3%)" in line and "1,500.0 (+66.7%)" in line and "900.0 (+0.0%)" in line
    assert line.endswith("| megatron refused |")


def test_sections_from_records() -> None:
    for name in interop.SECTIONS:
        rec = records.load(name, FIXTURES / "clean")
        text = interop.render(rec)
        assert text.startswith(interop.HEADINGS[name] + "\n\n" + records.reproduce_line(rec) + "\n")
    torchcsv = interop.render(records.load("torchcsv", FIXTURES / "clean"))
    assert (
        "torch / ours median step time: 1.18x" in torchcsv
        and "| torch _PipelineScheduleRuntime (our CSV) | 130.0 |" in torchcsv
    )


def test_a_failed_torchcsv_run_says_so() -> None:
    assert interop.torchcsv_markdown({"error": "torchrun exited 1"}) == "_failed: torchrun exited 1_"
