"""Helpers every benchmark shares: the repository root and the machine a table was made on.

Imports nothing from the other bench modules, so `bench.run` and `bench.real` both use it
without importing each other.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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
