"""The application layer: one module per command family, each a library call the CLI wraps.

- `app.plan`: `adaptis plan` (`PlanRequest` -> `make_plan_for` -> `PlanOutcome`)
- `app.simulate`: plan-file loading, the judge's verdict (`judge_result`, `judge_plan`), `adaptis simulate`
- `app.export`: `adaptis export` (`export_plan_file`)
- `app.run`: `adaptis run` (`run_plan_file`, `executor_refusal`, `predicted_comm`)
- `app.profile`: `adaptis profile` (`profile_for`, `measure_action_overhead`)

Data flow: CLI arguments (or a library caller) -> these modules -> `search`, `judge`, `planfile`,
`executor` -> data the renderers print. No rich, no click; ortools and torch are reached only through
`search` and `executor`, lazily. `app.plan`, `app.export` and `app.run` use `app.simulate`; nothing
here imports `cli` or `render`.
"""
