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
