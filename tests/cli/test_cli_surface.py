"""The command line is a contract: every command, every option, its type and its default are
frozen here (`cli_surface.json`), so a change to them is always deliberate.

After changing the CLI on purpose, regenerate the file and review its diff:

    .venv/bin/python tests/cli/test_cli_surface.py > tests/cli/cli_surface.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).with_name("cli_surface.json")


def _type(param: click.Parameter) -> str:
    t = param.type
    if isinstance(t, click.Choice):
        return "choice: " + "|".join(map(str, t.choices))
    if isinstance(t, click.IntRange | click.FloatRange):
        return f"{t.name} {t.min}..{t.max}"
    return t.name


def _default(param: click.Parameter) -> object:
    value = param.default
    if callable(value):
        return "<computed>"
    if "UNSET" in repr(value):  # click 8.2+: no default given (a flag is then off)
        return False if getattr(param, "is_flag", False) else None
    return value if isinstance(value, str | int | float | bool | type(None)) else repr(value)


def surface() -> dict[str, dict[str, dict[str, object]]]:
    """{'plan': {'--pp': {...}, ...}, 'model show': {...}, ...} of every command and group."""
    from adaptis_plan.cli import cli

    out: dict[str, dict[str, dict[str, object]]] = {}

    def visit(cmd: click.Command, path: str) -> None:
        params: dict[str, dict[str, object]] = {}
        for p in cmd.params:
            key = "/".join(sorted(p.opts)) if isinstance(p, click.Option) else f"<{p.name}>"
            entry: dict[str, object] = {"type": _type(p), "required": p.required}
            if isinstance(p, click.Option):
                entry.update(default=_default(p), flag=p.is_flag)
                if p.secondary_opts:
                    entry["off"] = "/".join(sorted(p.secondary_opts))
            params[key] = entry
        out[path or "adaptis"] = params
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                visit(sub, f"{path} {name}".strip())

    visit(cli, "")
    return out


def test_cli_surface_is_frozen() -> None:
    now = surface()
    frozen = json.loads(GOLDEN.read_text())
    changed = sorted(
        f"{cmd} {opt}: {frozen.get(cmd, {}).get(opt)} -> {now.get(cmd, {}).get(opt)}"
        for cmd in set(now) | set(frozen)
        for opt in set(now.get(cmd, {})) | set(frozen.get(cmd, {}))
        if now.get(cmd, {}).get(opt) != frozen.get(cmd, {}).get(opt)
    )
    assert not changed, (
        "the command line changed; if on purpose, regenerate tests/cli/cli_surface.json"
        " (python tests/cli/test_cli_surface.py > tests/cli/cli_surface.json):\n  " + "\n  ".join(changed)
    )


def test_every_contract_command_is_in_the_surface() -> None:
    names = set(json.loads(GOLDEN.read_text()))
    assert {"models", "model show", "hardware", "hardware show", "plan", "simulate", "export", "run"} <= names
    assert {"profile", "schema"} <= names


def test_every_command_takes_json() -> None:
    """README: every command takes --json (one JSON object on stdout)."""
    frozen = json.loads(GOLDEN.read_text())
    without = [cmd for cmd, opts in frozen.items() if cmd not in ("adaptis", "model") and "--json" not in opts]
    assert without == []


if __name__ == "__main__":
    sys.stdout.write(json.dumps(surface(), indent=1, sort_keys=True) + "\n")


def test_partition_choices_are_the_planners() -> None:
    """`--partition` lists its choices literally (the CLI imports no numpy): they are the planner's."""
    from adaptis_plan.cli.commands import cli
    from adaptis_plan.schedules.placement import CLASSIC_PARTITIONS

    option = next(p for p in cli.commands["plan"].params if p.name == "partition")
    assert tuple(option.type.choices) == CLASSIC_PARTITIONS
