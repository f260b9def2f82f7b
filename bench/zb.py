"""Against the zero-bubble schedulers on their own abstract pipelines: ZB-H1/H2-style and ZB-V-style
references, the adaptive search, the lower bound; plus the paper cases and the planning-time scale.

Run: `python -m bench.zb [--quick] [--parts grid,paper,plantime] [--workers 2] [--allow-dirty]` writes
the suite's record to bench/results/zb.json; `python -m bench.run` calls `run_suite` and renders the
record's three sections with `render`.

Data flow: abstract cost tables (`grid_costs`: p stages with F = I = W = 1 and comm 0.01, or
F = 1, I = 1.1, W = 0.9 and comm 0.05; memory 1x / 2x of 1F1B's peak) -> the reference
heuristic (`zb_reference`, the zero-bubble paper's rules, written here from its description) and
`adaptis_plan.search.generator.search_plan` on the same table -> `judge.simulate` times every
plan -> one record (`bench.records`) -> tables. Imports `adaptis_plan` and `bench`; no rich.

The reference (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 3.1 heuristic):
1. warm-up: as many forwards as memory allows before the first backward; a binary parameter
   decides whether a forward that would delay the first backward still runs;
2. steady state: one F and one B (our I) in turn; a W fills a gap longer than W; a gap shorter
   than W still gets a W if idling would make this device's cumulative bubble the largest of
   all (binary parameter); a W also runs when memory blocks the next forward;
3. a stage keeps at least one more forward done than the next stage; when it is ahead by more
   than one, a binary parameter lets it skip a forward turn for a ready backward;
4. the binary parameters are grid-searched (plus, to make the reference no weaker than the
   description, whether the F / B alternation is strict); the best simulated plan that fits
   memory is the reference;
5. when a stage runs out of forwards and backwards, it runs its remaining W's in order.
On a V placement (ZB-V style) the same rules run per device over its two chunks, forwards and
backwards oldest micro-batch first, later chunk first; torch's handcrafted ZBVZeroBubble order
(the zero-bubble authors' ZB-V) is a second ZB-V-style reference, the better of the two counts.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adaptis_plan.core import Action, CostTable, Layout, Programs, uniform_costs
from adaptis_plan.judge.semantics import stage_costs
from adaptis_plan.judge.simulate import SimResult, simulate

#: The two abstract cost sets: per sequential stage (F, I, W, comm between devices).
COST_SETS: dict[str, tuple[float, float, float, float]] = {
    "F=I=W=1, comm 0.01": (1.0, 1.0, 1.0, 0.01),
    "F=1 I=1.1 W=0.9, comm 0.05": (1.0, 1.1, 0.9, 0.05),
}
#: Activation memory a stage's forward allocates, and the part W still needs after I (F's units).
ACT_PER_STAGE = 1.0
ACT_W_SHARE = 0.5


def grid_costs(num_devices: int, cost_set: str, layers_per_stage: int = 1, mem_limit: float = math.inf) -> CostTable:
    """The abstract pipeline: `num_devices` sequential stages of `layers_per_stage` equal layers
    each (so a V or loop placement can cut it finer), P2P = the comm time between devices."""
    f, i, w, comm = COST_SETS[cost_set]
    k = layers_per_stage
    return uniform_costs(
        num_devices * k,
        num_devices,
        f=f / k,
        i=i / k,
        w=w / k,
        act=ACT_PER_STAGE / k,
        act_w=ACT_PER_STAGE * ACT_W_SHARE / k,
        mem_limit=mem_limit,
        latency=comm,
    )


def with_memory(costs: CostTable, limit: float) -> CostTable:
    return dataclasses.replace(costs, mem_limit_bytes=np.full(costs.num_devices, float(limit)))


def one_f_one_b_peak(num_devices: int, cost_set: str, num_microbatches: int) -> float:
    """1F1B's peak activation memory (max over devices) on the sequential pipeline: the 1x limit."""
    from adaptis_plan.schedules import get_spec

    costs = grid_costs(num_devices, cost_set)
    sd = tuple(range(num_devices))
    layout = Layout(tuple(range(num_devices + 1)), sd, num_devices)
    programs = get_spec("1F1B").build(sd, num_devices, num_microbatches)
    return max(simulate(layout, costs, programs, num_microbatches).peak_memory_bytes)


# ----------------------------------------------------------------------------- the reference heuristic


@dataclass(frozen=True)
class ZBParams:
    """The reference's binary parameters (module docstring, rules 1-4)."""

    extra_warmup_f: bool
    small_gap_w: bool
    skip_f: bool
    strict: bool

    @property
    def label(self) -> str:
        names = ("extra-F", "small-gap-W", "skip-F", "strict")
        flags = [n for n, on in zip(names, dataclasses.astuple(self), strict=True) if on]
        return "+".join(flags) or "plain"


ALL_PARAMS = tuple(ZBParams(*bits) for bits in itertools.product((False, True), repeat=4))


def zb_reference_programs(layout: Layout, costs: CostTable, num_microbatches: int, params: ZBParams) -> Programs | None:
    """The reference heuristic's per-device orders for one parameter setting; None if it deadlocks
    (memory full on every device that could move)."""
    st = stage_costs(layout, costs)
    num_stages, num_devices, m = layout.num_stages, layout.num_devices, num_microbatches
    last = num_stages - 1
    inf = math.inf
    f_dur, i_dur, w_dur = st.f.tolist(), st.i.tolist(), st.w.tolist()
    act, act_w = st.act.tolist(), st.act_w.tolist()
    p2p_act, p2p_grad = st.p2p_act.tolist(), st.p2p_grad.tolist()
    room = [float(costs.mem_limit_bytes[d]) - float(st.static[d]) + 1e-9 for d in range(num_devices)]
    dev_stages = [layout.stages_of(d) for d in range(num_devices)]
    f_end = [[inf] * m for _ in range(num_stages)]
    i_end = [[inf] * m for _ in range(num_stages)]
    n_f, n_i = [0] * num_stages, [0] * num_stages
    w_queue: list[deque] = [deque() for _ in range(num_devices)]
    mem = [0.0] * num_devices
    started_b = [False] * num_devices
    turn = ["F"] * num_devices
    idle = [0.0] * num_devices
    last_end = [0.0] * num_devices
    free_at = [0.0] * num_devices
    parked = [False] * num_devices
    remaining = [3 * m * len(dev_stages[d]) for d in range(num_devices)]
    programs: Programs = [[] for _ in range(num_devices)]
    heap = [(0.0, d) for d in range(num_devices)]
    heapq.heapify(heap)

    while heap:
        t, d = heapq.heappop(heap)
        if t != free_at[d] or not remaining[d]:
            continue
        stages = dev_stages[d]
        ready_b, next_b = None, inf
        for s in stages:
            k = n_i[s]
            if k >= m or f_end[s][k] == inf:
                continue
            r = f_end[s][k] if s == last else max(f_end[s][k], i_end[s + 1][k] + p2p_grad[s + 1])
            if r <= t:
                if ready_b is None or (k, -s) < (n_i[ready_b], -ready_b):
                    ready_b = s
            else:
                next_b = min(next_b, r)
        ready_f, next_f, mem_blocked = None, inf, False
        for s in stages:
            k = n_f[s]
            if k >= m:
                continue
            r = 0.0 if s == 0 else f_end[s - 1][k] + p2p_act[s]
            if r > t:
                next_f = min(next_f, r)
            elif mem[d] + act[s] > room[d]:
                mem_blocked = True
            elif ready_f is None or (k, -s) < (n_f[ready_f], -ready_f):
                ready_f = s
        f_left = any(n_f[s] < m for s in stages)
        b_left = any(n_i[s] < m for s in stages)

        def try_w(gap: float, d: int = d) -> bool:
            if not w_queue[d]:
                return False
            s0 = w_queue[d][0][0]
            return gap >= w_dur[s0] or (params.small_gap_w and idle[d] + gap > max(idle))

        op = ""
        if not f_left and not b_left:
            op = "W" if w_queue[d] else ""
        elif not started_b[d]:  # warm-up
            if ready_b is not None:
                op = "B"
            elif ready_f is not None:
                s = ready_f
                if params.extra_warmup_f or not (next_b < t + f_dur[s]):
                    op = "F"
        else:
            want = turn[d]
            if want == "F" and not f_left:
                want = "B"
            if want == "B" and not b_left:
                want = "F"
            # a stage keeps at least one more forward done than the next stage
            if want == "B" and ready_f is not None and ready_f < last and n_f[ready_f] <= n_f[ready_f + 1]:
                want = "F"
            elif (
                want == "F"
                and params.skip_f
                and ready_b is not None
                and all(n_f[s] - n_f[s + 1] > 1 for s in stages if s < last)
            ):
                want = "B"  # ahead by more than one: skip this forward for a ready backward (no bubble)
            if want == "F":
                if ready_f is not None:
                    op = "F"
                elif mem_blocked and w_queue[d]:
                    op = "W"  # recycle memory
                elif ready_b is not None and (mem_blocked or not params.strict):
                    op = "B"
                elif try_w(next_f - t):
                    op = "W"
            else:
                if ready_b is not None:
                    op = "B"
                elif ready_f is not None and not params.strict:
                    op = "F"
                elif try_w(next_b - t):
                    op = "W"
        if not op:
            nxt = min(next_b, next_f)
            free_at[d], parked[d] = nxt, True
            if nxt < inf:
                heapq.heappush(heap, (nxt, d))
            continue
        parked[d] = False
        idle[d] += t - last_end[d]
        target, arrival = -1, inf
        if op == "F":
            s = ready_f
            k = n_f[s]
            end = t + f_dur[s]
            f_end[s][k] = end
            n_f[s] += 1
            mem[d] += act[s]
            turn[d] = "B"
            if s < last:
                target, arrival = layout.stage_device[s + 1], end + p2p_act[s + 1]
            action = Action(s, "F", k)
        elif op == "B":
            s = ready_b
            k = n_i[s]
            end = t + i_dur[s]
            i_end[s][k] = end
            n_i[s] += 1
            mem[d] -= act[s] - act_w[s]
            w_queue[d].append((s, k))
            started_b[d] = True
            turn[d] = "F"
            if s > 0:
                target, arrival = layout.stage_device[s - 1], end + p2p_grad[s]
            action = Action(s, "I", k)
        else:
            s, k = w_queue[d].popleft()
            end = t + w_dur[s]
            mem[d] -= act_w[s]
            action = Action(s, "W", k)
        programs[d].append(action)
        remaining[d] -= 1
        free_at[d] = last_end[d] = end
        heapq.heappush(heap, (end, d))
        if target >= 0 and parked[target] and arrival < free_at[target]:
            free_at[target] = arrival
            heapq.heappush(heap, (arrival, target))
    if any(remaining):
        return None
    return programs


@dataclass(frozen=True)
class Reference:
    """The best reference plan: its name, parameters (or the classic builder) and simulated result."""

    name: str
    layout: Layout
    programs: Programs
    result: SimResult


def zb_reference(layout: Layout, costs: CostTable, num_microbatches: int, name: str) -> Reference | None:
    """The grid-searched reference on `layout`: the fastest memory-feasible plan over `ALL_PARAMS`."""
    best: Reference | None = None
    for params in ALL_PARAMS:
        programs = zb_reference_programs(layout, costs, num_microbatches, params)
        if programs is None:
            continue
        res = simulate(layout, costs, programs, num_microbatches)
        if res.fits_memory and (best is None or res.step_time_s < best.result.step_time_s - 1e-12):
            best = Reference(f"{name} ({params.label})", layout, programs, res)
    return best


def zbv_handcrafted(layout: Layout, costs: CostTable, num_microbatches: int) -> Reference | None:
    """torch's ZBVZeroBubble order (the zero-bubble authors' handcrafted ZB-V) on the V layout, if it fits memory."""
    from adaptis_plan.schedules import get_spec

    programs = get_spec("ZBVZeroBubble").build(layout.stage_device, layout.num_devices, num_microbatches)
    res = simulate(layout, costs, programs, num_microbatches)
    return Reference("ZBVZeroBubble (handcrafted ZB-V)", layout, programs, res) if res.fits_memory else None


def sequential_layout(num_devices: int, layers_per_stage: int = 1) -> Layout:
    k = layers_per_stage
    return Layout(tuple(range(0, num_devices * k + 1, k)), tuple(range(num_devices)), num_devices)


def v_layout(num_devices: int, layers_per_stage: int = 2) -> Layout:
    """2P chunks of `layers_per_stage // 2` layers: device d holds chunk d and chunk 2P-1-d."""
    half = layers_per_stage // 2
    sd = tuple(range(num_devices)) + tuple(reversed(range(num_devices)))
    return Layout(tuple(range(0, 2 * num_devices * half + 1, half)), sd, num_devices)


def best_reference(refs: Sequence[Reference | None]) -> Reference | None:
    found = [r for r in refs if r is not None]
    return min(found, key=lambda r: r.result.step_time_s) if found else None


# ----------------------------------------------------------------------------- the grid


#: The budget every benchmarked search runs with: what `adaptis plan --time-limit 5` does.
BENCH_TIME_LIMIT_S = 180.0
#: The wall-clock abort of a benchmarked search: generous, so a busy machine changes wall times only.
BENCH_ABORT_S = 600.0

GRID_P = (4, 8)
GRID_M = (8, 16, 32, 64)
GRID_MEM = (1, 2)
PLACEMENTS = ("sequential", "free")


@dataclass(frozen=True)
class GridCell:
    p: int
    m: int
    cost_set: str
    mem: int  # multiple of 1F1B's peak activation memory
    placement: str  # "sequential" or "free"

    @property
    def key(self) -> tuple:
        return (self.placement, self.cost_set, self.mem, self.p, self.m)


@dataclass(frozen=True)
class GridResult:
    cell: GridCell
    limit: float
    ref_name: str
    ref_step: float | None
    step: float
    fits: bool
    label: str
    origin: str
    lower_bound: float
    aborted: bool
    wall_s: float

    @property
    def ratio(self) -> float | None:
        return None if self.ref_step is None else self.step / self.ref_step

    @property
    def own(self) -> bool:
        """The plan's order comes from the search's own policies (not a classic strategy's order)."""
        return self.origin.startswith("list policy")


def grid_cells(quick: bool = False) -> list[GridCell]:
    ps, ms = ((4,), (8, 16)) if quick else (GRID_P, GRID_M)
    return [
        GridCell(p, m, cs, mem, pl) for pl in PLACEMENTS for cs in COST_SETS for mem in GRID_MEM for p in ps for m in ms
    ]


def run_cell(cell: GridCell) -> GridResult:
    """The reference and the adaptive search on one grid cell, both timed by the simulator."""
    import time

    from adaptis_plan.judge.bound import lower_bound
    from adaptis_plan.search.budget import Deadline, SearchBudget
    from adaptis_plan.search.generator import search_plan

    limit = cell.mem * one_f_one_b_peak(cell.p, cell.cost_set, cell.m)
    if cell.placement == "sequential":
        costs = grid_costs(cell.p, cell.cost_set, 1, limit)
        layout = sequential_layout(cell.p)
        ref = zb_reference(layout, costs, cell.m, "ZB-H")

        def allowed(sd: tuple[int, ...]) -> bool:
            return sd == tuple(range(cell.p))

    else:
        costs = grid_costs(cell.p, cell.cost_set, 2, limit)
        layout = v_layout(cell.p, 2)
        ref = best_reference([zb_reference(layout, costs, cell.m, "ZB-V"), zbv_handcrafted(layout, costs, cell.m)])
        allowed = None  # type: ignore[assignment]
    t0 = time.perf_counter()
    out = search_plan(
        costs,
        costs.num_layers,
        cell.m,
        placement_ok=allowed,
        budget=SearchBudget.for_time_limit(BENCH_TIME_LIMIT_S),
        deadline=Deadline.after(BENCH_ABORT_S),
    )
    wall = time.perf_counter() - t0
    best = out.best
    return GridResult(
        cell,
        limit,
        ref.name if ref else "none fits",
        ref.result.step_time_s if ref else None,
        best.step_s,
        best.feasible,
        best.label,
        best.origin,
        lower_bound(costs, cell.p, cell.m),
        out.aborted,
        wall,
    )


def _pool_map(fn, items: Sequence, workers: int) -> list:
    if workers <= 1:
        return [fn(x) for x in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        return list(pool.map(fn, items))


def _f(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def grid_section(
    results: Sequence[GridResult], reproduce: str, wall_s: float | None = None, settings: Mapping | None = None
) -> str:
    """The section; `settings`: the record's (its search budget), else this module's."""
    st = _settings_of(settings)
    seq = [r for r in results if r.cell.placement == "sequential"]
    free = [r for r in results if r.cell.placement == "free"]
    lines = [
        "## Against the zero-bubble schedulers (abstract pipelines)",
        "",
        reproduce + _part_wall(wall_s),
        "",
        "The zero-bubble paper's own setting, on adaptis' simulator: p stages, each F = I = W = 1 with comm 0.01,"
        " or F = 1, I = 1.1, W = 0.9 with comm 0.05 (time units; comm = the P2P time between two devices, zero on"
        f" one device); activation {st['grid']['activation_per_stage']:g} per stage forward, of which"
        f" {st['grid']['activation_w_share']:g} is held until W;"
        " memory limit per device = 1x or 2x 1F1B's peak activation memory (simulated, max over devices). **Sequential**: one"
        " stage per device, placement fixed. **Free**: the same model as 2p half-stages, the search chooses partition"
        " and placement. The references are written here from the zero-bubble paper's description (`bench/zb.py`):"
        " its heuristic (warm-up forwards within memory, F/B alternation, W into gaps longer than W, ...) with its"
        " binary parameters grid-searched, on sequential placement (ZB-H1/H2-style) and on V placement (ZB-V-style),"
        " plus torch's handcrafted ZBVZeroBubble order (the zero-bubble authors' ZB-V) for the free case; the best"
        f" plan that fits memory counts. Ours: `search_plan` with the work budget of `--time-limit {st['search_time_limit_s']:g}`"
        " (deterministic: the same plan on any machine), classic strategies included as candidates and hints."
        " `ours / ref` < 1 is faster than the reference; `LB` the lower bound; `origin` where the plan's order"
        " comes from at the root (a list policy of ours, or a classic strategy's order that CP-SAT refined).",
        "",
    ]
    for title, rows in (("Sequential placement (vs ZB-H1/H2-style)", seq), ("Free placement (vs ZB-V-style)", free)):
        if not rows:
            continue
        worse = [r for r in rows if r.ratio is not None and r.ratio > 1 + 1e-9]
        lines += [
            f"### {title}",
            "",
            f"Ours slower than the reference in {len(worse)} of {len(rows)} cells"
            + (f" (worst {max(r.ratio for r in worse):.4f})" if worse else "")
            + f"; ours / LB at most {max(r.step / r.lower_bound for r in rows):.4f}."
            + (
                f" 1x-memory plans whose order comes from our own list policies: "
                f"{sum(r.own for r in rows if r.cell.mem == 1)} of {sum(1 for r in rows if r.cell.mem == 1)}."
                if title.startswith("Free")
                else ""
            ),
            "",
            "| costs | memory | p | m | reference | ref step | ours | ours / ref | ours / LB | plan | origin |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(rows, key=lambda r: r.cell.key):
            c = r.cell
            lines.append(
                f"| {c.cost_set} | {c.mem}x ({r.limit:g}) | {c.p} | {c.m} | {r.ref_name} | {_f(r.ref_step)} |"
                f" {_f(r.step)}{'' if r.fits else ' OOM'}{' (aborted)' if r.aborted else ''} | {_f(r.ratio, 4)} |"
                f" {r.step / r.lower_bound:.4f} | `{r.label}` | {r.origin} |"
            )
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the paper's cases


@dataclass(frozen=True)
class PaperCase:
    model: str
    seq_len: int
    pp: int
    num_microbatches: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.seq_len // 1024}K"


@dataclass(frozen=True)
class PaperResult:
    case: PaperCase
    step: float
    lower_bound: float
    label: str
    origin: str
    order_status: str
    order_bound: float | None
    order_gap: float | None
    layers_per_device: tuple[int, ...]
    wall_s: float
    aborted: bool
    busiest: float = 0.0  # the busiest device's work in the plan (its layout's load)

    @property
    def ratio(self) -> float:
        return self.step / self.lower_bound


def paper_cases(quick: bool = False) -> list[PaperCase]:
    scales = ("s",) if quick else ("s", "m")
    return [
        PaperCase(f"{fam}-{sc}", seq, 4 if sc == "s" else 8, 16 if sc == "s" else 32)
        for sc in scales
        for fam in ("gemma", "deepseek", "nemotron-h")
        for seq in (2048, 4096)
    ]


def run_paper_case(case: PaperCase) -> PaperResult:
    import time

    from adaptis_plan.judge.bound import lower_bound
    from adaptis_plan.search.budget import Deadline, SearchBudget
    from adaptis_plan.search.generator import search_plan
    from bench.paper_profile import paper_costs

    costs, num_layers = paper_costs(case.model, case.seq_len, case.pp)
    t0 = time.perf_counter()
    out = search_plan(
        costs,
        num_layers,
        case.num_microbatches,
        budget=SearchBudget.for_time_limit(BENCH_TIME_LIMIT_S),
        deadline=Deadline.after(BENCH_ABORT_S),
    )
    wall = time.perf_counter() - t0
    best = out.best
    order = out.solver.get("order", {})
    lay = best.layout
    per_device = tuple(sum(lay.bounds[s + 1] - lay.bounds[s] for s in lay.stages_of(d)) for d in range(lay.num_devices))
    return PaperResult(
        case,
        best.step_s,
        lower_bound(costs, case.pp, case.num_microbatches),
        best.label,
        best.origin,
        str(order.get("status", "")),
        order.get("bound_s"),
        order.get("gap"),
        per_device,
        wall,
        out.aborted,
        max(best.result.busy_s),
    )


def paper_section_zb(
    results: Sequence[PaperResult], reproduce: str, wall_s: float | None = None, settings: Mapping | None = None
) -> str:
    """The section; `settings`: the record's (its search budget), else this module's."""
    st = _settings_of(settings)
    s_cases = [r for r in results if r.case.model.endswith("-s")]
    proven = [r for r in results if r.order_gap is not None]
    optimal = [r for r in results if r.order_status == "OPTIMAL"]
    lines = [
        "## The paper's cases on the author's profiled costs",
        "",
        reproduce + _part_wall(wall_s),
        "",
        "Per-layer F, I (the paper's B) and W from the AdaPtis author's profile (`tests/data/paper-profiled-ratios.csv`,"
        " from the built-in paper profile, `bench/paper_profile.py`): T = attention / dense layer, X = MoE or Mamba layer, H = head, in units"
        " of the reference layer's forward; the embedding costs nothing; zero communication; no memory limit."
        " S = PP 4, 16 micro-batches; M = PP 8, 32 micro-batches. `search_plan` with the work budget of"
        f" `--time-limit {st['search_time_limit_s']:g}`. `LB` = the simulator's lower bound (`judge/bound.py`); `order` = CP-SAT's"
        " status on the chosen plan's partition and placement, with its proven bound and the gap of the plan's"
        " simulated step to it (OPTIMAL: no order of those stages is faster); `busiest / LB` = the plan's busiest"
        " device's work over LB (what its partition and placement cost before any idle time).",
        "",
        f"S cases within 2% of LB: {sum(r.ratio <= 1.02 for r in s_cases)} of {len(s_cases)}."
        f" A proven order gap for {len(proven)} of {len(results)} plans; proven optimal for their partition and"
        f" placement: {len(optimal)} of {len(results)}.",
        "",
    ]
    # an S case above 2% whose order is proven optimal: the distance is its partition and placement's
    for r in s_cases:
        if r.ratio > 1.02 and r.order_status == "OPTIMAL":
            lines += [
                f"{r.case.label} is {r.ratio - 1:.1%} above LB with an order proven optimal for its layout: the distance"
                f" is the layout's. Its busiest device carries {r.busiest:.2f} of work ({r.busiest / r.lower_bound - 1:.1%}"
                " above LB) before any fill and drain; no layout the search built packs the work closer.",
                "",
            ]
    lines += [
        "| case | PP | m | step | LB | step / LB | busiest / LB | plan | order | order bound | gap | layers per device | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r.case
        lines.append(
            f"| {c.label} | {c.pp} | {c.num_microbatches} | {r.step:.2f} | {r.lower_bound:.2f} | {r.ratio:.4f} |"
            f" {r.busiest / r.lower_bound:.4f} | `{r.label}` | {r.order_status} | {_f(r.order_bound)} |"
            f" {'–' if r.order_gap is None else f'{r.order_gap:.2%}'} | {list(r.layers_per_device)} |"
            f" {r.wall_s:.1f}{' (aborted)' if r.aborted else ''} |"
        )
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- planning time and scale

#: The paper's AdaPtis generation times (the AdaPtis paper, arXiv 2509.23722, §3.5), small / medium / large model.
PAPER_GENERATION_S: dict[int, tuple[float, float, float]] = {
    8: (0.016, 0.060, 0.281),
    32: (0.151, 0.468, 2.03),
    64: (0.56, 1.64, 6.65),
    128: (2.15, 6.35, 23.7),
    256: (8.57, 24.7, 92.3),
}
PLANTIME_MODELS = (("deepseek-s", 4), ("deepseek-m", 8), ("deepseek-l", 8))
PLANTIME_MB = (8, 16, 32, 64, 128, 256, 512)
#: The scale case: PP 64, 512 micro-batches, a 500-layer model (LLaMA-2-S blocks, seq 2048 on h200).
SCALE_LAYERS = 500
SCALE_PP = 64
SCALE_MB = 512
SCALE_TIME_LIMIT_S = 60.0
#: The planning-time table runs `adaptis plan` with its default limit.
PLANTIME_TIME_LIMIT_S = 5.0


@dataclass(frozen=True)
class PlanTimeCase:
    model: str
    pp: int
    num_microbatches: int
    seq_len: int = 4096
    time_limit_s: float = PLANTIME_TIME_LIMIT_S


@dataclass(frozen=True)
class PlanTimeResult:
    case: PlanTimeCase
    wall_s: float
    cpu_s: float
    step: float
    lower_bound: float
    source: str
    aborted: bool
    candidates: int
    plan_bytes: int
    load: float

    @property
    def ratio(self) -> float:
        return self.step / self.lower_bound


def scale_model_path(folder: str) -> str:
    """A 500-layer model spec: LLaMA-2-S's blocks repeated (written to `folder`)."""
    from pathlib import Path

    from adaptis_plan.inputs.models.load import load_model

    base = load_model("llama-2-s")
    blocks = base.layers[1:-1]
    layers = [base.layers[0], *(blocks[i % len(blocks)] for i in range(SCALE_LAYERS - 2)), base.layers[-1]]
    spec = base.model_copy(update={"name": f"llama-2-s-{SCALE_LAYERS}", "layers": layers})
    path = Path(folder) / f"llama-2-s-{SCALE_LAYERS}.json"
    path.write_text(spec.model_dump_json())
    return str(path)


def run_plan_time(case: PlanTimeCase) -> PlanTimeResult:
    """`adaptis plan` as a user runs it (`make_plan_for` from the command's start, plan file written)."""
    import os
    import resource
    import tempfile
    import time

    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.planfile.io import write_plan

    with tempfile.TemporaryDirectory() as tmp:
        model = scale_model_path(tmp) if case.model == "scale" else case.model
        seq = 2048 if case.model == "scale" else case.seq_len
        req = PlanRequest.of(model, "h200", case.pp, case.num_microbatches, seq_len=seq, time_limit_s=case.time_limit_s)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        out = make_plan_for(req, started_at=t0)
        path = os.path.join(tmp, "plan.json")
        write_plan(out.plan, path)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        size = os.path.getsize(path)
    info = out.search_info
    return PlanTimeResult(
        case,
        wall,
        (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
        out.result.step_time_s,
        out.result.lower_bound_s,
        str(info.get("source", "")),
        bool(info.get("aborted", False)),
        int(info.get("candidates_evaluated", 0)),
        size,
        os.getloadavg()[0],
    )


def plan_time_cases(quick: bool = False) -> list[PlanTimeCase]:
    mbs = PLANTIME_MB[:3] if quick else PLANTIME_MB
    models = PLANTIME_MODELS[:1] if quick else PLANTIME_MODELS
    cases = [PlanTimeCase(model, pp, m) for m in mbs for model, pp in models]
    if not quick:
        cases.append(PlanTimeCase("scale", SCALE_PP, SCALE_MB, time_limit_s=SCALE_TIME_LIMIT_S))
    return cases


def plan_time_section(
    results: Sequence[PlanTimeResult], reproduce: str, wall_s: float | None = None, settings: Mapping | None = None
) -> str:
    """The section; `settings`: the record's (its search budget), else this module's."""
    st = _settings_of(settings)
    by = {(r.case.model, r.case.num_microbatches): r for r in results}
    models = [m for m, _ in PLANTIME_MODELS if any(k[0] == m for k in by)]
    lines = [
        "## Planning time, 8 to 512 micro-batches, and the 500-layer scale case",
        "",
        reproduce + _part_wall(wall_s),
        "",
        "`adaptis plan` as a user runs it (analytic costs on `h200`, seq 4096, TP 1, 90% of HBM per device; classic"
        f" baselines, search, plan file written), default `--time-limit {st['plantime']['time_limit_s']:g}`: the search's work is"
        " fixed by the limit (the same plan on any machine), so its wall time stays flat as micro-batches grow, until one"
        " candidate alone is big; the limit then aborts (marked) and the plan is the best found so far. `cpu s` is"
        " the process's CPU time (what an idle machine would take); this machine is shared, its 1-minute load is"
        " shown. The paper's AdaPtis generation times (the AdaPtis paper, arXiv 2509.23722, §3.5) beside ours: 8.6 s at S/256,"
        " 23.7 s at L/128, 92 s at L/256.",
        "",
        "| micro-batches | "
        + " | ".join(f"{m} (PP {pp}) wall s / cpu s / step÷LB" for m, pp in PLANTIME_MODELS if m in models)
        + " | paper S / M / L s |",
        "|---|" + "---|" * len(models) + "---|",
    ]
    for mb in PLANTIME_MB:
        cells = []
        for m in models:
            r = by.get((m, mb))
            cells.append(
                "–"
                if r is None
                else f"{r.wall_s:.1f} / {r.cpu_s:.1f} / {r.ratio:.3f}{' (aborted)' if r.aborted else ''}"
            )
        paper = PAPER_GENERATION_S.get(mb)
        lines.append(f"| {mb} | " + " | ".join(cells) + f" | {' / '.join(f'{x:g}' for x in paper) if paper else '–'} |")
    scale = by.get(("scale", SCALE_MB))
    if scale is not None:
        lines += [
            "",
            f"Scale case: a {SCALE_LAYERS}-layer model (LLaMA-2-S blocks, seq 2048), PP {SCALE_PP}, {SCALE_MB}"
            f" micro-batches, `--time-limit {scale.case.time_limit_s:g}`: planned in {scale.wall_s:.1f} s wall"
            f" ({scale.cpu_s:.1f} s CPU, load {scale.load:.1f}), step / LB = {scale.ratio:.4f}, plan `{scale.source}`,"
            f" {scale.candidates} candidates evaluated{', aborted by the limit' if scale.aborted else ''};"
            f" plan file {scale.plan_bytes / 2**20:.1f} MiB.",
        ]
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the suite's record

SUITE = "zb"
#: the record's parts, in the order they run and render
PARTS = ("grid", "paper", "plantime")


def _part_wall(wall_s: float | None) -> str:
    return "" if wall_s is None else f"\n\n_Wall time of this part: {wall_s:.0f} s._"


def _settings_of(rec_settings: Mapping | None) -> dict:
    """The settings a section renders with: the record's, over this module's for what an older record lacks."""
    base = settings(False, PARTS)
    for key, value in (rec_settings or {}).items():
        base[key] = {**base[key], **value} if isinstance(base.get(key), dict) and isinstance(value, dict) else value
    return base


def settings(quick: bool, parts: Sequence[str]) -> dict:
    """What the suite ran: the search budget, and each part's cases."""
    return {
        "quick": quick,
        "parts": list(parts),
        "search_time_limit_s": BENCH_TIME_LIMIT_S,
        "search_abort_s": BENCH_ABORT_S,
        "grid": {
            "cost_sets": {k: list(v) for k, v in COST_SETS.items()},
            "memory_multiples_of_1f1b_peak": list(GRID_MEM),
            "activation_per_stage": ACT_PER_STAGE,
            "activation_w_share": ACT_W_SHARE,
            "placements": list(PLACEMENTS),
            "cells": len(grid_cells(quick)),
        },
        "paper": {
            "costs": "paper (the author's profiled ratios)",
            "memory_limit": None,
            "cases": len(paper_cases(quick)),
        },
        "plantime": {
            "hardware": "h200",
            "tp": 1,
            "costs": "analytic",
            "time_limit_s": PLANTIME_TIME_LIMIT_S,
            "scale_time_limit_s": SCALE_TIME_LIMIT_S,
            "runs": len(plan_time_cases(quick)),
        },
    }


def run_suite(
    quick: bool,
    workers: int = 1,
    *,
    parts: Sequence[str] = PARTS,
    command: str | None = None,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Run the selected parts (in `PARTS` order) and return one record: per part its results and wall time."""
    import sys
    import time

    from bench import records

    log = log or (lambda m: print(f"[bench.zb] {m}", file=sys.stderr, flush=True))
    runs = {
        "grid": (grid_cells, run_cell, workers),
        "paper": (paper_cases, run_paper_case, workers),
        "plantime": (plan_time_cases, run_plan_time, 1),  # one at a time: its wall times are the figure
    }
    t0 = time.perf_counter()
    data = {}
    for name in PARTS:
        if name not in parts:
            continue
        cases_of, run, pool = runs[name]
        t1 = time.perf_counter()
        cases = cases_of(quick)
        log(f"{name}: {len(cases)} runs")
        results = _pool_map(run, cases, pool)
        data[name] = {"wall_s": round(time.perf_counter() - t1, 1), "results": records.to_json(results)}
    if command is None:
        command = "python -m bench.zb" + (f" --parts {','.join(data)}" if list(data) != list(PARTS) else "")
        command += " --quick" if quick else ""
    return records.record(SUITE, settings(quick, list(data)), data, command, time.perf_counter() - t0)


#: part -> (result type, section renderer)
_SECTIONS = {
    "grid": (GridResult, grid_section),
    "paper": (PaperResult, paper_section_zb),
    "plantime": (PlanTimeResult, plan_time_section),
}


def results_from_record(rec: dict) -> dict[str, list]:
    """Part name -> its result objects, for the parts the record holds."""
    from bench.records import from_json

    return {
        name: [from_json(_SECTIONS[name][0], r) for r in rec["data"][name]["results"]]
        for name in PARTS
        if name in rec["data"]
    }


def render(rec: dict) -> str:
    """The record's sections (those of the parts it holds), each with the reproduce line."""
    from bench.records import reproduce_line

    line = reproduce_line(rec)
    results = results_from_record(rec)
    return "\n".join(
        _SECTIONS[name][1](got, line, rec["data"][name].get("wall_s"), rec["settings"]) for name, got in results.items()
    )


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import os
    import sys
    from pathlib import Path

    from bench import records

    ap = argparse.ArgumentParser(prog="python -m bench.zb", description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)}")
    ap.add_argument("--quick", action="store_true", help="a small subset (smoke run)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--allow-dirty", action="store_true", help="write the record from a checkout with changes")
    ap.add_argument("--out-dir", default=str(records.RESULTS), help="folder of the record (zb.json)")
    args = ap.parse_args(argv)
    parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    bad = [s for s in parts if s not in PARTS]
    if bad or not parts:
        ap.error(f"--parts = {args.parts}: use a comma list of {','.join(PARTS)}")
    if not args.allow_dirty and not records.checkout()[1]:  # refuse before the run, not after it
        print("error: the checkout has uncommitted changes; commit them first, or pass --allow-dirty", file=sys.stderr)
        return 2
    rec = run_suite(args.quick, args.workers, parts=parts)
    path = records.write(rec, Path(args.out_dir), allow_dirty=args.allow_dirty)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def headline(rec: dict) -> str:
    """One line for the report's headline: the adaptive step over the best zero-bubble reference's,
    across the grid cells that have a reference (below 1.00 = ours faster; float rounding counts as equal)."""
    grid = results_from_record(rec).get("grid", [])
    ratios = sorted(r.ratio for r in grid if r.ratio is not None)
    if not ratios:
        return "no grid cell with a zero-bubble reference in this record"
    return (
        f"our step / best reference's: median {statistics.median(ratios):.3f}, worst {ratios[-1]:.3f}"
        f" over {len(ratios)} cells ({sum(r <= 1.0 + 1e-9 for r in ratios)} at or below 1.00)"
    )
