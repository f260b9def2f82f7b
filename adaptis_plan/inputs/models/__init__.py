"""Model inputs: built-in zoo, Hugging Face `config.json` importers, native spec files -> `ModelSpec`.

Data flow: the first box of inputs; the cost model, planner and executor read the `ModelSpec`
this package returns. No torch, no ortools, no rich/click here.
"""

from __future__ import annotations

from adaptis_plan.inputs.models.hf import SUPPORTED_MODEL_TYPES, from_hf_config
from adaptis_plan.inputs.models.load import list_models, load_file, load_model, parse_native_spec

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "from_hf_config",
    "list_models",
    "load_file",
    "load_model",
    "parse_native_spec",
]
