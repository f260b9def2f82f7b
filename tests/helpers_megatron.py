"""Megatron-LM's command-line flags that `adaptis export --format megatron-args` may write, as
Megatron declares them, and a parser built from them.

megatron-core (the `interop` extra) does not ship `megatron.training`, whose `arguments.py` owns
these flags, so they are copied here: names, argparse action, dest, type and choices, read from
the parser that `megatron.training.arguments.add_megatron_arguments` builds at NVIDIA/Megatron-LM
commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (megatron/training/arguments.py; the recompute
and hybrid flags are generated there from megatron/core/transformer/transformer_config.py and
megatron/training/models/ dataclass fields by `ArgumentGroupFactory`).
"""

from __future__ import annotations

import argparse
import shlex

from bench.megatron_check import SIX_PLANS  # the checker's reference plans, also this suite's

# flag -> (dest, kind, type, choices); kind "true" = store_true, "value" = one value
MEGATRON_FLAGS: dict[str, tuple[str, str, type | None, tuple[str, ...] | None]] = {
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", "value", int, None),
    "--sequence-parallel": ("sequence_parallel", "true", None, None),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", "value", int, None),
    "--pipeline-model-parallel-layout": ("pipeline_model_parallel_layout", "value", str, None),
    "--hybrid-layer-pattern": ("hybrid_layer_pattern", "value", str, None),
    "--num-layers": ("num_layers", "value", int, None),
    "--mtp-num-layers": ("mtp_num_layers", "value", int, None),
    "--context-parallel-size": ("context_parallel_size", "value", int, None),
    "--expert-model-parallel-size": ("expert_model_parallel_size", "value", int, None),
    "--micro-batch-size": ("micro_batch_size", "value", int, None),
    "--global-batch-size": ("global_batch_size", "value", int, None),
    "--seq-length": ("seq_length", "value", int, None),
    "--bf16": ("bf16", "true", None, None),
    # generated from TransformerConfig.attention_backend (AttnBackend) by ArgumentGroupFactory._get_enum_kwargs:
    # the member's name, checked against the members
    "--attention-backend": ("attention_backend", "value", str, ("flash", "fused", "unfused", "local", "auto")),
    "--fp16": ("fp16", "true", None, None),
    "--use-distributed-optimizer": ("use_distributed_optimizer", "true", None, None),
    "--use-megatron-fsdp": ("use_megatron_fsdp", "true", None, None),
    "--data-parallel-sharding-strategy": (
        "data_parallel_sharding_strategy",
        "value",
        str,
        ("no_shard", "optim", "optim_grads", "optim_grads_params"),
    ),
    "--ckpt-format": ("ckpt_format", "value", str, ("torch", "torch_dist", "torch_dcp", "fsdp_dtensor")),
    "--recompute-granularity": ("recompute_granularity", "value", str, ("full", "selective")),
    "--recompute-method": ("recompute_method", "value", str, ("uniform", "block")),
    "--recompute-num-layers": ("recompute_num_layers", "value", int, None),
    "--overlap-grad-reduce": ("overlap_grad_reduce", "true", None, None),
    "--overlap-param-gather": ("overlap_param_gather", "true", None, None),
    # generated from ModelParallelConfig.tp_comm_overlap (a bool field: store_true)
    "--tp-comm-overlap": ("tp_comm_overlap", "true", None, None),
    "--num-virtual-stages-per-pipeline-rank": ("num_virtual_stages_per_pipeline_rank", "value", int, None),
    "--num-layers-per-virtual-pipeline-stage": ("num_layers_per_virtual_pipeline_stage", "value", int, None),
}


def megatron_parser() -> argparse.ArgumentParser:
    """An argparse parser with Megatron's declarations of `MEGATRON_FLAGS` (exits on anything else)."""
    parser = argparse.ArgumentParser(prog="megatron", allow_abbrev=False, exit_on_error=False)
    for flag, (dest, kind, typ, choices) in MEGATRON_FLAGS.items():
        if kind == "true":
            parser.add_argument(flag, dest=dest, action="store_true")
        else:
            parser.add_argument(flag, dest=dest, type=typ, choices=choices, default=None)
    return parser


def argv_of(text: str) -> list[str]:
    """The argument list a POSIX shell makes of the export's text: `#` lines are comments, a line
    ending in ` \\` continues the command (the shell drops the backslash and the newline)."""
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(line.endswith(" \\") for line in lines), lines
    return shlex.split(" ".join(line[:-2] for line in lines))


def parse_megatron_args(text: str) -> argparse.Namespace:
    return megatron_parser().parse_args(argv_of(text))


# ----------------------------------------------------------------------------- settings read back
_ZERO_OF = {(False, None): 0, (True, None): 1, (True, "optim_grads"): 2, (True, "optim_grads_params"): 3}
_ATTENTION_OF = {"flash": "flash", "fused": "cudnn", "unfused": "unfused"}


def world_size_of(text: str) -> int:
    """The world size the export's `# world size = ... = N GPUs` line states."""
    line = next(line for line in text.splitlines() if line.startswith("# world size = "))
    return int(line.split(" = ")[-1].split()[0])


def layout_stage_sizes(layout: str) -> list[int]:
    """Layers per stage of a `--pipeline-model-parallel-layout` string (`Ett|t*3|ttL`: 3, 3, 3)."""
    sizes = []
    for stage in layout.split("|"):
        count, i = 0, 0
        while i < len(stage):
            if i + 1 < len(stage) and stage[i + 1] == "*":
                j = i + 2
                while j < len(stage) and stage[j].isdigit():
                    j += 1
                count += int(stage[i + 2 : j])
                i = j
            else:
                count += 1
                i += 1
        sizes.append(count)
    return sizes


def settings_from_args(ns: argparse.Namespace, world_size: int) -> dict:
    """The plan settings Megatron runs with these arguments (the keys `settings_of_plan` gives)."""
    tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size
    dp = world_size // (tp * pp * cp)
    sizes = layout_stage_sizes(ns.pipeline_model_parallel_layout)
    mode = ns.recompute_granularity or "none"
    if mode == "full":
        assert (ns.recompute_method, ns.recompute_num_layers) == ("uniform", 1), "full: each block from its input"
    return {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "dp": dp,
        "ep": ns.expert_model_parallel_size,
        "micro_batch_size": ns.micro_batch_size,
        "num_microbatches": ns.global_batch_size // (ns.micro_batch_size * dp),
        "seq_len": ns.seq_length,
        "dtype": "bf16" if ns.bf16 else "fp16" if ns.fp16 else "fp32",
        "zero": _ZERO_OF[(ns.use_distributed_optimizer, ns.data_parallel_sharding_strategy)],
        "fsdp": ns.use_megatron_fsdp,
        "sequence_parallel": ns.sequence_parallel,
        "attention": _ATTENTION_OF[ns.attention_backend],
        "grad_overlap": ns.overlap_grad_reduce,
        "param_overlap": ns.overlap_param_gather,
        "tp_comm_overlap": ns.tp_comm_overlap,
        "stage_layers": sizes,
        "stage_device": [s % pp for s in range(len(sizes))],
        "block_recompute": [mode] * len(sizes),
    }


def settings_of_plan(plan: dict) -> dict:
    """A plan file's settings as Megatron must run them: the degrees, the batch, the ZeRO stage, the
    overlaps the cost model priced (`judge.training_step`: gradient reduce with dp x cp > 1, the
    parameter gather with ZeRO >= 1 too), sequence parallelism with tp > 1 (how the cost model
    prices TP), the stages and each stage's recomputation (stages without blocks as the export's one mode)."""
    t = plan["training"]
    kinds = [layer["kind"] for layer in plan["model"]["spec"]["layers"]]
    stages = plan["stages"]
    blocks = [any(kinds[i] not in ("embedding", "head") for i in range(*s["layers"])) for s in stages]
    modes = {s["recompute"] for s, b in zip(stages, blocks, strict=True) if b} or {"none"}
    assert len(modes) == 1, modes  # a mix is refused by the export
    (mode,) = modes
    overlap = t["dp_overlap"] and t["dp"] * t["cp"] > 1
    has_moe = any(layer.get("moe") for layer in plan["model"]["spec"]["layers"])
    return {
        "tp": t["tp"],
        "pp": t["pp"],
        "cp": t["cp"],
        "dp": t["dp"],
        "ep": t["ep"] if has_moe else 1,
        "micro_batch_size": t["micro_batch_size"],
        "num_microbatches": t["num_microbatches"],
        "seq_len": t["seq_len"],
        "dtype": t["dtype"],
        "zero": t["zero"],
        "fsdp": t["zero"] >= 2,
        "sequence_parallel": t["tp"] > 1,
        "attention": t["attention"],
        "grad_overlap": overlap,
        "param_overlap": overlap and t["zero"] >= 1,
        "tp_comm_overlap": t["tp_comm_overlap"] and t["tp"] > 1,
        "stage_layers": [s["layers"][1] - s["layers"][0] for s in stages],
        "stage_device": [s["device"] for s in stages],
        "block_recompute": [mode] * len(stages),
    }


# ----------------------------------------------------------------------------- the six plans
def build_six_plans(folder, run) -> dict:  # noqa: ANN001
    """name -> (plan path, plan dict) for `SIX_PLANS`, planned with `run` (`tests.conftest.run_adaptis`)."""
    import json

    out = {}
    for name, options in SIX_PLANS:
        path = folder / f"{name}.json"
        r = run("plan", *options.split(), "--time-limit", "1", "--no-hard-stop", "-o", path)
        assert r.exit_code == 0, (name, r.stderr)
        out[name] = (path, json.loads(path.read_text()))
    return out
