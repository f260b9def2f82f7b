"""Benchmark harness: regenerates BENCHMARKS.md and docs/img/*.svg from scratch.

Run: `python -m bench.run --out BENCHMARKS.md [--quick] [--sections paper,bubbles,seq,ablation,plantime,real]`
(`make bench` runs the full set).

- `bench.paper`: the simulated experiments of the AdaPtis paper (cases, workers, the paper's
  published figures as data, one markdown section per experiment).
- `bench.charts`: SVG pictures (pure string building, no matplotlib).
- `bench.run`: the command line; runs every needed case once in a process pool and writes the report.
- `bench.real` (optional, written separately): the real CPU / gloo execution section.

Imports `adaptis_plan` like any user would (the planner's public use cases), never its CLI.
"""
