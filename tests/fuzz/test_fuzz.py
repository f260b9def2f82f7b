"""Fuzz the boundary: real configs, profiles, cost profiles, plans and CLI values, mutated.

Each case takes a real file (the HF configs in tests/data/configs, the zoo's configs and
native specs, the built-in hardware profiles, a measured-style cost profile, plans of the tiny
model), damages it with the seeded generator in `mutate.py`, runs `adaptis` in-process on it
and checks what a user must always get: exit 0, 2 or 3; no traceback; one `error:` line (a
deadlock adds its grid; a click usage error its usage line); nothing on stdout after an error;
no output file, not even a temporary one, unless the command succeeded; an answer within
`CASE_TIMEOUT_S`.

`ADAPTIS_FUZZ_SEED` and `ADAPTIS_FUZZ_SCALE` explore further (e.g. SCALE=10 for 6,500 cases).
Every tenth case is fast enough for `make test-fast`; the rest are marked slow.
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import pytest
from helpers_cli import leftovers, tiny_cost_profile
from mutate import hostile_option_value, mutate_data, mutate_text, to_json

from adaptis_plan.inputs.models import zoo

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("ADAPTIS_FUZZ_SEED", "20251130"))
SCALE = float(os.environ.get("ADAPTIS_FUZZ_SCALE", "1"))
CASE_TIMEOUT_S = 60

HF_CONFIGS = sorted((ROOT / "tests" / "data" / "configs").glob("*.json"))
HARDWARE = sorted((ROOT / "profiles").glob("*.json"))
NATIVE_MODELS = ("tiny-llama", "tiny-deepseek", "tiny-nemotron-h", "tiny-gemma")
SMALL = ("--pp", "2", "--microbatches", "2", "--seq-len", "64")

# cases per target (650 in all at scale 1)
COUNTS = {"hf": 170, "native": 110, "hardware": 120, "costs": 70, "plan": 110, "options": 70}


class _Hang(BaseException):
    """Raised by the alarm: not an Exception, so the CLI's bug handler cannot swallow it."""


def _cases() -> list:
    out = []
    for target, n in COUNTS.items():
        for i in range(max(1, round(n * SCALE))):
            marks = () if i % 10 == 0 else (pytest.mark.slow,)
            out.append(pytest.param(target, i, id=f"{target}-{i}", marks=marks))
    return out


def test_at_least_500_cases() -> None:
    assert sum(COUNTS.values()) >= 500


@pytest.fixture
def alarm():
    def ring(signum, frame):
        raise _Hang

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ----------------------------------------------------------------------------- seeds
def _seed_data(target: str, rng: random.Random, plans: list[Path]) -> tuple[object, str]:
    """(real data to mutate, a label) for one target."""
    if target == "hf":
        if rng.random() < 0.5:
            path = rng.choice(HF_CONFIGS)
            return json.loads(path.read_text()), path.name
        name = rng.choice([n for n in zoo.names() if not n.startswith("tiny-")])
        return dict(zoo.entry(name).config), f"zoo:{name}"
    if target == "native":
        from adaptis_plan.inputs.models.load import load_model

        name = rng.choice(NATIVE_MODELS)
        return load_model(name).model_dump(mode="json", exclude_none=True), f"native:{name}"
    if target == "hardware":
        path = rng.choice(HARDWARE)
        return json.loads(path.read_text()), path.name
    if target == "costs":
        return tiny_cost_profile(), "tiny-llama costs"
    plan = rng.choice(plans)
    return json.loads(plan.read_text()), plan.name


def _file_for(target: str, rng: random.Random, plans: list[Path], folder: Path) -> tuple[Path, str]:
    data, label = _seed_data(target, rng, plans)
    if rng.random() < 0.8:
        what, mutated = mutate_data(data, rng)
        content = to_json(mutated)
    else:
        what, content = mutate_text(to_json(data), rng)
    name = {"hf": "config.json", "native": "spec.json", "hardware": "hw.json", "costs": "costs.json"}.get(
        target, "plan.json"
    )
    if target in ("native", "hardware") and rng.random() < 0.25 and content.startswith(b"{"):
        import yaml

        try:  # the same data as YAML (a YAML file goes through the YAML parser)
            content = yaml.safe_dump(json.loads(content)).encode()
            name = name.replace(".json", ".yaml")
        except (ValueError, RecursionError, yaml.YAMLError):
            pass
    path = folder / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path, f"{label}: {what}"


def _command(target: str, rng: random.Random, path: Path, plans: list[Path], out: Path) -> list[str]:
    """The adaptis command line for one case (mostly cheap commands; a plan for some)."""
    plan_now = rng.random() < 0.2
    if target in ("hf", "native"):
        if plan_now:
            return ["plan", "--model", str(path), "--hardware", "h200", *SMALL, "--strategy", "1F1B", "-o", str(out)]
        return ["model", "show", str(path), "--json", *(["--hardware", "h200"] if rng.random() < 0.5 else [])]
    if target == "hardware":
        if plan_now:
            return [
                "plan",
                "--model",
                "tiny-llama",
                "--hardware",
                str(path),
                *SMALL,
                "--strategy",
                "GPipe",
                "-o",
                str(out),
            ]
        if rng.random() < 0.5:
            return ["hardware", "show", str(path), "--json"]
        return ["model", "show", "tiny-llama", "--hardware", str(path), "--seq-len", "64", "--json"]
    if target == "costs":
        if plan_now:
            cmd = ["plan", "--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4"]
            return [*cmd, "--seq-len", "128", "--strategy", "1F1B", "--costs", str(path), "-o", str(out)]
        return ["simulate", str(plans[0]), "--costs", str(path), "--json"]
    if target == "plan":
        if rng.random() < 0.5:
            return ["simulate", str(path), "--json"]
        fmt = rng.choice(["torch-csv", "megatron-layout", "megatron-args", "torchtitan"])
        return ["export", str(path), "--format", fmt, "-o", str(out)]
    # options: a classic plan of the tiny model with one or two hostile values
    opts = {
        "--pp": "2",
        "--microbatches": "4",
        "--seq-len": "64",
        "--micro-batch-size": "1",
        "--tp": "1",
        "--seed": "0",
        "--head-chunks": "1",
        "--strategy": rng.choice(["1F1B", "GPipe", "ZBVZeroBubble", "Interleaved1F1B"]),
    }
    for key in rng.sample(sorted(opts), rng.choice([1, 1, 2])):
        opts[key] = hostile_option_value(rng, opts[key])
    args = [x for kv in opts.items() for x in kv]
    return ["plan", "--model", "tiny-llama", "--hardware", "cpu", *args, "-o", str(out)]


# ----------------------------------------------------------------------------- the test
@pytest.mark.parametrize(("target", "i"), _cases())
def test_fuzz_case(target: str, i: int, tmp_path: Path, tiny_plan: Path, zbv_plan: Path, adaptis, alarm) -> None:
    rng = random.Random(f"{SEED}-{target}-{i}")
    plans = [tiny_plan, zbv_plan]
    if target == "options":
        path, what = tmp_path / "none", "CLI values"
    else:
        path, what = _file_for(target, rng, plans, tmp_path)
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "result.json"
    argv = _command(target, rng, path, plans, out)
    case = f"seed {SEED} case {target}-{i}: {what}\n  adaptis {' '.join(argv)}"
    try:
        r = adaptis(*argv)
    except _Hang:
        pytest.fail(f"no answer within {CASE_TIMEOUT_S} s: {case}")
    _check(r, argv, out, outdir, case)


def _check(r, argv: list[str], out: Path, outdir: Path, case: str) -> None:
    detail = f"{case}\n  exit {r.exit_code}\n  stderr: {r.stderr[-2000:]}"
    assert r.exit_code in (0, 2, 3), detail
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, detail
    writes = "-o" in argv
    if r.exit_code != 0:
        assert r.stdout == "", detail
        lines = r.stderr.splitlines()
        assert lines and lines[0].startswith("error: "), detail  # click's usage errors included
        if "<-- ERROR" not in r.stderr:
            assert len(lines) == 1, detail
        assert leftovers(outdir) == [], detail
        return
    if "--json" in argv:
        assert isinstance(_finite_json(r.stdout, detail), dict), detail
    if writes:
        assert leftovers(outdir) == ["result.json"], detail
        if argv[0] == "plan":
            assert _finite_json(out.read_text(), detail)["devices"], detail


def _finite_json(text: str, detail: str) -> object:
    """The JSON document, failing on NaN / Infinity anywhere (every reported number is finite)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the output\n{detail}")

    return json.loads(text, parse_constant=refuse)
