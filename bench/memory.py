"""Predicted peak memory per rank against published measured peaks, and the configuration ranking
against published measured sweeps.

Run: `python -m bench.run --suites memory [--quick]` (suite `memory`: writes bench/results/memory.json,
then re-renders BENCHMARKS.md).

Data flow: `bench/memory_runs.json` (`load_runs`, checked by `check_runs`: every run cites its source,
table and row, states what it measures and in which unit, and the full configuration) -> `predict` plans
the run with every dimension forced (`bench.scale`'s `model_spec`, `forced_request_args` and `runtime`,
the path `adaptis plan --gpus` takes) on a copy of the built-in profile whose memory is large enough
that no run is refused (`PREDICT_HBM_BYTES`: the prediction is wanted, not the fit) -> `MemoryRow`
(predicted peak of the fullest device, its static part: weights, gradients and optimizer state by
ZeRO stage, and its activation part) -> per-source median and worst |error|.
`bench/sweeps.json` (`load_sweeps`): published sweeps of one model over its configurations, each
configuration a base run (a published run of `bench/published_runs.json` or a memory run) with a few
fields changed, and its measured step time or throughput -> `rank_sweep` plans each configuration
forced, on the device's whole memory (`bench.scale.HARDWARE`, or `DEVICES` here) -> Spearman's rank
correlation between predicted and measured speed, and the top-1 regret (how much slower, measured, the
configuration we rank first is than the measured best).

What the sources measure (`MEASURES`): every memory figure here is torchtitan's logged peak of the
CUDA caching allocator's reserved bytes (`reserved_bytes.all.peak`), the whole rank, either the maximum
over the ranks or the logged rank. Reserved is at least allocated (fragmentation and cached free blocks
count too) and the runtime's workspaces (NCCL, cuBLAS) are in it; our figure is the bytes of live
tensors the cost model counts. So a prediction below the measurement is expected by the allocator's
overhead; the error is reported as it is, nothing is fitted to it. Runs with torch.compile or float8
(`features`) are predicted as the plain bf16 eager run of the same configuration (neither is modelled);
the summary also gives the plain runs alone.

Rule for unstated settings (written before any error was seen): a torchtitan run's unstated sequence
length, local batch size or activation-checkpointing mode is the value of the model's train config in
torchtitan at the commit the source names (or the last commit before the source's date); micro-batches
under pipelining are torchtitan's default (one per pipeline rank). Every run plans with `--target torchtitan`
(`TORCHTITAN_SOURCES`), the framework its source ran: under pipelining torch's stages keep FSDP2's gathered
parameters and fp32 unsharded gradients over the step (`TrainingConfig.stage_keeps_unsharded`). The
recomputation is the one the source states: torchtitan's per-op selective checkpointing (`selective_ac_option = "op"`) is our `op`
(`adaptis_plan.cost.recompute`), its full checkpointing our `full`.

Left out, because a figure that cannot be pinned down exactly is not guessed: the Ultra-Scale
Playbook's nanotron sweeps (the playbook's interactive benchmark plot holds about 3,250 configurations
of its 1B, 3B, 8B and 80B models on 1 to 64 nodes of 8 H100s, each with tokens/s per GPU and "GPU
memory"): the playbook states neither those models' architectures nor whether its memory is nanotron's
peak allocated or peak reserved. Korthikanti et al. 2022's activation memory per method (Figures 1 and
7) is drawn, not printed, and is its own formula's estimate (Table 2), not a measurement.
Imports `adaptis_plan` use cases and `bench.scale`'s helpers; no CLI, no rich.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO
from bench.paper import Provenance, table
from bench.published_runs import MODEL_KEYS
from bench.published_runs import load_runs as load_published_runs

HEADING = "## Memory against measured peaks"
RANKING_HEADING = "## Ranking against measured sweeps"
SUITE = "memory"
RUNS_PATH = REPO / "bench" / "memory_runs.json"
SWEEPS_PATH = REPO / "bench" / "sweeps.json"
GIB = 1 << 30
MIB = 1 << 20
#: bytes per unit a figure may be stated in
UNITS = {"GiB": GIB, "MiB": MIB, "GB": 1e9}
#: what a source's figure measures, in words
MEASURES = {
    "reserved_peak_max_rank": "peak reserved bytes of the CUDA caching allocator, whole rank, maximum over the ranks",
    "reserved_peak_logged_rank": "peak reserved bytes of the CUDA caching allocator, whole rank, the logged rank",
    "allocated_peak_max_rank": "peak allocated bytes (live tensors), whole rank, maximum over the ranks",
    "activations_per_rank": "activation bytes only (what the forward pass keeps for the backward), one rank",
}
RUN_KEYS = (
    "id", "source", "source_key", "table", "model", "device", "gpus", "tp", "pp", "dp", "cp", "virtual_stages",
    "micro_batch_size", "global_batch_size", "seq_len", "recompute", "sequence_parallel", "zero", "features",
    "measures", "unit", "measured", "notes",
)  # fmt: skip
FEATURES = ("compile", "float8", "mxfp8", "async_tp")
RECOMPUTE = ("none", "selective", "op", "full")
SWEEP_KEYS = ("id", "source", "source_key", "table", "base", "metric", "unit", "configurations", "notes")
#: metric -> True when larger is faster
METRICS = {"iteration_time_s": False, "tokens_per_s_per_gpu": True}
#: a memory large enough that no run is refused: the prediction is wanted, whether or not it fits
PREDICT_HBM_BYTES = 1 << 40
#: sweep devices beside `bench.scale.HARDWARE`: (built-in profile, the whole memory the source states)
DEVICES = {"h100-96gb": ("h100", 95 * GIB)}  # torchtitan's Grand Teton H100s: "95 GiB memory" (its benchmarks)
QUICK_IDS = ("torchtitan24-8b-8-fsdp", "torchtitan24-70b-256-tp", "torchao-f8nc-8b-8-none-bf16-eager")
QUICK_SWEEPS = ("korthikanti22-22b-recompute", "torchao-f8nc-8b-recompute")


# ----------------------------------------------------------------------------- data sets


def load_runs(path: Path | str = RUNS_PATH) -> list[dict]:
    return json.loads(Path(path).read_text())


def load_sweeps(path: Path | str = SWEEPS_PATH) -> list[dict]:
    return json.loads(Path(path).read_text())


def _pos_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def check_run(run: dict) -> list[str]:
    """Every problem of one memory run, each as 'field: problem'; empty when the run is well-formed."""
    if not isinstance(run, dict) or set(run) != set(RUN_KEYS):
        got = sorted(run) if isinstance(run, dict) else type(run).__name__
        return [f"keys: must be {list(RUN_KEYS)}, got {got}"]
    problems = []
    for k in ("id", "source", "source_key", "table", "notes", "device"):
        if not isinstance(run[k], str) or not run[k].strip():
            problems.append(f"{k}: must be a non-empty string")
    for k in ("gpus", "tp", "pp", "dp", "cp", "virtual_stages", "micro_batch_size", "global_batch_size", "seq_len"):
        if not _pos_int(run[k]):
            problems.append(f"{k}: must be a positive integer, got {run[k]!r}")
    if problems:
        return problems
    if run["gpus"] != run["tp"] * run["pp"] * run["dp"] * run["cp"]:
        problems.append(f"gpus: {run['gpus']} != tp*pp*dp*cp")
    if run["global_batch_size"] % (run["dp"] * run["micro_batch_size"]):
        problems.append(f"global_batch_size: {run['global_batch_size']} not a multiple of dp*micro_batch_size")
    if run["zero"] not in (0, 1, 2, 3):
        problems.append(f"zero: must be 0..3, got {run['zero']!r}")
    if run["recompute"] not in RECOMPUTE:
        problems.append(f"recompute: {run['recompute']!r} is not one of {RECOMPUTE}")
    if run["measures"] not in MEASURES:
        problems.append(f"measures: {run['measures']!r} is not one of {sorted(MEASURES)}")
    if run["unit"] not in UNITS:
        problems.append(f"unit: {run['unit']!r} is not one of {sorted(UNITS)}")
    m = run["measured"]
    if not isinstance(m, (int, float)) or isinstance(m, bool) or m <= 0:
        problems.append(f"measured: must be a positive number, got {m!r}")
    elif str(m) not in run["table"]:
        problems.append(f"table: must quote the measured figure {m} as the source prints it")
    if not isinstance(run["features"], list) or any(f not in FEATURES for f in run["features"]):
        problems.append(f"features: must be a list of {FEATURES}")
    model = run["model"]
    if not isinstance(model, dict) or set(model) != set(MODEL_KEYS):
        problems.append(f"model: keys must be {list(MODEL_KEYS)}")
    elif model["num_heads"] % run["tp"]:
        problems.append(f"model.num_heads: {model['num_heads']} is not a multiple of tp = {run['tp']}")
    return problems


def check_runs(runs: Sequence[dict]) -> list[str]:
    """Every problem of the list, each prefixed with the run's id; ids must be unique."""
    from bench.published_runs import check_each

    return check_each(runs, check_run)


#: the fields an inline sweep base states (`bench.scale`'s request and model spec read them)
BASE_RUN_KEYS = (
    "id", "source_key", "model", "device", "gpus", "tp", "pp", "dp", "cp", "virtual_stages", "micro_batch_size",
    "global_batch_size", "seq_len", "recompute", "sequence_parallel", "zero", "notes",
)  # fmt: skip
#: a configuration the source ran out of memory on
OOM = "OOM"


def check_sweeps(sweeps: Sequence[dict], runs: Sequence[dict]) -> list[str]:
    """Every problem of the sweeps; a base names a published run or a memory run, or states the run inline."""
    published = {r["id"] for r in load_published_runs()}
    memory = {r["id"] for r in runs}
    problems = []
    for i, s in enumerate(sweeps):
        name = s.get("id", f"#{i}") if isinstance(s, dict) else f"#{i}"
        if not isinstance(s, dict) or set(s) != set(SWEEP_KEYS):
            problems.append(f"{name}: keys must be {list(SWEEP_KEYS)}")
            continue
        if not isinstance(s["source"], str) or not s["source"].strip() or not s["unit"]:
            problems.append(f"{name}: source and unit must be stated")
        if s["metric"] not in METRICS:
            problems.append(f"{name}: metric {s['metric']!r} is not one of {sorted(METRICS)}")
        base = s["base"]
        if (
            not isinstance(base, dict)
            or len(base) != 1
            or next(iter(base)) not in ("published_run", "memory_run", "run")
        ):
            problems.append(f"{name}: base must be {{'published_run': id}}, {{'memory_run': id}} or {{'run': {{...}}}}")
        elif "run" in base:
            if not isinstance(base["run"], dict) or set(base["run"]) != set(BASE_RUN_KEYS):
                problems.append(f"{name}: an inline base run needs exactly the keys {list(BASE_RUN_KEYS)}")
        elif base.get("published_run", base.get("memory_run")) not in (
            published if "published_run" in base else memory
        ):
            problems.append(f"{name}: base {base} names no run")
        confs = s["configurations"]
        if sum(1 for c in confs if c.get("measured") != OOM) < 2:
            problems.append(f"{name}: a sweep needs at least 2 configurations with a measured figure")
        for c in confs:
            m = c.get("measured")
            good = m == OOM or (isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0)
            if set(c) != {"label", "changes", "measured"} or not good:
                problems.append(
                    f"{name}: configuration {c.get('label')!r} needs label, changes and a positive measured"
                    f" figure (or {OOM!r})"
                )
    return problems


def base_run(sweep: dict, runs: Sequence[dict]) -> dict:
    """The run a sweep's configurations change."""
    if "run" in sweep["base"]:
        return sweep["base"]["run"]
    if "published_run" in sweep["base"]:
        return next(r for r in load_published_runs() if r["id"] == sweep["base"]["published_run"])
    return next(r for r in runs if r["id"] == sweep["base"]["memory_run"])


# ----------------------------------------------------------------------------- arithmetic


def relative_error(predicted: float, measured: float) -> float:
    return predicted / measured - 1.0


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's of the ranks); None under 2 points or a constant side."""
    if len(a) != len(b) or len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return None if va == 0 or vb == 0 else cov / math.sqrt(va * vb)


def speed(value: float, metric: str) -> float:
    """A figure as a speed (larger is faster)."""
    return value if METRICS[metric] else 1.0 / value


def top1_regret(predicted_speed: Sequence[float | None], measured_speed: Sequence[float]) -> float | None:
    """How much slower, measured, our first choice is than the measured best: best / ours - 1 (0 when we pick
    the best); None when we predict none."""
    known = [i for i, p in enumerate(predicted_speed) if p is not None]
    if not known:
        return None
    ours = max(known, key=lambda i: predicted_speed[i])
    return max(measured_speed) / measured_speed[ours] - 1.0


# ----------------------------------------------------------------------------- predictions


@dataclass
class MemoryRow:
    id: str
    source_key: str
    measures: str
    configuration: str
    features: list[str]
    measured_bytes: float
    device: str = ""
    recompute: str = ""
    pp: int = 1
    predicted_bytes: float | None = None
    static_bytes: float | None = None  # weights, gradients and optimizer state of the fullest device
    activation_bytes: float | None = None  # the rest of its peak: activations, logits, in-flight buffers
    error_text: str | None = None

    @property
    def error(self) -> float | None:
        return None if self.predicted_bytes is None else relative_error(self.predicted_bytes, self.measured_bytes)


def label(run: dict) -> str:
    vp = run.get("virtual_stages", 1)
    return (f"tp{run['tp']} pp{run['pp']} dp{run['dp']} cp{run['cp']} zero{run['zero']} mbs{run['micro_batch_size']}"
            f" gbs{run['global_batch_size']} seq{run['seq_len']} {run['recompute']}" + (f" vp{vp}" if vp > 1 else ""))  # fmt: skip


def _hardware(folder: Path, run: dict, hbm_bytes: float) -> str:
    """A copy of the device's built-in profile holding `hbm_bytes`, all of it usable."""
    from adaptis_plan.inputs.hardware import load_hardware
    from bench.scale import HARDWARE

    name = (HARDWARE.get(run["device"]) or DEVICES.get(run["device"]) or ("h100", 0))[0]
    hw = load_hardware(name).model_dump(mode="json")
    for dt in hw["device_types"].values():
        dt["hbm_bytes"] = hbm_bytes
    hw["name"], hw["memory_fraction"] = run["device"], 1.0
    path = folder / f"{run['id']}.hardware.json"
    path.write_text(json.dumps(hw, indent=1))
    return str(path)


def _device_hbm(run: dict) -> float:
    from bench.scale import HARDWARE

    got = HARDWARE.get(run["device"]) or DEVICES.get(run["device"])
    if got is None:
        raise ValueError(f"{run['id']}: device {run['device']!r} has no whole-memory figure for a sweep")
    return float(got[1])


def plan_forced(run: dict, hbm_bytes: float):  # noqa: ANN201
    """The run planned with every dimension fixed (`bench.scale`'s request), on `hbm_bytes` of memory."""
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from bench.scale import forced_request_args, model_spec

    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / f"{run['id']}.model.json"
        model_path.write_text(json.dumps(model_spec(run), indent=1))
        common = {"model_arg": str(model_path), "hardware_arg": _hardware(Path(tmp), run, hbm_bytes), "pp": 1,
                  "num_microbatches": 1, "seq_len": run["seq_len"], "gpus": run["gpus"],
                  "global_batch_size": run["global_batch_size"], "hard_stop": False, **_runtime(run)}  # fmt: skip
        return make_plan_for(PlanRequest.of(**common, **forced_request_args(run)))


def predict(run: dict) -> MemoryRow:
    from adaptis_plan.errors import AdaptisError

    row = MemoryRow(run["id"], run["source_key"], run["measures"], label(run), list(run["features"]),
                    run["measured"] * UNITS[run["unit"]], run["device"], run["recompute"], run["pp"])  # fmt: skip
    try:
        result = plan_forced(run, PREDICT_HBM_BYTES).result
    except AdaptisError as e:
        row.error_text = str(e)
        return row
    peaks = list(result.peak_memory_bytes)
    d = max(range(len(peaks)), key=lambda i: peaks[i])
    row.predicted_bytes = peaks[d]
    row.static_bytes = result.static_bytes[d]
    row.activation_bytes = peaks[d] - result.static_bytes[d]
    return row


@dataclass
class SweepRow:
    id: str
    source_key: str
    metric: str
    labels: list[str]
    measured: list[float | None]  # None where the source ran out of memory
    predicted: list[float | None]  # tokens/s per GPU, None where the planner refuses (out of memory)
    refused: list[str | None]

    def _both(self) -> list[tuple[float, float]]:
        """(predicted, measured speed) of the configurations that have both."""
        return [
            (p, speed(m, self.metric))
            for p, m in zip(self.predicted, self.measured, strict=True)
            if p is not None and m is not None
        ]

    @property
    def spearman(self) -> float | None:
        pairs = self._both()
        return spearman([p for p, _ in pairs], [m for _, m in pairs])

    @property
    def regret(self) -> float | None:
        """Top-1 regret over the configurations that ran: our first choice among those we predict to fit."""
        ran = [i for i, m in enumerate(self.measured) if m is not None]
        return top1_regret([self.predicted[i] for i in ran], [speed(self.measured[i], self.metric) for i in ran])

    @property
    def oom_agreement(self) -> tuple[int, int]:
        """(configurations where our fit verdict matches the source's, configurations)."""
        same = sum(1 for p, m in zip(self.predicted, self.measured, strict=True) if (p is None) == (m is None))
        return same, len(self.measured)

    @property
    def measured_spread(self) -> float:
        """Fastest / slowest configuration that ran, measured."""
        ran = [speed(m, self.metric) for m in self.measured if m is not None]
        return max(ran) / min(ran)

    @property
    def predicted_spread(self) -> float | None:
        """Fastest / slowest of the same configurations, predicted (None unless each of them is predicted)."""
        both = [p for p, m in zip(self.predicted, self.measured, strict=True) if m is not None]
        if any(p is None for p in both):
            return None
        return max(both) / min(both)


def rank_sweep(sweep: dict, runs: Sequence[dict]) -> SweepRow:
    from adaptis_plan.errors import AdaptisError

    base = base_run(sweep, runs)
    row = SweepRow(sweep["id"], sweep["source_key"], sweep["metric"], [], [], [], [])
    for c in sweep["configurations"]:
        run = {**base, **c["changes"]}
        row.labels.append(c["label"])
        row.measured.append(None if c["measured"] == OOM else float(c["measured"]))
        try:
            row.predicted.append(plan_forced(run, _device_hbm(run)).cluster["tokens_per_s_per_gpu"])
            row.refused.append(None)
        except AdaptisError as e:
            row.predicted.append(None)
            row.refused.append(str(e))
    return row


# ----------------------------------------------------------------------------- the suite


def _map(fn, items: list, workers: int) -> list:  # noqa: ANN001
    if workers > 1 and len(items) > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            return list(pool.map(fn, items))
    return [fn(x) for x in items]


def _rank_one(item: tuple[dict, list[dict]]) -> SweepRow:
    return rank_sweep(*item)


def run_suite(quick: bool, workers: int = 1, log=None) -> dict:  # noqa: ANN001, ARG001
    """The suite's record: one row per memory run and per sweep (module docstring)."""
    from bench import records

    t0 = time.perf_counter()
    runs = load_runs()
    sweeps = load_sweeps()
    problems = check_runs(runs) + check_sweeps(sweeps, runs)
    if problems:
        raise ValueError("; ".join(problems))
    mem_runs = [r for r in runs if not quick or r["id"] in QUICK_IDS]
    chosen = [s for s in sweeps if not quick or s["id"] in QUICK_SWEEPS]
    rows = _map(predict, mem_runs, workers)
    sweep_rows = _map(_rank_one, [(s, runs) for s in chosen], workers)
    command = "python -m bench.run --suites memory" + (" --quick" if quick else "")
    settings = {"cost_model": "analytic", "quick": quick, "workers": workers,
                "memory_hbm_bytes": PREDICT_HBM_BYTES, "sweep_memory": "the device's whole memory"}  # fmt: skip
    data = {"rows": records.to_json(rows), "sweeps": records.to_json(sweep_rows)}
    return records.record(SUITE, settings, data, command, time.perf_counter() - t0)


def results_from_record(rec: Mapping) -> tuple[list[MemoryRow], list[SweepRow]]:
    from bench.records import from_json

    return from_json(list[MemoryRow], rec["data"]["rows"]), from_json(list[SweepRow], rec["data"].get("sweeps", []))


def spread_by(rows: Sequence[MemoryRow], key) -> dict[str, tuple[int, float, float]]:  # noqa: ANN001
    """(runs, median signed error, median |error|) per group of `key(row)`."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r.error is not None:
            groups.setdefault(key(r), []).append(r.error)
    return {k: (len(v), statistics.median(v), statistics.median(abs(e) for e in v)) for k, v in sorted(groups.items())}


def spread(rows: Sequence[MemoryRow]) -> dict[str, tuple[int, float, float]]:
    """(runs, median |error|, worst |error|) per source, and over all runs ('all') and over the runs with
    neither torch.compile nor a low-precision format ('plain')."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r.error is None:
            continue
        groups.setdefault(r.source_key, []).append(abs(r.error))
        groups.setdefault("all", []).append(abs(r.error))
        if not r.features:
            groups.setdefault("plain", []).append(abs(r.error))
    return {k: (len(v), statistics.median(v), max(v)) for k, v in groups.items()}


def summary(rows: Sequence[MemoryRow], sweeps: Sequence[SweepRow]) -> dict:
    errs = [r.error for r in rows if r.error is not None]
    rhos = [s.spearman for s in sweeps if s.spearman is not None]
    regrets = [s.regret for s in sweeps if s.regret is not None]
    return {
        "runs": len(errs),
        "sources": len({r.source_key for r in rows if r.error is not None}),
        "under": sum(1 for e in errs if e < 0),
        "spread": spread(rows),
        "by_recompute": spread_by(rows, lambda r: r.recompute),
        "by_pipeline": spread_by(rows, lambda r: "pipelined (pp > 1)" if r.pp > 1 else "not pipelined"),
        "by_device": spread_by(rows, lambda r: r.device),
        "refused": sum(1 for r in rows if r.error_text),
        "sweeps": len(sweeps),
        "mean_spearman": statistics.fmean(rhos) if rhos else None,
        "top1_hits": sum(1 for g in regrets if g == 0.0),
        "worst_regret": max(regrets) if regrets else None,
        "oom_agree": tuple(map(sum, zip(*(w.oom_agreement for w in sweeps), strict=True))) if sweeps else (0, 0),
    }


def _gib(b: float | None) -> str:
    return "-" if b is None else f"{b / GIB:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def render(rec: Mapping) -> str:
    rows, sweeps = results_from_record(rec)
    s = summary(rows, sweeps)
    sp = s["spread"]
    prov = Provenance.of(rec)
    lines = [
        HEADING,
        "",
        "Every figure below is a published, measured peak (bench/memory_runs.json cites each source, table and row)."
        " Predicted: the run's configuration forced through `adaptis plan --gpus N --global-batch-size B` (analytic"
        " cost model, built-in profile of the device, memory limit lifted so nothing is refused), the fullest"
        " device's peak: static (weights, gradients, optimizer state by ZeRO stage) + activations in flight."
        " What is measured: "
        + "; ".join(f"`{k}` = {v}" for k, v in MEASURES.items() if any(r.measures == k for r in rows))
        + ". Reserved includes the caching allocator's free blocks and the runtime's workspaces, which we do not"
        " count: like with like would be allocated, which none of these sources publishes. torch.compile and float8"
        " are not modelled (the plain bf16 run's prediction is used).",
        "",
    ]
    if "all" in sp:
        n, med, worst = sp["all"]
        lines.append(f"- {n} runs from {s['sources']} sources: median |error| {med:.1%}, worst {worst:.1%};"
                     f" {s['under']} predicted below the measurement.")  # fmt: skip
    if "plain" in sp:
        n, med, worst = sp["plain"]
        lines.append(f"- Plain bf16 eager runs only ({n}): median |error| {med:.1%}, worst {worst:.1%}.")
    lines.append("- By source: " + "; ".join(f"{k} {n} runs, median {m:.1%}, worst {w:.1%}"
                                            for k, (n, m, w) in sp.items() if k not in ("all", "plain")) + ".")  # fmt: skip
    for name, what in (("by_recompute", "By recomputation"), ("by_pipeline", "By pipelining"),
                       ("by_device", "By device")):  # fmt: skip
        lines.append(f"- {what} (median signed error, median |error|): "
                     + "; ".join(f"{k} {n} runs {m:+.1%}, {a:.1%}" for k, (n, m, a) in s[name].items()) + ".")  # fmt: skip
    if s["refused"]:
        lines.append(f"- {s['refused']} runs could not be planned (listed below).")
    lines.append("")
    body = [[r.id, r.configuration, ",".join(r.features) or "-", _gib(r.measured_bytes), _gib(r.predicted_bytes),
             _pct(r.error), _gib(r.static_bytes), _gib(r.activation_bytes)] for r in rows]  # fmt: skip
    lines.append(table(["run", "configuration", "features", "measured GiB", "predicted GiB", "error",
                        "predicted static GiB", "predicted activations GiB"], body))  # fmt: skip
    refused = [r for r in rows if r.error_text]
    if refused:
        lines += ["", "Runs the planner refused:", ""] + [f"- {r.id}: {r.error_text}" for r in refused]
    lines += ["", prov.line(), "", RANKING_HEADING, ""]
    lines.append(
        "Published sweeps of one model over its configurations (bench/sweeps.json cites each): every configuration"
        " forced as above on the device's whole memory, predicted tokens/s per GPU against the measured step time"
        " or throughput. Spearman: rank correlation of predicted and measured speed (with two configurations it is"
        " +1 or -1: the order is right or wrong). Top-1 regret: how much slower, measured, the configuration we rank"
        " first is than the measured best (0% = we pick the best), over the configurations that ran. Fastest / slowest:"
        " how far apart the configurations are, measured and predicted. A configuration the source ran out of memory"
        f" on is marked {OOM}; the planner refusing it on the device's whole memory is the matching verdict."
    )
    lines.append("")
    if sweeps:
        rho = s["mean_spearman"]
        lines.append(f"- {s['sweeps']} sweeps: mean Spearman {'-' if rho is None else f'{rho:+.2f}'}, measured best"
                     f" ranked first in {s['top1_hits']}, worst top-1 regret {_pct(s['worst_regret'])}; our fit"
                     f" verdict (refused on the device's whole memory, or not) matches the source's (ran, or"
                     f" {OOM}) on {s['oom_agree'][0]} of {s['oom_agree'][1]} configurations.")  # fmt: skip
        lines.append("")
    body = []
    for w in sweeps:
        confs = "; ".join(f"{lab}: {OOM if m is None else f'{m:g}'} / {'refused' if p is None else f'{p:,.0f}'}"
                          for lab, m, p in zip(w.labels, w.measured, w.predicted, strict=True))  # fmt: skip
        body.append(
            [
                w.id,
                w.metric,
                confs,
                "-" if w.spearman is None else f"{w.spearman:+.2f}",
                _pct(w.regret),
                f"{w.measured_spread:.2f}x",
                "-" if w.predicted_spread is None else f"{w.predicted_spread:.2f}x",
                "{}/{}".format(*w.oom_agreement),
            ]
        )
    lines.append(table(["sweep", "measured", "configuration: measured / predicted tok/s/GPU", "Spearman",
                        "top-1 regret", "fastest / slowest measured", "predicted", "fit verdicts agree"], body))  # fmt: skip
    lines += ["", prov.line()]
    return "\n".join(lines)


#: torchtitan's own defaults, for a row that does not state them: FSDP2 prefetches its all-gathers and
#: overlaps its reduce-scatters with compute, attention is torch's SDPA (the flash kernel on these GPUs),
#: and async tensor parallelism is off unless enabled.
TORCHTITAN_RUNTIME = {"dp_overlap": True, "attention": "flash", "tp_comm_overlap": False}


#: the sources whose runs ran in torchtitan (every memory run, `MEASURES`; the sweeps' own torchtitan runs): they
#: plan with `--target torchtitan`, whose pipeline stages keep FSDP2's parameters gathered and gradients unsharded
#: over a step (`TrainingConfig.stage_keeps_unsharded`); the published runs of other frameworks plan as before
TORCHTITAN_SOURCES = frozenset(
    {"torchtitan_2024", "torchtitan_2024_04", "torchao_float8", "torchao_float8nocompile", "trainy_2025"}
)


def _runtime(run: dict) -> dict:
    """The runtime settings a memory row plans with (its own where it states them, else torchtitan's), and the
    target runtime its source ran (`TORCHTITAN_SOURCES`)."""
    got: dict = {k: run.get(k, default) for k, default in TORCHTITAN_RUNTIME.items()}
    if run["source_key"] in TORCHTITAN_SOURCES:
        got["target"] = "torchtitan"
    return got
