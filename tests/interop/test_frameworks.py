"""Exports read by the frameworks' own code: megatron-core's layout parser and torchtitan's config
manager, model split and schedule builder. Each test reads back which layers every stage holds
and on which rank, and checks it against the plan.

Needs the `interop` extras (megatron-core 0.16.1, torchtitan 0.3.0; `make test` installs them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from adaptis_plan.spec.model import AttentionSpec, LayerSpec, MlpSpec, ModelSpec
from tests.conftest import run_adaptis


def _megatron_layout_module():  # noqa: ANN202 - megatron-core's module, imported when a test needs it
    """megatron-core's layout parser, imported by the test that reads it (not at collection: megatron-core
    takes seconds to import, in every worker)."""
    return pytest.importorskip(
        "megatron.core.transformer.pipeline_parallel_layer_layout", reason="the interop extras (pip install .[interop])"
    )


def _plan(tmp_path: Path, model: str | Path, name: str, *args: str) -> tuple[Path, dict]:
    path = tmp_path / f"{name}.json"
    r = run_adaptis("plan", "--model", model, *args, "--time-limit", "1", "--no-hard-stop", "-o", path)
    assert r.exit_code == 0, r.stderr
    return path, json.loads(path.read_text())


# ----------------------------------------------------------------------------- Megatron
MEGATRON_CASES = [
    # (name, model, hardware, pp, micro-batches, seq, extra options)
    ("interleaved", "tiny-llama", "cpu", "2", "4", "64", ("--strategy", "Interleaved1F1B")),
    ("1f1b", "tiny-deepseek", "cpu", "2", "4", "64", ("--strategy", "1F1B")),
    ("adaptive-gemma-s", "gemma-s", "h200", "4", "16", "4096", ("--target", "megatron")),
    ("adaptive-nemotron-h-s", "nemotron-h-s", "h200", "4", "16", "4096", ("--target", "megatron")),
]


@pytest.mark.parametrize(
    ("name", "model", "hw", "pp", "mb", "seq", "extra"), MEGATRON_CASES, ids=[c[0] for c in MEGATRON_CASES]
)
def test_megatron_core_parses_our_layout(tmp_path: Path, name, model, hw, pp, mb, seq, extra) -> None:
    from megatron.core.transformer.enums import LayerType

    path, plan = _plan(
        tmp_path, model, name, "--hardware", hw, "--pp", pp, "--microbatches", mb, "--seq-len", seq, *extra
    )
    r = run_adaptis("export", path, "--format", "megatron-layout")
    assert r.exit_code == 0, r.stderr
    text = r.stdout.strip()
    num_pp = int(pp)
    layout = _megatron_layout_module().PipelineParallelLayerLayout(text, num_pp)
    kinds = [layer["kind"] for layer in plan["model"]["spec"]["layers"]]
    num_decoders = sum(k not in ("embedding", "head") for k in kinds)
    layout.validate_layer_layout(num_layers=num_decoders, mtp_num_layers=None)
    # read back: virtual stage v of rank r is global stage v * pp + r; its entries are its layers, in order
    vpp = layout.virtual_pipeline_model_parallel_size
    assert vpp * num_pp == len(plan["stages"])
    start = 0
    letter = {LayerType.embedding: "embedding", LayerType.loss: "head", LayerType.decoder: "block"}
    for v in range(vpp):
        for rank in range(num_pp):
            stage = plan["stages"][v * num_pp + rank]
            held = layout.layout[rank][v]
            assert stage["device"] == rank
            assert stage["layers"] == [start, start + len(held)]
            for layer, lt in zip(range(start, start + len(held)), held, strict=True):
                kind = kinds[layer]
                assert letter[lt] == (kind if kind in ("embedding", "head") else "block")
            start += len(held)
    assert start == len(kinds)


# (name, training edits, stage recompute): a plan's training block as `adaptis plan --gpus` writes it
MEGATRON_ARGS_CASES = [
    ("classic", {}, None),
    ("tp2-dp4-zero1-full", {"tp": 2, "dp": 4, "zero": 1}, "full"),
    ("tp2-cp2-dp2-zero3-selective", {"tp": 2, "cp": 2, "dp": 2, "zero": 3}, "selective"),
    ("tp2-dp2-cudnn", {"tp": 2, "dp": 2, "attention": "cudnn"}, None),
]


@pytest.mark.parametrize(("name", "edits", "recompute"), MEGATRON_ARGS_CASES, ids=[c[0] for c in MEGATRON_ARGS_CASES])
def test_megatron_core_config_takes_our_arguments(tmp_path: Path, name, edits, recompute) -> None:
    """megatron-core's TransformerConfig (its own checks of the parallel degrees, sequence parallelism,
    recomputation and the layout) accepts the arguments megatron-args writes, parsed with Megatron's
    flag declarations (`tests/helpers_megatron.py`)."""
    import torch
    from helpers_megatron import parse_megatron_args
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    path, plan = _plan(tmp_path, "tiny-llama", name, *"--hardware cpu --pp 2 --microbatches 4 --seq-len 64".split(),
                       "--strategy", "Interleaved1F1B")  # fmt: skip
    plan["training"].update(edits)
    for stage in plan["stages"]:
        stage["recompute"] = recompute or "none"
    path.write_text(json.dumps(plan))
    r = run_adaptis("export", path, "--format", "megatron-args")
    assert r.exit_code == 0, r.stderr
    ns = parse_megatron_args(r.stdout)
    spec = plan["model"]["spec"]
    heads = next(layer["attention"]["num_heads"] for layer in spec["layers"] if layer.get("attention"))
    config = TransformerConfig(
        num_layers=ns.num_layers,
        hidden_size=spec["hidden_size"],
        num_attention_heads=heads,
        tensor_model_parallel_size=ns.tensor_model_parallel_size,
        sequence_parallel=ns.sequence_parallel,
        pipeline_model_parallel_size=ns.pipeline_model_parallel_size,
        pipeline_dtype=torch.bfloat16,
        pipeline_model_parallel_layout=ns.pipeline_model_parallel_layout,
        context_parallel_size=ns.context_parallel_size,
        expert_model_parallel_size=ns.expert_model_parallel_size,
        bf16=ns.bf16,
        recompute_granularity=ns.recompute_granularity,
        recompute_method=ns.recompute_method,
        recompute_num_layers=ns.recompute_num_layers,
        attention_backend=AttnBackend[ns.attention_backend],
    )
    t = plan["training"]
    assert (config.tensor_model_parallel_size, config.context_parallel_size) == (t["tp"], t["cp"])
    assert config.sequence_parallel == (t["tp"] > 1)
    assert config.virtual_pipeline_model_parallel_size == len(plan["stages"]) // t["pp"]
    assert config.recompute_granularity == (None if recompute is None else recompute)
    assert ns.global_batch_size == t["dp"] * t["micro_batch_size"] * t["num_microbatches"]
    want = {"cudnn": AttnBackend.fused, "unfused": AttnBackend.unfused}.get(t.get("attention"), AttnBackend.flash)
    assert config.attention_backend == want


def test_megatron_export_refuses_what_it_cannot_express(tmp_path: Path) -> None:
    path, _ = _plan(tmp_path, "tiny-llama", "zbv", *"--hardware cpu --pp 2 --microbatches 4 --seq-len 64".split(),
                    "--strategy", "ZBVZeroBubble")  # fmt: skip
    out = tmp_path / "layout.txt"
    r = run_adaptis("export", path, "--format", "megatron-layout", "-o", out)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1 and "--target megatron" in r.stderr
    assert not out.exists()


# ----------------------------------------------------------------------------- torchtitan
def _debugmodel_spec() -> ModelSpec:
    """A model with torchtitan's llama3 debug model's 6 blocks (the layer count is what the split reads)."""
    block = LayerSpec(
        kind="decoder",
        attention=AttentionSpec(num_heads=16, num_kv_heads=16, head_dim=16),
        mlp=MlpSpec(intermediate_size=768),
    )
    return ModelSpec(
        name="llama3-debug",
        hidden_size=256,
        vocab_size=2048,
        layers=[LayerSpec(kind="embedding"), *[block] * 6, LayerSpec(kind="head")],
    )


#: what `adaptis plan --target torchtitan` writes: priced as torch's pipeline stages keep FSDP2's state
_KEPT = {"stage_keeps_unsharded": True}
TORCHTITAN_CASES = [
    # (name, plan options, training edits, every stage's recompute): the edits are a plan's training
    # block as `adaptis plan --gpus` writes it (the degrees beside the pipeline)
    ("gpipe", ("--strategy", "GPipe"), {}, "none"),  # one stage per rank
    (
        "interleaved",
        ("--strategy", "Interleaved1F1B"),
        {"tp": 2, "dp": 4, "cp": 2, "ep": 2, "zero": 3, **_KEPT},
        "full",
    ),
    ("zbv", ("--strategy", "ZBVZeroBubble"), {"tp": 4, "dp": 2, "zero": 1, **_KEPT}, "selective"),
    ("adaptive", ("--target", "torchtitan"), {"dp": 8, "zero": 0, "dtype": "fp32"}, "none"),
]
# ZeRO stage -> (data_parallel_replicate_degree, data_parallel_shard_degree) as multiples of dp
_TT_DP = {0: (1, 0), 1: (0, 1), 2: (0, 1), 3: (0, 1)}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "extra", "edits", "recompute"), TORCHTITAN_CASES, ids=[c[0] for c in TORCHTITAN_CASES]
)
def test_torchtitan_loads_and_splits_our_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name, extra, edits, recompute
) -> None:
    pytest.importorskip("torchtitan", reason="the interop extras (pip install .[interop])")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.distributed.pipeline_parallel import _build_pipeline_schedule, _pipeline_module_split

    spec = tmp_path / "model.json"
    spec.write_text(json.dumps(_debugmodel_spec().model_dump(mode="json")))
    path, plan = _plan(tmp_path, spec, name, *"--hardware cpu --pp 2 --microbatches 4 --seq-len 64".split(), *extra)
    plan["training"].update(edits)
    for stage in plan["stages"]:
        stage["recompute"] = recompute
    path.write_text(json.dumps(plan))
    t = plan["training"]
    module = f"adaptis_tt_{name}"
    config_file = tmp_path / "tt" / f"{module}.py"
    r = run_adaptis(
        "export", path, "--format", "torchtitan", "--torchtitan-config", "llama3:llama3_debugmodel", "-o", config_file
    )
    assert r.exit_code == 0, r.stderr
    monkeypatch.syspath_prepend(str(config_file.parent))
    monkeypatch.chdir(tmp_path)
    config = ConfigManager().parse_args(["--module", module, "--config", "adaptis_pipeline"])
    par = config.parallelism
    assert par.pipeline_parallel_degree == 2
    assert Path(par.pipeline_parallel_schedule_csv).read_text() == config_file.with_suffix(".csv").read_text()
    assert config.training.local_batch_size // par.pipeline_parallel_microbatch_size == 4
    # every degree of the plan, as torchtitan's own config parser read it back
    replicate, shard = _TT_DP[t["zero"]]
    assert (par.tensor_parallel_degree, par.context_parallel_degree, par.expert_parallel_degree) == (
        t["tp"],
        t["cp"],
        t["ep"],
    )
    assert (par.data_parallel_replicate_degree, par.data_parallel_shard_degree) == (
        t["dp"] if replicate else 1,
        t["dp"] if shard else 1,
    )
    # under pipelining torch's stages keep parameters gathered over the step: never reshard, as priced
    kept = t.get("stage_keeps_unsharded", False) and t["zero"] >= 1
    assert par.fsdp_reshard_after_forward == ("always" if t["zero"] == 3 and not kept else "never")
    assert config.training.global_batch_size == t["dp"] * config.training.local_batch_size
    assert config.training.seq_len == 64
    assert config.training.mixed_precision_param == {"bf16": "bfloat16", "fp32": "float32"}[t["dtype"]]
    want_ac = {"none": type(None), "selective": SelectiveAC.Config, "full": FullAC.Config}[recompute]
    assert type(config.activation_checkpoint) is want_ac

    expected = {s["stage"]: s for s in plan["stages"]}
    kinds = [layer["kind"] for layer in plan["model"]["spec"]["layers"]]
    seen = set()
    for rank in range(2):
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=2)
        try:
            mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("pp",))
            with torch.device("meta"):
                whole = config.model_spec.model.build()
            stages, parts = _pipeline_module_split(
                whole, mesh, par.pipeline_parallel_schedule, torch.device("cpu"), par.module_fqns_per_model_part
            )
            for stage, part in zip(stages, parts, strict=True):
                want = expected[stage.stage_index]
                assert want["device"] == rank, (stage.stage_index, rank)
                lo, hi = want["layers"]
                blocks = [layer - 1 for layer in range(lo, hi) if kinds[layer] not in ("embedding", "head")]
                assert sorted(int(k) for k in part.layers.keys()) == blocks
                assert (part.tok_embeddings is not None) == (lo == 0)
                assert (part.lm_head is not None) == (hi == len(kinds)) == (part.norm is not None)
                seen.add(stage.stage_index)
            # torchtitan's own schedule builder loads the CSV for these stages; its stage -> rank map is the plan's
            schedule = _build_pipeline_schedule(
                parallelism=par,
                local_batch_size=config.training.local_batch_size,
                stages=stages,
                loss_fn=lambda *a, **k: (None, None),
            )
            assert schedule.stage_index_to_group_rank == {s: st["device"] for s, st in expected.items()}
        finally:
            dist.destroy_process_group()
    assert seen == set(expected)
    sys.modules.pop(module, None)


# ----------------------------------------------------------------------------- Megatron: the six plans
SIX = ("dense-tp-pp-dp", "zero3-fsdp", "cp", "moe-ep", "pp1", "interleaved-layout")


@pytest.fixture(scope="module")
def six_plans(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from helpers_megatron import build_six_plans

    return build_six_plans(tmp_path_factory.mktemp("six"), run_adaptis)


@pytest.mark.parametrize("name", SIX)
def test_megatron_core_configs_take_the_six_exports(six_plans, name) -> None:
    """megatron-core's own config objects, built from the exported arguments as Megatron-LM's
    training loop builds them (megatron/training/arguments.py `core_transformer_config_from_args`,
    megatron/training/training.py `get_model` -> DistributedDataParallelConfig, the optimizer's
    OptimizerConfig), accept them and hold the plan's settings: the parallel degrees and layout,
    sequence parallelism, TP overlap, recomputation, the attention backend (TransformerConfig), the
    overlaps and the sharding (DistributedDataParallelConfig), the distributed optimizer (OptimizerConfig)."""
    import torch
    from helpers_megatron import parse_megatron_args, settings_of_plan, world_size_of
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.enums import AttnBackend
    from megatron.core.transformer.transformer_config import TransformerConfig

    path, plan = six_plans[name]
    r = run_adaptis("export", path, "--format", "megatron-args")
    assert r.exit_code == 0, r.stderr
    ns = parse_megatron_args(r.stdout)
    want = settings_of_plan(plan)
    spec = plan["model"]["spec"]
    attention = next(layer["attention"] for layer in spec["layers"] if layer.get("attention"))
    moe = next((layer["moe"] for layer in spec["layers"] if layer.get("moe")), None)
    dtype = torch.bfloat16 if ns.bf16 else torch.float16 if ns.fp16 else torch.float32
    config = TransformerConfig(
        num_layers=ns.num_layers,
        hidden_size=spec["hidden_size"],
        num_attention_heads=attention["num_heads"],
        num_query_groups=attention.get("num_kv_heads"),
        tensor_model_parallel_size=ns.tensor_model_parallel_size,
        sequence_parallel=ns.sequence_parallel,
        tp_comm_overlap=ns.tp_comm_overlap,
        pipeline_model_parallel_size=ns.pipeline_model_parallel_size,
        pipeline_dtype=dtype,
        pipeline_model_parallel_layout=ns.pipeline_model_parallel_layout,
        context_parallel_size=ns.context_parallel_size,
        expert_model_parallel_size=ns.expert_model_parallel_size,
        num_moe_experts=moe["num_experts"] if moe else None,
        moe_router_topk=moe["top_k"] if moe else 2,
        bf16=ns.bf16,
        fp16=ns.fp16,
        params_dtype=dtype,
        recompute_granularity=ns.recompute_granularity,
        recompute_method=ns.recompute_method,
        recompute_num_layers=ns.recompute_num_layers,
        attention_backend=AttnBackend[ns.attention_backend],
    )
    ddp = DistributedDataParallelConfig(
        overlap_grad_reduce=ns.overlap_grad_reduce,
        overlap_param_gather=ns.overlap_param_gather,
        use_distributed_optimizer=ns.use_distributed_optimizer,
        use_megatron_fsdp=ns.use_megatron_fsdp,
        data_parallel_sharding_strategy=ns.data_parallel_sharding_strategy or "no_shard",
    )
    opt = OptimizerConfig(
        optimizer="adam",
        lr=1e-4,
        bf16=ns.bf16,
        fp16=ns.fp16,
        params_dtype=dtype,
        use_distributed_optimizer=ns.use_distributed_optimizer,
    )
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size) == (want["tp"], want["pp"])
    assert (config.context_parallel_size, config.expert_model_parallel_size) == (want["cp"], want["ep"])
    assert config.sequence_parallel == want["sequence_parallel"] and config.tp_comm_overlap == want["tp_comm_overlap"]
    vpp = len(plan["stages"]) // want["pp"]
    assert (config.virtual_pipeline_model_parallel_size or 1) == vpp
    assert (config.recompute_granularity or "none") == want["block_recompute"][0]
    assert (
        config.attention_backend
        == AttnBackend[{"flash": "flash", "cudnn": "fused", "unfused": "unfused"}[want["attention"]]]
    )
    assert (ddp.overlap_grad_reduce, ddp.overlap_param_gather) == (want["grad_overlap"], want["param_overlap"])
    assert ddp.use_megatron_fsdp == want["fsdp"]
    assert (
        ddp.data_parallel_sharding_strategy
        == {0: "no_shard", 1: "no_shard", 2: "optim_grads", 3: "optim_grads_params"}[want["zero"]]
    )
    assert opt.use_distributed_optimizer == (want["zero"] >= 1)
    world = world_size_of(r.stdout)
    assert world // (want["tp"] * want["pp"] * want["cp"]) == want["dp"]
    assert ns.global_batch_size == want["dp"] * want["micro_batch_size"] * want["num_microbatches"]
