"""The planning request's vocabulary: one typed, frozen, documented section per concern, each
setting declared once, with the command-line option that sets it.

Sections: `Parallelism` (how one step is split over the GPUs), `RuntimeSettings` (what the runtime
does beside the model: its attention core and overlaps), `PipelineSettings` (the pipeline strategy
and what its search may vary) and `SearchEffort` (how long and how reproducibly the search works).
`app.plan.PlanRequest` composes them; `search.space.Request` holds the same sections;
`spec.training.TrainingConfig.of` and `search.driver.PipelineOptions.of` are built from them in one
place each.

Each field's `metadata["cli"]` is its option of `adaptis plan` as plain data (`cli_option`): the
declarations, help and click keywords, with `type` a Python type, `choices` a tuple of choices or
`int_range` a (min, max) pair; `cli.options.field_option` turns it into the click option. The
option's default is the command's (None where `--gpus` searches the dimension), the field's default
is a library caller's. Data flow: the CLI (or a library caller) -> these sections -> `app.plan`,
`search`. Imports nothing of the package (the command line reads it at start-up: no numpy): a spec
module, below every stage that reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adaptis_plan.spec.limits import DEFAULT_HARD_STOP_S, DEFAULT_TIME_LIMIT_S

#: what the adaptive search varies by default (--search): `core.ALL_COMPONENTS`, which imports numpy
SEARCH_COMPONENTS = ("partition", "placement", "schedule")


def cli_option(*decls: str, **click: Any) -> dict[str, Any]:
    """A field's `metadata`: its `adaptis plan` option as plain data (module docstring)."""
    return {"cli": {"decls": decls, **click}}


@dataclass(frozen=True)
class Parallelism:
    """How one optimizer step is split over the GPUs: the degrees and the micro-batch split.

    On the command line each is optional: with `--gpus` a dimension not given is searched
    (`search.configuration`, the partial configuration as `{name: value or None}`), without it
    the field's default applies (`complete`). The field order is `search.space.DIMENSIONS`.
    """

    tp: int = field(
        default=1,
        metadata=cli_option(
            "--tp", type=int, default=None, help="tensor-parallel degree [default: 1; --gpus: searched]"
        ),
    )
    pp: int = field(
        default=1,
        metadata=cli_option("--pp", type=int, default=None, help="pipeline ranks (required without --gpus)"),
    )
    dp: int = field(
        default=1,
        metadata=cli_option("--dp", type=int, default=None, help="data-parallel degree [default: 1; --gpus: searched]"),
    )
    cp: int = field(
        default=1,
        metadata=cli_option(
            "--cp", type=int, default=None, help="context-parallel degree [default: 1; --gpus: searched]"
        ),
    )
    ep: int = field(
        default=1,
        metadata=cli_option(
            "--ep", type=int, default=None, help="expert-parallel degree [default: 1; --gpus: searched]"
        ),
    )
    zero: int = field(
        default=1,
        metadata=cli_option(
            "--zero", int_range=(0, 3), default=None, help="ZeRO stage over dp x cp [default: 1; --gpus: searched]"
        ),
    )
    micro_batch_size: int = field(
        default=1,
        metadata=cli_option(
            "--micro-batch-size",
            type=int,
            default=None,
            help="sequences per micro-batch [default: 1; --gpus: searched]",
        ),
    )
    num_microbatches: int = field(
        default=1,
        metadata=cli_option(
            "--microbatches", type=int, default=None, help="micro-batches per step (required without --gpus)"
        ),
    )

    @classmethod
    def complete(cls, given: Mapping[str, int | None]) -> Parallelism:
        """The configuration with every dimension `given` as None at its default."""
        return cls(**{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class RuntimeSettings:
    """What the runtime does beside the model and the split, which the costs assume
    (`spec.training.TrainingConfig`'s fields of the same names say what each changes)."""

    attention: str = field(
        default="flash",
        metadata=cli_option(
            "--attention",
            choices=("flash", "cudnn", "unfused"),
            default="flash",
            show_default=True,
            help="the runtime's attention core: flash (FlashAttention-2 class), cudnn (cuDNN's, TransformerEngine's"
            " choice on Hopper), or unfused (s x s scores through memory, as pre-2023 Megatron-LM)",
        ),
    )
    tp_comm_overlap: bool = field(
        default=False,
        metadata=cli_option(
            "--tp-comm-overlap/--no-tp-comm-overlap",
            default=False,
            show_default=True,
            help="tensor-parallel collectives overlap their GEMMs (Megatron-Core --tp-comm-overlap)",
        ),
    )
    dp_overlap: bool = field(
        default=True,
        metadata=cli_option(
            "--dp-overlap/--no-dp-overlap",
            default=True,
            show_default=True,
            help="data-parallel gradient reduce and parameter gather overlap the pipeline's compute",
        ),
    )


@dataclass(frozen=True)
class PipelineSettings:
    """The pipeline strategy and what its search may vary, and the runtime the plan must run on.

    `strategy`: "adaptive" (the search) or a classic schedule's name (`schedules`). `partition` and
    `stages_per_device` shape a classic schedule's layout (None: the strategy's own; adaptive
    searches both). `components`: what the adaptive search varies (fewer: an ablation). `head_chunks`:
    the LM head's vocabulary chunks (None: adaptive decides, classic 1). `recompute`: none, selective,
    full, or auto (the planner chooses per stage; classic strategies: none). `target`: the runtime
    (`schedules.targets`), lower case.
    """

    strategy: str = field(
        default="adaptive",
        metadata=cli_option(
            "--strategy", default="adaptive", show_default=True, help="adaptive, or a classic schedule name"
        ),
    )
    partition: str | None = field(
        default=None,
        metadata=cli_option(
            "--partition",
            choices=("uniform", "balanced", "ends-as-layers"),  # schedules.placement.CLASSIC_PARTITIONS
            default=None,
            help="classic strategies only: uniform (Megatron's), balanced (min-max stage), ends-as-layers"
            " (torchtitan's default: embedding and head count as layers, as Megatron's --account-for-*-in-pipeline-split"
            " count them)",
        ),
    )
    stages_per_device: int | None = field(
        default=None,
        metadata=cli_option(
            "--stages-per-device", type=int, default=None, help="classic loop strategies: chunks per device"
        ),
    )
    components: tuple[str, ...] = field(
        default=SEARCH_COMPONENTS,
        metadata=cli_option(
            "--search",
            default=",".join(SEARCH_COMPONENTS),
            show_default=True,
            help="adaptive components to search (comma list; ablations)",
        ),
    )
    head_chunks: int | None = field(
        default=None,
        metadata=cli_option(
            "--head-chunks",
            default="auto",
            show_default=True,
            help="split the LM head into N vocabulary chunks (auto: adaptive decides; classic: 1)",
        ),
    )
    recompute: str = field(
        default="none",
        metadata=cli_option(
            "--recompute",
            choices=("none", "selective", "op", "full", "auto"),
            default="auto",
            show_default=True,
            is_flag=False,
            flag_value="full",
            help="activation recomputation of the decoder blocks: auto lets the planner choose per stage"
            " (classic strategies: none); a bare --recompute means full",
        ),
    )
    target: str = field(
        default="adaptis",
        metadata=cli_option(
            "--target",
            choices=("adaptis", "torch", "torchtitan", "megatron"),
            case_sensitive=False,
            default="adaptis",
            show_default=True,
            help="the runtime that will execute the plan: search only what it can run (and show what that costs)",
        ),
    )

    @property
    def adaptive(self) -> bool:
        """Whether the strategy is the adaptive search (any case), not a classic schedule."""
        return self.strategy.lower() == "adaptive"


@dataclass(frozen=True)
class SearchEffort:
    """How much work the search does and whether the wall clock may cut it short. The work itself,
    when a library caller fixes it, is `usecases.PlanRequest.budget` (`search.budget.SearchBudget`,
    a search type this layer may not name)."""

    time_limit_s: float = field(
        default=DEFAULT_TIME_LIMIT_S,
        metadata=cli_option(
            "--time-limit",
            default=DEFAULT_TIME_LIMIT_S,
            show_default=True,
            type=float,
            help="seconds: sizes the adaptive search's work (same limit, same plan, on any machine). Given explicitly,"
            " it also hard-stops the command at that wall time (the command's start-up takes about 1 s of it, so below"
            " 5 s the search gets what is left, and below about 2 s its smallest budget); a stop that cuts the search"
            " short says so, and the plan can then differ from run to run. Left at the default, the work is sized for"
            f" 5 s and the wall clock stops the command only after {DEFAULT_HARD_STOP_S:g} s, a safety net that the"
            " default work does not reach even on a busy 2-core machine: the same plan every time",
        ),
    )
    hard_stop: bool = field(
        default=True,
        metadata=cli_option(
            "--hard-stop/--no-hard-stop",
            default=True,
            show_default=True,
            help="--no-hard-stop: no wall-clock abort at all (not even the default's safety net); the search does all"
            " the work --time-limit sizes, however long a slow or busy machine takes, so the plan depends on the"
            " inputs and seed only, never on the load",
        ),
    )
    #: seconds after which the wall clock aborts the search; None = `time_limit_s` (an explicit `--time-limit`).
    #: `adaptis plan` without `--time-limit` sets `spec.limits.DEFAULT_HARD_STOP_S`: a safety net, not a limit
    hard_stop_s: float | None = None
    seed: int = field(
        default=0,
        metadata=cli_option(
            "--seed", default=0, show_default=True, int_range=(0, 2**31 - 1), help="search seed, 0..2^31-1"
        ),
    )


#: every section `app.plan.PlanRequest` composes, by its attribute there
SECTIONS: dict[str, type] = {
    "parallelism": Parallelism,
    "runtime": RuntimeSettings,
    "pipeline": PipelineSettings,
    "effort": SearchEffort,
}


def field_names(section: type) -> tuple[str, ...]:
    """The setting names a section declares, in order."""
    return tuple(f.name for f in dataclasses.fields(section))
