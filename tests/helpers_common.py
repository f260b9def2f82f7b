"""Small helpers several test modules share (imported like `helpers_executor`)."""

from __future__ import annotations

import signal

from adaptis_plan.core import Action, Programs


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
