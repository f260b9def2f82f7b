"""The torch executor: run any plan for real, and measure layer costs.

The only package that imports torch (lazily: importing `adaptis_plan.executor` alone does not).
Data flow: a `PlanFile` + the `ModelSpec` it was made for (read and checked once by the use
case) -> `launch.run_plan(plan, model, RunOptions)` -> torchrun -> `worker` (one process per
plan device, data-parallel replica and tensor-parallel rank: pp x dp x tp) -> `runtime.RankRuntime`
(stages from `layers`, cut over tp by `tensorparallel`, whose collectives are `tpcomm`'s, with the
plan's per-stage recomputation; I/W split from `wgrad`; sends and receives ordered by `lowering`)
with `dataparallel.DataParallel` around it (gradient averaging, ZeRO 0-3) -> measured
step times, the measured trace, and with `--verify` the comparison against a single-process
step (`verify`). `processes` keeps the run's process tree from outliving the launcher.
`profile.profile_model` / `profile_recompute` measure per-layer F / I / W / B costs and
activation bytes for `adaptis profile`, `profile_estimate` what a profile will ask of the machine
before it starts, and `link.measure_link` the gloo link between two local processes. The executor runs what it is given: it never makes or
simulates a plan (the use cases do).

Modules: `layers` (every layer kind, recomputation), `wgrad` (deferred weight gradients),
`lowering` (pure Python: executability check, global order, transfers), `dataparallel` (the dp
group: gradient sync, ZeRO, the optimizer), `optim` (torch's SGD / AdamW arithmetic without
`torch.optim.Optimizer`'s start-up cost), `tensorparallel` (the tp slices of every layer, partial
gradients, tp gathers for --verify), `tpcomm` (the collectives inside layers), `support` (what the
executor refuses; no torch), `cpu` (how a rank computes
on CPU: one thread, denormals flushed), `runtime` (one rank's
interpreter), `worker` (`python -m adaptis_plan.executor.worker` under torchrun), `launch`
(`RunOptions`, `run_plan`, `run_plans`), `processes` (run token, reaper, worker lifeline;
standard library only), `verify`, `data`, `profile`, `profile_estimate`, `link`.
"""
