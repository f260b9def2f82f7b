"""Terminal reports for `adaptis plan` and `adaptis simulate` (rich).

Data flow: `app.plan.PlanOutcome` / `app.simulate.SimOutcome` -> tables and a timeline on the
console. Presentation only: every number comes from the simulator's result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console
from rich.table import Table

from adaptis_plan.core import ALL_COMPONENTS, Layout
from adaptis_plan.spec.hardware import usable_memory_text
from adaptis_plan.text import MAX_SHOWN, shown
from adaptis_plan.units import fmt_bytes, fmt_time

if TYPE_CHECKING:
    from adaptis_plan.judge.simulate import SimResult


def expected_line(r: SimResult) -> str | None:
    """The expected step time under the profile's measured variation (`judge.simulate.expected_step`), if any."""
    if r.expected_step_time_s is None:
        return None
    return (
        f"expected step, each action's time varying as the profile measured (`time_spread`):"
        f" {_ms(r.expected_step_time_s)} ms ({r.expected_step_time_s / r.step_time_s - 1:+.1%})."
    )


def _gib(n: float) -> str:
    return fmt_bytes(n, "GiB", suffix=False)


def _share(x: float) -> str:
    """x as a percentage with one decimal; a rounding-sized negative is 0.0%, not "-0.0%"."""
    return f"{0.0 if -0.0005 < x < 0 else x:.1%}"


def _ms(s: float) -> str:
    return fmt_time(s, "ms", suffix=False)


def _peak(r) -> str:
    """Max peak memory over devices, marked when a device runs out of memory."""
    peak = _gib(max(r.peak_memory_bytes))
    return peak if r.fits_memory else f"[red]{peak} OOM[/]"


def layout_glance(layout: Layout, layer_kinds: list[str] | None = None) -> list[str]:
    """One line per device: its stages with their layer ranges."""
    lines = []
    for d in range(layout.num_devices):
        parts = []
        for s in layout.stages_of(d):
            lo, hi = layout.bounds[s], layout.bounds[s + 1]
            tag = ""
            if layer_kinds:
                if layer_kinds[lo] == "embedding":
                    tag += "E+"
                if layer_kinds[hi - 1] == "head":
                    tag += "+H"
            parts.append(f"s{s}[{lo}:{hi}) {hi - lo}L{(' ' + tag) if tag else ''}")
        lines.append(f"device {d}: " + "  ".join(parts))
    return lines


def print_plan_report(console: Console, outcome, output_path: str) -> None:
    r = outcome.result
    plan = outcome.plan
    t = Table(
        title=f"{shown(outcome.model.name)}: pp {plan.training.pp}, {plan.training.num_microbatches} micro-batches,"
        f" seq {plan.training.seq_len}, {shown(plan.hardware.name)}"
        + "".join(f", {s}" for s in plan.training.runtime_settings())
    )
    t.add_column("strategy")
    t.add_column("step ms", justify="right")
    t.add_column("speed-up", justify="right")
    t.add_column("bubble", justify="right")
    t.add_column("peak GiB (max device)", justify="right")
    classic = plan.strategy != "adaptive"
    rows = sorted(outcome.baselines.items(), key=lambda kv: (not kv[1].fits_memory, kv[1].step_time_s))
    if classic:  # the plan itself is the last row
        rows = [(n, b) for n, b in rows if n != outcome.search_info.get("source")]
    # a balanced partition that is the uniform one is the same plan (`classic_baselines`): one row
    same = {n for n, b in rows if n.endswith("/balanced") and outcome.baselines.get(n[: -len("/balanced")]) is b}
    rows = [(n, b) for n, b in rows if n not in same]
    for name, b in rows:
        t.add_row(
            shown(name), _ms(b.step_time_s), f"{b.step_time_s / r.step_time_s:.2f}x", f"{b.bubble_ratio:.1%}", _peak(b)
        )
    partition = outcome.search_info.get("partition", "uniform") if classic else "uniform"
    label = plan.strategy if partition == "uniform" else f"{plan.strategy}/{partition}"  # as the baselines' names
    t.add_row(
        f"[bold]{shown(label)}[/]",
        f"[bold]{_ms(r.step_time_s)}[/]",
        "[bold]1.00x[/]",
        f"{r.bubble_ratio:.1%}",
        _peak(r),
        end_section=True,
    )
    console.print(t)
    if same:
        console.print("(a strategy whose balanced partition is its uniform one here has one row)")
    kinds = [layer.kind for layer in outcome.model.layers]
    console.print("[bold]partition and placement[/]")
    for line in layout_glance(outcome.layout, kinds):
        console.print("  " + line)
    gap = r.step_time_s / r.lower_bound_s - 1 if r.lower_bound_s > 0 else float("nan")
    console.print(
        f"lower bound {_ms(r.lower_bound_s)} ms; this plan is {_share(gap)} above it."
        f" planned in {outcome.plan_time_s:.2f} s."
    )
    if (expected := expected_line(r)) is not None:
        console.print(expected)
    console.print(f"planned with usable memory {usable_memory_text(plan.hardware.profile)}.")
    if outcome.unrestricted is not None:
        u = outcome.unrestricted
        console.print(
            f"target {shown(plan.target)}: restricted to what it can run; the best unrestricted plan takes"
            f" {_ms(u.step_time_s)} ms, so the restriction costs {_share(r.step_time_s / u.step_time_s - 1)}."
        )
    for line in recompute_lines(outcome):
        console.print(line)
    if classic:
        for line in classic_lines(outcome):
            console.print(line)
    else:
        for line in why_lines(outcome):
            console.print(line)
        for line in search_lines(outcome.search_info, r.step_time_s):
            console.print(line)
    if outcome.cluster is not None:
        print_configurations(console, outcome.cluster)
    from adaptis_plan.render.terminal import timeline

    console.print(timeline(r, outcome.programs, outcome.layout, width=min(console.width - 12, 110)))
    console.print(f"wrote {shown(output_path, 4096)}")


#: configurations listed in the report (the `--json` list has every legal one)
TOP_CONFIGURATIONS = 5


def _dims(c: dict) -> str:
    return (
        f"tp {c['tp']} pp {c['pp']} dp {c['dp']} cp {c['cp']} ep {c['ep']} zero {c['zero']}"
        f" mbs {c['micro_batch_size']} x {c['num_microbatches']}"
    )


def step_parts(step: dict) -> str:
    """A whole step (`TrainingStep.summary()`) and what it is made of: '6,273 ms (6,201 ms pipeline, ...)'."""
    return (
        f"{_ms(step['training_step_time_s'])} ms ({_ms(step['pipeline_step_time_s'])} ms pipeline,"
        f" {_ms(step['grad_sync_exposed_s'])} ms exposed gradient sync,"
        f" {_ms(step['param_gather_exposed_s'])} ms exposed parameter gather, {_ms(step['optimizer_s'])} ms optimizer)"
    )


def print_configurations(console: Console, cluster: dict) -> None:
    """The whole configuration (`plan --gpus`): the winner, the runners-up, why the runner-up lost,
    what was rejected and why, the configuration-level bound."""
    rows = cluster["configurations"]
    ranked = [r for r in rows if r.get("step_time_s") is not None]
    best = cluster["configuration"]
    step = cluster["training_step"]
    console.print(
        f"[bold]configuration[/] on {cluster['gpus']:,} GPUs: {_dims(best)}, {shown(best['strategy'])},"
        f" recompute {shown(best['recompute'])}: step {step_parts(step)},"
        f" {cluster['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, MFU {cluster['mfu']:.1%}"
    )
    t = Table(title="best configurations (whole step)")
    for col in ("configuration", "status", "schedule", "recompute", "step ms", "bound ms"):
        t.add_column(col, justify="right" if col.endswith("ms") else "left")
    for r in ranked[:TOP_CONFIGURATIONS]:
        t.add_row(
            _dims(r["configuration"]), r["status"], shown(r.get("strategy", "-")), shown(r.get("recompute", "-")),
            _ms(r["step_time_s"]), _ms(r["lower_bound_s"]),
        )  # fmt: skip
    console.print(t)
    if len(ranked) > 1:
        a, b = ranked[0], ranked[1]
        console.print(
            f"runner-up {_dims(b['configuration'])} ({b['status']}) takes {b['step_time_s'] / a['step_time_s'] - 1:.1%}"
            " longer: " + _why_lost(a["configuration"], b["configuration"])
        )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    console.print(
        f"{len(rows):,} legal configurations: " + ", ".join(f"{n:,} {k.replace('_', ' ')}" for k, n in counts.items())
    )
    oom = sorted((r for r in rows if r["status"] == "out_of_memory"), key=lambda r: r.get("overflow_bytes", 0.0))
    if oom:
        r = oom[0]
        console.print(f"closest out of memory: {_dims(r['configuration'])}: {shown(r.get('reason', ''), 300)}")
    co = cluster.get("co_design")
    if co is not None:
        alone = co["classic_only"]
        console.print(
            f"co-design: here the plan is {co['gain_over_classic']:.1%} faster than the best classic schedule"
            f" ({shown(co['classic_strategy'])}); classic schedules alone would choose {_dims(alone['configuration'])},"
            f" {shown(alone['configuration']['strategy'])}, at {alone['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU"
            f" (this plan {co['gain_over_classic_only']:+.1%}"
            + ("; the co-designed pipeline chose the configuration)" if co["decides_configuration"] else ")")
        )
    gap = cluster.get("configuration_gap")
    console.print(
        f"configuration lower bound {_ms(cluster['configuration_lower_bound_s'])} ms (the least over every legal"
        f" configuration that may fit); this plan is {_share(gap)} above it."
        if gap is not None
        else "no configuration bound"
    )


def _why_lost(win: dict, other: dict) -> str:
    """The dimensions in which the runner-up differs from the winner."""
    diff = [f"{k} {other[k]} (not {win[k]})" for k in win if k in other and other[k] != win[k]]
    return ", ".join(diff) if diff else "the same dimensions, a slower schedule"


def why_lines(outcome) -> list[str]:
    """One or two lines on why the plan wins: which device bottlenecked the best classic plan, what moved."""
    r = outcome.result
    feasible = {k: v for k, v in outcome.baselines.items() if v.fits_memory}
    if not feasible:
        return ["no classic strategy fits memory on this input; this plan does."]
    name, b = min(feasible.items(), key=lambda kv: kv[1].step_time_s)
    components = outcome.search_info.get("components")
    if components is not None and set(components) != set(ALL_COMPONENTS) and b.step_time_s < r.step_time_s:
        return [
            f"the search was restricted to {', '.join(components)} (--search), where classic plans are not"
            f" candidates: the best classic plan ({shown(name)}, {_ms(b.step_time_s)} ms) is"
            f" {r.step_time_s / b.step_time_s - 1:.1%} faster than this plan."
        ]
    if b.step_time_s <= r.step_time_s * (1 + 1e-9):
        return [f"the best classic plan ({shown(name)}) is already as good as anything found; it is kept."]
    busy_b = np.array(b.busy_s)
    hot = int(np.argmax(busy_b))
    busy_a = np.array(r.busy_s)
    spread_b = busy_b.max() / max(busy_b.mean(), 1e-12) - 1
    spread_a = busy_a.max() / max(busy_a.mean(), 1e-12) - 1
    return [
        f"why: under {shown(name)} device {hot} is the bottleneck ({_ms(busy_b[hot])} ms busy, {spread_b:.0%} above the"
        f" mean device); this plan evens work to {spread_a:.0%} above the mean and cuts the mean bubble from"
        f" {b.bubble_ratio:.1%} to {r.bubble_ratio:.1%} ({b.step_time_s / r.step_time_s:.2f}x faster).",
        f"found by: {shown(outcome.search_info.get('source', outcome.plan.strategy))}",
    ]


def classic_lines(outcome) -> list[str]:
    """What a classic plan is: the one asked for, or (`search.fallback`, whole configuration) the screened
    classic plan an adaptive request kept because its own search found nothing faster."""
    info = outcome.search_info
    what = f"classic {shown(outcome.plan.strategy)} plan ({shown(info.get('partition', 'uniform'))} partition)"
    fallback = info.get("fallback")
    if fallback is None:
        return [f"{what}; `--strategy adaptive` searches partition, placement and schedule for this input."]
    found = fallback.get("adaptive_step_time_s")
    searched = (
        "found no plan that fits" if found is None else f"found nothing faster (its best whole step: {_ms(found)} ms)"
    )
    return [f"{what}: the adaptive search at this configuration {searched}; the screened classic plan is kept."]


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    out: list[str] = []
    for i in ids:
        if out and int(out[-1].split("-")[-1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def recompute_lines(outcome) -> list[str]:
    """Where the plan recomputes, what that costs in compute and (auto) what it bought against the
    best plan found without recomputation; nothing when none was asked for."""
    info = (outcome.search_info or {}).get("recompute") or {}
    requested = info.get("requested", "none")
    stages = info.get("stages") or {}
    where = [f"{mode} on stage{'s' if len(ids) > 1 else ''} {_ranges(ids)}" for mode, ids in stages.items() if ids]
    if not where:
        if requested == "auto":
            return [f"recomputation (auto): none; {info.get('reason', 'no candidate was faster')}."]
        return [] if requested == "none" else [f"recomputation ({requested}): no stage has a block to recompute."]
    lines = [
        f"recomputation ({requested}): {'; '.join(where)}; it adds {_ms(info['extra_compute_s'])} ms of compute"
        f" per step over all devices ({info['extra_compute_share']:.1%} of the step's work)."
    ]
    without = info.get("without")
    if requested == "auto" and without:
        r = outcome.result
        lines.append(
            f"  against the best plan without recomputation ({_ms(without['step_time_s'])} ms, bubble"
            f" {without['bubble_ratio']:.1%}{'' if without['fits_memory'] else ', out of memory'}): bubble"
            f" {r.bubble_ratio:.1%}, {without['step_time_s'] / r.step_time_s:.2f}x; chosen: {info.get('chosen')};"
            f" lower bound {_ms(r.lower_bound_s)} ms with this recomputation, {_ms(without['lower_bound_s'])} ms"
            " without."
        )
    return lines


def search_lines(info: dict, step_s: float) -> list[str]:
    """The search's verdict on its own plan: CP-SAT's status and proven bound for the plan's partition
    and placement, the gap to it, and whether the wall-clock limit cut the search short."""
    lines = []
    order = info.get("solver", {}).get("order") or {}
    status = order.get("status")
    if status == "BOUND_ONLY" and order.get("bound_s") is not None:
        lines.append(
            f"order: no CP-SAT window fits the budget on a program this long; the device bound for this"
            f" partition and placement is {_ms(order['bound_s'])} ms, gap {order.get('gap', 0.0):.2%} to this plan."
        )
    elif status and status != "NOT_RUN" and order.get("bound_s") is not None:
        what = {
            "OPTIMAL": "proven optimal",
            "FEASIBLE": "not proven optimal",
            "WINDOWS_ONLY": "improved window by window (too big for one model)",
        }.get(status, status)
        lines.append(
            f"order: CP-SAT {status} ({what}) for this partition and placement; best bound"
            f" {_ms(order['bound_s'])} ms, gap {order.get('gap', 0.0):.2%} to this plan."
        )
    elif status == "NOT_RUN":
        lines.append("order: CP-SAT did not run on this plan's partition and placement (budget or a classic plan).")
    if info.get("aborted"):
        lines.append(
            f"[yellow]note:[/] --time-limit cut the search short (during {info.get('abort_phase') or 'the search'}):"
            " this machine ran the search's work slower than the limit allows, so the plan is the best found by"
            " then and can differ from run to run. --no-hard-stop lets the same search finish (the same plan"
            " under any load); a longer --time-limit buys a larger search."
        )
    return lines


def print_simulation_report(
    console: Console, sim, width: int | None = None, trace_path: str | None = None, svg_path: str | None = None
) -> None:
    r = sim.result
    console.print(f"[bold]{shown(sim.title, 4 * MAX_SHOWN)}[/]")
    t = Table()
    t.add_column("device", justify="right")
    t.add_column("busy ms", justify="right")
    t.add_column("bubble", justify="right")
    t.add_column("peak GiB", justify="right")
    t.add_column("limit GiB", justify="right")
    for d in range(r.num_devices):
        limit = r.mem_limit_bytes[d] if r.mem_limit_bytes else float("nan")
        t.add_row(
            str(d), _ms(r.busy_s[d]), f"{r.bubble_ratio_per_device[d]:.1%}", _gib(r.peak_memory_bytes[d]), _gib(limit)
        )
    console.print(t)
    gap = r.step_time_s / r.lower_bound_s - 1 if r.lower_bound_s > 0 else float("nan")
    if sim.cost_source:
        console.print(f"costs: {shown(sim.cost_source, 4096)}")
    console.print(
        f"step {_ms(r.step_time_s)} ms, mean bubble {r.bubble_ratio:.1%}, lower bound"
        f" {_ms(r.lower_bound_s)} ms ({_share(gap)} above), fits memory: {r.fits_memory}"
    )
    if (line := expected_line(r)) is not None:
        console.print(line)
    t = sim.plan.training
    if sim.step is not None and t.tp * t.dp * t.cp * t.ep > 1:  # a replica of a whole configuration
        console.print(
            f"whole step, tp {t.tp} pp {t.pp} dp {t.dp} cp {t.cp} ep {t.ep} zero {t.zero}:"
            f" {step_parts(sim.step.summary())}"
        )
    if sim.stored_differs:
        console.print(
            f"[yellow]note:[/] the plan file says {_ms(sim.plan.predicted.step_time_s)} ms; re-simulated"
            f" {_ms(r.step_time_s)} ms (costs or cost model differ from when it was planned)"
        )
    from adaptis_plan.render.terminal import timeline

    console.print(timeline(r, sim.programs, sim.layout, width=width or min(console.width - 12, 110)))
    for label, path in (("trace", trace_path), ("svg", svg_path)):
        if path:
            console.print(f"wrote {label}: {shown(path, 4096)}")
