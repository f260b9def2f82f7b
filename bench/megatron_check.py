"""Megatron-LM's own argument checks on a plan's export: `parse_args` and `validate_args` from a
Megatron-LM checkout the user points at (Megatron-LM is not on PyPI; megatron-core does not ship
`megatron.training`).

Run: `python -m bench.megatron_check --megatron /path/to/Megatron-LM [PLAN.json ...] [--six DIR]
[--arch 9.0] [--model MODEL]`, or `... --megatron DIR --record [--megatron-commit SHA]` to check the
six plans of `SIX_PLANS` and write the suite `megatron_check`'s record (bench/results/
megatron_check.json, or `--out FILE`; refused from a checkout with uncommitted changes unless
`--allow-dirty`, as `bench.run` does), which `bench.report` renders into BENCHMARKS.md. For each plan it writes the launch script (`adaptis export
--format megatron-launch`), reads back the environment it exports and the arguments it passes to
the training script, adds the model's size from the plan (the arguments a user passes after the
script's name: `--hidden-size`, `--num-attention-heads`, `--ffn-hidden-size`, `--num-query-groups`,
`--max-position-embeddings`, `--vocab-size` and the MoE counts; printed), then imports
`megatron.training.arguments` from the checkout, runs `parse_args` on those arguments with
WORLD_SIZE = the plan's world size and RANK 0 in the environment as the script sets it, and
`validate_args` on the result. Prints one line per plan (ok, or the assertion Megatron raised) and
exits 1 when any plan fails.

What is mocked, and why (printed with every run): `validate_args` asks the GPU for its architecture
(`megatron.core.utils.get_device_arch_version`, through torch.cuda) to decide whether
CUDA_DEVICE_MAX_CONNECTIONS must be 1; on a machine without a GPU that is answered with `--arch`
(default 9.0, Hopper: the plans' h100 / h200). Nothing else is mocked: no process group is started
(parse_args and validate_args do not need one), and every other check runs as Megatron wrote it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SUITE = "megatron_check"
HEADING = "## Megatron-LM's own argument checks"

# (name, `adaptis plan` options): small zoo models at fixed degrees, classic Megatron schedules (no
# search: seconds) but one plan that the search lays out for Megatron (`--target megatron`);
# every plan built with --no-hard-stop, so the same plan every time.
_LLAMA = "--model llama-2-7b --hardware h100 --seq-len 4096"
SIX_PLANS = (
    ("dense-tp-pp-dp", f"{_LLAMA} --pp 2 --tp 2 --dp 4 --zero 1 --microbatches 16 --strategy 1F1B --tp-comm-overlap"),
    ("zero3-fsdp", f"{_LLAMA} --pp 2 --tp 2 --dp 4 --zero 3 --microbatches 8 --strategy Interleaved1F1B"
     " --recompute selective"),
    ("cp", "--model llama-2-7b --hardware h100 --seq-len 8192 --pp 2 --tp 2 --cp 2 --dp 2 --zero 1 --microbatches 8"
     " --strategy 1F1B --attention cudnn"),
    ("moe-ep", "--model deepseek-v2-lite --hardware h100 --seq-len 4096 --pp 2 --dp 8 --ep 4 --zero 1 --microbatches 8"
     " --strategy 1F1B"),
    ("pp1", f"{_LLAMA} --pp 1 --tp 4 --dp 4 --zero 1 --microbatches 4 --strategy 1F1B --recompute full"),
    ("interleaved-layout", f"{_LLAMA} --pp 4 --microbatches 8 --recompute none --target megatron"),
)  # fmt: skip


def launch_argv(script: str) -> tuple[dict[str, str | None], list[str], list[str]]:
    """A `megatron-launch` script read back: (the environment it exports, None for what it unsets;
    torchrun's own arguments; the training script and its arguments, without the trailing `"$@"`).

    The script is one `torchrun` command continued over lines ending in ` \\` after `export` /
    `unset` lines; `${VAR}` placeholders stay as written (shlex does not expand them)."""
    env: dict[str, str | None] = {}
    lines = script.splitlines()
    for line in lines:
        if not line.startswith(("export ", "unset ")):
            continue
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            name, _, value = words[1].partition("=")
            env[name] = value
        elif words[:1] == ["unset"]:
            env[words[1]] = None
    start = next(i for i, line in enumerate(lines) if line.startswith("torchrun "))
    command: list[str] = []
    for line in lines[start:]:
        command.append(line[:-2] if line.endswith(" \\") else line)
        if not line.endswith(" \\"):
            break
    argv = shlex.split(" ".join(command))
    if argv[0] != "torchrun" or argv[-1] != "$@":
        raise ValueError(f"not a megatron-launch command: {argv[:1]} ... {argv[-1:]}")
    script_at = next(i for i, word in enumerate(argv) if word.endswith(".py"))
    return env, argv[1:script_at], argv[script_at:-1]


def launch_parts(script: str) -> tuple[dict[str, str | None], list[str], str]:
    """(the environment the launch script exports, None for what it unsets; the training script's
    arguments; the training script's name) from `adaptis export --format megatron-launch`'s text."""
    env, _, command = launch_argv(script)
    return env, command[1:], command[0].rsplit("/", 1)[-1]


def model_args(plan: dict) -> list[str]:
    """The model-size arguments a user passes after the launch script's name, from the plan's model."""
    spec = plan["model"]["spec"]
    layers = spec["layers"]
    attention = next(layer["attention"] for layer in layers if layer.get("attention"))
    mlp = next((layer["mlp"] for layer in layers if layer.get("mlp")), None)
    moe = next((layer["moe"] for layer in layers if layer.get("moe")), None)
    out = [
        "--hidden-size", str(spec["hidden_size"]),
        "--num-attention-heads", str(attention["num_heads"]),
        "--max-position-embeddings", str(plan["training"]["seq_len"]),
        "--vocab-size", str(spec["vocab_size"]),
        "--tokenizer-type", "NullTokenizer",
        "--mock-data",
        "--lr", "1e-4",
        "--train-iters", "10",
    ]  # fmt: skip
    if attention.get("num_kv_heads") and attention["num_kv_heads"] != attention["num_heads"]:
        out += ["--group-query-attention", "--num-query-groups", str(attention["num_kv_heads"])]
    if mlp is not None:
        out += ["--ffn-hidden-size", str(mlp["intermediate_size"])]
    if moe is not None:
        out += ["--num-experts", str(moe["num_experts"]), "--moe-router-topk", str(moe["top_k"])]
        if moe.get("expert_intermediate_size"):
            out += ["--moe-ffn-hidden-size", str(moe["expert_intermediate_size"])]
    return out


@dataclass
class PlanCheck:
    """One plan through Megatron-LM's parse_args and validate_args. `env`: what its launch script
    exports (None: unsets); `degrees`: Megatron's own parallel sizes after validate_args (passed plans);
    `message`: Megatron's refusal (failed plans)."""

    plan: str
    world: int
    passed: bool
    env: dict[str, str | None] = field(default_factory=dict)
    degrees: dict[str, int | None] | None = None
    message: str | None = None
    name: str = ""
    command: str = ""

    def line(self) -> str:
        if not self.passed:
            return f"{self.plan}: {self.message}"
        d = self.degrees or {}
        shown_env = " ".join(f"{k}={v}" if v is not None else f"unset {k}" for k, v in self.env.items()) or "(none)"
        return (
            f"{self.plan}: ok: world {self.world} = dp {d.get('dp')} x tp {d.get('tp')} x pp {d.get('pp')} x cp"
            f" {d.get('cp')}, vpp {d.get('vpp')}, env {shown_env}"
        )


def check_plan(
    plan_path: str, megatron: Path, arch: float, model: str | None, env_override: dict[str, str | None]
) -> PlanCheck:
    """The plan's launch script through Megatron-LM's parse_args and validate_args, then every switch
    the script passes still on after validate_args (it turns some off silently, e.g.
    --sequence-parallel at tp 1). `env_override` replaces what the script sets (a negative control:
    `--env CUDA_DEVICE_MAX_CONNECTIONS=1` on a Megatron-FSDP plan must fail)."""
    from adaptis_plan.app.export import export_plan_file

    plan = json.loads(Path(plan_path).read_text())
    ((_, script),) = export_plan_file(plan_path, "megatron-launch", model_arg=model, output=None)
    env, args, script_name = launch_parts(script)
    env = {**env, **env_override}
    t = plan["training"]
    world = t["tp"] * t["pp"] * t["cp"] * t["dp"]
    argv = [*args, *model_args(plan)]
    saved_env, saved_argv = dict(os.environ), sys.argv
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.environ.update({"WORLD_SIZE": str(world), "RANK": "0"})
        sys.argv = [script_name, *argv]
        arguments = importlib.import_module("megatron.training.arguments")
        with _arch(arguments, arch), contextlib.redirect_stdout(io.StringIO()):
            ns = arguments.parse_args()
            arguments.validate_args(ns)
    except (AssertionError, ValueError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        return PlanCheck(plan_path, world, False, env, message=f"validate_args refused: {why}")
    except SystemExit as e:
        return PlanCheck(
            plan_path, world, False, env, message=f"parse_args exited ({e.code}): an argument Megatron-LM does not know"
        )
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
    dropped = [a for a, b in zip(args, [*args[1:], "--"], strict=True) if a.startswith("--") and b.startswith("--")]
    dropped = [flag for flag in dropped if getattr(ns, flag[2:].replace("-", "_"), None) is not True]
    if dropped:
        return PlanCheck(plan_path, world, False, env, message=f"validate_args turned off {', '.join(dropped)}")
    degrees = {
        key: getattr(ns, attr, None)
        for key, attr in (
            ("dp", "data_parallel_size"),
            ("tp", "tensor_model_parallel_size"),
            ("pp", "pipeline_model_parallel_size"),
            ("cp", "context_parallel_size"),
            ("ep", "expert_model_parallel_size"),
            ("vpp", "virtual_pipeline_model_parallel_size"),
        )
    }
    return PlanCheck(plan_path, world, True, env, degrees=degrees)


@contextlib.contextmanager
def _arch(arguments, arch: float):  # noqa: ANN001
    """`get_device_arch_version` answered with `arch` where arguments.py calls it (no GPU here)."""
    saved = arguments.get_device_arch_version
    arguments.get_device_arch_version = lambda: arch
    try:
        yield
    finally:
        arguments.get_device_arch_version = saved


def _python_shims() -> list[str]:
    """Python 3.12's `typing.override` on an older Python (Megatron-LM's training code imports it;
    PEP 698: at runtime it sets `__override__` and returns its argument, nothing else): what was added."""
    import typing

    if hasattr(typing, "override"):
        return []

    def override(method):  # noqa: ANN001, ANN202
        with contextlib.suppress(AttributeError, TypeError):
            method.__override__ = True
        return method

    typing.override = override
    return [f"typing.override (Python 3.12, PEP 698) added to Python {sys.version.split()[0]}"]


def plan_options(options: str) -> list[str]:
    """`adaptis plan`'s arguments for one of `SIX_PLANS`' option strings (no output file)."""
    return ["plan", *options.split(), "--time-limit", "1", "--no-hard-stop"]


def plan_six(folder: Path) -> list[Path]:
    """`SIX_PLANS` planned into `folder` with `adaptis plan` (in this process), in order."""
    from adaptis_plan.cli import main as adaptis

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, options in SIX_PLANS:
        path = folder / f"{name}.json"
        argv = [*plan_options(options), "-o", str(path)]
        print("adaptis " + " ".join(argv))
        saved = sys.argv
        sys.argv = ["adaptis", *argv]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                adaptis()
        except SystemExit as e:
            if e.code not in (0, None):
                raise
        finally:
            sys.argv = saved
        out.append(path)
    return out


ADDED_ARGS = "--tokenizer-type NullTokenizer --mock-data --lr 1e-4 --train-iters 10"


def megatron_commit(megatron: Path, given: str | None) -> str | None:
    """`given`, else the checkout's HEAD when `megatron` is a git checkout, else None."""
    if given:
        return given
    try:
        return subprocess.run(
            ["git", "-C", str(megatron), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def make_record(checks: list[PlanCheck], commit: str, arch: float, mocked: list[str], command: str, wall_s: float):
    """The suite's record (`bench.records.record`): the Megatron-LM commit, what validate_args was told
    and what is mocked in `settings`; one entry per plan in `data.plans`."""
    from bench import records

    settings = {
        "megatron_commit": commit,
        "arch": arch,
        "mocked": mocked,
        "added_arguments": f"the plan's model size, {ADDED_ARGS}",
        "cost_model": "analytic",
    }
    return records.record(SUITE, settings, {"plans": records.to_json(checks)}, command, wall_s)


def _world(c: PlanCheck) -> str:
    if not c.degrees:
        return str(c.world)
    d = c.degrees
    parts = [f"{k} {d[k]}" for k in ("dp", "tp", "pp", "cp") if d.get(k) not in (None, 1)]
    extra = [f"{k} {d[k]}" for k in ("ep", "vpp") if d.get(k) not in (None, 1)]
    return f"{c.world} = {' x '.join(parts) or 'dp 1'}" + "".join(f", {x}" for x in extra)


def _env(env: Mapping[str, str | None]) -> str:
    shown = [f"`{k}={v}`" if v is not None else f"`{k}` unset" for k, v in env.items()]
    return ", ".join(shown) or "none"


def _short(commit: str) -> str:
    return commit[:12]


def render(rec: Mapping) -> str:
    """The section: per plan its world, pass / fail (Megatron's message) and environment; the plans'
    commands; the Megatron-LM commit, what validate_args was told and what is mocked."""
    from bench.paper import table
    from bench.records import from_json, reproduce_line

    st = rec["settings"]
    checks = from_json(list[PlanCheck], rec["data"]["plans"])
    rows = [
        [c.name or c.plan, _world(c), "pass" if c.passed else f"**fail**: {c.message}", _env(c.env)] for c in checks
    ]
    passed = sum(c.passed for c in checks)
    return "\n".join(
        [
            HEADING,
            "",
            reproduce_line(rec),
            "",
            f"Megatron-LM's `parse_args` and `validate_args` (`megatron/training/arguments.py` of NVIDIA/Megatron-LM"
            f" `{st['megatron_commit']}`) on the `adaptis export --format megatron-launch` script of each plan:"
            " the arguments it passes to the training script and the environment it exports, WORLD_SIZE = the"
            f" plan's world size, RANK 0; added after the script's arguments: {st['added_arguments']}. A plan"
            " also fails when validate_args turns off a switch the script passes. validate_args is told GPU"
            f" architecture {st['arch']:.1f}. Mocked: {'; '.join(st['mocked'])}; nothing else (no process group"
            f" is started). {passed} of {len(checks)} plans pass.",
            "",
            table(["plan", "world", "validate_args", "environment"], rows),
            "",
            "The plans (llama-2-7b and deepseek-v2-lite on the h100 profile, analytic cost model):",
            "",
            *[f"- {c.name or c.plan}: `{c.command}`" if c.command else f"- {c.plan}" for c in checks],
            "",
        ]
    )


def headline(rec: Mapping) -> str:
    """The headline's figure: how many plans pass, at which Megatron-LM commit."""
    plans = rec["data"]["plans"]
    passed = sum(1 for p in plans if p["passed"])
    return f"{passed} of {len(plans)} plans at Megatron-LM `{_short(rec['settings']['megatron_commit'])}`"


def _write_record(rec: dict, out: Path | None, allow_dirty: bool) -> Path:
    from bench import records

    if out is None:
        return records.write(rec, records.RESULTS, allow_dirty=allow_dirty)
    if not rec["provenance"]["clean"] and not allow_dirty:
        raise records.DirtyTree(rec["provenance"]["commit"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.megatron_check", description=__doc__.splitlines()[0])
    parser.add_argument("--megatron", required=True, type=Path, help="a Megatron-LM checkout (holds megatron/training)")
    parser.add_argument("plans", nargs="*", help="plan files made with adaptis plan ... --target megatron")
    parser.add_argument(
        "--six", type=Path, default=None, metavar="DIR", help="plan `SIX_PLANS` into DIR first and check them too"
    )
    parser.add_argument("--arch", type=float, default=9.0, help="GPU architecture validate_args is told (9.0 Hopper)")
    parser.add_argument("--model", default=None, help="model (default: the one embedded in each plan)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="replace what the launch script sets (NAME= unsets it): a negative control",
    )
    parser.add_argument("--record", action="store_true", help=f"check SIX_PLANS and write bench/results/{SUITE}.json")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE", help="with --record's checks: write here")
    parser.add_argument(
        "--megatron-commit",
        default=None,
        metavar="SHA",
        help="the checkout's Megatron-LM commit (if not a git checkout)",
    )
    parser.add_argument("--allow-dirty", action="store_true", help="record from a checkout with uncommitted changes")
    raw = sys.argv[1:] if argv is None else list(argv)
    opts = parser.parse_args(raw)
    t0 = time.perf_counter()
    if not (opts.megatron / "megatron" / "training" / "arguments.py").is_file():
        print(f"error: --megatron {opts.megatron}: no megatron/training/arguments.py there", file=sys.stderr)
        return 2
    recording = opts.record or opts.out is not None
    commit = None
    if recording:
        from bench import records

        if opts.plans or opts.env:
            print(
                "error: --record: a record holds the six plans of SIX_PLANS as exported; pass no PLAN.json and no --env",
                file=sys.stderr,
            )
            return 2
        commit = megatron_commit(opts.megatron, opts.megatron_commit)
        if commit is None:
            print(
                f"error: --megatron {opts.megatron}: not a git checkout; pass --megatron-commit SHA (the commit it holds)",
                file=sys.stderr,
            )
            return 2
        head, clean = records.checkout()
        if not clean and not opts.allow_dirty:
            print(
                f"error: the checkout at {head} has uncommitted changes; commit them first, or pass --allow-dirty"
                " (the record is then marked dirty)",
                file=sys.stderr,
            )
            return 2
    shims = _python_shims()
    sys.path.insert(0, str(opts.megatron.resolve()))
    for name in [m for m in sys.modules if m == "megatron" or m.startswith("megatron.")]:
        del sys.modules[name]  # the checkout's megatron (and its megatron.core), not an installed one
    print(f"Megatron-LM checkout: {opts.megatron}" + (f" at {commit}" if commit else ""))
    mocked = [f"megatron.core.utils.get_device_arch_version() -> {opts.arch:.1f} (no GPU here)", *shims]
    print(
        f"mocked: {'; '.join(mocked)}; nothing else. Added after the launch script's arguments: the plan's model size, {ADDED_ARGS}"
    )
    plans = list(opts.plans)
    six = opts.six
    scratch = None
    if recording and six is None:
        scratch = tempfile.TemporaryDirectory(prefix="adaptis-megatron-check-")
        six = Path(scratch.name)
    named: dict[str, tuple[str, str]] = {}
    if six is not None:
        for (name, options), path in zip(SIX_PLANS, plan_six(six), strict=True):
            plans.append(str(path))
            named[str(path)] = (name, "adaptis " + " ".join(plan_options(options)))
    if not plans:
        print("error: no plan: pass PLAN.json files or --six DIR", file=sys.stderr)
        return 2
    override = {name: value or None for name, _, value in (item.partition("=") for item in opts.env)}
    if override:
        print(f"environment replaced: {override}")
    checks = []
    for plan in plans:
        check = check_plan(plan, opts.megatron, opts.arch, opts.model, override)
        check.name, check.command = named.get(plan, ("", ""))
        checks.append(check)
        print(("PASS " if check.passed else "FAIL ") + check.line())
    if recording:
        for check in checks:
            check.plan = f"{check.name}.json"  # not the scratch folder's path
        command = "python -m bench.megatron_check " + shlex.join(raw)
        rec = make_record(checks, commit, opts.arch, mocked, command, time.perf_counter() - t0)
        print(f"wrote {_write_record(rec, opts.out, opts.allow_dirty)}")
    if scratch is not None:
        scratch.cleanup()
    return 1 if any(not c.passed for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
