"""Chrome trace event JSON of a measured run (`adaptis run --trace`), laid out like the simulator's
(`render.trace`) so the two open side by side in Perfetto (ui.perfetto.dev) or chrome://tracing.

Data flow: the plan that ran + each device's measured timeline of its last step (the executor's
result files: (name, stage, mb, op, start_s, end_s) per action) -> a JSON-ready dict (the launcher
writes it). Imports the plan-file spec and the shared helpers in `render`; never the executor or
torch.
"""

from __future__ import annotations

from typing import Any

from adaptis_plan.render import OP_NAMES
from adaptis_plan.spec.plan_file import PlanFile


def measured_trace(plan: PlanFile, timelines: dict[int, list], predicted_s: float) -> dict[str, Any]:
    """Chrome trace of the last measured step, laid out like the simulator's (`render/trace.py`):
    one process per device, thread 0 "compute", one `ph: "X"` event per action (µs); `predicted_s`
    is the step the run reports as predicted (`PlanJob.predicted_step_time_s`)."""
    events: list[dict[str, Any]] = []
    for d in sorted(timelines):
        events += [
            {"name": "process_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": f"device {d}"}},
            {"name": "process_sort_index", "ph": "M", "pid": d, "tid": 0, "args": {"sort_index": d}},
            {"name": "thread_name", "ph": "M", "pid": d, "tid": 0, "args": {"name": "compute"}},
        ]
        for name, stage, mb, op, t0, t1 in timelines[d]:
            st = plan.stages[stage]
            events.append(
                {
                    "name": name,
                    "cat": OP_NAMES[op],
                    "ph": "X",
                    "pid": d,
                    "tid": 0,
                    "ts": t0 * 1e6,
                    "dur": max(t1 - t0, 0.0) * 1e6,
                    "args": {"stage": stage, "mb": mb, "op": op, "layers": list(st.layers)},
                }
            )
    end = max((a[5] for tl in timelines.values() for a in tl), default=0.0)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "name": f"measured: {plan.strategy}",
            "measured": True,
            "step_span_s": end,
            "predicted_step_time_s": predicted_s,
            "num_devices": plan.training.pp,
            "num_stages": len(plan.stages),
            "num_microbatches": plan.training.num_microbatches,
        },
    }
