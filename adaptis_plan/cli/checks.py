"""The command-line checks of option values the request dataclasses do not make themselves: positive
numbers, physical-sense maximums (`spec.limits`), `--head-chunks`, and output paths that must not be
one of the command's inputs. Each failure is one `InputError`: the value, the limit, the fix.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from adaptis_plan.errors import InputError
from adaptis_plan.text import shown


def _check_output(path: str | Path, flag: str, *inputs: str | None) -> None:
    """`check_output_path`, and refuse an output that is one of the command's input files (`inputs`: the
    paths or names given for them): writing it would destroy the input it was made from."""
    from adaptis_plan.planfile.io import check_output_path

    check_output_path(path, flag)
    out = Path(path)
    for given in inputs:
        if given is None:
            continue
        src = Path(given)
        for candidate in (src, src / "config.json") if src.is_dir() else (src,):
            try:
                same = out.exists() and candidate.exists() and os.path.samefile(out, candidate)
            except OSError:
                same = False
            if same:
                raise InputError(
                    f"{flag} {shown(path, 4096)}: the input file {shown(candidate, 4096)} itself; writing it would"
                    " destroy the input: pass another output path"
                )


def _check_positive(**values: int | float | None) -> None:
    for name, v in values.items():
        if v is not None and v <= 0:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} = {v}: must be a positive number; pass {flag} 1 or more")


def _num(v: int | float) -> str:
    """A number in a message: digits as typed up to 99999, then grouped (1,000,000) or 1e+30."""
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1e15:
        return str(int(v)) if abs(v) < 100_000 else f"{int(v):,}"
    return f"{v:g}"


def _check_at_most(**values: tuple[int | float | None, int | float]) -> None:
    """`--flag = v: more than MAX ...` for every `name=(value, max)` past its physical-sense limit."""
    for name, (v, most) in values.items():
        flag = "--" + name.replace("_", "-")
        if v is not None and not math.isfinite(v):
            raise InputError(f"{flag} = {v}: not a finite number; pass a number from 1 to {_num(most)}")
        if v is not None and v > most:
            raise InputError(
                f"{flag} = {_num(v)}: more than {_num(most)}, past any real use; pass {flag} 1..{_num(most)}"
            )


def _check_training_options(pp: int, microbatches: int, seq_len: int, micro_batch_size: int, tp: int) -> None:
    """The step's sizes against the limits the plan file's `training` has (`spec.limits`)."""
    from adaptis_plan.spec import limits

    _check_positive(pp=pp, microbatches=microbatches, seq_len=seq_len, micro_batch_size=micro_batch_size, tp=tp)
    _check_at_most(
        pp=(pp, limits.MAX_PP),
        microbatches=(microbatches, limits.MAX_MICROBATCHES),
        seq_len=(seq_len, limits.MAX_SEQ_LEN),
        micro_batch_size=(micro_batch_size, limits.MAX_MICRO_BATCH_SIZE),
        tp=(tp, limits.MAX_TP),
    )
    if pp * microbatches > limits.MAX_DEVICE_MICROBATCHES:
        raise InputError(
            f"--pp {pp} x --microbatches {microbatches} = {_num(pp * microbatches)} (device, micro-batch) pairs per"
            f" step: more than {_num(limits.MAX_DEVICE_MICROBATCHES)}; use fewer micro-batches (a larger --micro-batch-size)"
            " or fewer pipeline ranks"
        )


def _check_configuration_options(gpus: int | None, global_batch_size: int | None, fixed: dict) -> None:
    """--gpus / --global-batch-size and the fixed dimensions: positive, within the limits, and the
    pipeline shape (--pp, --microbatches) given when the configuration is not searched."""
    from adaptis_plan.spec import limits

    # the flags' names: --microbatches fixes num_microbatches
    sizes = {("microbatches" if k == "num_microbatches" else k): v for k, v in fixed.items() if k != "zero"}
    _check_positive(gpus=gpus, global_batch_size=global_batch_size, **sizes)
    _check_at_most(
        gpus=(gpus, limits.MAX_DP), global_batch_size=(global_batch_size, limits.MAX_DP * limits.MAX_MICRO_BATCH_SIZE)
    )
    if gpus is None:
        if global_batch_size is not None:
            raise InputError("--global-batch-size needs --gpus N (the whole-configuration search)")
        missing = [f"--{k}" for k in ("pp", "num_microbatches") if fixed.get(k) is None]
        if missing:
            raise InputError(
                f"{' and '.join(m.replace('num_microbatches', 'microbatches') for m in missing)} missing: give the"
                " pipeline shape (--pp P --microbatches M), or --gpus N --global-batch-size B to search it"
            )
    elif global_batch_size is None:
        raise InputError("--gpus needs --global-batch-size B (sequences per optimizer step)")


def _head_chunks_option(value: str) -> int | None:
    """--head-chunks: None for auto, else a whole number of vocabulary chunks within the sane maximum."""
    from adaptis_plan.spec.limits import MAX_HEAD_CHUNKS

    if value == "auto":
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_HEAD_CHUNKS:
        raise InputError(
            f"--head-chunks = {value[:40]!r}: use auto or a whole number from 1 to {MAX_HEAD_CHUNKS}"
            " (vocabulary chunks of the LM head)"
        )
    return int(text)
