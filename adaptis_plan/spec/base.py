"""The base of every boundary-file model: what all of them refuse beyond their own fields' ranges.

Unknown keys (a misspelt field must not be ignored), infinities and NaN, and `true` / `false`
where a number belongs: pydantic reads `true` as 1, so `"seq_len": true` would silently plan a
sequence of one token. Imports pydantic only.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


def _is_number(annotation: Any) -> bool:
    """Whether a field's type is a number (int or float, optional or not), bool excluded."""
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(_is_number(a) for a in args)
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_number(typing.get_args(annotation)[0])
    return False


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _number_not_bool(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name and _is_number(cls.model_fields[info.field_name].annotation):
            raise PydanticCustomError("number_not_bool", "a number is expected, not true / false")
        return value
