"""Helpers every benchmark shares: the repository root, the commit and the machine a table was made on.

Imports nothing from the other bench modules, so `bench.run` and `bench.real` both use it
without importing each other.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git_commit(repo: Path = REPO) -> str:
    """Short HEAD, plus '+dirty' when tracked or untracked files differ (the generated report excluded)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":!BENCHMARKS.md", ":!docs/img"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+dirty" if status.strip() else "")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.platform()}, {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
