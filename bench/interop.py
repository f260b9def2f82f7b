"""Interoperability benchmarks: what planning for another runtime costs, and the same adaptive plan
timed in torch's runtime and in ours.

Run: `python -m bench.run --suites targets,torchcsv [--quick]` (one record each in bench/results/,
rendered into BENCHMARKS.md by `bench.report`).

- "targets": every paper case at sequence length 4K (h200 profile, analytic cost model, TP 1,
  micro-batch size 1, micro-batches = 4 x PP, memory limit 90% of HBM) planned with
  `adaptis plan --target torch|torchtitan|megatron`: the restricted plan's simulated step time
  beside the best unrestricted plan's (the same search without the restriction), and whether
  the plan exports to that runtime's format (torch CSV, torchtitan config, Megatron layout).
- "torchcsv": one adaptive plan of a tiny model (`--target torch`, CPU profile) run by our
  executor and by torch.distributed.pipelining's `_PipelineScheduleRuntime` from the exported
  CSV, side by side in one torchrun launch on 2 gloo ranks (`bench/torch_runtime.py`):
  median step times over the measured rounds, and the loss each computed.

Imports the package's use cases and `bench.paper` / `bench.common`; torch only inside the
torchrun workers.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench.common import REPO

SECTIONS = ("targets", "torchcsv")
HEADINGS = {
    "targets": "## What a target runtime costs (adaptis plan --target, simulated, h200 profile)",
    "torchcsv": "## The same adaptive plan in torch's runtime and ours (CPU, gloo)",
}
TARGETS = ("torch", "torchtitan", "megatron")
FORMAT = {"torch": "torch-csv", "torchtitan": "torchtitan", "megatron": "megatron-layout"}


# ----------------------------------------------------------------------------- targets
def _plan_case(args: tuple[str, int, int, int, float]) -> list[dict]:
    model, pp, seq, mb, limit = args
    from adaptis_plan.app.export import export_plan_file
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.errors import AdaptisError
    from adaptis_plan.planfile.io import write_plan

    rows = []
    with tempfile.TemporaryDirectory(prefix="adaptis-bench-targets-") as tmp:
        for target in TARGETS:
            row = {"model": model, "pp": pp, "seq_len": seq, "num_microbatches": mb, "target": target}
            t0 = time.perf_counter()
            try:
                out = make_plan_for(
                    PlanRequest.of(
                        model_arg=model,
                        hardware_arg="h200",
                        pp=pp,
                        num_microbatches=mb,
                        seq_len=seq,
                        time_limit_s=limit,
                        target=target,
                    )  # fmt: skip
                )
            except AdaptisError as e:
                rows.append({**row, "error": str(e)})
                continue
            row["plan_time_s"] = time.perf_counter() - t0
            row["step_time_s"] = out.result.step_time_s
            row["unrestricted_s"] = out.unrestricted.step_time_s if out.unrestricted else out.result.step_time_s
            info = out.search_info.get("unrestricted", {})
            row["unrestricted_head_chunks"] = info.get("head_chunks", out.plan.model.head_chunks)
            row["unrestricted_placement"] = info.get("stage_device", list(out.layout.stage_device))
            row["placement"] = list(out.layout.stage_device)
            path = Path(tmp) / f"{target}.json"
            write_plan(out.plan, path)
            try:
                export_plan_file(
                    str(path), FORMAT[target], output=str(Path(tmp) / f"{target}_pipeline.py"),
                    torchtitan_config="llama3:llama3_8b",
                )  # fmt: skip
                row["exported"] = True
            except AdaptisError as e:
                row["exported"] = False
                row["export_error"] = str(e)
            rows.append(row)
    return rows


def targets_rows(quick: bool, time_limit_s: float, workers: int) -> list[dict]:
    from bench.paper import default_config

    cases = list(default_config(quick=quick).paper)
    jobs = [(c.model, c.pp, c.seq_len, c.num_microbatches, time_limit_s) for c in cases]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return [row for rows in pool.map(_plan_case, jobs) for row in rows]


def _placement_kind(stage_device: list[int], pp: int, head_chunks: int) -> str:
    from adaptis_plan.schedules.targets import loop_map, v_map

    n = len(stage_device)
    sd = tuple(stage_device)
    kind = "irregular"
    if n % pp == 0 and sd == loop_map(n, pp):
        kind = "sequential" if n == pp else f"loop x{n // pp}"
    elif n % pp == 0 and sd == v_map(n, pp):
        kind = f"V x{n // pp}"
    return kind + (f", head in {head_chunks} chunks" if head_chunks > 1 else "")


def targets_markdown(rows: list[dict], time_limit_s: float) -> str:
    cases = list(dict.fromkeys((r["model"], r["pp"], r["seq_len"], r["num_microbatches"]) for r in rows))
    by = {(r["model"], r["pp"], r["seq_len"], r["num_microbatches"], r["target"]): r for r in rows}
    head = (
        "| case | PP | best unrestricted ms (its layout) | "
        + " | ".join(f"--target {t} ms (cost)" for t in TARGETS)
        + " | exports |"
    )
    lines = [
        "Each cell is the simulated step time of the best plan the target runtime can execute, and in parentheses"
        " how much slower it is than the best unrestricted plan. `adaptis plan --target` runs the search without"
        " the restriction beside the restricted one and reports both (`unrestricted` in `--json`); a restricted"
        " plan is an unrestricted plan too, so the best unrestricted figure here is the best of all of a case's"
        " searches. torch's runtime takes any placement but not a vocabulary-split head; torchtitan a loop or a V"
        " of 2 stages per rank; Megatron a loop. Megatron runs its own schedule on the exported layout, so a"
        " Megatron plan carries that order (1F1B, interleaved with more than one stage per rank) and its figure"
        " is that order's. 'exports' says whether each plan exported to its runtime's format"
        f" without refusal. Search time limit {time_limit_s:g} s per search, on a shared 2-core machine: a search"
        " cut short by the limit can miss a better plan.",
        "",
        head,
        "|" + " --- |" * (4 + len(TARGETS)),
    ]
    costs: dict[str, list[float]] = {t: [] for t in TARGETS}
    for case in cases:
        model, pp, seq, mb = case
        ok_rows = [by[(*case, t)] for t in TARGETS if "error" not in by.get((*case, t), {"error": 1})]
        if not ok_rows:
            continue
        best = min(min(r["unrestricted_s"], r["step_time_s"]) for r in ok_rows)
        src = min(ok_rows, key=lambda r: r["unrestricted_s"])
        layout = _placement_kind(src["unrestricted_placement"], pp, src["unrestricted_head_chunks"])
        cells, exported = [], []
        for t in TARGETS:
            r = by.get((*case, t))
            if r is None or "error" in r:
                cells.append("error: " + (r or {}).get("error", "missing")[:60])
                exported.append(False)
                continue
            cost = r["step_time_s"] / best - 1
            costs[t].append(cost)
            cells.append(f"{r['step_time_s'] * 1e3:,.1f} (+{100 * cost:.1f}%)")
            exported.append(r.get("exported", False))
        ok = (
            "all"
            if all(exported)
            else ", ".join(t for t, e in zip(TARGETS, exported, strict=True) if not e) + " refused"
        )
        lines.append(
            f"| {model} {seq // 1024}K mb {mb} | {pp} | {best * 1e3:,.1f} ({layout}) | "
            + " | ".join(cells)
            + f" | {ok} |"
        )
    lines += ["", "Mean cost per target: " + ", ".join(
        f"{t} +{100 * statistics.mean(v):.1f}% (max +{100 * max(v):.1f}%)" for t, v in costs.items() if v
    ) + ". The large costs are where the best plan splits the head into vocabulary chunks or places stages"
        " irregularly, which these runtimes cannot run."]  # fmt: skip
    return "\n".join(lines)


# ----------------------------------------------------------------------------- torch runtime vs ours
TORCHCSV_MODEL = "tiny-deepseek"


def torchcsv_measure(quick: bool) -> dict:
    """Plan, export and time the plan in both runtimes; plain JSON of what the section shows."""
    from adaptis_plan.app.export import export_plan_file
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.planfile.io import write_plan

    m, seq, rounds, warmup = (8, 128, 5, 1) if quick else (8, 256, 15, 2)
    with tempfile.TemporaryDirectory(prefix="adaptis-bench-torchcsv-") as tmp:
        folder = Path(tmp)
        out = make_plan_for(
            PlanRequest.of(
                model_arg=TORCHCSV_MODEL,
                hardware_arg="cpu",
                pp=2,
                num_microbatches=m,
                seq_len=seq,
                time_limit_s=5.0,
                target="torch",
            )  # fmt: skip
        )
        plan = folder / "plan.json"
        write_plan(out.plan, plan)
        csv = folder / "plan.csv"
        [(path, text)] = export_plan_file(str(plan), "torch-csv", output=str(csv))
        csv.write_text(text)
        model_file = folder / "model.json"
        model_file.write_text(out.plan.model.spec.model_dump_json())
        runs = [
            {"name": "ours", "runtime": "ours", "plan": str(plan)},
            {"name": "torch", "runtime": "torch-csv", "plan": str(plan), "csv": str(csv)},
        ]
        config = folder / "config.json"
        config.write_text(json.dumps({"model": str(model_file), "runs": runs, "warmup": warmup, "rounds": rounds}))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "0", "-m", "bench.torch_runtime", "--config", str(config), "--out", str(folder / "out")]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return {"error": f"torchrun exited {proc.returncode}: `{proc.stderr.strip().splitlines()[-1:]}`"}
        rank0 = json.loads((folder / "out" / "rank0.json").read_text())
        ranks = [rank0, json.loads((folder / "out" / "rank1.json").read_text())]
    times = rank0["step_times_s"]
    losses = {n: [x for r in ranks for x in r["losses"][n] if x is not None] for n in ("ours", "torch")}
    return {
        "model": TORCHCSV_MODEL,
        "num_microbatches": m,
        "seq_len": seq,
        "rounds": rounds,
        "warmup": warmup,
        "stages": ", ".join(f"s{s.stage}[{s.layers[0]}:{s.layers[1]})→d{s.device}" for s in out.plan.stages),
        "source": out.search_info.get("source"),
        "others_share": rank0.get("others_share") or [0.0],
        "step_times_s": {n: list(times[n]) for n in ("ours", "torch")},
        "first_loss": {n: losses[n][0] for n in ("ours", "torch")},
        "predicted_step_time_s": float(out.result.step_time_s),
    }


def torchcsv_markdown(d: dict) -> str:
    if "error" in d:
        return f"_failed: {d['error']}_"
    m, seq, rounds, warmup = d["num_microbatches"], d["seq_len"], d["rounds"], d["warmup"]
    times = d["step_times_s"]
    med = {n: statistics.median(times[n]) for n in ("ours", "torch")}
    shares = d["others_share"]
    return "\n".join([
        f"Model `{d['model']}` (zoo, CPU-sized), {m} micro-batches of 1 x {seq} tokens, fp32, PP 2 over gloo,"
        " one intra-op thread per rank. The plan is `adaptis plan --target torch` on the `cpu` profile (analytic"
        f" cost model, TP 1); its stages: {d['stages']}; found by {d['source']}. 'torch' is"
        " torch.distributed.pipelining's own `_PipelineScheduleRuntime` loading the plan's exported CSV"
        " (`adaptis export --format torch-csv`), on `PipelineStage`s holding the same layers with the same"
        " weights; 'ours' is the executor `adaptis run` uses. Both run in one torchrun launch, alternating"
        f" A B B A ... per round; {rounds} measured rounds after {warmup} warm-up. Other processes used a median"
        f" {100 * statistics.median(shares):.0f}% of the machine's CPU time during the rounds.",
        "",
        "| runtime | median step ms | min ms | max ms | loss (first round) |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {name} | {med[n] * 1e3:.1f} | {min(times[n]) * 1e3:.1f} | {max(times[n]) * 1e3:.1f} |"
            f" {d['first_loss'][n]:.6f} |"
            for n, name in (("ours", "adaptis executor"), ("torch", "torch _PipelineScheduleRuntime (our CSV)"))
        ),
        "",
        f"torch / ours median step time: {med['torch'] / med['ours']:.2f}x; predicted step time (simulator, cpu"
        f" profile): {d['predicted_step_time_s'] * 1e3:.1f} ms. Both runtimes compute the same loss and gradients"
        " (tests/interop/test_torch_runtime.py checks every gradient).",
    ])  # fmt: skip


# ----------------------------------------------------------------------------- suites: run -> record -> markdown
def run_suite(name: str, quick: bool, workers: int) -> dict:
    """Run suite `name` ("targets" or "torchcsv") and return its record (not written)."""
    from bench import records

    t0 = time.perf_counter()
    limit = 2.0 if quick else 5.0
    if name == "targets":
        data: dict = {"time_limit_s": limit, "rows": targets_rows(quick, limit, workers)}
        settings = {"quick": quick, "workers": workers, "hardware": "h200", "time_limit_s": limit}
    else:
        data = torchcsv_measure(quick)
        settings = {"quick": quick, "hardware": "cpu", "model": TORCHCSV_MODEL}
    command = f"python -m bench.run --suites {name}" + (" --quick" if quick else "")
    return records.record(name, settings, data, command, time.perf_counter() - t0)


def render(rec: Mapping) -> str:
    """The section of a `targets` or `torchcsv` record."""
    from bench.records import reproduce_line

    name, d = rec["suite"], rec["data"]
    body = targets_markdown(d["rows"], d["time_limit_s"]) if name == "targets" else torchcsv_markdown(d)
    return "\n".join([HEADINGS[name], "", reproduce_line(rec), "", body.rstrip(), ""])
