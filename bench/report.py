"""Render BENCHMARKS.md, docs/img/*.svg and README.md's results block from the suites' records.

Run: `python -m bench.report` (re-renders from the committed bench/results/*.json; plans nothing,
measures nothing). `bench.run` calls it after writing the records.

Data flow: `bench.records.load_all` -> `render_benchmarks` (a headline table of the figures a user
asks first, each row linking its section, then every section from its suite's record, each with the
record's reproduce line) / `render_readme_block` (a short paragraph between the README's results
markers) / `render_pictures` (the speed-up bars and the timeline of the `paper` record). A suite
without a record renders as "not run yet" with the command that makes it. Pure: records in, text
out; nothing is read from markdown. Imports the suites' renderers (`bench.real`, `bench.zb`,
`bench.megatron_check`, `bench.gpu_check` lazily) and `adaptis_plan.cost.published`.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bench import charts, paper, records
from bench.common import REPO

#: the suites in document order: `bench.run` runs all but gpu_check (it needs a GPU) and megatron_check
#: (it needs a Megatron-LM checkout: `python -m bench.megatron_check --megatron DIR --record`)
SUITES = (
    "paper", "recompute", "real", "targets", "torchcsv", "zb", "scale", "comm", "memory", "consistency", "megatron_check",
    "gpu_check",
)  # fmt: skip
#: each suite's heading when it has no record yet
TITLES = {
    "paper": "## Paper cases (simulated, h200)",
    "recompute": "## Memory-bound cases: recomputation off, full and auto (simulated, h200)",
    "real": "## Real execution (CPU, gloo)",
    "targets": "## What a target runtime costs (adaptis plan --target, simulated, h200 profile)",
    "torchcsv": "## The same adaptive plan in torch's runtime and ours (CPU, gloo)",
    "zb": "## Against the zero-bubble schedulers",
    "scale": "## Published runs at scale: predicted against measured tokens/s per GPU",
    "comm": "## Communication per parallel dimension: measured against predicted (CPU, gloo)",
    "memory": "## Memory against measured peaks",
    "consistency": "## Free configuration search against one dimension forced (adaptis plan --gpus, simulated)",
    "megatron_check": "## Megatron-LM's own argument checks",
    "gpu_check": "## GPU check",
}
MATCH_HEADING = "## Does the model match real runs?"
README_BEGIN = "<!-- results:begin -->"
README_END = "<!-- results:end -->"
MAX_HEADLINE_LINES = 15


def not_run(suite: str) -> str:
    return f"_not run yet: `python -m bench.run --suites {suite}`_"


def _missing(suite: str) -> str:
    return "\n".join([TITLES[suite], "", not_run(suite), ""])


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return "#" + text.replace(" ", "-")


def _heading(section: str) -> str:
    return next((line for line in section.splitlines() if line.startswith("## ")), "")


# ----------------------------------------------------------------------------- suites owned elsewhere


def _module(suite: str):  # noqa: ANN202
    """bench.real / bench.zb / bench.gpu_check, or None when absent or without `render`."""
    import importlib

    try:
        mod = importlib.import_module(f"bench.{suite}")
    except ImportError:
        return None
    return mod if hasattr(mod, "render") and hasattr(mod, "SUITE") else None


def _foreign(suite: str, rec: Mapping) -> str:
    mod = _module(suite)
    if mod is None:
        return "\n".join([TITLES[suite], "", records.reproduce_line(rec), "", "_no renderer for this record._", ""])
    return str(mod.render(rec)).rstrip() + "\n"


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


def _real_rows(recs: Mapping[str, Mapping]) -> list[paper.RealError] | None:
    """The real record's errors; None without a record (or without `bench.real.results_from_record`)."""
    rec = recs.get("real")
    mod = _module("real")
    if rec is None or mod is None or not hasattr(mod, "results_from_record"):
        return None
    return real_errors(mod.results_from_record(rec))


def match_section(recs: Mapping[str, Mapping]) -> str:
    from adaptis_plan.cost.published import published_figures

    rows = _real_rows(recs)
    rec = recs.get("real")
    if rows is None:
        prov = paper.Provenance("_The published figures are computed now; " + not_run("real")[1:])
        note = "Not run yet: there is no `real` record."
    else:
        prov = paper.Provenance.of(rec)
        note = "From the `real` record."
    return paper.match_section(published_figures(), rows or [], note, prov)


# ----------------------------------------------------------------------------- headline


def _papertp(recs: Mapping[str, Mapping]):  # noqa: ANN202
    rec = recs.get("paper")
    return None if rec is None else paper.results_from_record(rec)


def _spread(xs: Sequence[float | None]) -> str:
    vals = [x for x in xs if x is not None and math.isfinite(x)]
    if not vals:
        return "–"
    return f"mean {statistics.fmean(vals):.2f}x (min {min(vals):.2f}x, max {max(vals):.2f}x, {len(vals)} case{'s' if len(vals) != 1 else ''})"


def headline_rows(recs: Mapping[str, Mapping], link: Callable[[str], str]) -> list[list[str]]:
    """(question, setting, figure) rows; `link(section)` gives a section's anchor."""
    rows: list[list[str]] = []
    got = _papertp(recs)
    if got is None:
        rows.append(["adaptive vs classic schedules", "paper cases", not_run("paper")])
    else:
        cfg, results = got
        for costs in paper.COST_SETTINGS:
            rs = [results[c] for c in cfg.papertp if c.costs == costs and isinstance(results.get(c), paper.CaseResult)]
            if not rs:
                continue
            setting = f"[paper cases at the paper's TP, {paper.COST_SETTING_NAMES[costs]}]({link('papertp')})"
            rows.append(["adaptive vs Interleaved1F1B", setting, _spread([r.speedup("Interleaved1F1B") for r in rs])])
            rows.append(["adaptive vs best classic", setting, _spread([r.speedup_best for r in rs])])
        tp1 = [results[c] for c in cfg.paper if isinstance(results.get(c), paper.CaseResult)]
        setting = f"[paper cases at TP 1, calibrated analytic model]({link('paper')})"
        rows.append(["adaptive vs Interleaved1F1B", setting, _spread([r.speedup("Interleaved1F1B") for r in tp1])])
        plan = [results[c] for c in cfg.plantime if isinstance(results.get(c), paper.CaseResult)]
        if plan:
            mbs = f"{plan[0].case.num_microbatches}-{plan[-1].case.num_microbatches}"
            rows.append(
                [
                    "planning time",
                    f"[{plan[0].case.model}, PP {plan[0].case.pp}, {mbs} micro-batches]({link('plantime')})",
                    f"at most {max(r.plan_time_s for r in plan):.1f} s (limit {plan[0].case.time_limit_s:g} s)",
                ]
            )
    rec = recs.get("recompute")
    if rec is None:
        rows.append(["memory-bound cases: recomputation auto", "recompute cases", not_run("recompute")])
    else:
        from bench import recompute

        runs = records.from_json(list[recompute.CaseRun], rec["data"])
        ok = [r for r in runs if r.rows["auto"].error is None]
        off_oom = sum(1 for r in runs if r.rows["none"].error is not None)
        rows.append(
            [
                "memory-bound cases: `--recompute auto`",
                f"[{len(runs)} case{'s' if len(runs) != 1 else ''}, h200]({link('recompute')})",
                f"a plan that fits in {len(ok)} of {len(runs)} (without recomputation: {len(runs) - off_oom});"
                f" recomputes in {sum(1 for r in runs if r.rows['auto'].stages)}",
            ]
        )
    real = _real_rows(recs)
    if real is None:
        rows.append(["model vs real runs", "CPU, gloo, PP 2", not_run("real")])
    elif real:
        worst = max(real, key=lambda r: abs(r.planning))
        rows.append(
            [
                "model vs real runs",
                f"[CPU, gloo, PP 2, {len(real)} plans]({link('match')})",
                f"worst error {worst.planning:+.1%} with the planning-time profile",
            ]
        )
    rows.append(_zb_row(recs, link))
    rows.append(_scale_row(recs, link))
    megatron = _megatron_row(recs, link)
    if megatron is not None:
        rows.append(megatron)
    return rows


def _megatron_row(recs: Mapping[str, Mapping], link: Callable[[str], str]) -> list[str] | None:
    """Megatron-LM's own argument checks on the exports (`bench.megatron_check`); None without a record."""
    rec = recs.get("megatron_check")
    if rec is None:
        return None
    from bench import megatron_check

    return [
        "exports pass Megatron-LM's validate_args",
        f"[megatron-launch exports, GPU arch {rec['settings']['arch']:.1f}]({link('megatron_check')})",
        megatron_check.headline(rec),
    ]


def _scale_row(recs: Mapping[str, Mapping], link: Callable[[str], str]) -> list[str]:
    rec = recs.get("scale")
    if rec is None:
        return ["model vs published runs at scale", "published training runs", not_run("scale")]
    from bench import scale

    s = scale.summary(scale.results_from_record(rec))
    return [
        "model vs published runs at scale",
        f"[{s['runs']} runs, {s['sources']} sources, {s['min_gpus']}-{s['max_gpus']:,} GPUs]({link('scale')})",
        f"median abs. error {s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} (stated settings forced,"
        f" one rule where the source is silent; {s['not_counted']} calibration runs shown, not counted)",
    ]


def _zb_row(recs: Mapping[str, Mapping], link: Callable[[str], str]) -> list[str]:
    rec = recs.get("zb")
    if rec is None:
        return ["adaptive vs the zero-bubble schedulers", "zero-bubble grid", not_run("zb")]
    mod = _module("zb")
    figure = getattr(mod, "headline", None) if mod is not None else None
    text = str(figure(rec)) if figure is not None else "see the section"
    return ["adaptive vs the zero-bubble schedulers", f"[zero-bubble comparison]({link('zb')})", text]


def headline(recs: Mapping[str, Mapping], link: Callable[[str], str]) -> str:
    lines = paper.table(["question", "setting", "figure"], headline_rows(recs, link)).splitlines()
    return "\n".join(lines[:MAX_HEADLINE_LINES])


# ----------------------------------------------------------------------------- documents


def sections(recs: Mapping[str, Mapping]) -> dict[str, str]:
    """Every section's markdown by name, in document order."""
    from bench import interop, recompute

    out: dict[str, str] = {}
    if "paper" in recs:
        out.update(paper.render(recs["paper"]))
    else:
        out["paper"] = _missing("paper")
    out["recompute"] = recompute.render(recs["recompute"]) if "recompute" in recs else _missing("recompute")
    out["match"] = match_section(recs)
    out["real"] = _foreign("real", recs["real"]) if "real" in recs else _missing("real")
    for name in ("targets", "torchcsv"):
        out[name] = interop.render(recs[name]) if name in recs else _missing(name)
    out["zb"] = _foreign("zb", recs["zb"]) if "zb" in recs else _missing("zb")
    out["scale"] = _foreign("scale", recs["scale"]) if "scale" in recs else _missing("scale")
    out["comm"] = _foreign("comm", recs["comm"]) if "comm" in recs else _missing("comm")
    out["memory"] = _foreign("memory", recs["memory"]) if "memory" in recs else _missing("memory")
    if "consistency" in recs:  # a section only once its record exists
        out["consistency"] = _foreign("consistency", recs["consistency"])
    if "megatron_check" in recs:
        out["megatron_check"] = _foreign("megatron_check", recs["megatron_check"])
    if "gpu_check" in recs:
        out["gpu_check"] = _foreign("gpu_check", recs["gpu_check"])
    return out


def render_benchmarks(recs: Mapping[str, Mapping]) -> str:
    parts = sections(recs)
    anchors = {name: anchor(_heading(text)) for name, text in parts.items()}
    commits = sorted({r["provenance"]["commit"] for r in recs.values()})
    dirty = sorted(name for name, r in recs.items() if not r["provenance"]["clean"])
    head = [
        "# Benchmarks",
        "",
        "<!-- generated by `python -m bench.report` from bench/results/*.json; do not edit by hand -->",
        "",
        "Every section below is rendered from its suite's record in `bench/results/` (`python -m bench.report`"
        " re-renders this file, docs/img/*.svg and the README's results block from them). Each section names the"
        " command, commit, machine and date of its record. Simulated figures come from adaptis' own event"
        " simulator on its analytic cost model (the `h200` profile), or, where a table says so, on the paper's own"
        " profiled costs (`--costs paper`); the real-execution sections measure. The AdaPtis paper's figures"
        " (arXiv 2509.23722) are shown beside ours where it has them.",
        "",
        f"Records from commit{'s' if len(commits) != 1 else ''}: {', '.join(f'`{c}`' for c in commits) or 'none'}."
        + (f" **Not reproducible (uncommitted changes): {', '.join(dirty)}.**" if dirty else ""),
        "",
        "## Headline",
        "",
        headline(recs, lambda name: anchors.get(name, "")),
        "",
    ]
    return "\n".join(head + [t.rstrip() + "\n" for t in parts.values()]).rstrip() + "\n"


def _the(name: str) -> str:
    return name if name.startswith("the ") else f"the {name}"


def render_readme_block(recs: Mapping[str, Mapping]) -> str:
    """README.md's results paragraph, between the markers (markers included)."""
    body: list[str] = []
    got = _papertp(recs)
    if got is None:
        body.append("No benchmark record yet: `python -m bench.run --suites paper` makes it.")
    else:
        cfg, results = got
        rec = recs["paper"]
        parts = []
        for costs in paper.COST_SETTINGS:
            rs = [results[c] for c in cfg.papertp if c.costs == costs and isinstance(results.get(c), paper.CaseResult)]
            i1 = [x for r in rs if (x := r.speedup("Interleaved1F1B")) is not None]
            best = [x for r in rs if (x := r.speedup_best) is not None]
            if i1 and best:
                parts.append(
                    f"{statistics.fmean(i1):.2f}x over Interleaved1F1B and {statistics.fmean(best):.2f}x over the"
                    f" best classic schedule with {_the(paper.COST_SETTING_NAMES[costs])}"
                    + (f" (the paper measured {paper.PAPER_HEADLINE_MEAN:.2f}x)" if costs == "paper" else "")
                )
        body.append(
            f"- **Against the classic schedules**: on the AdaPtis paper's {len({(c.model, c.seq_len) for c in cfg.papertp})}"
            f" heterogeneous cases at its tensor parallelism ({', '.join(f'{f} TP {t}' for f, t in paper.PAPER_TP.items())};"
            " simulated, h200 profile, memory limit 90% of its 141 GB), the adaptive plan is on average "
            + "; and ".join(parts)
            + f" ({_provenance(rec)})."
        )
    scale_line = _readme_scale_line(recs)
    if scale_line:
        body.append(scale_line)
    if body and body[0].startswith("- "):
        body.append("")
    body.append("Every figure, its setting and the command that reproduces it: [BENCHMARKS.md](BENCHMARKS.md).")
    return "\n".join([README_BEGIN, *body, README_END])


def _provenance(rec: Mapping) -> str:
    p = rec["provenance"]
    return (
        f"record of commit `{p['commit']}`"
        + ("" if p["clean"] else ", with uncommitted changes")
        + (", quick run" if rec["settings"].get("quick") else "")
    )


def _readme_scale_line(recs: Mapping[str, Mapping]) -> str | None:
    """The published runs at scale in one bullet: median and worst error, with the setting (`bench.scale`)."""
    rec = recs.get("scale")
    if rec is None:
        return None
    from bench import scale

    rows = scale.results_from_record(rec)
    s = scale.summary(rows)
    if s["median_abs_error"] is None:
        return None
    devices = sorted({r.device.split("-")[0].upper() for r in rows if r.error is not None})
    return (
        f"- **Against published training runs at scale**: on {s['runs']} published runs not used to calibrate the"
        f" model ({s['sources']} sources, {s['min_gpus']}-{s['max_gpus']:,} {' / '.join(devices)} GPUs), with the"
        " published configuration forced (calibrated analytic model on the a100 / h100 profiles, memory limit:"
        " each GPU's whole memory),"
        f" the predicted tokens/s per GPU is off by a median {s['median_abs_error']:.1%} and at worst"
        f" {s['worst_abs_error']:.1%} ({_provenance(rec)})."
    )


def replace_readme_block(readme: str, block: str) -> str:
    start, end = readme.find(README_BEGIN), readme.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {README_BEGIN} ... {README_END} block")
    return readme[:start] + block + readme[end + len(README_END) :]


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


def render_pictures(recs: Mapping[str, Mapping], img_dir: Path) -> list[Path]:
    """docs/img/speedup.svg and docs/img/timeline-<case>.svg from the `paper` record; the files written."""
    if "paper" not in recs:
        return []
    cfg, results = paper.results_from_record(recs["paper"])
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
    written = [speed]
    tl = results.get(cfg.timeline) if cfg.timeline else None
    if isinstance(tl, paper.CaseResult) and tl.panels:
        path = img_dir / Path(paper.timeline_img(cfg)).name
        path.write_text(charts.timeline_chart(tl.panels, prefix=f"{tl.case.label} PP {tl.case.pp} · "))
        written.append(path)
    return written


def render_all(results_dir: Path, out: Path, img_dir: Path, readme: Path | None) -> None:
    recs = records.load_all(results_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_benchmarks(recs))
    render_pictures(recs, img_dir)
    if readme is not None and readme.exists():
        readme.write_text(replace_readme_block(readme.read_text(), render_readme_block(recs)))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(records.RESULTS), help="folder of the suites' records")
    ap.add_argument("--out", default=str(REPO / "BENCHMARKS.md"), help="markdown file to write")
    ap.add_argument("--img-dir", default=None, help="where the SVGs go (default: docs/img next to --out)")
    ap.add_argument("--readme", default=None, help="README whose results block to fill (default: next to --out)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    img_dir = Path(args.img_dir) if args.img_dir else out.parent / "docs" / "img"
    readme = Path(args.readme) if args.readme else out.parent / "README.md"
    render_all(Path(args.results), out, img_dir, readme)
    print(f"wrote {out}, {img_dir}/*.svg and the results block of {readme}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
