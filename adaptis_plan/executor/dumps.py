"""The verification dumps a rank writes and the launcher reads (`worker.run_job`, `launch._verify`).

One file per rank and kind: the named tensors ({name: tensor or None}, e.g. every gradient after the
first step) as one flat float32 tensor with the names and shapes beside it, and a few plain values
(the loss). One flat tensor pickles as one storage where a dict of hundreds of small tensors pickles
each on its own (and loads each through the weights-only unpickler): the same values, several times
less CPU at both ends. Imports torch only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch


def save_tensors(path: Path, tensors: Mapping[str, torch.Tensor | None], **values: float | None) -> None:
    """Write `tensors` (None kept as None; every tensor as float32 on the CPU) and `values` to `path`."""
    present = [t.detach().reshape(-1).float().cpu() for t in tensors.values() if t is not None]
    torch.save(
        {
            "names": list(tensors),
            "shapes": [None if t is None else list(t.shape) for t in tensors.values()],
            "flat": torch.cat(present) if present else torch.zeros(0),
            "values": values,
        },
        path,
    )


def load_tensors(path: Path) -> tuple[dict[str, torch.Tensor | None], dict[str, float | None]]:
    """What `save_tensors` wrote: ({name: tensor or None}, {value name: value})."""
    dump = torch.load(path, weights_only=True)
    out: dict[str, torch.Tensor | None] = {}
    flat, offset = dump["flat"], 0
    for name, shape in zip(dump["names"], dump["shapes"], strict=True):
        if shape is None:
            out[name] = None
            continue
        n = math.prod(shape)
        out[name] = flat[offset : offset + n].view(shape)
        offset += n
    return out, dump["values"]
