"""`adaptis_plan.text`: any value shown in a rich report line reads back exactly as written (printable
text), whatever markup or backslashes it holds, and control characters never reach the terminal."""

from __future__ import annotations

import pytest
from rich.console import Console

from adaptis_plan.text import MAX_SHOWN, shown

pytestmark = pytest.mark.unit

VALUES = [
    "[/]",
    "a[bold]b[/bold]",
    "[red]x[/]",
    "[link=http://x]y[/link]",
    "x\\[/]",
    "\\\\[/]",
    "\\",
    "a\\\\",
    "C:\\d\\[x]\\",
    "ok",
]


@pytest.mark.parametrize("value", VALUES)
def test_markup_and_backslashes_read_back_as_written(value: str) -> None:
    console = Console(width=400, color_system=None)
    with console.capture() as cap:
        console.print(f"[bold]{shown(value)}[/] after", end="")
    assert cap.get() == f"{value} after"


def test_control_characters_and_length() -> None:
    assert shown("a\x1b]0;T\x07\nb\x00") == "a?]0;T??b?"
    long = shown("x" * 1000)
    assert len(long) == MAX_SHOWN and long.endswith("…")
