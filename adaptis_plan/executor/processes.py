"""Process hygiene for `adaptis run`: nothing the launcher starts outlives it, whatever ends it.

Data flow: `launch.py` gives every process of one run (torchrun, the workers torchrun starts,
anything they start) the environment variable `ADAPTIS_RUN_ID` = a token unique to the run, and
`ADAPTIS_LAUNCHER_PID`; this module finds them again by that token (`run_processes`), kills
them (`kill_run`), keeps each worker tied to the launcher (`start_lifeline`) and, as
`python -m adaptis_plan.executor.processes`, is the reaper that cleans up when the launcher
itself is killed. Standard library only (no torch: the reaper must start in milliseconds, and a
worker starts its lifeline before it builds any model).

Why three mechanisms:
- torchrun runs in a session of its own (so a Ctrl-C in the terminal reaches only the
  launcher, which then stops the run in order), and torchrun starts every worker in a session
  of its own too: no single process group holds the run. The token does.
- The launcher stops the run itself on any exit it lives through: normal end, error,
  KeyboardInterrupt, SIGTERM / SIGHUP (turned into an exception so `finally` runs).
- SIGKILL of the launcher runs none of its code. Two things notice it: the reaper, a tiny
  process started before torchrun whose stdin is a pipe held open only by the launcher (EOF =
  the launcher is gone, however it went), which then kills every process with the token and
  removes the run's temporary folder; and each worker's lifeline thread, which exits the
  worker within a second once the launcher or its own parent (torchrun) is gone.
The lifeline also writes the worker's heartbeat (`alive.rank{r}`, its pid, touched every
second): the launcher reads it to tell a stopped or frozen rank (SIGSTOP, a machine that
hangs) from a slow one, which torch's own timeouts cannot, since a stopped process never
times out.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

RUN_ID_ENV = "ADAPTIS_RUN_ID"
LAUNCHER_PID_ENV = "ADAPTIS_LAUNCHER_PID"
HEARTBEAT_S = 1.0
_PROC = Path("/proc")


# ---------------------------------------------------------------- finding a run's processes


def _environ(pid: int) -> bytes:
    try:
        return (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return b""


def carries_token(pid: int, token: str) -> bool:
    """Whether process `pid` runs with `ADAPTIS_RUN_ID=token` (False when it is gone or unreadable)."""
    return f"{RUN_ID_ENV}={token}".encode() in _environ(pid).split(b"\0")


def run_processes(token: str) -> list[int]:
    """Every live process of the run `token` except this one (Linux /proc; [] where there is none)."""
    if not _PROC.is_dir():
        return []
    me = os.getpid()
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) != me and carries_token(int(entry.name), token):
            found.append(int(entry.name))
    return sorted(found)


def children(pid: int) -> list[int]:
    """Direct children of `pid`, from every thread's `/proc/PID/task/TID/children` ([] when unknown)."""
    out: list[int] = []
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return sorted(set(out))


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_run(token: str, pids: Iterable[int] = (), *, grace_s: float = 2.0) -> None:
    """End every process of run `token`: SIGTERM first (after SIGCONT, which a stopped process needs to
    act on it), so torchrun stops its workers in order, then SIGKILL to whatever is left after `grace_s`.

    The processes are found by their token; `pids` are used only where /proc cannot be scanned (and
    then trusted as they are, since the token cannot be checked)."""
    scan = _PROC.is_dir()
    targets = set(run_processes(token)) if scan else {p for p in pids if p > 0}
    for pid in targets:
        _signal(pid, signal.SIGCONT)
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not [p for p in targets if _alive(p, token)]:
            return
        time.sleep(0.05)
    for pid in (set(run_processes(token)) | targets) if scan else targets:
        if _alive(pid, token):
            _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (run_processes(token) if scan else [p for p in targets if _alive(p, token)]):
        time.sleep(0.05)


def is_running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (a process that has exited but is not yet reaped)."""
    if _PROC.is_dir():
        try:
            state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive(pid: int, token: str) -> bool:
    """Running and still ours (a reused pid is not; without /proc the token cannot be checked)."""
    return is_running(pid) and (carries_token(pid, token) or not _PROC.is_dir())


def worker_children(pid: int) -> list[int]:
    """The children of `pid` (torchrun) that are executor workers: torchrun has started its workers."""
    found = []
    for c in children(pid):
        try:
            if b"adaptis_plan.executor.worker" in (_PROC / str(c) / "cmdline").read_bytes():
                found.append(c)
        except OSError:
            continue
    return found


# ---------------------------------------------------------------- the worker's lifeline


def _watch_pid(pid: int) -> select.poll | None:
    """A poll object that becomes readable when `pid` exits (pidfd), or None where that is unsupported."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller


def start_lifeline(out: Path, rank: int) -> None:
    """Start the worker's heartbeat and its tie to the launcher (see the module docstring).

    Writes `out/alive.rank{rank}` (this pid) and touches it every `HEARTBEAT_S`; exits the process at
    once (`os._exit(1)`) when the launcher (`ADAPTIS_LAUNCHER_PID`, if set) or this process's
    parent is gone. Runs in a daemon thread; returns immediately.
    """
    out.mkdir(parents=True, exist_ok=True)
    beat = out / f"alive.rank{rank}"
    tmp = out / f".alive.rank{rank}.tmp"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, beat)
    parent = os.getppid()
    launcher = int(os.environ.get(LAUNCHER_PID_ENV, "0") or 0)
    launcher_gone = _watch_pid(launcher) if launcher > 0 else None

    def gone() -> bool:
        if os.getppid() != parent:
            return True
        if launcher <= 0:
            return False
        if launcher_gone is not None:
            return bool(launcher_gone.poll(0))
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False

    def loop() -> None:
        while True:
            if launcher_gone is not None:
                launcher_gone.poll(int(HEARTBEAT_S * 1000))  # wakes early when the launcher exits
            else:
                time.sleep(HEARTBEAT_S)
            if gone():
                os._exit(1)
            try:
                os.utime(beat)
            except OSError:
                pass

    if gone():
        os._exit(1)
    threading.Thread(target=loop, name="adaptis-lifeline", daemon=True).start()


def heartbeats(out: Path) -> dict[int, tuple[int, float]]:
    """{rank: (pid, seconds since its last heartbeat)} of the workers that have started."""
    now = time.time()
    found = {}
    for f in out.glob("alive.rank*"):
        suffix = f.name.removeprefix("alive.rank")
        if not suffix.isdigit():
            continue
        try:
            found[int(suffix)] = (int(f.read_text() or 0), now - f.stat().st_mtime)
        except (OSError, ValueError):
            continue
    return found


# ---------------------------------------------------------------- the reaper


def reap(token: str, folders: list[Path]) -> None:
    """What the reaper does once the launcher is gone: end the run's processes, remove its folders.

    A short grace: with the launcher gone nobody waits for an orderly shutdown, and torchrun's own
    (SIGTERM, then its workers, then Python's teardown) can take seconds on a loaded machine."""
    kill_run(token, grace_s=0.5)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    """`python -m adaptis_plan.executor.processes TOKEN`: read `dir PATH` lines on stdin; at EOF, reap."""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m adaptis_plan.executor.processes RUN_TOKEN  (folders to remove on stdin)")
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe's end tells this process to act
    folders = []
    for line in sys.stdin:
        kind, _, value = line.rstrip("\n").partition(" ")
        if kind == "dir" and value:
            folders.append(Path(value))
    reap(sys.argv[1], folders)


if __name__ == "__main__":
    main()
