"""Placement and partition presets for the classic schedules.

Data flow: pure functions over ints, used by the classic builders' callers (the planner, the
CLI, tests) to turn (devices, stages per device, layers) into a `core.Layout`'s
`stage_device` and `bounds`. Imports only `adaptis_plan.errors`; no numpy, no torch.

- `placement("sequential", P)`: stage s on device s (one stage per device: GPipe, 1F1B).
- `placement("loop", P, k)`: stage s on device s % P (Interleaved1F1B, LoopedBFS,
  InterleavedZeroBubble; Megatron's virtual pipeline order).
- `placement("v", P, k)`: zig-zag, as torch's `generate_stage_to_rank_mapping(style="v")`:
  stages 0..P-1 go down devices 0..P-1, the next P stages come back up P-1..0, and so on
  (ZBVZeroBubble, DualPipeV use k = 2, so device d holds stages d and 2P-1-d).
"""

from __future__ import annotations

from adaptis_plan.errors import InputError

PLACEMENT_STYLES: tuple[str, ...] = ("sequential", "loop", "v")
#: the partitions of a classic strategy (`--partition`; `search.partition.classic_bounds`): Megatron's
#: uniform split of the decoder layers (the default), the min-max stage work, and torchtitan's split,
#: which counts the embedding and the head as layers (`ends_as_layers_bounds`)
CLASSIC_PARTITIONS: tuple[str, ...] = ("uniform", "balanced", "ends-as-layers")


def placement(style: str, num_devices: int, stages_per_device: int = 1) -> tuple[int, ...]:
    """`stage_device` for a preset style: `stage_device[s]` is the device of stage s."""
    if style not in PLACEMENT_STYLES:
        raise InputError(
            f"placement: style = {style!r}: unknown placement style; use one of {', '.join(PLACEMENT_STYLES)}"
        )
    _check_positive("placement", "num_devices", num_devices)
    _check_positive("placement", "stages_per_device", stages_per_device)
    if style == "sequential":
        if stages_per_device != 1:
            raise InputError(
                f"placement: stages_per_device = {stages_per_device}: the sequential placement holds one stage per"
                " device; use 'loop' or 'v' for several stages per device"
            )
        return tuple(range(num_devices))
    num_stages = num_devices * stages_per_device
    if style == "loop":
        return tuple(s % num_devices for s in range(num_stages))
    # v: even passes go down the devices, odd passes come back up.
    return tuple(
        s % num_devices if (s // num_devices) % 2 == 0 else num_devices - 1 - s % num_devices for s in range(num_stages)
    )


def is_placement(style: str, stage_device: tuple[int, ...], num_devices: int) -> bool:
    """Whether `stage_device` is exactly the preset `style` for `num_devices` (any stages per device)."""
    num_stages = len(stage_device)
    if num_devices < 1 or num_stages == 0 or num_stages % num_devices:
        return False
    stages_per_device = num_stages // num_devices
    if style == "sequential" and stages_per_device != 1:
        return False
    return tuple(stage_device) == placement(style, num_devices, stages_per_device)


def uniform_bounds(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Megatron's uniform partition as `Layout.bounds` (num_stages + 1 cut points).

    Layer 0 is the embedding and layer num_layers-1 the head; the D = num_layers - 2 decoder
    layers (1..num_layers-2) are split evenly: every stage gets D // num_stages of them, the
    embedding joins the first stage and the head the last stage.

    Remainder rule (deterministic): the D % num_stages extra decoder layers go one each to the
    stages nearest the middle of the pipeline first (distance |s - (num_stages-1)/2|, ties to
    the lower stage), then to the first stage; the last stage, which carries the usually
    heavier head, never gets one (there are at most num_stages - 1 extras). Example: 10 decoder
    layers on 4 stages -> 2, 3, 3, 2 decoder layers.
    """
    _check_positive("uniform partition", "num_stages", num_stages)
    _check_positive("uniform partition", "num_layers", num_layers)
    num_decoder = num_layers - 2
    if num_stages > num_decoder:
        raise InputError(
            f"uniform partition: num_stages = {num_stages}: more stages than the {max(num_decoder, 0)} decoder layers"
            f" of a {num_layers}-layer model (embedding and head join the first and last stage); use at most"
            f" {max(num_decoder, 0)} stages"
            + (f", or the ends-as-layers partition (up to {num_layers})" if num_stages <= num_layers else "")
        )
    counts = _even_counts(num_decoder, num_stages)
    counts[0] += 1  # the embedding joins the first stage
    counts[-1] += 1  # the head joins the last stage
    return _bounds(counts)


def ends_as_layers_bounds(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """torchtitan's default split as `Layout.bounds`: all num_layers layers split evenly, the embedding
    and the head each counted as a layer (input and output weight 1), the num_layers % num_stages extra
    layers one each to the first stages. The first and last stages get one decoder layer fewer than the
    others; with one layer per stage the embedding and the head each have a stage of their own. Also
    Megatron-LM's --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split and
    Llama 3 405B's layout ("the first model chunk on the first stage has only the embedding"), whose
    layers divide evenly. Example: 126 decoder layers on 128 stages: one layer each."""
    _check_positive("ends-as-layers partition", "num_stages", num_stages)
    _check_positive("ends-as-layers partition", "num_layers", num_layers)
    if num_stages > num_layers:
        raise InputError(
            f"ends-as-layers partition: num_stages = {num_stages}: more stages than the {num_layers} layers"
            f" (embedding and head included); use at most {num_layers} stages"
        )
    base, extra = divmod(num_layers, num_stages)
    return _bounds([base + (s < extra) for s in range(num_stages)])


def _even_counts(total: int, num_stages: int) -> list[int]:
    """`total` items over `num_stages` stages as evenly as possible; the total % num_stages extras go
    to the stages nearest the middle first (ties to the lower stage), then to the first stage."""
    base, extra = divmod(total, num_stages)
    interior = sorted(range(1, num_stages - 1), key=lambda s: (abs(2 * s - (num_stages - 1)), s))
    priority = [*interior, 0, num_stages - 1] if num_stages > 1 else [0]
    counts = [base] * num_stages
    for s in priority[:extra]:
        counts[s] += 1
    return counts


def _bounds(counts: list[int]) -> tuple[int, ...]:
    bounds = [0]
    for count in counts:
        bounds.append(bounds[-1] + count)
    return tuple(bounds)


def _check_positive(where: str, name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{where}: {name} = {value!r}: must be an integer >= 1; pass a positive count")
