"""Regenerate BENCHMARKS.md (and docs/img/*.svg) from scratch.

Run: `python -m bench.run --out BENCHMARKS.md [--quick] [--sections papertp,paper,bubbles,seq,ablation,plantime,
recompute,match,real,hostmodes,hostdrift,replay,targets,torchcsv,zbgrid,zbpaper,zbtime] [--workers 2]` (`make bench` = the
full run, about 40-50 minutes on 2 cores; `--quick` a few minutes).

Data flow: `bench.paper.default_config` says which cases each selected section needs ->
`bench.paper.run_tasks` runs every distinct case once, in a process pool (results keyed by case,
so the report is in a fixed order whatever finishes first) -> one markdown section per
experiment + the SVG pictures (`bench.charts`) -> the output file, rewritten whole.

The section "Real execution (CPU, gloo)" is filled by `bench.real` (`run_bench` + `render`) when
`bench/real.py` exists, else it says "not run"; when `real` is not among the sections and the
output file already has that section, it is kept as it was (the CPU runs take minutes), and
"Does the model match real runs?" quotes its predicted vs measured errors. With `BENCH_REAL_WORK=DIR` in
the environment that run keeps its work (profiles, plans, each rank's per-round times) in DIR.
"""

from __future__ import annotations

import os

# one BLAS thread per process: the pool already uses every core
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from bench import charts, paper  # noqa: E402
from bench.common import git_commit, machine  # noqa: E402

SECTIONS = (
    "papertp", "paper", "bubbles", "seq", "ablation", "plantime", "recompute", "match", "real", "hostmodes", "hostdrift",
    "replay", "targets", "torchcsv", "zbgrid", "zbpaper", "zbtime",
)  # fmt: skip
# bench/zb.py's sections (the zero-bubble comparison, the author's profiled costs, planning time and scale)
ZB_SECTIONS = {"zbgrid": "grid", "zbpaper": "paper", "zbtime": "plantime"}


def provenance(out: str, quick: bool) -> paper.Provenance:
    cmd = f"python -m bench.run --out {out}" + (" --quick" if quick else "")
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return paper.Provenance(cmd, machine(), now, git_commit())


REAL_HEADING = "## Real execution (CPU, gloo)"
#: each section's heading (its beginning), to keep a section that is not rerun
HEADINGS = {
    "papertp": "## Paper cases at the paper's tensor parallelism",
    "paper": "## Paper cases at TP 1",
    "bubbles": "## Bubble ratios",
    "seq": "## Sequence-length sweep",
    "ablation": "## Ablation",
    "plantime": "## Planning time vs micro-batches",
    "recompute": "## Memory-bound cases",
    "match": "## Does the model match real runs?",
    "real": REAL_HEADING,
    "hostmodes": "## How steady is this machine? (CPU)",
    "hostdrift": "## How steady is this machine, over minutes? (CPU)",
    "replay": "## Program order without communication",
    "targets": "## What a target runtime costs",
    "torchcsv": "## The same adaptive plan in torch's runtime and ours",
    "zbgrid": "## Against the zero-bubble schedulers",
    "zbpaper": "## The paper's cases on the author's profiled costs",
    "zbtime": "## Planning time, 8 to 512 micro-batches",
}


def real_section(prov: paper.Provenance, quick: bool, results: list | None = None) -> tuple[str, bool]:
    """The section of `bench/real.py`; (markdown, ok). `results`, when given, receives the run's
    `RealResults` (for "Does the model match real runs?")."""
    head = [REAL_HEADING, "", prov.line("real"), ""]
    if importlib.util.find_spec("bench.real") is None:
        return "\n".join(head + ["_not run: `bench/real.py` does not exist yet._", ""]), True
    try:
        from bench import real

        # BENCH_REAL_WORK=DIR keeps the run's profiles, plans and per-round measurements there, to study afterwards
        keep = os.environ.get("BENCH_REAL_WORK")
        res = real.run_bench(
            real.QUICK if quick else real.FULL,
            work_dir=Path(keep) if keep else None,
            log=lambda m: print(f"[bench.real] {m}", file=sys.stderr, flush=True),
        )
        body = real.render(res)
    except Exception as e:  # report the failure in the document, not only on stderr
        return "\n".join(head + [f"_failed: `{type(e).__name__}: {e}`_", ""]), False
    if results is not None:
        results.append(res)
    return "\n".join(head + [str(body or "_ran; no markdown returned_").rstrip(), ""]), True


def kept_section(document: str, heading: str) -> str | None:
    """`heading`'s section (to the next `## ` heading) of a previous report, or None."""
    start = document.find("\n" + heading)
    if start < 0:
        return None
    nxt = document.find("\n## ", start + 1 + len(heading))
    return document[start + 1 : len(document) if nxt < 0 else nxt].rstrip() + "\n"


def real_errors(res) -> list[paper.RealError]:  # noqa: ANN001
    """Predicted vs measured of every plan of a `bench.real` run: with the planning profile, and with the
    profile of the layers it runs taken inside the launch (`PlanRun.in_run_error`, the "Real execution"
    section's target; without one, the split head re-simulated with its chunks profiled)."""
    rows = []
    for m in res.models:
        for name, p in m.plans.items():
            layers = p.in_run_error
            if layers is None:
                again = p.predicted_chunks_s if p.predicted_chunks_s is not None else p.predicted_s
                layers = (again - p.ours) / p.ours
            rows.append(paper.RealError(m.case.model, name, p.error, layers, p.in_run_error is not None))
    return rows


def real_errors_from_markdown(section: str) -> list[paper.RealError]:
    """The same from a kept "Real execution" section: its per-model table (plan-time error, and the error
    with the in-launch profile, its first figure); from an older section without that column, for split
    heads, the adaptive table's re-simulation with the chunks profiled."""
    rows: list[paper.RealError] = []
    chunks: dict[str, float] = {}
    part = ""
    for line in section.splitlines():
        if line.startswith("### "):
            part = line
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] in ("model", "") or set(cells[0]) <= set("-"):
            continue
        try:
            if part.startswith("### Per model") and len(cells) >= 9:
                plan = cells[2].split(" ")[0]
                err = float(cells[8].rstrip("%")) / 100
                in_launch = cells[9].split(" ")[0].rstrip("%") if len(cells) >= 11 else ""
                layers = float(in_launch) / 100 if in_launch not in ("", "–") else None
                rows.append(paper.RealError(cells[0], plan, err, err if layers is None else layers, layers is not None))
            elif part.startswith("### Adaptive vs") and "(" in cells[-1]:
                chunks[cells[0]] = float(cells[-1].rsplit("(", 1)[1].rstrip("%)")) / 100
        except ValueError:
            continue
    return [
        paper.RealError(r.model, r.plan, r.planning, chunks[r.model])
        if r.plan == "adaptive" and r.model in chunks and not r.in_launch
        else r
        for r in rows
    ]


def speedup_bars(results: Sequence[paper.CaseResult]) -> list[charts.SpeedupBar]:
    bars = []
    for r in results:
        key = (r.case.family, r.case.seq_len, paper.scale_of(r.case.model))
        p = paper.PAPER_THROUGHPUT.get(key)
        i1 = r.base("Interleaved1F1B")
        bars.append(
            charts.SpeedupBar(
                r.case.label,
                r.speedup("Interleaved1F1B"),
                r.speedup_best,
                paper.paper_speedups(p)["I-1F1B"] if p else None,
                i1f1b_oom=i1 is not None and not i1.fits_memory,
            )
        )
    return bars


def write_pictures(
    cfg: paper.BenchConfig, results: dict, img_dir: Path, out_dir: Path
) -> tuple[str | None, str | None]:
    """docs/img/speedup.svg and docs/img/timeline-<case>.svg; returns their links relative to the report."""
    img_dir.mkdir(parents=True, exist_ok=True)
    for old in [*img_dir.glob("timeline-*.svg"), img_dir / "speedup.svg"]:
        old.unlink(missing_ok=True)
    rs = [results[c] for c in cfg.paper]
    speed = img_dir / "speedup.svg"
    speed.write_text(
        charts.speedup_chart(
            speedup_bars(rs), "adaptive speed-up per paper case (simulated, h200)", target=paper.TARGET_MEAN_VS_I1F1B
        )
    )
    links = [os.path.relpath(speed, out_dir), None]
    tl = results.get(cfg.timeline) if cfg.timeline else None
    if tl is not None and tl.panels:
        path = img_dir / f"timeline-{tl.case.slug}.svg"
        path.write_text(
            charts.timeline_chart([(f"{tl.case.label} PP {tl.case.pp} · {title}", *rest) for title, *rest in tl.panels])
        )
        links[1] = os.path.relpath(path, out_dir)
    return links[0], links[1]


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def build_report(
    cfg: paper.BenchConfig,
    sections: Sequence[str],
    out: Path,
    img_dir: Path,
    prov: paper.Provenance,
    workers: int,
    log=None,
) -> tuple[str, bool]:
    """Run what `sections` need and return (markdown, ok)."""
    t0 = time.perf_counter()
    load0 = _load()
    log = log or (lambda _m: None)

    def progress(n: int, total: int, task, r) -> None:
        what = (
            f"{task.model} {task.key}"
            if isinstance(task, paper.AblationTask)
            else f"{task.label} pp{task.pp} mb{task.num_microbatches}"
        )
        wall = getattr(r, "plan_time_s", None) or getattr(r, "wall_s", 0.0)
        log(f"[{n:>3}/{total}] {what}: {wall:.1f} s" + (f"  ({r.error})" if getattr(r, "error", None) else ""))

    keep = [cfg.timeline] if cfg.timeline and "paper" in sections else []
    results = paper.run_tasks(cfg.tasks(sections), workers=workers, keep_panels=keep, progress=progress)
    ok = True
    real_text, real_rows, real_note = None, [], ""
    if "real" in sections:
        got: list = []
        real_text, real_ok = real_section(prov, cfg.quick, got)
        ok = ok and real_ok
        real_rows = real_errors(got[0]) if got else []
        real_note = "From this run."
    elif out.exists() and (real_text := kept_section(out.read_text(), REAL_HEADING)) is not None:
        real_rows = real_errors_from_markdown(real_text)
        real_note = (
            "Kept from the previous run of that section (the CPU runs take minutes; rerun with --sections real)."
        )
    made: dict[str, str] = {}
    if "papertp" in sections:
        made["papertp"] = paper.paper_tp_section(cfg.papertp, results, prov, quick=cfg.quick)
    if "paper" in sections:
        speed, timeline = write_pictures(cfg, results, img_dir, out.parent)
        made["paper"] = paper.paper_section(
            cfg.paper, results, prov, speedup_img=speed, timeline_img=timeline, quick=cfg.quick
        )
    if "bubbles" in sections:
        made["bubbles"] = paper.bubbles_section(cfg.bubbles, results, prov)
    if "seq" in sections:
        made["seq"] = paper.seq_section(cfg.seq, results, prov, quick=cfg.quick)
    if "ablation" in sections:
        made["ablation"] = paper.ablation_section(cfg.ablation, results, prov)
    if "plantime" in sections:
        made["plantime"] = paper.plantime_section(cfg.plantime, results, prov)
    if "recompute" in sections:
        from bench import recompute

        t_rc = time.perf_counter()
        runs = recompute.run_cases(recompute.default_cases(cfg.quick), workers, log=log)
        made["recompute"] = recompute.section(runs, prov, cfg.quick, time.perf_counter() - t_rc, "recompute")
    if "match" in sections:
        from adaptis_plan.cost.published import published_figures

        made["match"] = paper.match_section(published_figures(), real_rows, real_note or "Not run yet.", prov)
    if real_text is not None:
        made["real"] = real_text
    if "hostmodes" in sections:  # bench/host_modes.py: the host's speed, call after call
        from bench import host_modes

        blocks, calls = (4, 10) if cfg.quick else (24, 10)
        made["hostmodes"] = host_modes.section(host_modes.measure(blocks, calls), prov.line("hostmodes"))
    if "hostdrift" in sections:  # bench/host_drift.py: the host's speed, over minutes
        from bench import host_drift

        minutes, window = (1.0, 10.0) if cfg.quick else (10.0, 30.0)
        made["hostdrift"] = host_drift.section(host_drift.measure(minutes * 60, window), prov.line("hostdrift"))
    if "replay" in sections:  # bench/program_replay.py: each device's program without communication (CPU)
        from bench import program_replay

        made["replay"] = program_replay.section(prov.command, cfg.quick)
    for name in ("targets", "torchcsv"):  # bench/interop.py: planning for other runtimes, torch's runtime vs ours
        if name in sections:
            from bench import interop

            made[name] = interop.section(name, cfg.quick, 2.0 if cfg.quick else 5.0, workers, prov.command)
    for name, zb_name in ZB_SECTIONS.items():
        if name in sections:
            from bench import zb

            command = f"python -m bench.zb --sections {zb_name}{' --quick' if cfg.quick else ''}"
            made[name] = zb.build([zb_name], cfg.quick, workers, command, log)
    # a section not run this time keeps its text from the previous report, when it has one
    previous = out.read_text() if out.exists() else ""
    kept = []
    for name in SECTIONS:
        if name in made:
            continue
        text = kept_section(previous, HEADINGS[name])
        if text is not None:
            made[name] = text
            kept.append(name)
    parts = [made[name] for name in SECTIONS if name in made]
    wall = time.perf_counter() - t0
    skipped = [s for s in SECTIONS if s not in made]
    head = [
        "# Benchmarks",
        "",
        "<!-- generated by `python -m bench.run`; do not edit by hand, regenerate with `make bench` -->",
        "",
        f"Generated by `{prov.command}"
        + ("" if list(sections) == list(SECTIONS) else f" --sections {','.join(sections)}")
        + f"` in {wall:.0f} s wall time ({workers} worker process"
        f"{'es' if workers != 1 else ''}) on {prov.machine}, {prov.date}, commit `{prov.commit}`."
        + (" **Quick run** (subset of cases, 1 s search time limit)." if cfg.quick else ""),
        "",
        f"Machine load average (1 min) at the start / end: {load0} / {_load()}. Planning wall times grow on a"
        " loaded machine; the plans do not (the search's work is fixed by `--time-limit`, which only aborts"
        " a search that runs past it, and a plan it cut short says so).",
        "",
        "All figures are simulated by adaptis' own event simulator on its analytic cost model (the `h200`"
        ' profile, calibrated against the published runs of "Does the model match real runs?"), or, where a'
        " table says so, on the paper's own profiled costs (`--costs paper`); the real-execution section measures."
        " Every table names its TP and cost setting. The paper's figures (research/paper.md) are shown beside"
        " ours where it has them.",
        "",
    ]
    if skipped:
        head += [f"Sections not run this time: {', '.join(skipped)}.", ""]
    if real_text is not None and "real" not in sections:
        kept.append("real")
    if kept:
        head += [
            f"Kept from the previous report, not rerun this time (each with its own reproduce line and date):"
            f" {', '.join(kept)}.",
            "",
        ]
    return "\n".join(head + parts).rstrip() + "\n", ok


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="BENCHMARKS.md", help="markdown file to (re)write")
    ap.add_argument("--quick", action="store_true", help="a subset at short time limits (< 1 minute)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {','.join(SECTIONS)}")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="planning processes")
    ap.add_argument("--img-dir", default=None, help="where the SVGs go (default: docs/img next to --out)")
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        ap.error(
            f"--sections = {args.sections}: unknown section {unknown[0] if unknown else '(none)'};"
            f" use a comma list of {','.join(SECTIONS)}"
        )
    out = Path(args.out)
    img_dir = Path(args.img_dir) if args.img_dir else out.parent / "docs" / "img"
    cfg = paper.default_config(quick=args.quick)
    prov = provenance(args.out, args.quick)
    text, ok = build_report(
        cfg, sections, out, img_dir, prov, args.workers, log=lambda m: print(m, file=sys.stderr, flush=True)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}" + (f" and {img_dir}/*.svg" if "paper" in sections else ""), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
