"""Megatron-LM's own argument checks on a plan's export: `parse_args` and `validate_args` from a
Megatron-LM checkout the user points at (Megatron-LM is not on PyPI; megatron-core does not ship
`megatron.training`).

Run: `python -m bench.megatron_check --megatron /path/to/Megatron-LM [PLAN.json ...] [--six DIR]
[--arch 9.0] [--model MODEL]`. For each plan it writes the launch script (`adaptis export
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
import sys
from pathlib import Path

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


def launch_parts(script: str) -> tuple[dict[str, str | None], list[str], str]:
    """(the environment the launch script exports, None for what it unsets; the training script's
    arguments; the training script's name) from `adaptis export --format megatron-launch`'s text."""
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
    at = next(i for i, word in enumerate(argv) if word.endswith(".py"))
    return env, argv[at + 1 : -1], argv[at].rsplit("/", 1)[-1]


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


def check_plan(
    plan_path: str, megatron: Path, arch: float, model: str | None, env_override: dict[str, str | None]
) -> tuple[bool, str]:
    """(passed, one line): the plan's launch script through Megatron-LM's parse_args and validate_args,
    then every switch the script passes still on after validate_args (it turns some off silently,
    e.g. --sequence-parallel at tp 1). `env_override` replaces what the script sets (a negative
    control: `--env CUDA_DEVICE_MAX_CONNECTIONS=1` on a Megatron-FSDP plan must fail)."""
    from adaptis_plan.usecases import export_plan_file

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
        return False, f"{plan_path}: validate_args refused: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    except SystemExit as e:
        return False, f"{plan_path}: parse_args exited ({e.code}): an argument Megatron-LM does not know"
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
    dropped = [a for a, b in zip(args, [*args[1:], "--"], strict=True) if a.startswith("--") and b.startswith("--")]
    dropped = [flag for flag in dropped if getattr(ns, flag[2:].replace("-", "_"), None) is not True]
    if dropped:
        return False, f"{plan_path}: validate_args turned off {', '.join(dropped)}"
    shown_env = " ".join(f"{k}={v}" if v is not None else f"unset {k}" for k, v in env.items()) or "(none)"
    return True, (
        f"{plan_path}: ok: world {world} = dp {ns.data_parallel_size} x tp {ns.tensor_model_parallel_size} x pp"
        f" {ns.pipeline_model_parallel_size} x cp {ns.context_parallel_size}, vpp"
        f" {ns.virtual_pipeline_model_parallel_size}, env {shown_env}"
    )


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


def plan_six(folder: Path) -> list[Path]:
    """`SIX_PLANS` planned into `folder` with `adaptis plan` (in this process), in order."""
    from adaptis_plan.cli import main as adaptis

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, options in SIX_PLANS:
        path = folder / f"{name}.json"
        argv = ["plan", *options.split(), "--time-limit", "1", "--no-hard-stop", "-o", str(path)]
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
    opts = parser.parse_args(argv)
    if not (opts.megatron / "megatron" / "training" / "arguments.py").is_file():
        print(f"error: --megatron {opts.megatron}: no megatron/training/arguments.py there", file=sys.stderr)
        return 2
    shims = _python_shims()
    sys.path.insert(0, str(opts.megatron.resolve()))
    for name in [m for m in sys.modules if m == "megatron" or m.startswith("megatron.")]:
        del sys.modules[name]  # the checkout's megatron (and its megatron.core), not an installed one
    print(f"Megatron-LM checkout: {opts.megatron}")
    print(
        f"mocked: megatron.core.utils.get_device_arch_version() -> {opts.arch} (no GPU here)"
        + "".join(f"; {shim}" for shim in shims)
        + "; nothing else."
        " Added after the launch script's arguments: the plan's model size, --tokenizer-type NullTokenizer"
        " --mock-data --lr 1e-4 --train-iters 10"
    )
    plans = list(opts.plans)
    if opts.six is not None:
        plans += [str(path) for path in plan_six(opts.six)]
    if not plans:
        print("error: no plan: pass PLAN.json files or --six DIR", file=sys.stderr)
        return 2
    override = {name: value or None for name, _, value in (item.partition("=") for item in opts.env)}
    if override:
        print(f"environment replaced: {override}")
    failed = 0
    for plan in plans:
        ok, line = check_plan(plan, opts.megatron, opts.arch, opts.model, override)
        failed += not ok
        print(("PASS " if ok else "FAIL ") + line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
