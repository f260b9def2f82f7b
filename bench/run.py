"""Run benchmark suites, write one record per suite, then render the documents from the records.

Run: `python -m bench.run [--suites paper,recompute,real,targets,torchcsv,zb,scale,comm,memory,consistency] [--quick]
[--workers 2] [--allow-dirty] [--results DIR]` (`make bench` = the full run of every suite, which refuses a checkout
with uncommitted changes; `make bench-report` re-renders only).

Each suite answers one product question and is run by its own module's `run_suite`, which returns a
record (`bench.records.record`): `paper` (bench.paper: the paper's cases at its TP and at TP 1, bubble
ratios, the sequence sweep, the ablation and planning time, one task pool), `recompute`
(bench.recompute), `real` and `zb` (bench.real, bench.zb), `targets` and `torchcsv`
(bench.interop), `consistency` (bench.consistency: the free configuration search against one dimension
forced). `gpu_check` needs a GPU and is run by its own module. The records go to
bench/results/<suite>.json; a `--quick` run goes to a scratch folder (its BENCHMARKS.md and
pictures with it) unless `--results` says otherwise, so it never overwrites the committed records.
Then `bench.report` renders BENCHMARKS.md, docs/img/*.svg and README.md's results block from every
record in the folder.
"""

from __future__ import annotations

import os

# one BLAS thread per process: the pool already uses every core
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from bench import records, report  # noqa: E402
from bench.common import REPO  # noqa: E402

#: the suites `bench.run` runs by default, in order (gpu_check needs a GPU: `python -m bench.gpu_check`)
SUITES = ("paper", "recompute", "real", "targets", "torchcsv", "zb", "scale", "comm", "memory", "consistency")
QUICK_RESULTS = Path(tempfile.gettempdir()) / "adaptis-bench-quick"


def run_suite(name: str, quick: bool, workers: int, log: Callable[[str], None]) -> dict:
    """The record of suite `name` (not written)."""
    if name == "paper":
        from bench import paper

        return paper.run_suite(quick, workers, log)
    if name == "recompute":
        from bench import recompute

        return recompute.run_suite(quick, workers, log)
    if name in ("targets", "torchcsv"):
        from bench import interop

        return interop.run_suite(name, quick, workers)
    mod = importlib.import_module(f"bench.{name}")  # real, zb, scale, comm, memory, consistency
    return mod.run_suite(quick, workers)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default=",".join(SUITES), help=f"comma list of {','.join(SUITES)}")
    ap.add_argument("--quick", action="store_true", help="a subset at short time limits (minutes)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="planning processes")
    ap.add_argument("--allow-dirty", action="store_true", help="write records from a checkout with changes")
    ap.add_argument(
        "--results",
        default=None,
        help=f"folder of the records (default: bench/results; with --quick {QUICK_RESULTS})",
    )
    args = ap.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        ap.error(
            f"--suites = {args.suites}: unknown suite {unknown[0] if unknown else '(none)'};"
            f" use a comma list of {','.join(SUITES)}"
        )
    results = Path(args.results) if args.results else (QUICK_RESULTS if args.quick else records.RESULTS)
    committed = results.resolve() == records.RESULTS.resolve()
    allow_dirty = args.allow_dirty or not committed
    commit, clean = records.checkout()
    if not clean and not allow_dirty:
        print(
            f"bench.run: the checkout at {commit} has uncommitted changes; commit them first, or pass"
            " --allow-dirty (the records are then marked dirty)",
            file=sys.stderr,
        )
        return 2

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    failed = []
    for name in suites:
        log(f"bench.run: suite {name}")
        try:
            rec = run_suite(name, args.quick, args.workers, log)
        except Exception as e:  # one failing suite does not lose the others' records
            log(f"bench.run: suite {name} failed: {type(e).__name__}: {e}")
            failed.append(name)
            continue
        log(f"bench.run: wrote {records.write(rec, results, allow_dirty=allow_dirty)}")
    if committed:
        out, img, readme = REPO / "BENCHMARKS.md", REPO / "docs" / "img", REPO / "README.md"
    else:
        out, img, readme = results / "BENCHMARKS.md", results / "docs" / "img", None
    report.render_all(results, out, img, readme)
    log(f"bench.run: rendered {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
