"""The README's and docs/usage.md's shell commands run, in order, from a fresh clone.

Every fenced `bash` block of README.md, then docs/usage.md, is split into commands (a trailing `\\`
joins lines; `#` starts a comment), and each `adaptis` command runs in-process, in order, in one
temporary folder where `tests/` of this checkout is linked (the example model configs), so a command
that reads a file depends on an earlier command that wrote it. Skipped, and named by `SKIPPED`:
`make` lines (the Makefile's own targets: installing, the whole suite) and commands that need GPUs or
packages the CPU install lacks (`torchrun -m torchtitan.train`). Any other program fails the test, so
the documents cannot grow commands that nothing runs. To keep the walk short, a `plan` without
`--time-limit` gets `--time-limit 1` (the search's smallest work; the command is otherwise as shown);
`adaptis run` and `profile` run as shown (torchrun on CPU with gloo).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import run_adaptis

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "usage.md")
#: first words of the commands the walk does not run, and why
SKIPPED = {
    "make": "a Makefile target (installing, the whole test suite)",
    "torchrun": "needs GPUs and torchtitan",
    "PYTHONPATH=.": "needs GPUs and torchtitan",
}
FENCE = re.compile(r"^```(bash|sh|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def shell_commands(text: str) -> list[list[str]]:
    """The commands of every fenced shell block, in order, as argument lists (comments dropped)."""
    out = []
    for block in FENCE.finditer(text):
        joined = re.sub(r"\\\n", " ", block.group(2))
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def _walk() -> list[tuple[str, list[str]]]:
    return [(doc.relative_to(ROOT).as_posix(), cmd) for doc in DOCUMENTS for cmd in shell_commands(doc.read_text())]


@pytest.mark.unit
def test_the_documents_show_commands_and_only_known_programs() -> None:
    walk = _walk()
    assert len({doc for doc, _ in walk}) == len(DOCUMENTS)
    unknown = [(doc, cmd) for doc, cmd in walk if cmd[0] != "adaptis" and cmd[0] not in SKIPPED]
    assert unknown == []


@pytest.mark.unit
def test_every_file_a_command_reads_is_written_before() -> None:
    """A plan or profile file a command takes is the output (-o) of an earlier command of the walk."""
    written: set[str] = set()
    missing = []
    for doc, cmd in _walk():
        if cmd[0] != "adaptis":
            continue
        reads = [w for w in cmd[1:] if w.endswith(".json") and not w.startswith("tests/")]
        outs = {cmd[i + 1] for i, w in enumerate(cmd[:-1]) if w in ("-o", "--output", "--trace")}
        missing += [(doc, " ".join(cmd), f) for f in reads if f not in outs and f not in written]
        written |= outs
    assert missing == []


@pytest.mark.slow
def test_the_readme_commands_run_in_order_from_a_fresh_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README.md's commands run for real; docs/usage.md's (five torchrun executions and a profile: minutes
    on two cores) are held to the two checks above in the suite, and run in full by `ADAPTIS_WALK_DOCS=1`."""
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    walk = _walk() if os.environ.get("ADAPTIS_WALK_DOCS") else [w for w in _walk() if w[0] == "README.md"]
    assert walk
    for doc, cmd in walk:
        if cmd[0] != "adaptis":
            continue
        args = cmd[1:]
        if args[0] == "plan" and "--time-limit" not in args:
            args = [*args, "--time-limit", "1", "--no-hard-stop"]
        r = run_adaptis(*args)
        assert r.exit_code == 0, (doc, " ".join(cmd), r.stderr[-2000:])
