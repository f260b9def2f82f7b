"""Benchmark harness: suites write JSON records (bench/results/), a pure renderer makes BENCHMARKS.md,
docs/img/*.svg and README.md's results block from them.

Run: `python -m bench.run [--suites paper,recompute,...] [--quick]` (`make bench` runs every suite);
`python -m bench.report` (`make bench-report`) re-renders from the committed records.

- `bench.paper`: the simulated experiments of the AdaPtis paper (cases, workers, the paper's
  published figures as data, one markdown section per experiment).
- `bench.charts`: SVG pictures (pure string building, no matplotlib).
- `bench.run`: the command line; runs the chosen suites, writes one record each, then renders.
- `bench.records`: a record's JSON form and provenance; `bench.report`: records in, documents out.
- `bench.real` (optional, written separately): the real CPU / gloo execution section.

Imports `adaptis_plan` like any user would (the planner's public use cases), never its CLI.
"""
