"""What the bundled executor can run: the refusal `adaptis run` and the launcher give before anything starts.

Data flow: the use case (`app.run.executor_refusal`, before the launch) and the launcher (`launch._prepare`,
for plans handed to `run_plans` directly) ask `refusal(plan, model)`; a reason is one line for an
`InputError` (exit 2). Imports the spec only (no torch: the CLI's refusal costs no torch import).
"""

from __future__ import annotations

from adaptis_plan.spec.model import ModelSpec
from adaptis_plan.spec.plan_file import PlanFile


def refusal(plan: PlanFile, model: ModelSpec | None = None) -> str | None:
    """Why the bundled executor cannot run `plan` as planned, or None. It runs the pipeline, data-,
    tensor- and expert-parallel dimensions (pp x dp x tp processes, ZeRO 0-3, MoE experts sharded over
    ep of the dp ranks when tp = 1; `executor.dataparallel`, `executor.tensorparallel`,
    `executor.expertparallel`): a plan with context parallelism, or ep with tp, would run as a
    different configuration, so it is refused rather than run. With tp > 1 and `model` given, also
    the layers the executor cannot cut over tp (MLA, Mamba-2, MoE) and sizes tp does not divide."""
    t = plan.training
    op = [s.stage for s in plan.stages if s.recompute == "op"]
    if op:
        return (
            f"stages[{op[0]}].recompute = 'op': the executor recomputes none, the attention core (selective) or"
            " whole blocks (full), not torchtitan's per-op selection; run this plan under torchtitan"
            " (`adaptis export --format torchtitan`), or plan with --recompute none, selective or full to run it here"
        )
    if t.reduces_after_backward and t.dp * t.cp > 1:
        return (
            f"training.stage_keeps_unsharded: the plan was priced for torch's pipeline stages, which keep ZeRO"
            f" {t.zero}'s parameters gathered and gradients unsharded over the step; the executor shards them as"
            f" ZeRO {t.zero} (other memory, other traffic): run it under torchtitan (`adaptis export --format"
            " torchtitan`), or re-plan with --target adaptis to run it here"
        )
    if t.cp > 1:
        return (
            f"training.cp = {t.cp}: `adaptis run` executes the pipeline, data-, tensor- and expert-parallel"
            " dimensions (cp = 1); run this plan under Megatron-LM or torchtitan (`adaptis export`), or plan"
            " with --cp 1 to run it here"
        )
    if t.ep > 1:
        if t.tp > 1:
            return (
                f"training.tp = {t.tp} with ep = {t.ep}: `adaptis run` shards experts over data-parallel ranks"
                " without tensor parallelism; plan with --tp 1 (or --ep 1) to run it here"
            )
        if (t.dp * t.cp) % t.ep:
            return f"training.ep = {t.ep} does not divide dp x cp = {t.dp} x {t.cp}: use an ep that divides dp"
        experts = sorted({lay.moe.num_experts for lay in plan.model.spec.layers if lay.moe is not None})
        bad = [n for n in experts if n % t.ep]
        if bad:
            return (
                f"training.ep = {t.ep} does not divide the MoE layers' {bad[0]} experts: the executor shards whole"
                " experts over the ep ranks; use an ep that divides the expert count"
            )
    if t.tp > 1 and model is not None:
        return _tp_refusal(model, t.tp)
    return None


def _tp_refusal(model: ModelSpec, tp: int) -> str | None:
    """The first layer or size of `model` that `executor.tensorparallel` cannot cut into tp slices."""
    fix = "plan with --tp 1 to run it here, or run it under Megatron-LM (`adaptis export`)"
    if model.vocab_size % tp:
        return f"training.tp = {tp}: the vocabulary of {model.vocab_size} rows does not split into {tp} slices; {fix}"
    moe = [i for i, layer in enumerate(model.layers) if layer.moe is not None]
    for i, layer in enumerate(model.layers):
        what = None
        if moe:  # named first: experts are the dimension ep splits, not tp
            i, what = moe[0], "an MoE block (tensor parallelism inside experts is not implemented)"
        elif layer.mamba is not None:
            what = "a Mamba-2 mixer"
        elif layer.attention is not None and layer.attention.type != "gqa":
            what = f"{layer.attention.type} attention"
        elif layer.attention is not None and layer.attention.num_heads % tp:
            what = f"attention with {layer.attention.num_heads} heads (not a multiple of tp)"
        elif layer.mlp is not None and layer.mlp.intermediate_size % tp:
            what = f"an MLP of intermediate size {layer.mlp.intermediate_size} (not a multiple of tp)"
        elif layer.vocab_range is not None and (layer.vocab_range[1] - layer.vocab_range[0]) % tp:
            lo, hi = layer.vocab_range
            what = f"a head chunk of {hi - lo} vocabulary rows (not a multiple of tp)"
        if what is not None:
            return f"training.tp = {tp}: layer {i} of '{model.name}' is {what}, which `adaptis run` cannot split; {fix}"
    return None
