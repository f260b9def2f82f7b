"""Standard output and error of the `adaptis` commands: the one rich console (stderr), `say` / `note`
lines, `--json` on stdout, and what happens when a reader goes away (`| head`) or a write fails.

A closed pipe ends the command quietly with `EXIT_READER_GONE` (141, as a Unix filter ends), never
click's exit 1 for a broken pipe, which this CLI keeps for bugs; any other failed write is one
user-facing error. Imports click, and rich lazily (on the first use of the console).
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, NoReturn, cast

import click

from adaptis_plan.errors import AdaptisError
from adaptis_plan.text import printable

_STDERR = None


def console():
    """The one rich console (stderr), created on first use."""
    global _STDERR
    if _STDERR is None:
        from rich.console import Console

        _STDERR = Console(file=_stderr(), highlight=False)
    return _STDERR


class _StderrWriter:
    """sys.stderr (looked up at each call, as rich's own stderr console does), where a reader that went
    away (`adaptis simulate P 2>&1 | head -3`: the reports go to stderr) raises `_ReaderGone`, not
    click's exit 1 for a broken pipe."""

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except BrokenPipeError as e:
            raise _ReaderGone from e

    def flush(self) -> None:
        try:
            sys.stderr.flush()
        except BrokenPipeError as e:
            raise _ReaderGone from e

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: as stderr's
        return getattr(sys.stderr, name)


def _stderr() -> IO[str]:
    return cast(IO[str], _StderrWriter())  # a file to rich and click: write, flush, the rest as stderr's


def say(line: str) -> None:
    """One line on stderr (printable), through `_StderrWriter`: a reader that went away ends the command
    as on stdout."""
    click.echo(printable(line), file=_stderr())


def note(line: str) -> None:
    """One `note:` line on stderr (`say`)."""
    say(f"note: {line}")


def emit_json(data: object) -> None:
    write_stdout(json.dumps(data, indent=1) + "\n")


class _ReaderGone(Exception):
    """Standard output's or error's reader went away (`| head -1`): not an OSError, so that click does not turn it
    into its own exit 1, which this CLI keeps for bugs (`main` ends the command quietly, exit 141)."""


#: the exit status of a command that a closed pipe ends: 128 + SIGPIPE, as a shell reports `yes | head -1`
EXIT_READER_GONE = 141


def _reader_gone(fd: int) -> bool:
    """Whether `fd` is a pipe whose reader went away: poll reports an error on its write end."""
    try:
        import select

        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # not pollable here: say nothing is gone
        return False


def write_stdout(text: str) -> None:
    """`text` on stdout. A reader that went away (`| head`) ends the command quietly, exit 141, as
    any Unix filter ends; any other failed write (a full disk) is one line, exit 1: the output is
    incomplete, but not through bad input."""
    try:
        click.echo(text, nl=False)
        sys.stdout.flush()
    except BrokenPipeError as e:
        raise _ReaderGone from e
    except OSError as e:
        raise AdaptisError(f"standard output: the write failed ({e.strerror or e}); the output is incomplete") from e


def _interrupted() -> None:
    """Ctrl-C: say so and exit 130 at once. Every `finally` and context manager on the way up has
    run by now (temporary files removed, worker processes stopped); `os._exit` then skips the
    interpreter's shutdown, where a native thread still winding down (CP-SAT's, stopped a moment
    before) could abort the process ("terminate called without an active exception", exit -6)."""
    click.echo("interrupted (Ctrl-C); no file is left half-written", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def _quiet_exit_reader_gone() -> NoReturn:
    """End with 141, after pointing stdout and stderr, whichever lost its reader, at /dev/null: the
    interpreter's last flush at exit must not fail again and print "Exception ignored ... BrokenPipeError"."""
    for fd in (1, 2):
        if _reader_gone(fd):
            _to_devnull(fd)
    sys.exit(EXIT_READER_GONE)


def _to_devnull(fd: int) -> None:
    """Point `fd`, whose reader went away, at /dev/null: the interpreter's last flush must not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


def _say_error(*lines: str) -> None:
    """The error's lines on stderr; with nobody reading stderr any more, nothing (the exit code still
    says what happened: 2 bad input, 3 no fit)."""
    try:
        click.echo("\n".join(lines), err=True)
    except BrokenPipeError:
        _to_devnull(2)
