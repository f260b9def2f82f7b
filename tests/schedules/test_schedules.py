"""Classic schedule builders: invariants over grids of (devices, micro-batches, stages per device),
deadlock freedom, golden grids, registry and placement presets. No torch here (see
test_schedules_torch.py for parity with torch.distributed.pipelining)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptis_plan.core import Action, Programs
from adaptis_plan.errors import InputError
from adaptis_plan.schedules import (
    STRATEGIES,
    ends_as_layers_bounds,
    get_builder,
    get_spec,
    is_placement,
    placement,
    uniform_bounds,
)
from adaptis_plan.schedules.registry import canonical_name

pytestmark = pytest.mark.unit


def assert_schedule_invariants(programs: Programs, stage_device: tuple[int, ...], num_microbatches: int) -> None:
    """Every (stage, mb) has one F and one B or one I + one W, on the stage's device, F < I/B < W."""
    num_devices = len(programs)
    assert max(stage_device) < num_devices
    seen: dict[tuple[int, str, int], tuple[int, int]] = {}
    for device, program in enumerate(programs):
        for pos, action in enumerate(program):
            assert isinstance(action, Action), action
            assert action.op in "FBIW" and len(action.op) == 1, action
            assert 0 <= action.stage < len(stage_device), action
            assert 0 <= action.mb < num_microbatches, action
            assert stage_device[action.stage] == device, f"{action} on device {device}"
            assert action not in seen, f"{action} twice"
            seen[action] = (device, pos)
    for stage in range(len(stage_device)):
        for mb in range(num_microbatches):
            f = seen.get((stage, "F", mb))
            b, i, w = (seen.get((stage, op, mb)) for op in "BIW")
            assert f is not None, f"{stage}F{mb} missing"
            if b is not None:
                assert i is None and w is None, f"{stage}B{mb} together with I/W"
                assert f[1] < b[1], f"{stage}B{mb} before its F"
            else:
                assert i is not None and w is not None, f"{stage}: mb {mb} has no backward"
                assert f[1] < i[1] < w[1], f"{stage}: mb {mb} not in F < I < W order"
    assert len(seen) == sum(len(p) for p in programs)


def simulate_steps(programs: Programs, num_stages: int) -> int:
    """Unit-time lock-step execution of the programs; the number of steps, or AssertionError on deadlock.

    An action runs when its cross-stage inputs are done: F(s, m) after F(s-1, m); B or I(s, m)
    after the backward (B or I) of (s+1, m); the device order gives the rest.
    """
    done: set[tuple[int, str, int]] = set()
    heads = [0] * len(programs)
    steps = 0
    while any(h < len(p) for h, p in zip(heads, programs, strict=True)):
        ready = []
        for device, program in enumerate(programs):
            if heads[device] == len(program):
                continue
            stage, op, mb = program[heads[device]]
            if op == "F":
                ok = stage == 0 or (stage - 1, "F", mb) in done
            elif op in "BI":
                ok = stage == num_stages - 1 or (stage + 1, "bwd", mb) in done
            else:
                ok = True
            if ok:
                ready.append(device)
        assert ready, (
            f"deadlock after {steps} steps at {[p[h] for h, p in zip(heads, programs, strict=True) if h < len(p)]}"
        )
        for device in ready:
            stage, op, mb = programs[device][heads[device]]
            done.add((stage, "bwd" if op in "BI" else op, mb))
            heads[device] += 1
        steps += 1
    return steps


def build(name: str, num_devices: int, num_microbatches: int, stages_per_device: int | None = None):
    spec = get_spec(name)
    stage_device = spec.stage_device(num_devices, stages_per_device)
    return stage_device, spec.build(stage_device, num_devices, num_microbatches)


def stages_per_device_options(name: str) -> tuple[int, ...]:
    return get_spec(name).stages_per_device or (1, 2, 3)


def feasible(name: str, num_devices: int, num_microbatches: int, k: int) -> bool:
    return not (name == "DualPipeV" and num_microbatches < num_devices * k)


# ---------------------------------------------------------------- grids


@pytest.mark.parametrize("name", STRATEGIES)
def test_grid_invariants_and_no_deadlock(name: str) -> None:
    for num_devices in (1, 2, 3, 4, 5, 8):
        for num_microbatches in (1, 2, 3, 5, 8, 13, 16):
            for k in stages_per_device_options(name):
                case = f"{name} P={num_devices} M={num_microbatches} k={k}"
                if not feasible(name, num_devices, num_microbatches, k):
                    with pytest.raises(InputError):
                        build(name, num_devices, num_microbatches, k)
                    continue
                stage_device, programs = build(name, num_devices, num_microbatches, k)
                assert len(stage_device) == num_devices * k, case
                try:
                    assert_schedule_invariants(programs, stage_device, num_microbatches)
                    simulate_steps(programs, len(stage_device))
                except AssertionError as exc:
                    raise AssertionError(f"{case}: {exc}") from exc


@pytest.mark.parametrize("name", STRATEGIES)
def test_many_devices(name: str) -> None:
    num_devices = 64
    num_microbatches = 128 if name == "DualPipeV" else 64
    stage_device, programs = build(name, num_devices, num_microbatches)
    assert_schedule_invariants(programs, stage_device, num_microbatches)
    simulate_steps(programs, len(stage_device))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"]),
    num_devices=st.integers(1, 12),
    num_microbatches=st.integers(1, 30),
    k=st.integers(1, 4),
)
def test_loop_schedules_property(name: str, num_devices: int, num_microbatches: int, k: int) -> None:
    stage_device, programs = build(name, num_devices, num_microbatches, k)
    assert_schedule_invariants(programs, stage_device, num_microbatches)
    simulate_steps(programs, len(stage_device))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(STRATEGIES), num_devices=st.integers(1, 10), extra=st.integers(0, 25))
def test_all_schedules_property(name: str, num_devices: int, extra: int) -> None:
    k = get_spec(name).default_stages_per_device
    num_microbatches = (num_devices * k if name == "DualPipeV" else 1) + extra
    stage_device, programs = build(name, num_devices, num_microbatches)
    assert_schedule_invariants(programs, stage_device, num_microbatches)
    simulate_steps(programs, len(stage_device))


def test_builders_are_pure_and_deterministic() -> None:
    for name in STRATEGIES:
        first = build(name, 4, 8)
        assert build(name, 4, 8) == first
        assert all(isinstance(p, list) for p in first[1])


def test_zero_bubble_schedules_split_backward() -> None:
    for name in STRATEGIES:
        _, programs = build(name, 4, 8)
        ops = {a.op for p in programs for a in p}
        if name in ("InterleavedZeroBubble", "ZBVZeroBubble"):
            assert ops == {"F", "I", "W"}
        elif name == "DualPipeV":
            assert ops == {"F", "B", "I", "W"}
        else:
            assert ops == {"F", "B"}
        assert get_spec(name).split_backward == ("I" in ops)


def test_interleaved_beats_1f1b_in_lockstep_steps() -> None:
    # Sanity on the definitions: with unit-time ops more stages per device shrink the bubble.
    _, one = build("1F1B", 4, 8)
    _, inter = build("Interleaved1F1B", 4, 8, 2)
    assert simulate_steps(one, 4) == 2 * (8 + 4 - 1)
    # Each interleaved op is half a stage of work: compare in the same time unit.
    assert simulate_steps(inter, 8) < 2 * simulate_steps(one, 4)


# ---------------------------------------------------------------- golden grids


def grid(programs: Programs) -> str:
    return "\n".join(f"d{d}: " + " ".join(map(str, p)) for d, p in enumerate(programs))


GOLDEN_1F1B_P4_M8 = """\
d0: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7
d1: 1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7
d2: 2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2F6 2B5 2F7 2B6 2B7
d3: 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7"""

GOLDEN_ZBV_P2_M4 = """\
d0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3
d1: 1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3"""

# M=5 on P=2 is outside torch's Interleaved1F1B (5 is not a multiple of its 2 rounds): groups of 3 and 2.
GOLDEN_INTERLEAVED_P2_M5_K2 = """\
d0: 0F0 0F1 0F2 2F0 2F1 2F2 2B0 0F3 2B1 0F4 2B2 2F3 0B0 2F4 0B1 0B2 2B3 2B4 0B3 0B4
d1: 1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1F3 1B0 1F4 1B1 3F3 1B2 3F4 3B3 3B4 1B3 1B4"""


def test_golden_1f1b() -> None:
    assert grid(build("1F1B", 4, 8)[1]) == GOLDEN_1F1B_P4_M8


def test_golden_zbv() -> None:
    assert grid(build("ZBVZeroBubble", 2, 4)[1]) == GOLDEN_ZBV_P2_M4


def test_golden_interleaved_uneven_groups() -> None:
    assert grid(build("Interleaved1F1B", 2, 5, 2)[1]) == GOLDEN_INTERLEAVED_P2_M5_K2


# ---------------------------------------------------------------- registry and errors


def test_registry_names() -> None:
    assert STRATEGIES == (
        "GPipe",
        "1F1B",
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV",
    )
    for name in STRATEGIES:
        assert get_builder(name.lower()) is get_builder(name.upper()) is get_spec(name).build
        assert canonical_name(name.lower()) == name
    assert get_spec("zbvzerobubble").placement == "v"
    assert get_spec("interleaved1f1b").placement == "loop"
    assert get_spec("gpipe").placement == "sequential"
    assert [get_spec(n).default_stages_per_device for n in STRATEGIES] == [1, 1, 2, 2, 2, 2, 2]


def test_unknown_strategy() -> None:
    with pytest.raises(InputError, match="'zb2p'.*use one of GPipe, 1F1B"):
        get_spec("zb2p")


@pytest.mark.parametrize(
    ("name", "stage_device", "num_devices", "num_microbatches", "match"),
    [
        ("ZBVZeroBubble", placement("v", 2, 3), 2, 8, "stages per device = 3.*exactly 2"),
        ("DualPipeV", placement("v", 4, 2), 4, 7, "num_microbatches = 7.*at least as many micro-batches as stages"),
        ("GPipe", placement("loop", 2, 2), 2, 4, "stages per device = 2.*exactly 1"),
        ("1F1B", (1, 0), 2, 4, "needs the 'sequential' placement"),
        ("Interleaved1F1B", placement("v", 2, 2), 2, 4, "needs the 'loop' placement"),
        ("LoopedBFS", (0, 1, 0), 2, 4, "same number of stages"),
        ("ZBVZeroBubble", placement("loop", 2, 2), 2, 4, "needs the 'v' placement"),
        ("InterleavedZeroBubble", (0, 1), 2, 0, "num_microbatches = 0"),
        ("GPipe", (0, 2), 2, 4, "stage_device"),
        ("GPipe", (), 2, 4, "stage_device"),
    ],
)
def test_unsupported_combinations(name, stage_device, num_devices, num_microbatches, match) -> None:
    with pytest.raises(InputError, match=match):
        get_builder(name)(stage_device, num_devices, num_microbatches)


def test_spec_stage_device() -> None:
    assert get_spec("DualPipeV").stage_device(4) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert get_spec("LoopedBFS").stage_device(3, 3) == (0, 1, 2) * 3
    assert get_spec("1F1B").stage_device(3) == (0, 1, 2)
    with pytest.raises(InputError, match="stages per device = 3"):
        get_spec("ZBVZeroBubble").stage_device(4, 3)


# ---------------------------------------------------------------- placement and partition


def test_placement_presets() -> None:
    assert placement("sequential", 4) == (0, 1, 2, 3)
    assert placement("loop", 3, 2) == (0, 1, 2, 0, 1, 2)
    assert placement("v", 4, 2) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert placement("v", 2, 3) == (0, 1, 1, 0, 0, 1)
    assert placement("v", 1, 2) == (0, 0)
    assert is_placement("v", (0, 1, 1, 0), 2)
    assert not is_placement("loop", (0, 1, 1, 0), 2)
    assert is_placement("sequential", (0, 1), 2)
    assert not is_placement("sequential", (0, 1, 0, 1), 2)
    with pytest.raises(InputError, match="one stage per device"):
        placement("sequential", 4, 2)
    with pytest.raises(InputError, match="style = 'zigzag'"):
        placement("zigzag", 4, 2)
    with pytest.raises(InputError, match="num_devices = 0"):
        placement("loop", 0, 2)


def test_uniform_bounds_examples() -> None:
    assert uniform_bounds(34, 4) == (0, 9, 17, 25, 34)  # 32 decoder layers, 8 per stage
    assert uniform_bounds(12, 4) == (0, 3, 6, 9, 12)  # 10 decoder layers: 2, 3, 3, 2
    assert uniform_bounds(9, 2) == (0, 5, 9)  # 7 decoder layers: the extra one goes to the first stage
    assert uniform_bounds(5, 1) == (0, 5)
    assert uniform_bounds(3, 1) == (0, 3)
    assert uniform_bounds(11, 8) == (0, 2, 3, 4, 6, 7, 8, 9, 11)  # 9 decoder layers: the extra one to stage 3
    with pytest.raises(InputError, match="num_stages = 5.*4 decoder layers"):
        uniform_bounds(6, 5)


def test_ends_as_layers_bounds_examples() -> None:
    # Llama 3 405B: 126 decoder layers + embedding + head on 16 x 8 stages: one layer each, so the first
    # stage holds only the embedding and the last only the head ("the first model chunk ... has only the embedding")
    bounds = ends_as_layers_bounds(128, 128)
    assert bounds == tuple(range(129))
    with pytest.raises(InputError, match="uniform partition"):
        uniform_bounds(128, 128)  # Megatron's default split has no layer for two of those stages
    # 32 decoder layers on 8 stages, 34 counted: the 2 extras to the first stages, as torchtitan's
    # generate_llm_fqn_per_model_part gives them (tok_embeddings + layers 0-3, layers 4-8, ...)
    assert ends_as_layers_bounds(34, 8) == (0, 5, 10, 14, 18, 22, 26, 30, 34)
    assert ends_as_layers_bounds(12, 4) == uniform_bounds(12, 4)  # 12 counted layers: 3 each either way
    assert ends_as_layers_bounds(34, 4) == (0, 9, 18, 26, 34)
    with pytest.raises(InputError, match="num_stages = 13.*12 layers"):
        ends_as_layers_bounds(12, 13)


@settings(max_examples=200, deadline=None)
@given(num_layers=st.integers(1, 200), data=st.data())
def test_ends_as_layers_bounds_property(num_layers: int, data) -> None:
    num_stages = data.draw(st.integers(1, num_layers))
    bounds = ends_as_layers_bounds(num_layers, num_stages)
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    assert bounds[0] == 0 and bounds[-1] == num_layers and min(sizes) >= 1
    assert max(sizes) - min(sizes) <= 1
    assert sizes[-1] == num_layers // num_stages  # the head's stage never takes an extra layer


@settings(max_examples=200, deadline=None)
@given(num_layers=st.integers(3, 200), data=st.data())
def test_uniform_bounds_property(num_layers: int, data) -> None:
    num_decoder = num_layers - 2
    num_stages = data.draw(st.integers(1, num_decoder))
    bounds = uniform_bounds(num_layers, num_stages)
    assert len(bounds) == num_stages + 1 and bounds[0] == 0 and bounds[-1] == num_layers
    decoders = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
    decoders[0] -= 1
    decoders[-1] -= 1
    assert sum(decoders) == num_decoder
    assert max(decoders) - min(decoders) <= 1
    assert decoders[-1] == num_decoder // num_stages  # the head's stage never takes an extra layer
    assert all(decoders[0] <= d for d in decoders[1:-1]) or num_stages <= 2
