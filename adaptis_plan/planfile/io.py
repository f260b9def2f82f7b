"""Plan IO: read (with validation), write (atomic), and convert between the file and the
internal `Layout` / `Programs`.

Data flow: search / classic builders + simulator -> `make_plan` -> `write_plan`;
`read_plan` -> simulate / export / run. Every file adaptis writes (plans, traces, SVGs,
exports, profiles) goes through `_write_atomic`: a temporary file in the target's folder, then
a rename, and only ever over a regular file (`check_output_path`). Files are read by the one
boundary reader, `spec.read`. Imports the spec, core and the judge's semantics; never a solver
or torch.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from adaptis_plan.core import Action, Layout, Programs
from adaptis_plan.errors import InputError, located
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import (
    PlanAction,
    PlanDevice,
    PlanFile,
    PlanHardwareRef,
    PlanModelRef,
    PlanStage,
    Predicted,
)
from adaptis_plan.spec.read import path_kind, read_boundary_file
from adaptis_plan.spec.training import TrainingConfig

_PLAN_FIX = "pass the JSON file `adaptis plan -o` wrote"


def read_plan(path: str | Path) -> PlanFile:
    """Read and validate a plan file (structure, index bounds and action orders)."""
    p = Path(path)
    if path_kind(p) is None:
        raise InputError(f"{p}: no such plan file; write one with `adaptis plan ... -o {p.name}`")
    plan = read_boundary_file(p, PlanFile, "plan file", fix=_PLAN_FIX)
    from adaptis_plan.judge.semantics import check_programs

    try:
        check_programs(plan_layout(plan), plan_programs(plan), plan.training.num_microbatches)
    except InputError as e:
        raise located(e, p) from None
    return plan


def write_plan(plan: PlanFile, path: str | Path) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    write_json_atomic(plan.model_dump(mode="json", exclude_none=True), path)


def write_json_atomic(data: object, path: str | Path) -> None:
    """Write `data` as JSON atomically (see `write_text_atomic`)."""

    def dump(f) -> None:
        json.dump(data, f, indent=1)
        f.write("\n")

    _write_atomic(path, dump)


def write_text_atomic(text: str, path: str | Path) -> None:
    """Write `text` atomically: a temporary file in the same folder, then rename; never a partial file."""
    _write_atomic(path, lambda f: f.write(text))


def check_output_path(path: str | Path, flag: str = "the output") -> Path:
    """The regular file `path` will be written as (symbolic links followed), or an InputError saying why not.

    Called before any work starts (so a bad `-o` costs nothing) and again right before the
    rename: only a regular file, or nothing, may be replaced. A device node, a FIFO, a socket or
    a folder is refused and left as it is.
    """
    text = str(path)
    if not text.strip():
        raise InputError(f"{flag} {text!r}: empty path; give a file name, e.g. {flag} plan.json")
    if "\0" in text:
        raise InputError(f"{flag} {text!r}: a file name cannot contain a NUL byte; choose another output path")
    target = Path(os.path.realpath(text))
    kind = path_kind(target)
    if kind is not None and kind != "file":
        raise InputError(
            f"{text}: cannot write here: {kind}, not a regular file (adaptis replaces nothing but regular files);"
            f" choose a file path for {flag}"
        )
    if kind is None:
        folder = target.parent
        while path_kind(folder) is None and folder != folder.parent:
            folder = folder.parent
        if path_kind(folder) != "a folder":
            raise InputError(f"{text}: cannot write here ({folder} is not a folder); choose another output path")
    return target


def _write_atomic(path: str | Path, write) -> None:
    target = check_output_path(path)
    p = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as e:
        raise InputError(f"{p}: cannot write here ({e.strerror or e}); choose another output path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        # mkstemp makes the file 0600; give it the mode a plain open() would (umask applied)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        check_output_path(path)  # still nothing but a regular file there, right before the rename
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{p}: cannot write here ({e.strerror or e}); choose another output path") from None
    except BaseException:  # an InputError from the re-check, Ctrl-C, a bug: never leave the temporary file
        Path(tmp).unlink(missing_ok=True)
        raise


def plan_layout(plan: PlanFile) -> Layout:
    bounds = tuple([s.layers[0] for s in plan.stages] + [plan.stages[-1].layers[1]])
    return Layout(bounds=bounds, stage_device=tuple(s.device for s in plan.stages), num_devices=plan.training.pp)


def plan_programs(plan: PlanFile) -> Programs:
    return [[Action(a.stage, a.op, a.mb) for a in dev.actions] for dev in plan.devices]


def make_plan(
    *,
    strategy: str,
    model: ModelSpec,
    hardware: HardwareProfile,
    training: TrainingConfig,
    layout: Layout,
    programs: Programs,
    result,  # simulate.SimResult
    search: dict | None = None,
) -> PlanFile:
    """Assemble a plan file from a layout, orders and the simulator's verdict on them."""
    devices = []
    for d, prog in enumerate(programs):
        acts = [
            PlanAction(op=a.op, stage=a.stage, mb=a.mb, start_s=round(t0, 9), end_s=round(t1, 9))
            for a, (t0, t1) in zip(prog, result.times[d], strict=True)
        ]
        devices.append(PlanDevice(device=d, actions=acts))
    stages = [
        PlanStage(stage=s, device=layout.stage_device[s], layers=(layout.bounds[s], layout.bounds[s + 1]))
        for s in range(layout.num_stages)
    ]
    predicted = Predicted(
        step_time_s=result.step_time_s,
        bubble_ratio=float(result.bubble_ratio),
        bubble_ratio_per_device=[float(x) for x in result.bubble_ratio_per_device],
        peak_memory_bytes=[float(x) for x in result.peak_memory_bytes],
        lower_bound_s=float(result.lower_bound_s),
    )
    from adaptis_plan import __version__

    return PlanFile(
        strategy=strategy,
        model=PlanModelRef(
            name=model.name,
            fingerprint=model.fingerprint(),
            num_layers=model.num_layers,
            head_chunks=model.num_head_chunks,
        ),
        hardware=PlanHardwareRef(name=hardware.name, fingerprint=hardware.fingerprint()),
        training=training,
        stages=stages,
        devices=devices,
        predicted=predicted,
        search=search,
        created_by=f"adaptis {__version__}",
    )


def check_model_matches(plan: PlanFile, model: ModelSpec, plan_path: object) -> None:
    """Refuse a plan made for another model."""
    fp = model.fingerprint()
    if plan.model.fingerprint != fp:
        raise InputError(
            f"{plan_path}: model.fingerprint: the plan was made for model '{plan.model.name}'"
            f" ({plan.model.fingerprint[:12]}), not '{model.name}' ({fp[:12]}); re-plan with"
            f" `adaptis plan --model {model.name} ...` or pass --model {plan.model.name}"
        )
