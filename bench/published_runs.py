"""Published, measured training runs of dense transformer LLMs, with their parallel configuration.

`bench/published_runs.json` is a list of runs copied from papers, READMEs and documentation tables (each run
names its source, table and row). The planner's throughput prediction is checked against this set; this module
only loads the file and checks that every run is self-consistent. It imports nothing outside the standard library.

A run is a dict with exactly the keys in `RUN_KEYS`:

- `model`: the architecture (`MODEL_KEYS`), or `hf_config` naming a Hugging Face `config.json` that holds it.
- `gpus == tp * pp * dp * cp`; `global_batch_size` (sequences) is a multiple of `dp * micro_batch_size`.
- `zero`: 0 none; 1 optimizer state sharded over DP (Megatron distributed optimizer); 2 gradients too
  (FSDP SHARD_GRAD_OP); 3 parameters too (FSDP FULL_SHARD).
- `measured`: what the source reports (`MEASURED_KEYS`), always with `flops_formula`, the source's own FLOP
  accounting in its words.
- `tokens_per_s_per_gpu`: derived from `measured` by the source's accounting. `derivation` explains it and ends
  with `tokens/s/GPU = <expression>`, an arithmetic expression (numbers, + - * / ** and parentheses) that must
  evaluate to `tokens_per_s_per_gpu` within 1 %.
- `used_for_calibration`: the run's source was used to fit a cost-model coefficient, so it is not an
  independent check of that coefficient.
- `dp_overlap`, `attention` (`ATTENTIONS`), `tp_comm_overlap`: the runtime's data-parallel overlap, attention core
  and tensor-parallel communication overlap (`PlanRequest` fields of the same names).
- `settings`: for each of `SETTING_KEYS`, where the source states it (`stated: <table, flag, section>`) or what
  `RULE` gave it (`rule: <the default applied>`).
- optional `alternatives`: other readings of the run, each a `label` and the values of `ALTERNATIVE_KEYS` it
  changes (e.g. the data set's previous choice); they are predicted beside the headline, never instead of it.
- optional `partition` (`PARTITIONS`): how the source splits the layers over the pipeline stages when it
  states a split other than Megatron's uniform one ("ends-as-layers": the embedding and the loss each count
  as a layer); `notes` quote the statement.

The rule for settings a source does not state (`RULE`, fixed before any prediction was compared with the
runs): a setting a source states is used as stated, whatever the error; `settings` in each run says for
every setting of `SETTING_KEYS` where the source states it (`stated: <where>`) or that `RULE` gave it
(`rule: <the default applied>`).
"""

from __future__ import annotations

import ast
import json
import math
import operator
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS_PATH = REPO / "bench" / "published_runs.json"

RUN_KEYS = (
    "id", "source", "source_key", "model", "device", "gpus", "tp", "pp", "dp", "cp", "virtual_stages",
    "micro_batch_size", "global_batch_size", "seq_len", "recompute", "sequence_parallel", "zero", "dp_overlap",
    "attention", "tp_comm_overlap", "measured", "tokens_per_s_per_gpu", "derivation", "notes",
    "used_for_calibration", "settings",
)  # fmt: skip
#: the settings whose provenance every run gives in `settings` (stated by the source, or from `RULE`)
SETTING_KEYS = (
    "tp", "pp", "dp", "cp", "virtual_stages", "micro_batch_size", "global_batch_size", "seq_len", "recompute",
    "sequence_parallel", "zero", "dp_overlap", "attention", "tp_comm_overlap",
)  # fmt: skip
STATED, FROM_RULE = "stated: ", "rule: "
#: what an alternative may set beside the headline (the run's own value is the headline's)
ALTERNATIVE_KEYS = (
    "virtual_stages", "micro_batch_size", "recompute", "zero", "dp_overlap", "attention", "tp_comm_overlap",
    "vocab_size",
)  # fmt: skip
MODEL_KEYS = (
    "num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size", "activation",
    "position", "tied_embeddings",
)  # fmt: skip
MEASURED_KEYS = (
    "tflops_per_gpu", "mfu", "hfu", "tokens_per_s_per_gpu", "tokens_per_s", "iteration_time_s", "flops_formula",
)  # fmt: skip
OPTIONAL_KEYS = ("partition", "alternatives")
ATTENTIONS = ("unfused", "flash", "cudnn")
PARTITIONS = ("uniform", "ends-as-layers")
DEVICES = ("a100-80gb", "a100-40gb", "h100-80gb")
RECOMPUTE = ("none", "selective", "full")
ACTIVATIONS = ("gelu", "swiglu")
POSITIONS = ("learned", "rope", "alibi")
HF_CONFIG_DIRS = (REPO / "tests" / "data" / "configs",)
DERIVATION_MARK = "tokens/s/GPU = "
REL_TOL = 0.01
# Iteration times are printed to 3-4 significant figures, so B*s/(t*n) may differ from the throughput by more.
ITERATION_TOL = 0.02

#: the one rule for every setting a source does not state, the same for all sources
RULE = (
    "A setting the source does not state takes the default of the training software the source names, at the"
    " version or commit it names (where it names none, the last release before the source's date). Where that"
    " software has no default (the user must give a value), the setting takes the smallest value the software"
    " accepts for the run: micro-batch size 1; an interleaved schedule whose degree is not stated, the smallest"
    " degree above 1 the software accepts. Where the source names no software, adaptis's own default"
    " (`PlanRequest`) applies."
)
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}  # fmt: skip


def load_runs(path: Path | str = RUNS_PATH) -> list[dict]:
    """The runs in `path` (default `bench/published_runs.json`), in file order. Raises ValueError if not a list."""
    runs = json.loads(Path(path).read_text())
    if not isinstance(runs, list):
        raise ValueError(f"{path}: top level must be a list of runs, got {type(runs).__name__}")
    return runs


def eval_expression(text: str) -> float:
    """Value of an arithmetic expression of numbers, + - * / ** and parentheses; ValueError on anything else."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {text!r}") from exc

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"only numbers and + - * / ** ( ) are allowed, found {type(node).__name__} in {text!r}")

    return walk(tree)


def _close(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, rel_tol=tol)


def _is_int(v: object, minimum: int = 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def check_run(run: dict) -> list[str]:
    """Every inconsistency in one run, each as 'field: problem'; empty when the run is consistent."""
    if not isinstance(run, dict):
        return [f"run: must be an object, got {type(run).__name__}"]
    problems: list[str] = []
    keys = set(run)
    expected = set(RUN_KEYS)
    if "hf_config" in keys:
        expected = expected - {"model"} | {"hf_config"}
    expected |= keys & set(OPTIONAL_KEYS)
    if keys != expected:
        missing, extra = sorted(expected - keys), sorted(keys - expected)
        problems.append(f"keys: missing {missing}, unexpected {extra}")
        return problems

    for k in ("gpus", "tp", "pp", "dp", "cp", "virtual_stages", "micro_batch_size", "global_batch_size", "seq_len"):
        if not _is_int(run[k]):
            problems.append(f"{k}: must be a positive integer, got {run[k]!r}")
    if not _is_int(run["zero"], 0) or run["zero"] > 3:
        problems.append(f"zero: must be 0, 1, 2 or 3, got {run['zero']!r}")
    if problems:
        return problems
    if run["device"] not in DEVICES:
        problems.append(f"device: {run['device']!r} is not one of {DEVICES}")
    if run.get("partition", "uniform") not in PARTITIONS:
        problems.append(f"partition: {run['partition']!r} is not one of {PARTITIONS}")
    if run["recompute"] not in RECOMPUTE:
        problems.append(f"recompute: {run['recompute']!r} is not one of {RECOMPUTE}")
    for k in ("sequence_parallel", "used_for_calibration", "dp_overlap", "tp_comm_overlap"):
        if not isinstance(run[k], bool):
            problems.append(f"{k}: must be true or false, got {run[k]!r}")
    for k in ("id", "source", "source_key", "derivation", "notes"):
        if not isinstance(run[k], str) or not run[k].strip():
            problems.append(f"{k}: must be a non-empty string")

    if run["attention"] not in ATTENTIONS:
        problems.append(f"attention: {run['attention']!r} is not one of {ATTENTIONS}")
    problems += _check_settings(run)
    product = run["tp"] * run["pp"] * run["dp"] * run["cp"]
    if run["gpus"] != product:
        problems.append(f"gpus: {run['gpus']} != tp*pp*dp*cp = {product}")
    if run["global_batch_size"] % (run["dp"] * run["micro_batch_size"]):
        problems.append(
            f"global_batch_size: {run['global_batch_size']} is not a multiple of dp*micro_batch_size = "
            f"{run['dp'] * run['micro_batch_size']}"
        )
    if run["seq_len"] % run["cp"]:
        problems.append(f"seq_len: {run['seq_len']} is not a multiple of cp = {run['cp']}")

    if "hf_config" in run:
        if not any((d / run["hf_config"]).is_file() for d in HF_CONFIG_DIRS) and not Path(run["hf_config"]).is_file():
            problems.append(f"hf_config: {run['hf_config']!r} is not a file under {[str(d) for d in HF_CONFIG_DIRS]}")
    else:
        problems += _check_model(run["model"], run["tp"])

    problems += _check_measured(run)
    return problems


def _check_settings(run: dict) -> list[str]:
    """Every setting names its provenance; a setting from the rule that has one value under it is that value;
    alternatives change only `ALTERNATIVE_KEYS`."""
    settings = run["settings"]
    if not isinstance(settings, dict) or set(settings) != set(SETTING_KEYS):
        got = sorted(settings) if isinstance(settings, dict) else type(settings).__name__
        return [f"settings: keys must be {list(SETTING_KEYS)}, got {got}"]
    problems = []
    for k, v in settings.items():
        if not isinstance(v, str) or not v.startswith((STATED, FROM_RULE)) or len(v) <= len(FROM_RULE) + 1:
            problems.append(f"settings.{k}: must be '{STATED}<where>' or '{FROM_RULE}<what>', got {v!r}")
    # the rule's one value where the software has no default
    if settings["micro_batch_size"].startswith(FROM_RULE) and run["micro_batch_size"] != 1:
        problems.append(f"micro_batch_size: {run['micro_batch_size']} but the rule gives 1 (settings says rule)")
    alternatives = run.get("alternatives", [])
    if not isinstance(alternatives, list):
        return problems + ["alternatives: must be a list"]
    for i, alt in enumerate(alternatives):
        if not isinstance(alt, dict) or not isinstance(alt.get("label"), str) or not alt["label"].strip():
            problems.append(f"alternatives[{i}]: must be an object with a non-empty label")
            continue
        extra = sorted(set(alt) - {"label"} - set(ALTERNATIVE_KEYS))
        if extra or len(alt) < 2:
            problems.append(
                f"alternatives[{i}]: may set only {list(ALTERNATIVE_KEYS)}, got {sorted(set(alt) - {'label'})}"
            )
    return problems


def _check_model(model: object, tp: int) -> list[str]:
    if not isinstance(model, dict) or set(model) != set(MODEL_KEYS):
        got = sorted(model) if isinstance(model, dict) else type(model).__name__
        return [f"model: keys must be {list(MODEL_KEYS)}, got {got}"]
    problems = []
    for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size"):
        if not _is_int(model[k]):
            problems.append(f"model.{k}: must be a positive integer, got {model[k]!r}")
    if problems:
        return problems
    if model["activation"] not in ACTIVATIONS:
        problems.append(f"model.activation: {model['activation']!r} is not one of {ACTIVATIONS}")
    if model["position"] not in POSITIONS:
        problems.append(f"model.position: {model['position']!r} is not one of {POSITIONS}")
    if not isinstance(model["tied_embeddings"], bool):
        problems.append("model.tied_embeddings: must be true or false")
    if model["hidden_size"] % model["num_heads"]:
        problems.append(f"model.num_heads: {model['num_heads']} does not divide hidden_size {model['hidden_size']}")
    if model["num_heads"] % model["num_kv_heads"]:
        problems.append(f"model.num_kv_heads: {model['num_kv_heads']} does not divide num_heads {model['num_heads']}")
    if model["num_heads"] % tp:
        problems.append(f"model.num_heads: {model['num_heads']} is not a multiple of tp = {tp}")
    return problems


def _check_measured(run: dict) -> list[str]:
    measured = run["measured"]
    if not isinstance(measured, dict):
        return ["measured: must be an object"]
    problems = []
    unknown = sorted(set(measured) - set(MEASURED_KEYS))
    if unknown:
        problems.append(f"measured: unknown keys {unknown}, allowed {list(MEASURED_KEYS)}")
    if not isinstance(measured.get("flops_formula"), str) or not measured["flops_formula"].strip():
        problems.append("measured.flops_formula: the source's FLOP accounting is required")
    numbers = [k for k in MEASURED_KEYS if k != "flops_formula" and k in measured]
    if not numbers:
        problems.append("measured: no measured quantity")
    for k in numbers:
        v = measured[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            problems.append(f"measured.{k}: must be a positive number, got {v!r}")
        elif k in ("mfu", "hfu") and v > 1:
            problems.append(f"measured.{k}: a fraction of peak, got {v}")
    if problems:
        return problems

    tps = run["tokens_per_s_per_gpu"]
    if not isinstance(tps, (int, float)) or isinstance(tps, bool) or tps <= 0:
        return [f"tokens_per_s_per_gpu: must be a positive number, got {tps!r}"]
    derivation = run["derivation"]
    if DERIVATION_MARK not in derivation:
        problems.append(f"derivation: must end with '{DERIVATION_MARK}<expression>'")
    else:
        try:
            value = eval_expression(derivation.rsplit(DERIVATION_MARK, 1)[1])
        except (ValueError, ZeroDivisionError, OverflowError) as exc:
            problems.append(f"derivation: {exc}")
        else:
            if not _close(value, tps, REL_TOL):
                problems.append(f"derivation: evaluates to {value:.4g}, tokens_per_s_per_gpu is {tps}")
    if "tokens_per_s_per_gpu" in measured and not _close(measured["tokens_per_s_per_gpu"], tps, REL_TOL):
        problems.append(f"tokens_per_s_per_gpu: {tps} != measured {measured['tokens_per_s_per_gpu']}")
    if "tokens_per_s" in measured and not _close(measured["tokens_per_s"] / run["gpus"], tps, REL_TOL):
        problems.append(f"tokens_per_s_per_gpu: {tps} != measured tokens_per_s / gpus")
    if "iteration_time_s" in measured:
        from_time = run["global_batch_size"] * run["seq_len"] / (measured["iteration_time_s"] * run["gpus"])
        if not _close(from_time, tps, ITERATION_TOL):
            problems.append(f"tokens_per_s_per_gpu: {tps} but batch*seq/(iteration_time*gpus) = {from_time:.4g}")
    return problems


def check_runs(runs: list[dict]) -> list[str]:
    """Every problem in the list, each prefixed with the run's id (or index); ids must be unique."""
    return check_each(runs, check_run)


def check_each(runs: Sequence[dict], check: Callable[[dict], list[str]]) -> list[str]:
    """`check`'s problems of every run, each prefixed with the run's id (or index); ids must be unique."""
    problems: list[str] = []
    seen: set[str] = set()
    for i, run in enumerate(runs):
        name = run.get("id", f"#{i}") if isinstance(run, dict) else f"#{i}"
        if name in seen:
            problems.append(f"{name}: id: duplicate")
        seen.add(name)
        problems += [f"{name}: {p}" for p in check(run)]
    return problems


def coverage(runs: list[dict]) -> dict:
    """How much the set covers: run count, source keys, device kinds ('a100'/'h100'), GPU range."""
    return {
        "runs": len(runs),
        "source_keys": sorted({r["source_key"] for r in runs}),
        "device_kinds": sorted({r["device"].split("-")[0] for r in runs}),
        "min_gpus": min(r["gpus"] for r in runs),
        "max_gpus": max(r["gpus"] for r in runs),
        "calibration_runs": sum(r["used_for_calibration"] for r in runs),
    }


def table(runs: list[dict]) -> str:
    """A plain-text table of the runs: id, source key, device, GPUs, tp/pp/dp/cp, mbs/gbs, seq, recompute, tok/s/GPU."""
    lines = [f"{'id':36} {'source_key':24} {'device':9} {'gpus':>6} {'tp/pp/dp/cp':>13} {'mbs/gbs':>9} "
             f"{'seq':>6} {'recompute':9} {'tok/s/GPU':>9}"]  # fmt: skip
    for r in runs:
        par = f"{r['tp']}/{r['pp']}/{r['dp']}/{r['cp']}"
        bat = f"{r['micro_batch_size']}/{r['global_batch_size']}"
        lines.append(
            f"{r['id']:36} {r['source_key']:24} {r['device']:9} {r['gpus']:>6} {par:>13} {bat:>9} {r['seq_len']:>6} "
            f"{r['recompute']:9} {r['tokens_per_s_per_gpu']:>9.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Check the file (argument, or the default path); print the table, or one line per problem and exit 2."""
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else RUNS_PATH
    try:
        runs = load_runs(path)
    except (OSError, ValueError) as exc:
        print(f"{path}: cannot read runs ({exc}); fix the file or pass a JSON list of runs", file=sys.stderr)
        return 2
    problems = check_runs(runs)
    if problems:
        for p in problems:
            print(f"{path}: {p}", file=sys.stderr)
        return 2
    print(table(runs))
    print(coverage(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
