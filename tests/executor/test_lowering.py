"""Lowering: the transfers of a plan and its global order, deadlocks refused.

Run: `pytest tests/executor/test_lowering.py`.
"""

from __future__ import annotations

import pytest
from helpers_executor import (
    greedy_programs,
)

from adaptis_plan.core import Action, Layout
from adaptis_plan.errors import DeadlockError
from adaptis_plan.executor.lowering import lower

pytestmark = pytest.mark.unit

M = 4  # micro-batches in the executor runs

# ---------------------------------------------------------------- lowering


def test_lowering_lists_only_cross_device_transfers_in_a_consistent_order() -> None:
    layout = Layout(bounds=(0, 1, 2, 3, 4, 5), stage_device=(0, 0, 1, 0, 1), num_devices=2)
    low = lower(layout, greedy_programs(layout, 3, "random", seed=4), 3)
    kinds = {(t.kind, t.stage) for t in low.transfers}
    assert ("act", 0) not in kinds and ("grad", 1) not in kinds  # stages 0 and 1 share device 0
    assert {("act", 1), ("act", 2), ("act", 3), ("grad", 2), ("grad", 3), ("grad", 4)} == kinds
    assert len({t.tag for t in low.transfers}) == len(low.transfers)
    q0, q1 = low.peer_queues(0)[1], low.peer_queues(1)[0]
    assert [t.seq for t in q0] == [t.seq for t in q1] == sorted(t.seq for t in q0)


def test_lowering_refuses_a_deadlocking_order() -> None:
    layout = Layout(bounds=(0, 3, 6), stage_device=(0, 1), num_devices=2)
    programs = [
        [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)],
        [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)],
    ]
    with pytest.raises(DeadlockError, match="circular wait") as e:
        lower(layout, programs, 2)
    assert "[0B0]" in e.value.grid and "[1F1]" in e.value.grid


def _recording_p2p(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202
    """(runtime module, lowered 2-stage 1F1B-like plan, event list, boundaries), with gloo's isend /
    irecv and the core yield replaced by recorders into the event list."""
    import torch

    import adaptis_plan.executor.runtime as runtime

    layout = Layout(bounds=(0, 1, 2), stage_device=(0, 1), num_devices=2)
    programs = [
        [Action(0, "F", 0), Action(0, "F", 1), Action(0, "B", 0), Action(0, "B", 1)],
        [Action(1, "F", 0), Action(1, "B", 0), Action(1, "F", 1), Action(1, "B", 1)],
    ]
    low = lower(layout, programs, 2)
    events: list[str] = []
    # the runtime posts on its pipeline group: isend(t, group=, group_dst=, tag=), irecv(t, group=, group_src=, tag=)
    monkeypatch.setattr(runtime.dist, "isend", lambda t, *, tag, **_: events.append(f"send {tag}") or object())
    monkeypatch.setattr(runtime.dist, "irecv", lambda t, *, tag, **_: events.append(f"recv {tag}") or object())
    monkeypatch.setattr(runtime.os, "sched_yield", lambda: events.append("yield"))
    return runtime, low, events, {0: ((1, 2), torch.float32)}


def test_a_cpu_rank_yields_its_core_once_after_posting_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    # with a rank computing on every core, gloo's I/O thread writes a posted send only once it gets a
    # core: the runtime yields after posting (measured: `python -m bench.link_busy`)
    from datetime import timedelta

    import torch

    runtime, low, events, boundaries = _recording_p2p(monkeypatch)
    for device, yields in (("cpu", True), ("meta", False)):
        events.clear()
        comm = runtime.P2P(low, 0, boundaries, torch.device(device), 60.0)
        comm._timeout = timedelta(seconds=60)
        comm.start_step()
        assert "yield" not in events  # receives posted, nothing sent yet
        comm.send(("act", 0, 0), torch.zeros(1, 2))
        comm.send(("act", 0, 1), torch.zeros(1, 2))
        sends = [i for i, e in enumerate(events) if e.startswith("send")]
        assert len(sends) == 2
        assert [e for e in events if e == "yield"] == (["yield", "yield"] if yields else [])
        if yields:  # each send is followed by a yield before anything else is sent
            assert all("yield" in events[i + 1 : j] for i, j in zip(sends, sends[1:] + [len(events)], strict=True))


def test_ahead_order_posts_every_receive_of_the_step_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # posted mid-step, a receive can stall its rank for milliseconds on gloo (runtime docstring);
    # "ahead" posts all of them at the step's start, "peer" only up to its line's first pending send
    import torch

    runtime, low, events, boundaries = _recording_p2p(monkeypatch)
    incoming = sorted(f"recv {t.tag}" for t in low.transfers if t.dst == 0)
    assert len(incoming) == 2
    posted = {}
    for order in ("peer", "ahead"):
        events.clear()
        comm = runtime.P2P(low, 0, boundaries, torch.device("cpu"), 60.0, order=order)
        comm.start_step()
        posted[order] = sorted(e for e in events if e != "yield")
        comm.send(("act", 0, 0), torch.zeros(1, 2))
        comm.send(("act", 0, 1), torch.zeros(1, 2))
        assert sorted(e for e in events if e.startswith("recv")) == incoming  # each posted once
        assert [e for e in events if e.startswith("send")] == [
            f"send {t.tag}" for t in low.peer_queues(0)[1] if t.src == 0
        ]
    assert posted["ahead"] == incoming
    assert posted["peer"] == []  # device 0's line starts with its own sends
    with pytest.raises(ValueError, match="use one of peer, ahead, global"):
        runtime.P2P(low, 0, boundaries, torch.device("cpu"), 60.0, order="eager")


@pytest.mark.unit
def test_a_fault_applies_to_every_job_or_to_the_one_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from adaptis_plan.executor.runtime import Fault

    monkeypatch.delenv("ADAPTIS_EXECUTOR_FAULT", raising=False)
    assert Fault.from_env(0) is None
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "skipw:1")
    assert Fault.from_env(0) == Fault.from_env(3) == Fault("skipw", 1, 0, None)
    monkeypatch.setenv("ADAPTIS_EXECUTOR_FAULT", "hang:1:2:3")
    assert Fault.from_env(3) == Fault("hang", 1, 2, 3)
    assert Fault.from_env(0) is None and Fault.from_env(2) is None
