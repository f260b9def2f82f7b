"""A progress bar for long library calls (the planner's search), drawn by rich on the terminal.

Data flow: the CLI opens `progress_bar(console)` and hands the callback it yields to the
library (`app.plan.make_plan_for(..., progress=tick)`), so the library never imports rich.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from adaptis_plan.core import ProgressFn


@contextmanager
def progress_bar(console: Console, label: str = "planning") -> Iterator[ProgressFn]:
    """A transient bar on `console` while the block runs; yields the `(message, fraction)` callback."""
    bar = Progress(
        TextColumn(f"{label}: {{task.description:<24}}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        task = bar.add_task("start", total=1.0)

        def tick(message: str, fraction: float) -> None:
            bar.update(task, description=message, completed=fraction)

        yield tick
