"""The planning request's sections (`spec.config`): each setting declared once, the `plan` option
taken from it, the training config and the request built from the sections."""

from __future__ import annotations

import dataclasses

import click
import pytest

from adaptis_plan.spec.config import SECTIONS, Parallelism, RuntimeSettings, field_names
from adaptis_plan.spec.training import TrainingConfig

pytestmark = pytest.mark.unit

#: section fields the command sets itself rather than take from an option of their own
NOT_OPTIONS = {"hard_stop_s"}  # from whether --time-limit was given


def test_every_section_field_is_one_plan_option() -> None:
    from adaptis_plan.cli.commands import plan_cmd

    options = {p.name: p for p in plan_cmd.params if isinstance(p, click.Option)}
    for section in SECTIONS.values():
        for fld in dataclasses.fields(section):
            if fld.name in NOT_OPTIONS:
                assert "cli" not in fld.metadata and fld.name not in options, fld.name
                continue
            spec = fld.metadata["cli"]
            option = options[fld.name]  # the option fills the field of its name
            assert option.help == spec["help"] and option.default == spec["default"], fld.name
            assert sorted(option.opts + option.secondary_opts) == sorted(
                d for decl in spec["decls"] for d in decl.split("/")
            ), fld.name
    assert len({fld for section in SECTIONS.values() for fld in field_names(section)}) == sum(
        len(field_names(s)) for s in SECTIONS.values()
    )  # no setting in two sections


def test_search_components_are_the_core_ones() -> None:
    from adaptis_plan.core import ALL_COMPONENTS
    from adaptis_plan.spec.config import SEARCH_COMPONENTS

    assert SEARCH_COMPONENTS == ALL_COMPONENTS


def test_training_config_of_the_sections() -> None:
    split = Parallelism(tp=2, pp=4, dp=8, cp=2, ep=4, zero=3, micro_batch_size=2, num_microbatches=16)
    runtime = RuntimeSettings(attention="cudnn", tp_comm_overlap=True, dp_overlap=False)
    got = TrainingConfig.of(split, 8192, "selective", runtime)
    assert got == TrainingConfig(
        tp=2, pp=4, dp=8, cp=2, ep=4, zero=3, micro_batch_size=2, num_microbatches=16, seq_len=8192,
        recompute="selective", attention="cudnn", tp_comm_overlap=True, dp_overlap=False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="ep = 3 does not divide"):
        TrainingConfig.of(dataclasses.replace(split, ep=3), 8192, "none", runtime)


def test_plan_request_of_sorts_settings_into_sections() -> None:
    from adaptis_plan.usecases import PlanRequest

    req = PlanRequest.of("tiny-llama", "cpu", 2, 4, tp=2, seed=7, recompute="auto", attention="unfused", gpus=8)
    assert (req.parallelism.pp, req.parallelism.num_microbatches, req.parallelism.tp) == (2, 4, 2)
    assert (req.effort.seed, req.pipeline.recompute, req.runtime.attention, req.gpus) == (7, "auto", "unfused", 8)
    with pytest.raises(TypeError):
        PlanRequest.of("tiny-llama", "cpu", 2, 4, no_such_setting=1)
