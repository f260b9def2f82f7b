"""Exports: torch CSV (loaded, lowered, validated and simulated by torch itself), Megatron
layout string, torchtitan module names."""

from __future__ import annotations

import re
from unittest import mock

import pytest

from adaptis_plan.core import Action, Layout
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.export import TrainingShape, megatron_layout, to_torch_csv
from adaptis_plan.planfile.export_torchtitan import (
    TORCHTITAN_MAIN_COMMIT,
    TORCHTITAN_VERSIONS,
    torchtitan_config_module,
    torchtitan_field_set,
    torchtitan_fqns,
    torchtitan_parallelism,
)
from adaptis_plan.schedules import STRATEGIES, get_spec, placement, uniform_bounds

pytestmark = pytest.mark.unit

# ---------------------------------------------------------------- torch CSV


def test_torch_csv_text() -> None:
    programs = [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "F", 0), Action(1, "I", 0), Action(1, "W", 0)]]
    assert to_torch_csv(programs) == "0F0,0B0\n1F0,1I0,1W0\n"
    with pytest.raises(InputError, match="device 0 action"):
        to_torch_csv([[(0, "X", 0)]])


def _csv_cases():
    for name in STRATEGIES:
        spec = get_spec(name)
        ks = spec.stages_per_device or (1, 2, 3)
        for num_devices, num_microbatches in ((1, 3), (2, 4), (3, 7), (4, 8), (4, 12)):
            for k in ks:
                if name == "DualPipeV" and num_microbatches < num_devices * k:
                    continue
                yield name, num_devices, num_microbatches, k


@pytest.mark.parametrize(("name", "num_devices", "num_microbatches", "k"), list(_csv_cases()))
def test_torch_loads_lowers_validates_and_simulates_our_csv(name, num_devices, num_microbatches, k, tmp_path) -> None:
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from torch.distributed.pipelining.stage import PipelineStage

    spec = get_spec(name)
    stage_device = spec.stage_device(num_devices, k)
    num_stages = len(stage_device)
    programs = spec.build(stage_device, num_devices, num_microbatches)
    path = tmp_path / "schedule.csv"
    path.write_text(to_torch_csv(programs))

    # A runtime with mocked stages, as torch's own schedule tests and visualizer build one.
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank = 0
    stage.group_size = num_devices
    stage.submod = None
    stage.num_stages = num_stages
    runtime = schedules._PipelineScheduleRuntime([stage] * k, num_microbatches)
    runtime._load_csv(str(path))  # parses, validates, infers stage -> rank, lowers with comms

    loaded = [
        [Action(a.stage_index, a.computation_type.value, a.microbatch_index) for a in runtime.pipeline_order[r]]
        for r in range(num_devices)
    ]
    assert loaded == programs
    assert runtime.stage_index_to_group_rank == dict(enumerate(stage_device))
    stage_to_rank = runtime.stage_index_to_group_rank.__getitem__

    mapping = schedules._validate_schedule(runtime.pipeline_order, num_devices, num_stages, num_microbatches)
    assert mapping == dict(enumerate(stage_device))
    compute = {r: list(runtime.pipeline_order[r]) for r in range(num_devices)}
    with_comms = schedules._add_send_recv(compute, stage_to_rank=stage_to_rank, num_stages=num_stages)
    schedules._simulate_comms_compute(with_comms, stage_to_rank, num_stages)
    # The runtime's own lowering (with FSDP / grad-reduction bookkeeping, which the simulator skips) runs too.
    bookkeeping = ("UNSHARD", "RESHARD", "REDUCE_GRAD")
    lowered = {
        r: [a for a in acts if a.computation_type.value not in bookkeeping]
        for r, acts in runtime.pipeline_order_with_comms.items()
    }
    schedules._simulate_comms_compute(lowered, stage_to_rank, num_stages)


# ---------------------------------------------------------------- Megatron layout


def _parse_megatron(layout: str) -> list[list[str]]:
    """Megatron's own reading of the layout string: unroll `(..)*n` and `x*n`, split stages on `|`."""
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return [list(stage) for stage in text.split("|")]


def _kinds(num_layers: int) -> list[str]:
    return ["embedding"] + ["decoder"] * (num_layers - 2) + ["head"]


def test_megatron_layout_interleaved() -> None:
    layout = Layout(uniform_bounds(12, 4), placement("loop", 2, 2), 2)
    text = megatron_layout(layout, _kinds(12))
    assert text == "Ett|t*3|t*3|ttL"
    stages = _parse_megatron(text)
    assert [len(s) for s in stages] == [3, 3, 3, 3]
    assert stages[0][0] == "E" and stages[-1][-1] == "L"


def test_megatron_layout_heterogeneous_kinds() -> None:
    kinds = ["embedding", "decoder", "moe", "moe", "mamba", "attention", "mamba", "mtp", "head"]
    layout = Layout((0, 3, 5, 7, 9), placement("loop", 2, 2), 2)
    assert megatron_layout(layout, kinds) == "Ett|tt|tt|mL"


def test_megatron_layout_sequential_is_a_loop() -> None:
    layout = Layout(uniform_bounds(34, 4), placement("sequential", 4), 4)
    assert megatron_layout(layout, _kinds(34)) == "Et*8|t*8|t*8|t*8L"


def test_megatron_layout_rejects_v_placement() -> None:
    layout = Layout(uniform_bounds(10, 4), placement("v", 2, 2), 2)
    with pytest.raises(
        InputError, match=r"needs a loop placement \(stage s on device s % pp\); this plan places stage 2"
    ):
        megatron_layout(layout, _kinds(10))


def test_megatron_layout_rejects_uneven_stage_counts() -> None:
    layout = Layout((0, 2, 4, 6), (0, 1, 0), 2)
    with pytest.raises(InputError, match="same number of stages"):
        megatron_layout(layout, _kinds(6))


def test_megatron_layout_checks_kinds() -> None:
    layout = Layout(uniform_bounds(10, 2), placement("sequential", 2), 2)
    with pytest.raises(InputError, match="layer_kinds has 9 entries"):
        megatron_layout(layout, _kinds(9))
    with pytest.raises(InputError, match="embedding first"):
        megatron_layout(layout, ["decoder"] * 10)


# ---------------------------------------------------------------- torchtitan


def test_torchtitan_fqns() -> None:
    layout = Layout(uniform_bounds(12, 4), placement("loop", 2, 2), 2)
    assert torchtitan_fqns(layout, _kinds(12)) == [
        ["tok_embeddings", "layers.0", "layers.1"],
        ["layers.2", "layers.3", "layers.4"],
        ["layers.5", "layers.6", "layers.7"],
        ["layers.8", "layers.9", "norm", "lm_head"],
    ]


def test_torchtitan_fqns_single_stage_and_v() -> None:
    assert torchtitan_fqns(Layout((0, 4), (0,), 1), _kinds(4)) == [
        ["tok_embeddings", "layers.0", "layers.1", "norm", "lm_head"]
    ]
    parts = torchtitan_fqns(Layout(uniform_bounds(10, 4), placement("v", 2, 2), 2), _kinds(10))
    assert [name for part in parts for name in part] == ["tok_embeddings"] + [f"layers.{i}" for i in range(8)] + [
        "norm",
        "lm_head",
    ]
    with pytest.raises(InputError, match="layer_kinds has 3 entries"):
        torchtitan_fqns(Layout((0, 4), (0,), 1), _kinds(3))


# ---------------------------------------------------------------- torchtitan degrees
@pytest.mark.parametrize(
    ("zero", "replicate", "shard", "reshard"),
    [(0, 8, 1, "never"), (1, 1, 8, "never"), (2, 1, 8, "never"), (3, 1, 8, "always")],
)
def test_torchtitan_parallelism_by_zero_stage(zero, replicate, shard, reshard) -> None:
    par = torchtitan_parallelism(TrainingShape(4, tp=2, dp=8, cp=2, ep=2, zero=zero))
    assert par == {
        "tensor_parallel_degree": 2,
        "context_parallel_degree": 2,
        "expert_parallel_degree": 2,
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": reshard,
    }


def test_torchtitan_refuses_what_its_mesh_and_dtypes_cannot_hold() -> None:
    # ZeRO 0 is DDP: torchtitan's experts borrow ranks from FSDP, CP and TP only
    with pytest.raises(InputError, match=r"ep = 4 must divide data-parallel shard x cp x tp = 1 x 1 x 2"):
        torchtitan_parallelism(TrainingShape(4, tp=2, dp=4, ep=4, zero=0))
    assert torchtitan_parallelism(TrainingShape(4, tp=2, dp=4, ep=4, zero=1))["expert_parallel_degree"] == 4
    layout = Layout(uniform_bounds(10, 2), placement("sequential", 2), 2)
    with pytest.raises(InputError, match="no fp16"):
        torchtitan_config_module(
            layout,
            _kinds(10),
            csv_name="a.csv",
            base="llama3:llama3_8b",
            training=TrainingShape(4, dtype="fp16"),
            title="t",
        )


def test_torchtitan_module_values() -> None:
    layout = Layout(uniform_bounds(10, 4), placement("loop", 2, 2), 2)
    training = TrainingShape(8, micro_batch_size=2, seq_len=512, tp=2, dp=4, zero=3, stage_recompute=("full",) * 4)
    source = torchtitan_config_module(
        layout, _kinds(10), csv_name="a.csv", base="llama3:llama3_8b", training=training, title="t"
    )
    space: dict = {"__file__": "/x/adaptis_pipeline.py"}
    exec(compile(source, "adaptis_pipeline.py", "exec"), space)  # defines names only; torchtitan is not imported
    assert space["PARALLELISM"]["tensor_parallel_degree"] == 2
    assert space["PARALLELISM"]["data_parallel_shard_degree"] == 4
    training_fields = space["TRAINING"]
    assert (training_fields["local_batch_size"], training_fields["global_batch_size"]) == (16, 64)
    assert training_fields["seq_len"] == 512 and space["PIPELINE"]["pipeline_parallel_microbatch_size"] == 2
    assert (space["ACTIVATION_CHECKPOINT"], training_fields["mixed_precision_param"]) == ("full", "bfloat16")
    assert "tp x pp x cp x dp = 16 ranks" in source
    assert space["TORCHTITAN_VERSION"] == "0.3"


# torchtitan's config fields at pytorch/torchtitan b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (main,
# 2026-08-21), read from torchtitan/config/configs.py: the batch fields after "fold batch dim"
# (73aed7f, #4121), and the 0.3.0 release's, which that commit removed.
MAIN_TRAINING_BATCH = ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "max_context_length")
MAIN_PIPELINE_MICROBATCHES = "num_pp_microbatches"
RELEASE_03_BATCH = ("local_batch_size", "global_batch_size", "seq_len")


def test_torchtitan_field_sets_are_the_named_commits() -> None:
    assert TORCHTITAN_MAIN_COMMIT == "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
    assert TORCHTITAN_VERSIONS["main"] == (MAIN_TRAINING_BATCH, MAIN_PIPELINE_MICROBATCHES)
    assert TORCHTITAN_VERSIONS["0.3"] == (RELEASE_03_BATCH, "pipeline_parallel_microbatch_size")


@pytest.mark.parametrize("pp", [2, 1])
def test_torchtitan_module_for_main_counts_tokens(pp) -> None:
    layout = Layout(uniform_bounds(10, 2 * pp), placement("loop", pp, 2), pp) if pp > 1 else Layout((0, 10), (0,), 1)
    training = TrainingShape(8, micro_batch_size=2, seq_len=512, dp=4, zero=1)
    source = torchtitan_config_module(
        layout, _kinds(10), csv_name="a.csv", base="llama3:llama3_8b", training=training, title="t", version="main"
    )
    space: dict = {"__file__": "/x/adaptis_pipeline.py"}
    exec(compile(source, "adaptis_pipeline.py", "exec"), space)
    assert space["TRAINING"] == {
        "num_tokens_per_microbatch_per_dp_rank": 2 * 512,
        "num_tokens_per_train_step": 4 * 8 * 2 * 512,  # dp x micro-batches x tokens per micro-batch
        "max_context_length": 512,
        "mixed_precision_param": "bfloat16",
        "disable_cuda_graphs": True,
    }
    assert space["PIPELINE"]["num_pp_microbatches"] == 8
    assert "local_batch_size" not in source and "pipeline_parallel_microbatch_size" not in source
    assert space["TORCHTITAN_VERSION"] == "main"


def test_torchtitan_03_without_pipeline_accumulates_micro_batches() -> None:
    source = torchtitan_config_module(
        Layout((0, 10), (0,), 1), _kinds(10), csv_name="a.csv", base="llama3:llama3_8b",
        training=TrainingShape(8, micro_batch_size=2, seq_len=512, dp=4), title="t",
    )  # fmt: skip
    space: dict = {"__file__": "/x/adaptis_pipeline.py"}
    exec(compile(source, "adaptis_pipeline.py", "exec"), space)
    # torchtitan 0.3 runs global / (local x dp) gradient-accumulation steps of one local batch each
    assert (space["TRAINING"]["local_batch_size"], space["TRAINING"]["global_batch_size"]) == (2, 64)


@pytest.mark.parametrize(
    ("requested", "installed", "want"),
    [
        (None, "0.3.0", "0.3"),
        (None, "0.3.12", "0.3"),
        ("main", "0.3.0", "main"),
        ("0.3", None, "0.3"),
        ("main", None, "main"),
        ("main", "0.2.2", "main"),  # a source checkout of main reports a stale version
        (None, None, "0.3"),  # not installed here: the PyPI release (the module checks its fields at load)
    ],
)
def test_torchtitan_field_set_choice(requested, installed, want) -> None:
    assert torchtitan_field_set(requested, installed) == want


@pytest.mark.parametrize(
    ("requested", "installed", "needle"),
    [
        (None, "0.2.2", "the installed torchtitan is '0.2.2'"),
        (None, "0.4.0", "the installed torchtitan is '0.4.0'"),
        (None, "0.3.0.dev20260801", "the installed torchtitan is '0.3.0.dev20260801'"),
        ("0.4", "0.3.0", "--torchtitan-version = '0.4'"),
        ("", None, "--torchtitan-version = ''"),
    ],
)
def test_torchtitan_field_set_refusals_are_one_line(requested, installed, needle) -> None:
    with pytest.raises(InputError, match=re.escape(needle)) as e:
        torchtitan_field_set(requested, installed)
    assert "\n" not in str(e.value) and "--torchtitan-version" in str(e.value)
