"""The torch executor: run any plan for real, and measure layer costs.

The only package that imports torch (lazily: importing `adaptis_plan.executor` alone does not).
Data flow: plan file + `ModelSpec` -> `launch.run_plan` -> torchrun -> `worker` (one process per
plan device) -> `runtime.RankRuntime` (stages from `layers`, I/W split from `wgrad`, sends and
receives ordered by `lowering`) -> measured step times, the measured trace, and with `--verify`
the comparison against a single-process step (`verify`). `profile.profile_model` measures
per-layer F / I / W / B costs for `adaptis profile`.

Modules: `layers` (every layer kind), `wgrad` (deferred weight gradients), `lowering` (pure
Python: executability check, global order, transfers), `runtime` (one rank's interpreter),
`worker` (`python -m adaptis_plan.executor.worker` under torchrun), `launch` (`run_plan`,
`run_plans`), `verify`, `data`, `profile`.
"""
