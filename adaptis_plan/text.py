"""Text from files and the command line, made safe to show in a report.

Names, descriptions, strategies and paths come from files a user may have been sent: in a rich
report line a `[/]` in a model name is markup (an error, or restyled output), and an escape byte
reaches the terminal (a new window title, a cleared screen). Every such value goes through
`shown` before it is put into a report line or table cell. Imports nothing (the CLI imports it
at start-up, before any command runs).
"""

from __future__ import annotations

import re

#: the longest value a report shows whole; longer ones are cut (a name is a label, not content)
MAX_SHOWN = 160

# rich markup: `[` opens a tag and `\[` is a literal one; backslashes right before a `[` escape it
_BRACKET = re.compile(r"(\\*)\[")


def printable(text: str) -> str:
    """`text` with every control or otherwise unprintable character shown as '?' (no markup escaping)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def markup_escaped(text: str) -> str:
    """`text` as rich markup that shows it literally: every `[` escaped (and the backslashes before it
    doubled), and trailing backslashes doubled so that they cannot escape a tag the line puts after it."""
    text = _BRACKET.sub(lambda m: m.group(1) * 2 + r"\[", text)
    trailing = len(text) - len(text.rstrip("\\"))
    return text + "\\" * trailing


def cut(text: str, limit: int = MAX_SHOWN) -> str:
    """`text` cut to `limit` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """`value` as report text: unprintable characters as '?', cut to `limit` characters, rich markup escaped."""
    return markup_escaped(cut(printable(str(value)), limit))
