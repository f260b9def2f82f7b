"""Plan IO: read (with validation), write (atomic), and convert between the file and the
internal `Layout` / `Programs`.

Data flow: search / classic builders + simulator -> `make_plan` (embeds the model spec, the
hardware profile, the training settings and the costs as planned) -> `write_plan`;
`read_plan` -> simulate / export / run. Every file adaptis writes (plans, traces, SVGs,
exports, profiles) goes through `_write_atomic`: a temporary file in the target's folder, then
a rename, and only ever over a regular file (`check_output_path`). Files are read by the one
boundary reader, `spec.read`. Imports the spec, core, errors and the judge's program
semantics; never a solver or torch.

Files are written as JSON with one level of indentation per object, every list of plain values
on one line and every action object on a line of its own: readable with any JSON tool, and a
500-layer model with 512 micro-batches at PP 64 stays a few MB and loads in under a second.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from adaptis_plan.core import Action, CostTable, Layout, Programs
from adaptis_plan.errors import InputError, located
from adaptis_plan.spec.cost_profile import CostProfile
from adaptis_plan.spec.hardware import HardwareProfile
from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import (
    PLAN_SCHEMA_VERSION,
    PlanAction,
    PlanCosts,
    PlanDevice,
    PlanFile,
    PlanHardwareRef,
    PlanModelRef,
    PlanStage,
    PlanStageCosts,
    Predicted,
)
from adaptis_plan.spec.read import path_kind, read_data, short, validate
from adaptis_plan.spec.training import TrainingConfig

_PLAN_FIX = "pass the JSON file `adaptis plan -o` wrote"


def _check_version(data: object, p: Path) -> None:
    """One clear line for a plan of another format version (before any field is looked at)."""
    if not isinstance(data, dict):
        return
    replan = "re-plan with this version (`adaptis plan ... -o FILE`)"
    if "schema_version" not in data:
        raise InputError(f"{p}: schema_version: field required: not an adaptis plan file, or an edited one; {replan}")
    version = data["schema_version"]
    if version == PLAN_SCHEMA_VERSION:
        return
    if isinstance(version, int) and not isinstance(version, bool) and 1 <= version < PLAN_SCHEMA_VERSION:
        raise InputError(
            f"{p}: schema_version = {version}: written by an older adaptis, without the model, hardware and costs"
            f" it was planned with (this version reads {PLAN_SCHEMA_VERSION}); {replan}"
        )
    if isinstance(version, int) and not isinstance(version, bool) and version > PLAN_SCHEMA_VERSION:
        raise InputError(
            f"{p}: schema_version = {version}: written by a newer adaptis (this version reads"
            f" {PLAN_SCHEMA_VERSION}); upgrade adaptis or {replan}"
        )
    # shown by `short`: a YAML plan's version may be a date, a set or bytes, which JSON cannot write
    raise InputError(f"{p}: schema_version = {short(version)}: must be {PLAN_SCHEMA_VERSION}; {replan}")


def _check_embedded(plan: PlanFile, p: Path) -> None:
    """The embedded model spec and hardware profile are the ones the fingerprints name."""
    spec = plan.model.spec
    if spec.fingerprint() != plan.model.fingerprint:
        raise InputError(
            f"{p}: model.spec does not match model.fingerprint ({plan.model.fingerprint[:12]}): the embedded model"
            " was edited; re-plan with `adaptis plan`"
        )
    if spec.num_layers != plan.model.num_layers or spec.num_head_chunks != plan.model.head_chunks:
        raise InputError(
            f"{p}: model.spec has {spec.num_layers} layers with the head in {spec.num_head_chunks} chunk(s), but"
            f" model.num_layers = {plan.model.num_layers} and model.head_chunks = {plan.model.head_chunks};"
            " re-plan with `adaptis plan`"
        )
    if plan.hardware.profile.fingerprint() != plan.hardware.fingerprint:
        raise InputError(
            f"{p}: hardware.profile does not match hardware.fingerprint ({plan.hardware.fingerprint[:12]}): the"
            " embedded profile was edited; re-plan with `adaptis plan`"
        )


def read_plan(path: str | Path) -> PlanFile:
    """Read and validate a plan file (format version, structure, index bounds, embedded inputs, action orders)."""
    p = Path(path)
    if path_kind(p) is None:
        raise InputError(f"{p}: no such plan file; write one with `adaptis plan ... -o {p.name}`")
    # a plan holds up to hundreds of thousands of small objects, none of them in a reference cycle:
    # the cycle collector would rescan them all again and again while they are built
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _read_plan(p)
    finally:
        if enabled:
            gc.enable()


def _read_plan(p: Path) -> PlanFile:
    data = read_data(p, "plan file", fix=_PLAN_FIX)
    _check_version(data, p)
    plan = validate(data, PlanFile, p, "plan file")
    _check_embedded(plan, p)
    from adaptis_plan.judge.semantics import check_programs

    try:
        check_programs(plan_layout(plan), plan_programs(plan), plan.training.num_microbatches)
    except InputError as e:
        raise located(e, p) from None
    return plan


def write_plan(plan: PlanFile, path: str | Path) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    write_json_atomic(plan.model_dump(mode="json", exclude_none=True), path)


# objects with at most this many plain values are written on one line (an action has five)
_FLAT_KEYS = 5
# `json.dumps(value, separators=...)` builds a new encoder per call, and so does `JSONEncoder.encode`;
# a plan writes one line per action, so the one-line encoder is made once (the C one where Python has it)
_ONE_LINE_ENCODER = json.JSONEncoder(separators=(", ", ": "))
_ONE_LINE: Callable[[object], str] = _ONE_LINE_ENCODER.encode
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
if _C_MAKE_ENCODER is not None:
    _C_ONE_LINE = _C_MAKE_ENCODER(
        None, _ONE_LINE_ENCODER.default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )

    def _c_one_line(value: object, _enc: Callable[[object, int], tuple[str, ...]] = _C_ONE_LINE) -> str:
        return "".join(_enc(value, 0))

    _ONE_LINE = _c_one_line


# value types that are never containers (checked by type first: an action's five values)
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _plain_values(value: dict) -> bool:
    """Whether no value of `value` is a dict, list or tuple."""
    return set(map(type, value.values())) <= _PLAIN or not any(
        isinstance(v, dict | list | tuple) for v in value.values()
    )


def dumps(data: object) -> str:
    """JSON text: objects indented one space per level; lists of plain values, and small objects of
    plain values (a plan's actions), on one line each."""
    parts: list[str] = []
    _dump(data, 0, parts)
    return "".join(parts)


def _dump(value: object, level: int, out: list[str]) -> None:
    if isinstance(value, dict) and 0 < len(value) <= _FLAT_KEYS and _plain_values(value):
        out.append(_ONE_LINE(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        pad = "\n" + " " * (level + 1)
        out.append("{")
        for k, (key, item) in enumerate(value.items()):
            out.append(("," if k else "") + pad + json.dumps(str(key)) + ": ")
            _dump(item, level + 1, out)
        out.append("\n" + " " * level + "}")
    elif isinstance(value, list | tuple) and any(isinstance(v, dict | list | tuple) for v in value):
        pad = "\n" + " " * (level + 1)
        out.append("[")
        for k, item in enumerate(value):
            out.append(("," if k else "") + pad)
            _dump(item, level + 1, out)
        out.append("\n" + " " * level + "]")
    else:
        out.append(_ONE_LINE(value))


def write_json_atomic(data: object, path: str | Path) -> None:
    """Write `data` as JSON atomically (see `write_text_atomic`); lists of plain values on one line."""

    def dump(f) -> None:
        f.write(dumps(data))
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
    new = tuple.__new__  # Action(stage, op, mb) without the per-call overhead: plans hold many actions
    return [[new(Action, (a[1], a[0], a[2])) for a in dev.actions] for dev in plan.devices]


def plan_costs(layout: Layout, costs: CostTable, profile: CostProfile | None, source: str | None = None) -> PlanCosts:
    """The `costs` section: what every action of every stage costs on `costs` (as planned)."""
    from adaptis_plan.judge.semantics import stage_costs

    sc = stage_costs(layout, costs)
    stages = [
        PlanStageCosts(
            stage=s,
            f_s=float(sc.f[s]),
            i_s=float(sc.i[s]),
            w_s=float(sc.w[s]),
            w_hot_s=None if sc.w_hot is None else float(sc.w_hot[s]),
            b_s=float(sc.b[s]),
            act_bytes=float(sc.act[s]),
            act_w_bytes=float(sc.act_w[s]),
            recv_act_s=float(sc.p2p_act[s]),
            send_grad_s=float(sc.p2p_grad[s]),
        )
        for s in range(layout.num_stages)
    ]
    return PlanCosts(
        source=source or ("measured" if profile is not None else "analytic"),
        profile=profile,
        action_overhead_s=float(costs.action_overhead_s),
        static_bytes=[float(x) for x in sc.static],
        mem_limit_bytes=[float(x) for x in costs.mem_limit_bytes[: layout.num_devices]],
        stages=stages,
    )


def plan_file_search_info(info: object) -> object:
    """The search record without its wall times: what the plan file stores, so that the same
    inputs give a byte-identical file under any machine load (`--json` keeps the wall times)."""
    if isinstance(info, dict):
        return {k: plan_file_search_info(v) for k, v in info.items() if k != "wall_s"}
    if isinstance(info, list):
        return [plan_file_search_info(v) for v in info]
    return info


def make_plan(
    *,
    strategy: str,
    model: ModelSpec,
    hardware: HardwareProfile,
    training: TrainingConfig,
    layout: Layout,
    programs: Programs,
    result,  # simulate.SimResult
    costs: CostTable,
    profile: CostProfile | None = None,
    cost_source: str | None = None,
    stage_recompute: Sequence[str] | None = None,
    search: dict | None = None,
    target: str = "adaptis",
) -> PlanFile:
    """Assemble a self-contained plan file from a layout, orders, the inputs they were made from and the
    simulator's verdict on them."""
    devices = []
    for d, prog in enumerate(programs):
        acts = [
            PlanAction(a.op, a.stage, a.mb, round(t0, 9), round(t1, 9))
            for a, (t0, t1) in zip(prog, result.times[d], strict=True)
        ]
        devices.append(PlanDevice(device=d, actions=acts))
    # each stage's recomputation, as `costs` charged it (none when not given)
    modes = list(stage_recompute) if stage_recompute is not None else ["none"] * layout.num_stages
    stages = [
        PlanStage(
            stage=s, device=layout.stage_device[s], layers=(layout.bounds[s], layout.bounds[s + 1]), recompute=modes[s]
        )
        for s in range(layout.num_stages)
    ]
    predicted = Predicted(
        step_time_s=result.step_time_s,
        expected_step_time_s=result.expected_step_time_s,
        bubble_ratio=float(result.bubble_ratio),
        bubble_ratio_per_device=[float(x) for x in result.bubble_ratio_per_device],
        peak_memory_bytes=[float(x) for x in result.peak_memory_bytes],
        lower_bound_s=float(result.lower_bound_s),
    )
    from adaptis_plan import __version__

    return PlanFile(
        schema_version=PLAN_SCHEMA_VERSION,
        strategy=strategy,
        target=target,
        model=PlanModelRef(
            name=model.name,
            fingerprint=model.fingerprint(),
            num_layers=model.num_layers,
            head_chunks=model.num_head_chunks,
            spec=model,
        ),
        hardware=PlanHardwareRef(name=hardware.name, fingerprint=hardware.fingerprint(), profile=hardware),
        training=training,
        costs=plan_costs(layout, costs, profile, cost_source),
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
            f" `adaptis plan --model {model.name} ...` or leave --model out to use the plan's own model"
        )
