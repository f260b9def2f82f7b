"""Hand-built tiny models and plans for the executor tests, and the shared torchrun launches.

`tiny_family(name)` gives CPU-sized models of the four families the paper studies;
`greedy_programs` produces valid per-device orders of several styles by a round-based list
scheduler (each round every device runs one ready action, picked by the style's priority),
so every order it returns is accepted by the dependency simulator by construction;
`plan_file` / `write_plan_file` wrap a layout and programs in a plan file (with per-stage
recomputation), `job` makes a launcher job of a plan file on disk. Two helpers run the planner,
for the tests that execute what `adaptis plan` writes: `cpu_plan_file` (its plan of a zoo model on
the cpu profile) and `strategy_jobs` (every strategy's plan of the zoo's tiny models).
`four_rank_launch` and `two_rank_launch` run every four-process case of tests/executor, and every
two-process one that verifies a step, each in one torchrun launch (the session fixtures
`four_ranks` and `two_ranks`, tests/executor/conftest.py), labelled jobs with their results (`Ran`).
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaptis_plan.core import Action, Layout, Programs
from adaptis_plan.cost.recompute import layer_modes
from adaptis_plan.cost.table import build_cost_table
from adaptis_plan.executor.launch import PlanJob, RunOptions, run_plans
from adaptis_plan.inputs.hardware import load_hardware
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.planfile.io import plan_costs, read_plan, write_plan
from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MambaSpec, MlpSpec, ModelSpec, MoeSpec
from adaptis_plan.spec.plan_file import PlanDevice, PlanFile, PlanHardwareRef, PlanModelRef, PlanStage, Predicted
from adaptis_plan.spec.training import TrainingConfig

H = 32


def _gqa(**kw: object) -> AttentionSpec:
    return AttentionSpec(num_heads=4, num_kv_heads=kw.pop("kv", 2), head_dim=8, **kw)


def tiny_family(name: str) -> ModelSpec:
    emb, head = LayerSpec(kind="embedding"), LayerSpec(kind="head")
    if name == "llama":
        dec = LayerSpec(kind="decoder", attention=_gqa(), mlp=MlpSpec(activation="swiglu", intermediate_size=64))
        return ModelSpec(name="tiny-llama-like", hidden_size=H, vocab_size=128, layers=[emb, dec, dec, dec, dec, head])
    if name == "gemma":  # large vocabulary, tied embeddings, MQA, GeGLU, local + global attention, qk-norm
        glob = LayerSpec(
            kind="decoder", attention=_gqa(kv=1, qk_norm=True), mlp=MlpSpec(activation="geglu", intermediate_size=64)
        )
        loc = LayerSpec(
            kind="decoder",
            attention=_gqa(kv=1, sliding_window=6, qk_norm=True),
            mlp=MlpSpec(activation="geglu", intermediate_size=64),
        )
        return ModelSpec(
            name="tiny-gemma-like",
            hidden_size=H,
            vocab_size=1024,
            tie_word_embeddings=True,
            layers=[emb, loc, glob, loc, glob, head],
        )
    if name == "deepseek":  # MLA everywhere, a dense first block, then MoE blocks with a shared expert
        mla = dict(
            type="mla",
            num_heads=4,
            num_kv_heads=4,
            head_dim=8,
            kv_lora_rank=16,
            qk_nope_head_dim=8,
            qk_rope_head_dim=4,
            v_head_dim=8,
        )
        dense = LayerSpec(kind="decoder", attention=AttentionSpec(**mla), mlp=MlpSpec(intermediate_size=64))
        moe = MoeSpec(
            num_experts=4, top_k=2, expert_intermediate_size=16, num_shared_experts=1, shared_intermediate_size=16
        )
        moe_layer = LayerSpec(kind="moe", attention=AttentionSpec(**mla, q_lora_rank=16), moe=moe)
        return ModelSpec(
            name="tiny-deepseek-like",
            hidden_size=H,
            vocab_size=128,
            layers=[emb, dense, moe_layer, moe_layer, moe_layer, head],
        )
    if name == "nemotron":  # Mamba-2 + attention-only + MLP-only blocks (squared ReLU)
        mamba = LayerSpec(
            kind="mamba", mamba=MambaSpec(num_heads=4, head_dim=8, state_size=8, num_groups=2, conv_kernel=4)
        )
        mlp = LayerSpec(kind="mlp", mlp=MlpSpec(activation="relu2", intermediate_size=64))
        att = LayerSpec(kind="attention", attention=_gqa())
        return ModelSpec(
            name="tiny-nemotron-h-like", hidden_size=H, vocab_size=128, layers=[emb, mamba, mlp, att, mamba, mlp, head]
        )
    raise ValueError(name)


FAMILIES = ("llama", "gemma", "deepseek", "nemotron")


def even_bounds(num_layers: int, num_stages: int) -> tuple[int, ...]:
    return tuple(round(i * num_layers / num_stages) for i in range(num_stages + 1))


def greedy_programs(layout: Layout, num_microbatches: int, style: str, seed: int = 0) -> Programs:
    """Valid orders: style 'gpipe' (all F first), '1f1b' (backward as soon as ready),
    'zb' (I as soon as ready, W only when nothing else is), 'random' (random priorities, B or I+W per (stage, mb))."""
    rng = random.Random(seed)
    last = layout.num_stages - 1
    split = {}
    for s in range(layout.num_stages):
        for m in range(num_microbatches):
            split[(s, m)] = style == "zb" or (style == "random" and rng.random() < 0.5)
    todo: list[set[Action]] = [set() for _ in range(layout.num_devices)]
    for s in range(layout.num_stages):
        d = layout.stage_device[s]
        for m in range(num_microbatches):
            todo[d].add(Action(s, "F", m))
            todo[d] |= {Action(s, "I", m), Action(s, "W", m)} if split[(s, m)] else {Action(s, "B", m)}
    noise = {a: rng.random() for t in todo for a in t}

    def ready(a: Action, done: set[Action]) -> bool:
        s, op, m = a
        if op == "F":
            return s == 0 or Action(s - 1, "F", m) in done
        if op == "W":
            return Action(s, "I", m) in done
        back = s == last or Action(s + 1, "I", m) in done or Action(s + 1, "B", m) in done
        return Action(s, "F", m) in done and back

    def priority(a: Action) -> tuple:
        s, op, m = a
        if style == "gpipe":
            return (op != "F", m, s if op == "F" else -s)
        if style == "1f1b":
            return (op == "F", m, -s if op != "F" else s)
        if style == "zb":
            return ({"I": 0, "F": 1, "W": 2}[op], m, s)
        return (noise[a],)

    programs: Programs = [[] for _ in range(layout.num_devices)]
    done: set[Action] = set()
    while any(todo):
        picked = []
        for d in range(layout.num_devices):
            cands = [a for a in todo[d] if ready(a, done)]
            if cands:
                a = min(cands, key=priority)
                todo[d].discard(a)
                programs[d].append(a)
                picked.append(a)
        assert picked, "greedy scheduler stuck"
        done.update(picked)
    return programs


def plan_file(
    model: ModelSpec,
    layout: Layout,
    programs: Programs,
    num_microbatches: int,
    *,
    seq_len: int = 16,
    micro_batch_size: int = 1,
    strategy: str = "handmade",
    predicted_s: float = 0.0,
    recompute: tuple[str, ...] | None = None,
) -> PlanFile:
    """A self-contained plan file object for `layout` and `programs` on the `cpu` profile, its costs the
    analytic ones (`recompute`: one mode per stage; default none)."""
    modes = recompute or ("none",) * layout.num_stages
    training = TrainingConfig(
        num_microbatches=num_microbatches,
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        pp=layout.num_devices,
        dtype="fp32",
    )
    hardware = load_hardware("cpu")
    costs = build_cost_table(model, hardware, training, recompute=layer_modes(layout.bounds, list(modes)))
    return PlanFile(
        schema_version=2,
        strategy=strategy,
        model=PlanModelRef(
            name=model.name,
            fingerprint=model.fingerprint(),
            num_layers=model.num_layers,
            head_chunks=model.num_head_chunks,
            spec=model,
        ),
        hardware=PlanHardwareRef(name=hardware.name, fingerprint=hardware.fingerprint(), profile=hardware),
        training=training,
        costs=plan_costs(layout, costs, None),
        stages=[
            PlanStage(
                stage=s,
                device=layout.stage_device[s],
                layers=(layout.bounds[s], layout.bounds[s + 1]),
                recompute=modes[s],
            )
            for s in range(layout.num_stages)
        ],
        devices=[
            PlanDevice(device=d, actions=[{"op": a.op, "stage": a.stage, "mb": a.mb} for a in prog])
            for d, prog in enumerate(programs)
        ],
        predicted=Predicted(
            step_time_s=predicted_s,
            bubble_ratio_per_device=[0.0] * layout.num_devices,
            peak_memory_bytes=[0.0] * layout.num_devices,
        ),
    )


def write_plan_file(
    path: Path, model: ModelSpec, layout: Layout, programs: Programs, num_microbatches: int, **kw: object
) -> Path:
    """`plan_file(...)` written to `path` (keywords as `plan_file`)."""
    write_plan(plan_file(model, layout, programs, num_microbatches, **kw), path)  # type: ignore[arg-type]
    return path


def cpu_plan_file(path: Path, model_arg: str, *, pp: int = 2, num_microbatches: int = 4, **kw: object) -> Path:
    """`adaptis plan` of `model_arg` on the cpu profile at seq 16 with a 1 s budget (other `PlanRequest`
    fields as `kw`), written to `path`."""
    from adaptis_plan.usecases import PlanRequest, make_plan_for

    req = PlanRequest.of(
        model_arg=model_arg, hardware_arg="cpu", pp=pp, num_microbatches=num_microbatches, seq_len=16,
        time_limit_s=1.0, hard_stop=False, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    write_plan(make_plan_for(req).plan, path)
    return path


def job(path: Path, model: ModelSpec, trace: Path | None = None) -> PlanJob:
    """A launcher job for the plan file at `path`, read and checked as `adaptis run` reads it."""
    return PlanJob(read_plan(path), model, trace, str(path))


# (name, stage_device, style): the placements and orders every family is run with.
PLAN_SHAPES = (
    ("gpipe", (0, 1), "gpipe"),
    ("1f1b-unequal", (0, 1), "1f1b"),
    ("interleaved-zb", (0, 1, 0, 1), "zb"),
    ("v-shape", (0, 1, 1, 0), "1f1b"),
    ("v-zb", (0, 1, 1, 0), "zb"),
    ("irregular", (0, 0, 1, 0, 1), "random"),
)


def layout_for(model: ModelSpec, shape: str, stage_device: tuple[int, ...]) -> Layout:
    n = model.num_layers
    if shape == "1f1b-unequal":
        bounds: tuple[int, ...] = (0, 1, n)  # embedding alone, everything else on device 1
    else:
        bounds = even_bounds(n, len(stage_device))
    return Layout(bounds=bounds, stage_device=stage_device, num_devices=2)


def with_training(plan: PlanFile, *, recompute: list[str] | None = None, **training: int) -> PlanFile:
    """`plan` with its training block's fields replaced (dp, tp, ep, zero, ...) and, when given, every
    stage's recompute mode: how the executor tests turn one planned replica into a cluster plan."""
    stages = plan.stages
    if recompute is not None:
        stages = [st.model_copy(update={"recompute": r}) for st, r in zip(stages, recompute, strict=True)]
    return plan.model_copy(update={"training": plan.training.model_copy(update=training), "stages": stages})


@dataclass(frozen=True)
class Ran:
    """One job of a shared launch: the plan and model it ran, and `run_plans`' result for it."""

    plan: PlanFile
    model: ModelSpec
    result: dict[str, Any]


#: the options of the four-process launch: two steps (the second shows the first one trained), verified
FOUR_RANK_OPTIONS = RunOptions(steps=1, warmup=0, verify=True, timeout_s=180)


def four_rank_launch(folder: Path) -> dict[str, Ran]:
    """Every four-process case of tests/executor in one torchrun launch, by label "<module>:<case>", each
    job with its own split of the four processes: PP2 x TP2 (the planner's adaptive tiny-llama plan with
    split backward, its tp = 2 plans with full recomputation and with a head split in two, a tied
    interleaved gemma-like model), TP2 x DP2 with ZeRO 1 and 3, PP2 x DP2 with ZeRO 1-3, PP2 x DP2 x EP2
    and DP4 x EP2 (tiny-deepseek), and two jobs where global rank 1 drops one W (tp and dp), which must
    fail verification. One step each, two for the dp and PP2 x DP2 x EP2 cases (their tests check the
    second step: the first one trained)."""
    from adaptis_plan.usecases import load_plan_and_model

    def load(path: Path) -> tuple[PlanFile, ModelSpec]:
        return load_plan_and_model(str(path), None)

    llama, model = load(cpu_plan_file(folder / "adaptive.json", "tiny-llama"))
    tp_recompute, _ = load(cpu_plan_file(folder / "recompute.json", "tiny-llama", tp=2, recompute="full"))
    tp_chunks, _ = load(cpu_plan_file(folder / "chunks.json", "tiny-llama", tp=2, head_chunks=2))
    tp_pp1, _ = load(cpu_plan_file(folder / "pp1.json", "tiny-llama", pp=1, tp=2))
    gemma_spec = tiny_family("gemma")
    layout = layout_for(gemma_spec, "interleaved-zb", (0, 1, 0, 1))
    programs = greedy_programs(layout, 4, "zb", seed=1)
    gemma, gemma_model = load(write_plan_file(folder / "gemma.json", gemma_spec, layout, programs, 4, predicted_s=0.05))
    deepseek, ds_model = load(cpu_plan_file(folder / "deepseek.json", "tiny-deepseek"))
    ds_pp1, _ = load(cpu_plan_file(folder / "deepseek-pp1.json", "tiny-deepseek", pp=1, num_microbatches=2))
    modes = ["full", "selective"] + ["none"] * (len(deepseek.stages) - 2)
    dp = {"dp": 0.001}
    cases: list[tuple[str, PlanFile, ModelSpec, dict[str, float] | None]] = [
        ("tp:adaptive", with_training(llama, tp=2), model, None),
        ("tp:recompute", tp_recompute, model, None),
        ("tp:adaptive+recompute", with_training(llama, tp=2, recompute=["full", "selective"]), model, None),
        ("tp:chunks", tp_chunks, model, None),
        ("tp:gemma-interleaved", with_training(gemma, tp=2), gemma_model, None),
        ("tp:adaptive, rank 1 drops a W", with_training(llama, tp=2), model, None),
        ("tp:zero1", with_training(tp_pp1, dp=2, zero=1), model, None),
        ("tp:zero3", with_training(tp_pp1, dp=2, zero=3), model, None),
        ("dp:zero1", with_training(llama, dp=2, zero=1), model, dp),
        ("dp:zero2", with_training(llama, dp=2, zero=2), model, dp),
        ("dp:zero3", with_training(llama, dp=2, zero=3), model, dp),
        ("dp:zero3+recompute", with_training(llama, dp=2, zero=3, recompute=["full", "selective"]), model, dp),
        ("dp:gemma-interleaved-zero3", with_training(gemma, dp=2, zero=3), gemma_model, dp),
        ("dp:zero1, rank 1 drops a W", with_training(llama, dp=2, zero=1), model, None),
        ("ep:ep2-zero1", with_training(deepseek, dp=2, ep=2, zero=1), ds_model, None),
        ("ep:ep2-zero3+recompute", with_training(deepseek, dp=2, ep=2, zero=3, recompute=modes), ds_model, None),
        ("ep:dp4-ep2-zero3", with_training(ds_pp1, dp=4, ep=2, zero=3), ds_model, None),
    ]

    def steps(label: str) -> int:
        return 2 if label.startswith(("dp:", "ep:ep2-")) and "drops a W" not in label else 1

    jobs = [
        PlanJob(plan, spec, label=label, predicted_comm_s=comm, steps=steps(label)) for label, plan, spec, comm in cases
    ]
    faults = ",".join(f"skipw:1:0:{i}" for i, (label, *_) in enumerate(cases) if "drops a W" in label)
    results = launch_with_faults(jobs, FOUR_RANK_OPTIONS, faults)
    return {job.label: Ran(job.plan, job.model, r) for job, r in zip(jobs, results, strict=True)}


def shape_plans(folder: Path, num_microbatches: int = 4) -> dict[tuple[str, str], tuple[Path, ModelSpec]]:
    """Every family (`FAMILIES`) on every plan shape (`PLAN_SHAPES`), written under `folder`, each predicted
    at 0.05 s: {(family, shape): (plan file, model)}."""
    out = {}
    for fam in FAMILIES:
        model = tiny_family(fam)
        for name, stage_device, style in PLAN_SHAPES:
            layout = layout_for(model, name, stage_device)
            programs = greedy_programs(layout, num_microbatches, style, seed=1)
            path = write_plan_file(
                folder / f"{fam}-{name}.json", model, layout, programs, num_microbatches, predicted_s=0.05
            )
            out[(fam, name)] = (path, model)
    return out


#: the recomputation patterns `recompute_plans` runs, per stage of a four-stage V placement
RECOMPUTE_PATTERNS = {
    "none": ("none",) * 4,
    "full": ("full",) * 4,
    "selective": ("selective",) * 4,
    "mixed": ("none", "full", "selective", "full"),
}


def recompute_plans(folder: Path, num_microbatches: int = 4) -> list[tuple[str, str, PlanJob]]:
    """(family, pattern, job): per family, no recompute, full everywhere, selective everywhere and mixed
    (each of none / selective / full on some stage), alternately with the I / W split and fused B."""
    out = []
    for fam in FAMILIES:
        model = tiny_family(fam)
        layout = Layout(bounds=even_bounds(model.num_layers, 4), stage_device=(0, 1, 1, 0), num_devices=2)
        for k, (name, modes) in enumerate(RECOMPUTE_PATTERNS.items()):
            programs = greedy_programs(layout, num_microbatches, "zb" if k % 2 else "1f1b")
            path = write_plan_file(
                folder / f"{fam}-{name}.json", model, layout, programs, num_microbatches, recompute=modes
            )
            out.append((fam, name, job(path, model)))
    return out


#: the zoo's tiny models whose plans `strategy_jobs` makes with every strategy
ZOO_TINY = ("tiny-llama", "tiny-gemma", "tiny-deepseek", "tiny-nemotron-h")


def strategy_jobs(folder: Path) -> list[tuple[str, PlanJob]]:
    """(label, job): `adaptis plan` of each of `ZOO_TINY` on the cpu profile (pp 2, 4 micro-batches, seq 16)
    with every classic strategy and adaptive, written under `folder` and read back as `adaptis run` reads it;
    the label names the model, the strategy and where the plan came from."""
    from adaptis_plan.schedules import STRATEGIES
    from adaptis_plan.usecases import PlanRequest, load_plan_and_model, make_plan_for

    out = []
    for model in ZOO_TINY:  # every plan has pp 2 (dp 1, tp 1): one launch runs them all
        for strategy in (*STRATEGIES, "adaptive"):
            req = PlanRequest.of(
                model_arg=model, hardware_arg="cpu", pp=2, num_microbatches=4, seq_len=16, strategy=strategy,
                time_limit_s=1.0, hard_stop=False,
            )  # fmt: skip
            path = folder / f"{model}-{strategy}.json"
            write_plan(make_plan_for(req).plan, path)
            plan, spec = load_plan_and_model(str(path), None)
            source = plan.search.get("source") if plan.search else ""
            out.append((f"{model} {strategy} ({source})", PlanJob(plan, spec, label=str(path))))
    return out


#: the options of the two-process launch: one verified step
TWO_RANK_OPTIONS = RunOptions(steps=1, warmup=0, verify=True, timeout_s=180)


def launch_with_faults(jobs: list[PlanJob], options: RunOptions, faults: str) -> list[dict[str, Any]]:
    """`run_plans` with the executor's fault hook set to `faults` (ADAPTIS_EXECUTOR_FAULT, which the workers
    inherit) and one intra-op thread for the references here, as `_one_thread` gives the tests (a session
    fixture starts before it); both restored after."""
    import torch

    prev, threads = os.environ.get("ADAPTIS_EXECUTOR_FAULT"), torch.get_num_threads()
    os.environ["ADAPTIS_EXECUTOR_FAULT"] = faults
    torch.set_num_threads(1)
    try:
        return run_plans(jobs, options)
    finally:
        torch.set_num_threads(threads)
        if prev is None:
            del os.environ["ADAPTIS_EXECUTOR_FAULT"]
        else:
            os.environ["ADAPTIS_EXECUTOR_FAULT"] = prev


def untied_gemma() -> ModelSpec:
    """The tiny gemma family with its own (untied) head, which can be split into vocabulary chunks."""
    g = tiny_family("gemma")
    return ModelSpec.model_validate({**g.model_dump(), "name": "tiny-gemma-untied", "tie_word_embeddings": False})


#: the split-head plans `head_chunk_jobs` writes: (chunks k, bounds, stage -> device, order style) of the
#: 6-layer `untied_gemma` split into blocks 1-4 and then its k head chunks from layer 5 on
HEAD_CHUNK_CASES = (
    (2, (0, 3, 6, 7), (0, 1, 0), "zb"),  # chunk 0 with two blocks on device 1, chunk 1 on device 0; I/W
    (3, (0, 5, 6, 7, 8), (0, 1, 0, 1), "zb"),  # one stage per chunk, every boundary crosses devices; I/W
    (3, (0, 3, 6, 8), (0, 1, 0), "1f1b"),  # chunks 1 and 2 in one stage
    (3, (0, 5, 6, 7, 8), (0, 1, 1, 0), "random"),  # chunks 0 and 1: adjacent stages on device 1; B and I/W
)


def head_chunk_jobs(folder: Path, num_microbatches: int = 4) -> list[tuple[str, PlanJob]]:
    """(label, job): each of `HEAD_CHUNK_CASES` planned on the split model ("split<j>"), then the second
    one's plan given the unsplit model ("unsplit"), which the launcher splits as planned."""
    base = untied_gemma()
    out = []
    for j, (k, bounds, stage_device, style) in enumerate(HEAD_CHUNK_CASES):
        model = split_head(base, k)
        layout = Layout(bounds=bounds, stage_device=stage_device, num_devices=2)
        programs = greedy_programs(layout, num_microbatches, style, seed=2)
        path = write_plan_file(folder / f"split{j}.json", model, layout, programs, num_microbatches)
        out.append((f"split{j}", PlanJob(read_plan(path), model, label=str(path))))
    out.append(("unsplit", PlanJob(out[1][1].plan, base)))
    return out


def two_rank_launch(folder: Path) -> dict[str, Ran]:
    """The two-process cases of tests/executor that verify one step, in one torchrun launch, by label:
    "shapes:<family> <shape>" (`shape_plans`; gemma's irregular plan also writes its measured trace, the
    result's "trace"), "shapes:rank 1 drops a W" (deepseek's interleaved plan, where rank 1 loses one
    micro-batch's weight gradients: it must fail verification), "recompute:<family> <pattern>"
    (`recompute_plans`), "strategies:<model> <strategy> (<source>)" (`strategy_jobs`),
    "heads:split<j>" / "heads:unsplit" (`head_chunk_jobs`), and with their own steps or dtype
    (`PlanJob.steps`, `PlanJob.dtype`): "bf16:heads split1" (the second split plan in bf16) and
    "trains:gemma gpipe" (three steps of gemma's GPipe plan, tied embeddings on two devices, its trace
    written)."""
    for sub in ("shapes", "recompute", "strategies", "heads"):
        (folder / sub).mkdir(exist_ok=True)
    shapes = shape_plans(folder / "shapes")
    named: list[tuple[str, PlanJob]] = [
        (
            f"shapes:{fam} {shape}",
            job(path, model, folder / "trace.json" if (fam, shape) == ("gemma", "irregular") else None),
        )
        for (fam, shape), (path, model) in sorted(shapes.items())
    ]
    named.append(("shapes:rank 1 drops a W", job(*shapes[("deepseek", "interleaved-zb")])))
    named += [(f"recompute:{fam} {name}", j) for fam, name, j in recompute_plans(folder / "recompute")]
    named += [(f"strategies:{label}", j) for label, j in strategy_jobs(folder / "strategies")]
    heads = head_chunk_jobs(folder / "heads")
    named += [(f"heads:{label}", j) for label, j in heads]
    named.append(("bf16:heads split1", dataclasses.replace(heads[1][1], dtype="bf16")))
    gpipe = job(*shapes[("gemma", "gpipe")], folder / "gpipe-trace.json")
    named.append(("trains:gemma gpipe", dataclasses.replace(gpipe, steps=3)))
    fault = next(i for i, (label, _) in enumerate(named) if label == "shapes:rank 1 drops a W")
    results = launch_with_faults([j for _, j in named], TWO_RANK_OPTIONS, f"skipw:1:0:{fault}")
    return {label: Ran(j.plan, j.model, r) for (label, j), r in zip(named, results, strict=True)}
