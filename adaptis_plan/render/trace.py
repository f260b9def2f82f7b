"""Chrome trace event JSON of a simulated plan; opens in Perfetto (ui.perfetto.dev) or chrome://tracing.

Data flow: (`SimResult`, `Programs`, `Layout`) -> a JSON-ready dict (the CLI writes it).
Imports `core`, the shared helpers in `render` and `simulate`'s result type only.

Layout of the trace: one process per device (`device d`), thread 0 "compute" holds one
complete event (`ph: "X"`) per action, thread 1 "p2p send" one per outgoing transfer; each
cross-device transfer is also a flow arrow (`ph: "s"` bound to the sending action, `ph: "f"`
with `bp: "e"` bound to the receiving action, same `id`); a counter (`ph: "C"`) per device
tracks activation + static memory. Timestamps and durations are microseconds.
"""

from __future__ import annotations

from typing import Any

from adaptis_plan.core import Layout, Programs
from adaptis_plan.judge.simulate import SimResult
from adaptis_plan.render import OP_NAMES

_COMPUTE_TID = 0
_SEND_TID = 1
_US = 1e6


def chrome_trace(result: SimResult, programs: Programs, layout: Layout, name: str = "adaptis") -> dict[str, Any]:
    """The trace as a dict: `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`."""
    events: list[dict[str, Any]] = []
    for d in range(layout.num_devices):
        events += [
            {"name": "process_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": f"device {d}"}},
            {"name": "process_sort_index", "ph": "M", "pid": d, "tid": 0, "args": {"sort_index": d}},
            {"name": "thread_name", "ph": "M", "pid": d, "tid": _COMPUTE_TID, "args": {"name": "compute"}},
            {"name": "thread_name", "ph": "M", "pid": d, "tid": _SEND_TID, "args": {"name": "p2p send"}},
        ]

    where: dict[tuple[int, str, int], tuple[int, int]] = {}
    for d, prog in enumerate(programs):
        for k, a in enumerate(prog):
            stage, op, mb = a
            where[(stage, op, mb)] = (d, k)
            t0, t1 = result.times[d][k]
            events.append(
                {
                    "name": f"{stage}{op}{mb}",
                    "cat": OP_NAMES[op],
                    "ph": "X",
                    "pid": d,
                    "tid": _COMPUTE_TID,
                    "ts": t0 * _US,
                    "dur": max(t1 - t0, 0.0) * _US,
                    "args": {
                        "stage": stage,
                        "mb": mb,
                        "op": op,
                        "layers": [layout.bounds[stage], layout.bounds[stage + 1]],
                    },
                }
            )

    for i, x in enumerate(result.transfers):
        receiver = x.stage + 1 if x.kind == "act" else x.stage - 1
        if x.kind == "act":
            src_key, dst_key = (x.stage, "F", x.mb), (receiver, "F", x.mb)
        else:
            src_op = "B" if (x.stage, "B", x.mb) in where else "I"
            dst_op = "B" if (receiver, "B", x.mb) in where else "I"
            src_key, dst_key = (x.stage, src_op, x.mb), (receiver, dst_op, x.mb)
        label = f"{x.kind} {x.stage}->{receiver} mb {x.mb}"
        events.append(
            {
                "name": label,
                "cat": "p2p",
                "ph": "X",
                "pid": x.src_device,
                "tid": _SEND_TID,
                "ts": x.start_s * _US,
                "dur": max(x.end_s - x.start_s, 0.0) * _US,
                "args": {"to_device": x.dst_device, "stage": x.stage, "mb": x.mb, "kind": x.kind},
            }
        )
        (sd, sk), (rd, rk) = where[src_key], where[dst_key]
        s0, s1 = result.times[sd][sk]
        r0, r1 = result.times[rd][rk]
        # Bind each flow end inside its slice (midpoints), which both viewers accept.
        events.append(
            {"name": label, "cat": "p2p", "ph": "s", "id": i, "pid": sd, "tid": _COMPUTE_TID, "ts": (s0 + s1) / 2 * _US}
        )
        events.append(
            {
                "name": label,
                "cat": "p2p",
                "ph": "f",
                "bp": "e",
                "id": i,
                "pid": rd,
                "tid": _COMPUTE_TID,
                "ts": (r0 + r1) / 2 * _US,
            }
        )

    for d, timeline in enumerate(result.memory_timeline):
        for t, nbytes in timeline:
            events.append(
                {"name": "memory", "ph": "C", "pid": d, "tid": 0, "ts": t * _US, "args": {"MiB": nbytes / 2**20}}
            )

    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "name": name,
            "step_time_s": result.step_time_s,
            "bubble_ratio": result.bubble_ratio,
            "lower_bound_s": result.lower_bound_s,
            "num_devices": layout.num_devices,
            "num_stages": layout.num_stages,
            "num_microbatches": result.num_microbatches,
        },
    }
