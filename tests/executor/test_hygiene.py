"""`adaptis run` as a process tree: nothing outlives it, stuck runs end on time, ports are named.

Each real test starts `adaptis run` (the console entry point, in a subprocess with its own
TMPDIR and a marker in its environment that every process it starts inherits), waits until
both workers beat, then does to it what a user or a cluster does: SIGTERM, SIGKILL or Ctrl-C
the launcher, SIGSTOP a worker, start a two-node run with no second node. The checks: the
launcher's exit code and line, no marked process alive 5 s after the signal, no run folder left.

Run: `pytest tests/executor/test_hygiene.py`.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_common import default_sigint
from helpers_executor import greedy_programs, layout_for, tiny_family, write_plan_file

from adaptis_plan.errors import InputError
from adaptis_plan.executor import processes
from adaptis_plan.executor.launch import RunOptions, _raise_port_problem

MARK = "ADAPTIS_TEST_MARK"


def _marked(mark: str) -> list[int]:
    """Live processes (zombies excluded) whose environment carries MARK=mark."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"{MARK}={mark}".encode() in env and state != "Z":
            found.append(int(entry.name))
    return found


def _rank_pid(mark: str, rank: int) -> int | None:
    for pid in _marked(mark):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"LOCAL_RANK=" + str(rank).encode() in env:
            return pid
    return None


class Launch:
    """`adaptis run PLAN ...` in a subprocess, with its own TMPDIR and marker."""

    def __init__(self, tmp: Path, *args: str) -> None:
        model = tiny_family("llama")
        layout = layout_for(model, "gpipe", (0, 1))
        plan = write_plan_file(tmp / "plan.json", model, layout, greedy_programs(layout, 2, "1f1b"), 2, seq_len=8)
        (tmp / "model.json").write_text(model.model_dump_json())
        self.tmp = tmp / "tmpdir"
        self.tmp.mkdir()
        self.mark = secrets.token_hex(6)
        env = dict(os.environ, TMPDIR=str(self.tmp), **{MARK: self.mark})
        cmd = [sys.executable, "-c", "from adaptis_plan.cli import main; main()", "run", str(plan)]
        cmd += ["--model", str(tmp / "model.json"), "--device", "cpu", *args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint
        )

    def run_folders(self) -> list[Path]:
        return sorted(self.tmp.glob("adaptis-run-*"))

    def wait_for_workers(self, timeout_s: float = 90.0) -> None:
        """Until both workers have started their heartbeat (and so are past importing torch)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()
            beats = [b for f in self.run_folders() for b in processes.heartbeats(f / "out")]
            if len(beats) == 2:
                time.sleep(1.0)  # into the step loop
                return
            time.sleep(0.1)
        raise AssertionError("the workers never started")

    def wait_for_torchrun(self, timeout_s: float = 90.0) -> float:
        """Until the launcher has started torchrun (past its own imports and checks); returns when."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for pid in _marked(self.mark):
                try:
                    if b"torch.distributed.run" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        return time.monotonic()
                except OSError:
                    continue
            assert self.proc.poll() is None, self.proc.communicate()
            time.sleep(0.05)
        raise AssertionError("torchrun never started")

    def finish(self, timeout_s: float) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"adaptis run still running after {timeout_s} s: {err[-2000:]}") from None
        return self.proc.returncode, err

    def assert_nothing_left(self, since: float, within_s: float = 5.0) -> None:
        while _marked(self.mark) and time.monotonic() < since + within_s:
            time.sleep(0.1)
        left = _marked(self.mark)
        for pid in left:  # do not leave them to the next test
            os.kill(pid, signal.SIGKILL)
        assert not left, f"processes alive {within_s} s after the launcher ended: {left}"
        assert list(self.tmp.iterdir()) == []  # the run folder, and torchrun's own temporary folders in it


LONG = ("--steps", "100000", "--warmup", "0")


@pytest.mark.slow
def test_sigterm_of_the_launcher_ends_torchrun_and_workers(tmp_path: Path) -> None:
    run = Launch(tmp_path, *LONG)
    run.wait_for_workers()
    t0 = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    code, err = run.finish(timeout_s=15)
    assert code == 128 + signal.SIGTERM, err[-2000:]
    assert "SIGTERM" in err and "Traceback" not in err
    run.assert_nothing_left(since=t0)


@pytest.mark.slow
def test_sigkill_of_the_launcher_leaves_no_process_and_no_run_folder(tmp_path: Path) -> None:
    run = Launch(tmp_path, *LONG)
    run.wait_for_workers()
    t0 = time.monotonic()
    run.proc.kill()
    run.finish(timeout_s=5)
    run.assert_nothing_left(since=t0)
    print(f"SIGKILL of the launcher: nothing left {time.monotonic() - t0:.1f} s later")


@pytest.mark.slow
def test_ctrl_c_of_the_launcher_exits_130_and_cleans_up(tmp_path: Path) -> None:
    run = Launch(tmp_path, *LONG)
    run.wait_for_workers()
    t0 = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    code, err = run.finish(timeout_s=15)
    assert code == 130, err[-2000:]
    run.assert_nothing_left(since=t0)


@pytest.mark.slow
def test_a_stopped_worker_ends_the_run_within_the_timeout(tmp_path: Path) -> None:
    run = Launch(tmp_path, *LONG, "--timeout", "5")
    run.wait_for_workers()
    pid = _rank_pid(run.mark, 1)
    assert pid is not None
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    code, err = run.finish(timeout_s=30)
    took = time.monotonic() - t0
    print(f"SIGSTOP of rank 1 with --timeout 5: the run ended {took:.1f} s later: {err.strip().splitlines()[-1]}")
    assert took < 10, f"the run took {took:.1f} s to end after SIGSTOP with --timeout 5"
    assert code == 1 and "error: rank 1 failed" in err and "stopped responding" in err, err[-2000:]
    run.assert_nothing_left(since=time.monotonic())


@pytest.mark.slow
def test_a_rendezvous_that_never_completes_ends_within_the_timeout(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = Launch(
        tmp_path, "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"127.0.0.1:{port}", "--timeout", "5"
    )
    t0 = run.wait_for_torchrun()
    code, err = run.finish(timeout_s=60)
    took = time.monotonic() - t0
    print(f"--nnodes 2 without a peer, --timeout 5: ended {took:.1f} s after torchrun started: {err.strip()}")
    assert code == 2 and "rendezvous" in err and "--timeout 5" in err, err[-2000:]
    assert took < 5 + 5, f"{took:.1f} s"  # --timeout + 5 s
    run.assert_nothing_left(since=time.monotonic())


def test_a_busy_master_port_is_named(adaptis, tiny_plan: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = adaptis("run", tiny_plan, "--device", "cpu", "--master-port", port)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: --master-port = {port}: the port is already in use"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("port", ["0", "70000"])
def test_a_bad_master_port_is_named(adaptis, tiny_plan: Path, port: str) -> None:
    r = adaptis("run", tiny_plan, "--device", "cpu", "--master-port", port)
    assert r.exit_code == 2 and r.stderr.startswith(f"error: --master-port = {port}:"), r.stderr
    assert ("1 or more" if port == "0" else "1..65535") in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_torchruns_own_port_error_is_named_as_a_port_problem() -> None:
    output = "torch.distributed.DistNetworkError: ... port: 29511, useIpv6: false, code: -98, name: EADDRINUSE, ..."
    with pytest.raises(InputError, match=r"^--master-port = 29511: the port is already in use"):
        _raise_port_problem(output, RunOptions(master_port=29511))
    _raise_port_problem("RuntimeError: injected failure", RunOptions(master_port=29511))  # not a port problem
