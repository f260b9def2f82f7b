"""`megatron_args`: Megatron-LM's command line for a plan's whole training configuration, parsed
back with Megatron's own flag declarations (`tests/helpers_megatron.py`, copied from
megatron/training/arguments.py at NVIDIA/Megatron-LM d98e8a6)."""

from __future__ import annotations

import pytest
from helpers_megatron import MEGATRON_FLAGS, argv_of, parse_megatron_args

from adaptis_plan.core import Layout
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.export import TrainingShape, megatron_layout, one_recompute
from adaptis_plan.planfile.export_megatron import megatron_args, megatron_env, megatron_launch
from adaptis_plan.schedules import placement, uniform_bounds

pytestmark = pytest.mark.unit


def _kinds(n: int) -> list[str]:
    return ["embedding"] + ["decoder"] * (n - 2) + ["head"]


_INTERLEAVED = Layout(uniform_bounds(12, 4), placement("loop", 2, 2), 2)  # 4 stages, 2 per rank


def _comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_classic_interleaved_plan_exact_arguments() -> None:
    text = megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(num_microbatches=8, seq_len=2048))
    args = [line for line in text.splitlines() if not line.startswith("#")]
    assert args == [
        "--tensor-model-parallel-size 1 \\",
        "--pipeline-model-parallel-size 2 \\",
        "--pipeline-model-parallel-layout 'Ett|t*3|t*3|ttL' \\",
        "--num-layers 10 \\",
        "--context-parallel-size 1 \\",
        "--expert-model-parallel-size 1 \\",
        "--micro-batch-size 1 \\",
        "--global-batch-size 8 \\",
        "--seq-length 2048 \\",
        "--bf16 \\",
        "--attention-backend flash \\",
        "--use-distributed-optimizer \\",
    ]
    # comments last (a `#` line between continued lines would end the shell command early)
    assert text.splitlines()[len(args) :] == _comments(text)
    assert any("d98e8a6" in line and "arguments.py" in line for line in _comments(text))
    assert any("interleaved 1F1B (2 virtual stages per rank)" in line for line in _comments(text))
    ns = parse_megatron_args(text)
    assert ns.pipeline_model_parallel_layout == megatron_layout(_INTERLEAVED, _kinds(12))  # the same string
    assert megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(num_microbatches=8, seq_len=2048)) == text


@pytest.mark.parametrize(
    ("tp", "dp", "cp", "mbs", "nmb", "zero"),
    [(1, 1, 1, 1, 4, 0), (2, 1, 1, 1, 4, 1), (4, 8, 1, 2, 16, 1), (2, 4, 2, 1, 8, 2), (8, 16, 4, 1, 32, 3)],
)
def test_degrees_batch_and_zero_round_trip(tp, dp, cp, mbs, nmb, zero) -> None:
    training = TrainingShape(num_microbatches=nmb, micro_batch_size=mbs, seq_len=4096, tp=tp, dp=dp, cp=cp, zero=zero)
    text = megatron_args(_INTERLEAVED, _kinds(12), training)
    ns = parse_megatron_args(text)
    assert (ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size) == (tp, 2, cp)
    assert ns.sequence_parallel == (tp > 1)
    assert ns.micro_batch_size == mbs and ns.seq_length == 4096
    assert ns.global_batch_size == dp * mbs * nmb
    # Megatron runs global / (micro x dp) micro-batches per step: the plan's count
    assert ns.global_batch_size // (ns.micro_batch_size * dp) == nmb
    assert ns.use_distributed_optimizer == (zero >= 1)
    assert ns.use_megatron_fsdp == (zero >= 2)
    want = {0: None, 1: None, 2: "optim_grads", 3: "optim_grads_params"}[zero]
    assert ns.data_parallel_sharding_strategy == want
    assert ns.ckpt_format == ("fsdp_dtensor" if zero >= 2 else None)
    assert f"world size = tp {tp} x pp 2 x cp {cp} x dp {dp} = {tp * 2 * cp * dp} GPUs" in text
    if zero >= 2:
        assert any(f"ZeRO {zero}: Megatron has no DeepSpeed ZeRO stages" in line for line in _comments(text))


@pytest.mark.parametrize(("attention", "backend"), [("flash", "flash"), ("cudnn", "fused"), ("unfused", "unfused")])
def test_the_planned_attention_core_is_megatrons_backend(attention, backend) -> None:
    text = megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(8, attention=attention))
    assert parse_megatron_args(text).attention_backend == backend
    # flash is TransformerEngine's flash-attn backend, and the note says what it needs
    assert any("flash-attn" in line and "planned as flash" in line for line in _comments(text)) == (backend == "flash")


def test_every_flag_is_megatrons() -> None:
    moe = ["embedding", "moe", "moe", "moe", "moe", "head"]
    texts = [
        megatron_args(Layout((0, 3, 6), (0, 1), 2), moe, TrainingShape(4, tp=2, dp=4, ep=4, zero=z), num_experts=[8])
        for z in (0, 1, 2, 3)
    ]
    texts.append(megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4, dtype="fp16", stage_recompute=("full",) * 4)))
    texts.append(megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4, attention="cudnn")))
    texts.append(
        megatron_args(Layout((0, 2, 4), (0, 1), 2), ["embedding", "mamba", "attention", "head"], TrainingShape(4))
    )
    for text in texts:
        flags = [a for a in argv_of(text) if a.startswith("--")]
        assert flags and set(flags) <= set(MEGATRON_FLAGS), set(flags) - set(MEGATRON_FLAGS)


def test_experts() -> None:
    moe = ["embedding", "moe", "moe", "head"]
    layout = Layout((0, 2, 4), (0, 1), 2)
    ns = parse_megatron_args(megatron_args(layout, moe, TrainingShape(4, dp=4, ep=4), num_experts=[64]))
    assert ns.expert_model_parallel_size == 4
    with pytest.raises(InputError, match="ep = 3 does not divide the MoE layers' 64 experts"):
        megatron_args(layout, moe, TrainingShape(4, dp=3, ep=3), num_experts=[64])
    # a dense model: Megatron takes ep > 1 only with experts; ep changes nothing there
    text = megatron_args(layout, _kinds(4), TrainingShape(4, dp=2, ep=2))
    assert parse_megatron_args(text).expert_model_parallel_size == 1
    assert any("ep = 2 in the plan, but the model has no MoE layer" in line for line in _comments(text))


# ---------------------------------------------------------------- recomputation
def test_recompute_uniform_modes() -> None:
    full = parse_megatron_args(megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4, stage_recompute=("full",) * 4)))
    assert (full.recompute_granularity, full.recompute_method, full.recompute_num_layers) == ("full", "uniform", 1)
    sel = parse_megatron_args(
        megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4, stage_recompute=("selective",) * 4))
    )
    assert (sel.recompute_granularity, sel.recompute_method, sel.recompute_num_layers) == ("selective", None, None)
    none = parse_megatron_args(megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4)))
    assert none.recompute_granularity is None


def test_recompute_mixed_stages_are_refused_naming_them() -> None:
    """Megatron sets one recomputation mode for every block: a plan whose block-holding stages differ
    cannot run as priced, so it is refused in one line naming each stage's mode."""
    # an adaptive plan: stage 0 holds only the embedding (no block to recompute), the rest differ
    layout = Layout((0, 1, 4, 7, 10, 12, 14), (0, 1, 0, 1, 0, 1), 2)
    modes = ("none", "full", "none", "selective", "full", "none")
    with pytest.raises(InputError) as e:
        megatron_args(layout, _kinds(14), TrainingShape(4, stage_recompute=modes))
    assert str(e.value) == (
        "megatron-args: Megatron sets one recomputation mode for every block, and this plan's stages differ"
        " (none: stages 2, 5; selective: stage 3; full: stages 1, 4); re-plan with --recompute none, selective or full"
    )
    assert one_recompute(layout, _kinds(14), modes) == ("full", [2, 3, 5])
    # only the embedding-only stage differs: Megatron runs the plan as priced
    same = ("none", "selective", "selective", "selective", "selective", "selective")
    text = megatron_args(layout, _kinds(14), TrainingShape(4, stage_recompute=same))
    assert parse_megatron_args(text).recompute_granularity == "selective"


# ---------------------------------------------------------------- overlap and environment
@pytest.mark.parametrize(
    ("dp", "cp", "zero", "dp_overlap", "grad", "param"),
    [
        (1, 1, 1, True, False, False),  # no data-parallel group: nothing to overlap
        (4, 1, 0, True, True, False),  # ZeRO 0: an all-reduce, no parameter gather
        (4, 1, 1, True, True, True),
        (1, 2, 1, True, True, True),  # cp ranks share the gradient reduction
        (4, 1, 3, True, True, True),
        (4, 1, 1, False, False, False),  # priced without overlap: Megatron's default
    ],
)
def test_dp_overlap_is_exported_as_priced(dp, cp, zero, dp_overlap, grad, param) -> None:
    t = TrainingShape(4, seq_len=4096, dp=dp, cp=cp, zero=zero, dp_overlap=dp_overlap)
    ns = parse_megatron_args(megatron_args(_INTERLEAVED, _kinds(12), t))
    assert (ns.overlap_grad_reduce, ns.overlap_param_gather) == (grad, param)


@pytest.mark.parametrize(("tp", "overlap", "want"), [(1, True, False), (2, False, False), (2, True, True)])
def test_tp_comm_overlap_is_exported_as_priced(tp, overlap, want) -> None:
    ns = parse_megatron_args(megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4, tp=tp, tp_comm_overlap=overlap)))
    assert ns.tp_comm_overlap == want
    assert ns.sequence_parallel == (tp > 1)  # Megatron's TP overlap needs sequence parallelism


@pytest.mark.parametrize(
    ("tp", "cp", "zero", "env"),
    [
        (1, 1, 1, ()),
        (2, 1, 1, (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),)),
        (1, 2, 0, (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),)),
        (2, 1, 2, (("CUDA_DEVICE_MAX_CONNECTIONS", None),)),  # Megatron-FSDP asserts it is not 1
        (1, 1, 3, (("CUDA_DEVICE_MAX_CONNECTIONS", None),)),
    ],
)
def test_environment_follows_megatrons_asserts(tp, cp, zero, env) -> None:
    t = TrainingShape(4, tp=tp, cp=cp, zero=zero, dp=2)
    assert megatron_env(t) == env
    text = megatron_args(_INTERLEAVED, _kinds(12), t)
    notes = [line for line in _comments(text) if line.startswith("# environment:")]
    assert len(notes) == len(env)


# ---------------------------------------------------------------- hybrid models and refusals
def test_hybrid_model_takes_a_piped_layer_pattern() -> None:
    kinds = ["embedding", "mamba", "attention", "mamba", "mlp", "moe_mlp", "decoder", "head"]
    layout = Layout((0, 1, 4, 7, 8), placement("loop", 2, 2), 2)  # embedding alone, head alone
    ns = parse_megatron_args(megatron_args(layout, kinds, TrainingShape(4), num_experts=[8]))
    assert ns.hybrid_layer_pattern == "|M*M|-E*-|"
    assert ns.pipeline_model_parallel_layout is None and ns.num_layers is None


@pytest.mark.parametrize(
    ("layout", "kinds", "training", "needle"),
    [
        (Layout(uniform_bounds(10, 4), placement("v", 2, 2), 2), _kinds(10), TrainingShape(4), "loop placement"),
        (Layout((0, 2, 4, 6), (0, 1, 0), 2), _kinds(6), TrainingShape(4), "same number of stages"),
        (Layout((0, 3, 6), (0, 0), 1), _kinds(6), TrainingShape(4), "virtual stages only with pp > 1"),
        (Layout((0, 3, 6), (0, 1), 2), _kinds(6), TrainingShape(4, seq_len=4095, cp=3), "multiple of 2 x cp"),
        (
            Layout((0, 3, 6), (0, 1), 2),
            ["embedding", "mamba", "mtp", "mamba", "mtp", "head"],
            TrainingShape(4),
            "mtp layers",
        ),
    ],
)
def test_refusals_are_one_line(layout, kinds, training, needle) -> None:
    with pytest.raises(InputError, match=needle) as e:
        megatron_args(layout, kinds, training)
    assert "\n" not in str(e.value) and str(e.value).startswith("megatron")


def test_plan_text_stays_one_comment_line() -> None:
    """A model name with a newline or shell syntax stays inside its `#` line."""
    title = "evil\n--use-torch-fsdp2 \\\n$(touch x)"
    text = megatron_args(_INTERLEAVED, _kinds(12), TrainingShape(4), title=title)
    assert "--use-torch-fsdp2" not in argv_of(text)
    assert all(line.startswith(("#", "--")) for line in text.splitlines())


# ---------------------------------------------------------------- the launch script
def test_launch_script_nodes_and_training_script() -> None:
    text = megatron_launch(_INTERLEAVED, _kinds(12), TrainingShape(4, tp=2, dp=8), devices_per_node=8)
    assert "    --nnodes 4 \\\n    --nproc-per-node 8 \\\n" in text  # tp 2 x pp 2 x dp 8 = 32 GPUs
    assert '"${MEGATRON_LM}/pretrain_gpt.py"' in text and "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" in text
    small = megatron_launch(_INTERLEAVED, _kinds(12), TrainingShape(4), devices_per_node=8)
    assert "    --nnodes 1 \\\n    --nproc-per-node 2 \\\n" in small  # fewer GPUs than a node
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in small.split("set -euo pipefail")[1]
    hybrid = ["embedding", "mamba", "attention", "mamba", "mlp", "head"]
    text = megatron_launch(Layout((0, 3, 6), (0, 1), 2), hybrid, TrainingShape(4), devices_per_node=8)
    assert '"${MEGATRON_LM}/pretrain_hybrid.py"' in text  # pretrain_mamba.py is a deprecated wrapper of it


def test_launch_refuses_a_world_that_is_not_whole_nodes() -> None:
    with pytest.raises(InputError, match="world size 12 is not whole nodes of 8 GPUs") as e:
        megatron_launch(_INTERLEAVED, _kinds(12), TrainingShape(4, dp=6), devices_per_node=8)
    assert "\n" not in str(e.value)


def test_launch_plan_text_stays_in_a_comment() -> None:
    title = "evil\nrm -rf / \\\n$(touch x)"
    text = megatron_launch(_INTERLEAVED, _kinds(12), TrainingShape(4), devices_per_node=8, title=title)
    head = text.split("set -euo pipefail")[0]
    assert all(line.startswith("#") for line in head.splitlines())
