"""A seeded generator of hostile variants of real boundary files and CLI values.

Generic on purpose: `mutate_data` walks the whole JSON tree of a real file and mutates any
value it finds (type swaps, huge / negative / NaN / inf / fractional numbers, 5,000-digit
integers, deep nesting, empty, dropped, duplicated, renamed and unknown keys, long strings),
so a field added to any format tomorrow is fuzzed without touching this file;
`mutate_text` damages the serialized bytes (truncation, flipped and invalid UTF-8 bytes, NUL,
UTF-16, duplicated keys, a byte-order mark). Everything is drawn from one `random.Random`, so a
case is reproduced from its seed alone.
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable
from typing import Any

Path_ = tuple[Any, ...]


def paths(data: Any) -> list[Path_]:
    """Every location in the tree, containers included, the root as ()."""
    out: list[Path_] = [()]
    stack: list[tuple[Any, Path_]] = [(data, ())]
    while stack:
        value, at = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, sub in items:
            out.append((*at, key))
            stack.append((sub, (*at, key)))
    return out


def _get(data: Any, at: Path_) -> Any:
    for key in at:
        data = data[key]
    return data


def _set(data: Any, at: Path_, value: Any) -> Any:
    if not at:
        return value
    _get(data, at[:-1])[at[-1]] = value
    return data


class _Huge:
    """A marker for an integer literal too long for json.dumps to write (written by `to_json`)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _number(rng: random.Random, x: float) -> Any:
    return rng.choice(
        [
            0,
            -1,
            -x,
            x * 1e9,
            x * 10,
            x + 0.5,
            1e30,
            -1e30,
            2**63,
            2**31,
            10**25,
            math.nan,
            math.inf,
            -math.inf,
            1e-300,
            _Huge(rng.choice([30, 4400, 6000])),
            str(x),
            True,
            None,
        ]
    )


def _string(rng: random.Random, s: str) -> Any:
    return rng.choice(["", " ", s * 1000 if s else "x" * 100_000, s + "\u202e\u0000", "12", 12, None, [s], {"s": s}])


class _Deep:
    """A marker for nesting `depth` levels deep, written as text by `to_json` (no recursion here)."""

    def __init__(self, depth: int, as_objects: bool) -> None:
        self.depth, self.as_objects = depth, as_objects

    def text(self) -> str:
        if self.as_objects:
            return '{"a": ' * self.depth + "1" + "}" * self.depth
        return "[" * self.depth + "1" + "]" * self.depth


def _nested(rng: random.Random) -> Any:
    return _Deep(rng.choice([70, 500, 3000]), rng.random() < 0.5)


def _mutate_value(rng: random.Random, value: Any) -> tuple[str, Any]:
    """(what was done, the new value) for one location."""
    if isinstance(value, bool):
        return "bool", rng.choice([not value, 1, "true", None, 2])
    if isinstance(value, int | float):
        new = _number(rng, float(value))
        return f"number {value!r:.30} -> {new if not isinstance(new, _Huge) else f'{new.digits} digits'}", new
    if isinstance(value, str):
        return "string", _string(rng, value)
    if isinstance(value, list):
        choice = rng.randrange(6)
        if choice == 0 or not value:
            return "list emptied", []
        if choice == 1:
            return "list element dropped", value[: (i := rng.randrange(len(value)))] + value[i + 1 :]
        if choice == 2:
            return "list element repeated", value + [copy.deepcopy(rng.choice(value))] * rng.choice([1, 3, 50])
        if choice == 3:
            return "list reversed", value[::-1]
        if choice == 4:
            return "list -> object", {str(i): v for i, v in enumerate(value)}
        return "list -> deep nesting", _nested(rng)
    if isinstance(value, dict):
        choice = rng.randrange(6)
        if choice == 0 or not value:
            return "object emptied", {}
        key = rng.choice(sorted(value, key=str))
        if choice == 1:
            return f"key {key!r} dropped", {k: v for k, v in value.items() if k != key}
        if choice == 2:
            typo = str(key)[:-1] + ("x" if not str(key).endswith("x") else "y")
            return f"key {key!r} misspelt", {(typo if k == key else k): v for k, v in value.items()}
        if choice == 3:
            return "unknown key added", {**value, "unexpected_field": rng.choice([1, "x", None])}
        if choice == 4:
            return "object -> list", list(value.values())
        return "object -> deep nesting", _nested(rng)
    return "null -> value", rng.choice([0, -1, "x", [], {}, 1e30])


def mutate_data(data: Any, rng: random.Random) -> tuple[str, Any]:
    """(description, a mutated deep copy of `data`): one to three mutations at random locations."""
    data = copy.deepcopy(data)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        at = rng.choice(paths(data))
        what, new = _mutate_value(rng, _get(data, at))
        data = _set(data, at, new)
        done.append(f"{_show(at)}: {what}")
    return "; ".join(done), data


def _show(at: Path_) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in at) or "(root)"


def to_json(data: Any) -> bytes:
    """JSON text of `data`, NaN / Infinity included, `_Huge` / `_Deep` markers as their literals."""
    marks: dict[str, str] = {}

    def default(value: Any) -> Any:
        if isinstance(value, _Huge | _Deep):
            key = f"@@mark{len(marks)}@@"
            marks[key] = "7" * value.digits if isinstance(value, _Huge) else value.text()
            return key
        raise TypeError(type(value).__name__)

    text = json.dumps(data, default=default)
    for key, literal in marks.items():
        text = text.replace(f'"{key}"', literal)
    return text.encode()


_TEXT_MUTATIONS: list[tuple[str, Callable[[random.Random, bytes], bytes]]] = [
    ("truncated", lambda rng, b: b[: rng.randrange(len(b))]),
    ("byte flipped", lambda rng, b: _at(rng, b, bytes([rng.randrange(256)]))),
    ("invalid UTF-8 inserted", lambda rng, b: _at(rng, b, b"\xff\xfe\xc3")),
    ("NUL inserted", lambda rng, b: _at(rng, b, b"\x00")),
    ("UTF-16", lambda rng, b: b.decode("utf-8", "replace").encode("utf-16")),
    ("byte-order mark", lambda rng, b: b"\xef\xbb\xbf" + b),
    ("duplicated first key", lambda rng, b: b.replace(b"{", b'{"name": "dup", ', 1) if b.startswith(b"{") else b),
    ("deeply nested prefix", lambda rng, b: b"[" * 100_000 + b),
    ("binary", lambda rng, b: bytes(rng.randrange(256) for _ in range(512))),
    ("empty", lambda rng, b: b""),
]


def _at(rng: random.Random, b: bytes, insert: bytes) -> bytes:
    i = rng.randrange(len(b) + 1)
    return b[:i] + insert + b[i:]


def mutate_text(text: bytes, rng: random.Random) -> tuple[str, bytes]:
    """(description, damaged bytes) of a serialized file."""
    name, fn = rng.choice(_TEXT_MUTATIONS)
    return name, fn(rng, text) if text else b""


def hostile_option_value(rng: random.Random, value: str) -> str:
    """A hostile replacement for one CLI option value."""
    return rng.choice(
        [
            "0",
            "-1",
            "nan",
            "inf",
            "-inf",
            "1e309",
            "99999999999999999999",
            "2147483648",
            "",
            " ",
            "\u0663",
            "0x10",
            "1_0",
            "abc",
            value + "0",
            value * 3 if value.isdigit() and len(value) < 3 else "7",
            "1.5",
        ]
    )


__all__ = ["hostile_option_value", "mutate_data", "mutate_text", "paths", "to_json"]
