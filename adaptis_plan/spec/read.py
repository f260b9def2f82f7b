"""The one reader of every boundary file: model spec / HF config, hardware profile, cost profile, plan.

Data flow: a path on disk -> `read_data` (bytes -> JSON or YAML data, hardened) ->
`validate` (data -> the pydantic boundary model, errors as one line) -> the loaders in
`inputs/`, `cost.source.load_costs_profile` and `planfile.io.read_plan`. `read_boundary_file`
does both. Imports pydantic (and its `annotated_types`), pyyaml and `errors`: nothing else of
the package, never torch, ortools, rich or click.

What a hostile or broken file gets instead of a traceback (an `InputError`, one line naming
the file, the field where there is one, the value and the fix):
- a folder, FIFO, socket or device node instead of a regular file (checked on the opened
  descriptor, so a FIFO never blocks the reader);
- more than `MAX_FILE_BYTES`, more than `MAX_VALUES` values (YAML aliases included), nesting
  deeper than `MAX_DEPTH`;
- bytes that are not UTF-8 (a binary file, a UTF-16 export);
- malformed JSON or YAML (line and column), a key given twice in one object;
- an integer longer than `MAX_INT_DIGITS` digits (Python refuses to parse 4,300 and more;
  nothing in these files needs more than 64 bits), named by its field;
- a pydantic error: the first one, as `file: field = value: problem; fix`, an unknown field
  with the nearest allowed name, a range error with the allowed range.
"""

from __future__ import annotations

import difflib
import errno
import json
import math
import os
import stat
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import annotated_types
import yaml
from pydantic import BaseModel, ValidationError

from adaptis_plan.errors import InputError

M = TypeVar("M", bound=BaseModel)

#: The largest file read (a plan of 8,192 device x micro-batch pairs with 8 stages per device is ~30 MB).
MAX_FILE_BYTES = 128 * 2**20
#: The most values (objects, lists, strings, numbers) one file may hold, YAML aliases counted at each use.
MAX_VALUES = 8_000_000
#: The deepest nesting of objects and lists (our formats need 6).
MAX_DEPTH = 64
#: The longest integer literal: 19 digits hold every 64-bit integer.
MAX_INT_DIGITS = 19

_YAML_SUFFIXES = (".yaml", ".yml")
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class _BigInt:
    """An integer literal too long to be a size, kept as its digit count until its field is known."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def file_kind(mode: int) -> str | None:
    """'a folder', 'a FIFO (named pipe)', ... for anything that is not a regular file; None for one."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def path_kind(path: str | Path) -> str | None:
    """None when nothing is at `path` (or the name cannot exist: too long, a NUL byte), 'file' for a
    regular file (symbolic links followed), 'a folder', 'a FIFO (named pipe)', 'a loop of symbolic
    links', ... otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return "a loop of symbolic links" if e.errno == errno.ELOOP else None
    except ValueError:
        return None
    return file_kind(mode) or "file"


# ----------------------------------------------------------------------------- bytes -> data
def read_data(path: str | Path, what: str, *, fix: str = "") -> Any:
    """The JSON (or, for .yaml / .yml, YAML) data of the file at `path`, checked as the module docstring says.

    `what` names the file's role in messages ("hardware profile"); `fix` is appended where the
    problem is the file as a whole (e.g. "pass the JSON file `adaptis plan -o` wrote").
    """
    p = Path(path)
    tail = f"; {fix}" if fix else ""
    raw = _read_bytes(p, what, tail)
    if raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark (Windows editors) is not content
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{p}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); a {what} is a UTF-8 JSON"
            f" or YAML file: re-save it as UTF-8{tail}"
        ) from None
    if p.suffix.lower() in _YAML_SUFFIXES:
        data = _parse_yaml(p, text, tail)
    else:
        data = _parse_json(p, text, tail)
    _walk(p, data)
    return data


def _file(what: str) -> str:
    """'hardware profile' -> 'hardware profile file'; 'plan file' stays as it is."""
    return what if what.endswith(" file") else f"{what} file"


def _read_bytes(p: Path, what: str, tail: str) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the kind is checked on the descriptor
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{p}: no such file; check the path{tail}") from None
    except IsADirectoryError:
        raise InputError(f"{p}: a folder, not a {_file(what)}{tail}") from None
    except ValueError:  # a NUL byte in the name
        raise InputError(f"{str(p)!r}: not a possible file name; check the path{tail}") from None
    except OSError as e:
        raise InputError(f"{p}: cannot open the {what}: {e.strerror or e}{tail}") from None
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        if kind is not None:
            raise InputError(f"{p}: {kind}, not a {_file(what)}; pass a regular JSON or YAML file{tail}")
        if st.st_size > MAX_FILE_BYTES:
            raise InputError(
                f"{p}: {st.st_size:,} bytes; a {what} is at most {MAX_FILE_BYTES:,} bytes: is this the right file?{tail}"
            )
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise InputError(f"{p}: cannot read the {what}: {e.strerror or e}{tail}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > MAX_FILE_BYTES:  # it grew after the check
        raise InputError(f"{p}: more than {MAX_FILE_BYTES:,} bytes; a {what} is at most that: is this the right file?")
    return raw


def _parse_int(text: str) -> int | _BigInt:
    digits = len(text.lstrip("+-"))
    return _BigInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _first_repeat(items: Iterable[Any]) -> Any:
    """The first item seen before (there is one)."""
    seen: set[Any] = set()
    for k in items:
        if k in seen:
            return k
        seen.add(k)
    raise ValueError("no repeated item")


def _unique_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _DuplicateKey(_first_repeat(k for k, _ in pairs))
    return out


class _DuplicateKey(Exception):
    pass


def _parse_json(p: Path, text: str, tail: str) -> Any:
    try:
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        cut = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string")
        hint = "; the file may be truncated" if cut else ""
        raise InputError(f"{p}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}){hint}{tail}") from None
    except _DuplicateKey as e:
        raise InputError(f"{p}: key '{e.args[0]}' appears twice in one object; keep one{tail}") from None
    except RecursionError:
        raise InputError(
            f"{p}: nested deeper than {MAX_DEPTH} levels; this is not a file adaptis wrote{tail}"
        ) from None


class _SafeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` whose integers and mappings follow the JSON rules above."""


def _yaml_int(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    digits = sum(c.isdigit() for c in str(node.value))
    if digits > MAX_INT_DIGITS:
        return _BigInt(digits)
    return yaml.SafeLoader.construct_yaml_int(loader, node)


def _yaml_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    keys = [loader.construct_object(k, deep=True) for k, _ in node.value]
    for k in keys:
        if not isinstance(k, str | int | float | bool) and k is not None:
            raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value", node.start_mark)
    if len(set(keys)) != len(keys):
        raise _DuplicateKey(_first_repeat(keys))
    return loader.construct_mapping(node, deep=True)


_SafeLoader.add_constructor("tag:yaml.org,2002:int", _yaml_int)
_SafeLoader.add_constructor("tag:yaml.org,2002:map", _yaml_mapping)


def _parse_yaml(p: Path, text: str, tail: str) -> Any:
    try:
        return yaml.load(text, Loader=_SafeLoader)  # noqa: S506 - a SafeLoader subclass
    except (ValueError, TypeError) as e:  # a scalar the constructors cannot build (2021-13-45 as a date)
        raise InputError(f"{p}: not valid YAML: {e}{tail}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{p}: not valid YAML{at}: {problem}{tail}") from None
    except _DuplicateKey as e:
        raise InputError(f"{p}: key '{e.args[0]}' appears twice in one mapping; keep one{tail}") from None
    except RecursionError:
        raise InputError(
            f"{p}: nested deeper than {MAX_DEPTH} levels; this is not a file adaptis wrote{tail}"
        ) from None


def _walk(p: Path, data: Any) -> None:
    """Depth, value count and big integers, without recursion (a hostile file may nest 900 deep).

    One pass over containers with their depth (a plan holds hundreds of thousands of values); the
    location of a problem is looked up only when there is one (`_locate`)."""
    count = 1
    if type(data) is _BigInt:
        _refuse_big(p, data, ())
    stack: list[tuple[Any, int]] = [(data, 0)] if type(data) in (dict, list) else []
    while stack:
        value, depth = stack.pop()
        if depth >= MAX_DEPTH:
            loc = _locate(data, lambda v, d: d >= MAX_DEPTH and isinstance(v, dict | list))
            raise InputError(
                f"{p}: {format_loc(loc[:8])}...: nested deeper than {MAX_DEPTH} levels; this is not a file"
                " adaptis wrote"
            )
        items = value.values() if type(value) is dict else value
        count += len(items)
        if count > MAX_VALUES:
            raise InputError(f"{p}: more than {MAX_VALUES:,} values; this is not a file adaptis wrote")
        for v in items:
            kind = type(v)
            if kind is dict or kind is list:
                stack.append((v, depth + 1))
            elif kind is _BigInt:
                _refuse_big(p, v, _locate(data, _is(v)))


def _is(target: Any) -> Callable[[Any, int], bool]:
    return lambda x, _depth: x is target


def _refuse_big(p: Path, value: _BigInt, loc: tuple[Any, ...]) -> None:
    field = format_loc(loc) or "(top level)"
    raise InputError(
        f"{p}: {field} = an integer of {value.digits} digits: far beyond any size adaptis handles"
        f" (integers here fit in 64 bits); fix the value"
    )


def _locate(data: Any, found: Callable[[Any, int], bool]) -> tuple[Any, ...]:
    """The location (keys and indices) of the first value, depth first, for which `found(value, depth)`."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if found(value, len(loc)):
            return loc
        if isinstance(value, dict):
            stack.extend((v, (*loc, k)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, (*loc, i)) for i, v in reversed(list(enumerate(value))))
    return ()


# ----------------------------------------------------------------------------- data -> model
def validate(data: Any, model_cls: type[M], where: object, what: str) -> M:
    """`model_cls.model_validate(data)`, any error as one line naming `where` (the file)."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: the top level is {_kind_of(data)}, not an object; a {what} is one JSON/YAML object")
    try:
        return model_cls.model_validate(data)
    except ValidationError as e:
        raise InputError(validation_message(where, e, model_cls)) from None


def read_boundary_file(path: str | Path, model_cls: type[M], what: str, *, fix: str = "") -> M:
    """Read and validate one boundary file (`read_data` then `validate`)."""
    return validate(read_data(path, what, fix=fix), model_cls, path, what)


def _kind_of(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "empty (null)"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def format_loc(loc: tuple[Any, ...] | list[Any]) -> str:
    """('layers', 3, 'attention') -> 'layers[3].attention'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def short(value: Any) -> str:
    """A value as the message shows it: JSON-like, at most 60 characters."""
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, list):
        return "[...]" if value else "[]"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(annotation: Any) -> Any:
    """list[X] / dict[str, X] / X | None -> X (the model class a nested location points into)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin in (list, tuple):
            annotation = typing.get_args(annotation)[0]
        elif origin is dict:
            annotation = typing.get_args(annotation)[1]
        elif origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _owner(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the field at the end of `loc` (dict keys and list indices skipped)."""
    current: Any = root
    for part in loc[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        if isinstance(part, int):
            continue
        info = current.model_fields.get(part)
        if info is None:
            if current is not root and not isinstance(part, str):
                return None
            continue  # a dict key (device type names)
        current = _unwrap(info.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def field_range(owner: type[BaseModel] | None, name: Any) -> str:
    """'1..1,000,000', '> 0', ... from a field's numeric constraints; '' when it has none."""
    if owner is None or not isinstance(name, str) or name not in owner.model_fields:
        return ""
    lo: Any = None
    hi: Any = None
    lo_open = hi_open = False
    for meta in owner.model_fields[name].metadata:
        if isinstance(meta, annotated_types.Ge):
            lo = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            lo, lo_open = meta.gt, True
        elif isinstance(meta, annotated_types.Le):
            hi = meta.le
        elif isinstance(meta, annotated_types.Lt):
            hi, hi_open = meta.lt, True
    if lo is None and hi is None:
        return ""
    if lo is not None and hi is not None:
        left = "> " if lo_open else ""
        if lo_open or hi_open:
            return f"{'>' if lo_open else '>='} {_num(lo)} and {'<' if hi_open else '<='} {_num(hi)}"
        return f"{left}{_num(lo)}..{_num(hi)}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    return f"{'<' if hi_open else '<='} {_num(hi)}"


def _num(v: Any) -> str:
    if isinstance(v, int) and abs(v) >= 10_000:
        return f"{v:,}"
    return f"{v:g}" if isinstance(v, float) else str(v)


_RANGE_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "finite_number",
    "int_parsing_size",
}


def validation_message(where: object, exc: ValidationError, root: type[BaseModel]) -> str:
    """The first error of `exc` as 'file: field = value: problem; fix' (+ how many more)."""
    # An unknown field usually is a misspelt one, and it also shows up as the real field
    # "missing": report the unknown field (with the suggestion) and drop the echo.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    err = errors[0]
    loc = tuple(err["loc"])
    field = format_loc(loc) or "(top level)"
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    msg = str(err["msg"]).removeprefix("Value error, ")
    owner = _owner(root, loc) if loc else None
    if kind == "missing":
        line = f"{where}: {field}: field required; add it"
    elif kind == "extra_forbidden":
        spelled = (
            sorted(f.alias or name for name, f in owner.model_fields.items()) if owner else []
        )  # as files spell them
        close = difflib.get_close_matches(str(loc[-1]), spelled, n=1)
        fix = f"did you mean '{close[0]}'?" if close else f"remove it (allowed: {', '.join(spelled)})"
        if close:
            errors = [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) == (*loc[:-1], close[0]))]
        line = f"{where}: {field} = {short(value)}: unknown field; {fix}"
    elif kind in _RANGE_ERRORS:
        allowed = field_range(owner, loc[-1] if loc else None)
        if not allowed:
            bound = next((ctx[k] for k in ("gt", "ge", "lt", "le") if k in ctx), None)
            op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
            allowed = f"{op[kind]} {_num(bound)}" if kind in op else "a finite number"
        problem = "not a finite number" if kind == "finite_number" else "out of range"
        line = f"{where}: {field} = {short(value)}: {problem}; allowed: {allowed}"
    elif kind == "literal_error":
        line = f"{where}: {field} = {short(value)}: {msg.removeprefix('Input should be ')}"
    elif kind == "value_error" and loc and isinstance(value, list) and msg.startswith("["):
        line = f"{where}: {field}{msg}"  # an item of a list, located by the list's own validator
    elif kind == "value_error":
        at = f"{where}: {field}: " if loc else f"{where}: "
        line = f"{at}{msg}"
    else:
        line = f"{where}: {field} = {short(value)}: {msg[0].lower() + msg[1:] if msg else 'invalid'}; fix the value"
    if len(errors) > 1:
        line += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return line


__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_DIGITS",
    "MAX_VALUES",
    "field_range",
    "file_kind",
    "format_loc",
    "path_kind",
    "read_boundary_file",
    "read_data",
    "short",
    "validate",
    "validation_message",
]
