"""Assertions on what `adaptis` prints and leaves behind, shared by the CLI and fuzz tests."""

from __future__ import annotations

from pathlib import Path


def one_line_error(r, code: int, *needles: str) -> str:
    """Exit `code`, nothing on stdout, no traceback, and ONE `error:` line on stderr naming every needle."""
    assert r.exit_code == code, (r.exit_code, r.stderr)
    assert r.stdout == "", r.stdout
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    """Every name in `folder` (temporary files of an atomic write included), sorted."""
    return sorted(p.name for p in folder.iterdir())
