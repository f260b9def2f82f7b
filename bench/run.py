"""Regenerate BENCHMARKS.md (and docs/img/*.svg) from scratch.

Run: `python -m bench.run --out BENCHMARKS.md [--quick] [--sections paper,bubbles,seq,ablation,plantime,real,zb]
[--workers 2]` (`make bench` = the full run, about 5-10 minutes on 2 cores; `--quick` < 1 minute).

Data flow: `bench.paper.default_config` says which cases each selected section needs ->
`bench.paper.run_tasks` runs every distinct case once, in a process pool (results keyed by case,
so the report is in a fixed order whatever finishes first) -> one markdown section per
experiment + the SVG pictures (`bench.charts`) -> the output file, rewritten whole.

The section "Real execution (CPU, gloo)" is filled by `bench.real.main(quick=...) -> str`
(markdown body) when `bench/real.py` exists, else it says "not run".
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

SECTIONS = ("paper", "bubbles", "seq", "ablation", "plantime", "real", "zb")


def provenance(out: str, quick: bool) -> paper.Provenance:
    cmd = f"python -m bench.run --out {out}" + (" --quick" if quick else "")
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return paper.Provenance(cmd, machine(), now, git_commit())


def real_section(prov: paper.Provenance, quick: bool) -> tuple[str, bool]:
    """The placeholder for `bench/real.py` (another engineer's); (markdown, ok)."""
    head = ["## Real execution (CPU, gloo)", "", prov.line("real"), ""]
    if importlib.util.find_spec("bench.real") is None:
        return "\n".join(head + ["_not run: `bench/real.py` does not exist yet._", ""]), True
    try:
        from bench import real

        body = real.main(quick=quick)
    except Exception as e:  # report the failure in the document, not only on stderr
        return "\n".join(head + [f"_failed: `{type(e).__name__}: {e}`_", ""]), False
    return "\n".join(head + [str(body or "_ran; no markdown returned_").rstrip(), ""]), True


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
    parts: list[str] = []
    if "paper" in sections:
        speed, timeline = write_pictures(cfg, results, img_dir, out.parent)
        parts.append(
            paper.paper_section(cfg.paper, results, prov, speedup_img=speed, timeline_img=timeline, quick=cfg.quick)
        )
    if "bubbles" in sections:
        parts.append(paper.bubbles_section(cfg.bubbles, results, prov))
    if "seq" in sections:
        parts.append(paper.seq_section(cfg.seq, results, prov, quick=cfg.quick))
    if "ablation" in sections:
        parts.append(paper.ablation_section(cfg.ablation, results, prov))
    if "plantime" in sections:
        parts.append(paper.plantime_section(cfg.plantime, results, prov))
    if "real" in sections:
        text, real_ok = real_section(prov, cfg.quick)
        parts.append(text)
        ok = ok and real_ok
    if "zb" in sections:  # the zero-bubble comparison, the author's profiled costs, planning time and scale
        from bench import zb

        parts.append(
            zb.build(zb.SECTIONS, cfg.quick, workers, f"python -m bench.zb{' --quick' if cfg.quick else ''}", log)
        )
    wall = time.perf_counter() - t0
    skipped = [s for s in SECTIONS if s not in sections]
    head = [
        "# Benchmarks",
        "",
        "<!-- generated by `python -m bench.run`; do not edit by hand, regenerate with `make bench` -->",
        "",
        f"Generated by `{prov.command}` in {wall:.0f} s wall time ({workers} worker process"
        f"{'es' if workers != 1 else ''}) on {prov.machine}, {prov.date}, commit `{prov.commit}`."
        + (" **Quick run** (subset of cases, 1 s search time limit)." if cfg.quick else ""),
        "",
        f"Machine load average (1 min) at the start / end: {load0} / {_load()}. Planning wall times grow on a"
        " loaded machine, and the search phases stop at their time limit, so on a busy machine a plan can"
        " differ slightly from one found on an idle one.",
        "",
        "All figures are simulated by adaptis' own event simulator on its analytic cost model (the `h200`"
        " profile), except the real-execution section. The paper's figures (research/paper.md) are shown in"
        " parentheses beside ours where it has them.",
        "",
    ]
    if skipped:
        head += [f"Sections not run this time: {', '.join(skipped)}.", ""]
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
