"""Published runs at scale: predicted against measured tokens/s per GPU with the published
configuration forced, and what the free configuration search picks for the same model, GPUs and batch.

Run: `python -m bench.run --suites scale [--quick]` (suite `scale`: writes bench/results/scale.json,
then re-renders BENCHMARKS.md).

Data flow: `bench/published_runs.json` (`bench.published_runs.load_runs`: every run's source, model,
parallel configuration and measured throughput, derived from the source's own FLOP accounting) ->
`run_one` writes the run's model as a native spec and plans it twice through
`app.plan.make_plan_for` (the path `adaptis plan --gpus` takes): once with every dimension fixed to the
published one (classic 1F1B, or Interleaved1F1B with the run's virtual stages, and its recomputation),
once free (`--recompute auto`, adaptive) -> `ScaleRow` -> the record -> `render`.

Every setting of a run is the one its source states or, where the source is silent, the one
`bench.published_runs.RULE` gives (each run's `settings` says which); the headline uses exactly those.
Beside it, never instead of it: each of the run's `alternatives` (another reading, e.g. the data set's
previous choice), and, for a setting the rule gave, the best value that fits: the interleaving degree
(`interleaving_degrees`, the rest as the headline's) and the micro-batch size (`MBS_TRIED`). Runs whose
source fed a cost-model coefficient (`used_for_calibration`) are predicted and shown but not counted.
Then `run_walls` times `WALL_CASES`: `adaptis plan` in a new process, one at a time, as a user runs it.

Settings: the analytic cost model on the built-in `a100` / `h100` profiles, each with the device's
whole memory as its driver reports it (`HARDWARE`: 81,920 MiB for an A100-80GB, 40,960 MiB for an
A100-40GB, 81,559 MiB for an H100, where the profiles plan with 80e9 bytes). A published configuration
ran, so its memory is checked against all of it (`PUBLISHED_MEMORY_FRACTION`, not the profiles'
planning margin of 90%), and the free search gets the same limit: both sides of the gain see one
memory. A source that states its split of the layers (`partition`, Llama 3's "ends-as-layers") is
planned with it. The runtime's data-parallel overlap, attention core and tensor-parallel overlap are
the run's own fields (`runtime`), stated or from the rule like the rest. Imports `adaptis_plan` use cases, the
published runs and `bench.paper`'s formatting; no CLI, no rich.
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.paper import Provenance, table
from bench.published_runs import FROM_RULE, load_runs

HEADING = "## Published runs at scale: predicted against measured tokens/s per GPU"
VP_TRIED = (2, 3, 4, 6, 8)
#: sources that ran Megatron-LM, whose interleaved schedule takes a number of layers per virtual stage
#: that divides the layers per pipeline stage (megatron/training/arguments.py: "number of layers per
#: pipeline stage must be divisible number of layers per virtual pipeline stage"): their degrees are
#: the divisors of layers / pp (`interleaving_degrees`), not VP_TRIED
MEGATRON_LM = ("narayanan2021", "korthikanti2022", "megascale2024", "megatron_core_h100_2024")
MBS_TRIED = (1, 2, 4, 8)
#: what the configuration-search anchors state of themselves (their papers and the Llama 3 report): context beside
#: our figures, never a comparison (none ran on these inputs or settings)
ANCHORS = (
    "Mist (EuroSys'25): 1.28x mean, 1.73x max measured over Megatron-LM, up to 32 GPUs; pipelines costed as 1F1B.",
    "Calculon (SC'23): exhaustive analytic search, about a minute for a 530B model on 5,128 A100s; validated on"
    " four rows of Korthikanti et al. (error not re-run here).",
    "Lumos (trace-driven replay, no search): 3.3% mean error up to 512 H100s.",
    "Llama 3: Meta's memory estimator and performance-projection tool picked its configurations (not released).",
)
MIB = 1 << 20
#: each device's profile and its whole memory as its driver reports it (nvidia-smi's total: A100-SXM4-80GB
#: 81,920 MiB, A100-SXM4-40GB 40,960 MiB, H100 80GB HBM3 81,559 MiB); the built-in profiles plan with a
#: conservative 80e9 bytes, but a published configuration ran on the whole of it (CUDA context and
#: communication buffers, which the memory model does not count, come out of the same memory)
HARDWARE = {
    "a100-80gb": ("a100", 81_920 * MIB),
    "a100-40gb": ("a100", 40_960 * MIB),
    "h100-80gb": ("h100", 81_559 * MIB),
}
#: the share of HBM a published configuration may fill: it ran, so only the device's whole memory, not
#: the planner's safety margin (the profiles' memory_fraction, 0.9), can refuse it; the free search of
#: the same run gets the same limit (identical inputs)
PUBLISHED_MEMORY_FRACTION = 1.0
#: the figures `issues` holds the cost model to: median and worst |error| over the dense runs
MEDIAN_TARGET, WORST_TARGET = 0.10, 0.25
#: the whole-configuration planning times the project is held to (at most 10 s up to 1,024 GPUs, at most
#: 60 s for a 405B-class model on 16,384 GPUs): `adaptis plan --no-hard-stop` as a user runs it (a new
#: process, built-in profile, defaults), one at a time after the runs above; (case, model: a published
#: run's id, whose `model_spec` is written, or a config path, plan arguments, target seconds)
WALL_CASES = (
    ("175B on 64 A100s", "korthikanti22-gpt-175b-64",
     ("--hardware", "a100", "--gpus", "64", "--global-batch-size", "64", "--seq-len", "2048"), 10.0),
    ("Llama-3.1-70B on 1,024 H100s", "tests/data/configs/llama-3.1-70b.json",
     ("--hardware", "h100", "--gpus", "1024", "--global-batch-size", "1024", "--seq-len", "4096"), 10.0),
    ("1T on 512 A100s", "korthikanti22-gpt-1t-512",
     ("--hardware", "a100", "--gpus", "512", "--global-batch-size", "512", "--seq-len", "2048"), 10.0),
    ("Llama-3.1-405B on 16,384 H100s", "tests/data/configs/llama-3.1-405b.json",
     ("--hardware", "h100", "--gpus", "16384", "--global-batch-size", "2048", "--seq-len", "8192"), 60.0),
)  # fmt: skip
QUICK_IDS = ("narayanan21-gpt-1.7b-32", "korthikanti22-gpt-175b-64", "llama3-405b-16384-cp1", "mcore24-gpt-70b-768")


@dataclass
class AltPrediction:
    label: str
    predicted: float | None = None  # tokens/s per GPU
    refused: str | None = None


@dataclass
class ScaleRow:
    id: str
    source_key: str
    device: str
    gpus: int
    configuration: str
    measured: float  # tokens/s per GPU
    predicted: float | None = None
    forced_error: str | None = None
    free: float | None = None
    free_configuration: str | None = None
    free_strategy: str | None = None
    free_gap: float | None = None
    free_error: str | None = None
    free_codesign: float | None = None  # best classic pipeline step / the plan's, same configuration
    used_for_calibration: bool = False
    forced_s: float = 0.0
    free_s: float = 0.0
    # where the rule gave the interleaving (pp > 1): the best Interleaved1F1B degree the software allows
    # (`interleaving_degrees`) that fits memory with the rest forced, and its tokens/s per GPU; "none fits"
    # when none does
    interleaved: float | None = None
    interleaved_vp: int | None = None
    interleaved_note: str | None = None
    # where the rule gave the micro-batch size: the fastest size of
    # `MBS_TRIED` that fits with the rest as the headline's, and its tokens/s per GPU
    best_mbs: int | None = None
    best_mbs_predicted: float | None = None
    # the settings the rule gave (`bench.published_runs.RULE`), the rest are the source's
    from_rule: list[str] = field(default_factory=list)
    # each of the run's `alternatives`, predicted beside the headline
    alternatives: list[AltPrediction] = field(default_factory=list)

    @property
    def counted(self) -> bool:
        return self.error is not None and not self.used_for_calibration

    def alternative_error(self, prefix: str) -> float | None:
        """The error of the first alternative whose label starts with `prefix` (None: none, or refused)."""
        alt = next((a for a in self.alternatives if a.label.startswith(prefix)), None)
        return None if alt is None or alt.predicted is None else alt.predicted / self.measured - 1.0

    @property
    def interleaved_error(self) -> float | None:
        return None if self.interleaved is None else self.interleaved / self.measured - 1.0

    @property
    def best_mbs_error(self) -> float | None:
        return None if self.best_mbs_predicted is None else self.best_mbs_predicted / self.measured - 1.0

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.measured - 1.0

    @property
    def gain(self) -> float | None:
        return None if self.free is None or self.predicted is None else self.free / self.predicted


def model_spec(run: dict) -> dict:
    """The run's model as a native model spec (GPT: learned positions, LayerNorm, GeLU; Llama: RoPE,
    RMSNorm, SwiGLU, grouped-query attention)."""
    m = run["model"]
    attention = {"num_heads": m["num_heads"], "num_kv_heads": m["num_kv_heads"],
                 "head_dim": m["hidden_size"] // m["num_heads"]}  # fmt: skip
    block = {"kind": "decoder", "attention": attention,
             "mlp": {"activation": m["activation"], "intermediate_size": m["ffn_hidden_size"]}}  # fmt: skip
    spec = {
        "name": run["id"],
        "hidden_size": m["hidden_size"],
        "vocab_size": m["vocab_size"],
        "norm": "layernorm" if m["position"] == "learned" or m["activation"] == "gelu" else "rmsnorm",
        "tie_word_embeddings": m["tied_embeddings"],
        "layers": [{"kind": "embedding"}] + [block] * m["num_layers"] + [{"kind": "head"}],
    }
    if m["position"] in ("learned", "alibi"):
        spec["position_encoding"] = m["position"]
    if m["position"] == "learned":
        spec["max_position_embeddings"] = run["seq_len"]
    return spec


def _inputs(run: dict, folder: Path, memory_fraction: float | None = None) -> tuple[str, str]:
    """The run's model spec and hardware profile: a copy of the built-in one with the device's whole
    memory (`HARDWARE`) and, with `memory_fraction`, the share of it the planner may fill."""
    from adaptis_plan.inputs.hardware import load_hardware

    model_path = folder / f"{run['id']}.model.json"
    model_path.write_text(json.dumps(model_spec(run), indent=1))
    name, hbm = HARDWARE[run["device"]]
    hw = load_hardware(name).model_dump(mode="json")
    for dt in hw["device_types"].values():
        dt["hbm_bytes"] = hbm
    hw["name"] = run["device"]
    if memory_fraction is not None:
        hw["memory_fraction"] = memory_fraction
    hw_path = folder / f"{run['id']}.{'published' if memory_fraction is not None else 'plan'}.hardware.json"
    hw_path.write_text(json.dumps(hw, indent=1))
    return str(model_path), str(hw_path)


def forced_request_args(run: dict) -> dict:
    """The published configuration, every dimension fixed."""
    vp = run.get("virtual_stages", 1)
    m = run["global_batch_size"] // (run["dp"] * run["micro_batch_size"])
    fixed = {"tp": run["tp"], "pp": run["pp"], "dp": run["dp"], "cp": run["cp"], "ep": 1,
             "zero": min(run["zero"], 3) if run["dp"] * run["cp"] > 1 else 1,
             "micro_batch_size": run["micro_batch_size"], "num_microbatches": m}  # fmt: skip
    if run["zero"] == 0 and run["dp"] * run["cp"] > 1:
        fixed["zero"] = 0
    return {
        "fixed": fixed,
        "partition": run.get("partition"),
        "recompute": run["recompute"],
        "strategy": "Interleaved1F1B" if vp > 1 else "1F1B",
        "stages_per_device": vp if vp > 1 else None,
    }


def runtime(run: dict) -> dict:
    """The runtime settings of the run (stated or from the rule, like the rest), as `PlanRequest` fields."""
    return {k: run[k] for k in ("dp_overlap", "attention", "tp_comm_overlap")}


def from_rule(run: dict) -> list[str]:
    """The run's settings that the rule gave, not its source."""
    return [k for k, v in run["settings"].items() if v.startswith(FROM_RULE)]


def with_alternative(run: dict, alt: dict) -> dict:
    """The run with an alternative's values in place of its own (`vocab_size` is the model's)."""
    out = {**run, **{k: v for k, v in alt.items() if k not in ("label", "vocab_size")}}
    if "vocab_size" in alt:
        out["model"] = {**run["model"], "vocab_size": alt["vocab_size"]}
    return out


def run_one(run: dict) -> ScaleRow:
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.errors import AdaptisError

    cfg = forced_request_args(run)
    f = cfg["fixed"]
    label = (f"tp{f['tp']} pp{f['pp']} dp{f['dp']} cp{f['cp']} mbs{f['micro_batch_size']}"
             f" gbs{run['global_batch_size']} {run['recompute']}"
             + (f" vp{run['virtual_stages']}" if run.get("virtual_stages", 1) > 1 else "")
             + (f" {run['partition']}" if run.get("partition", "uniform") != "uniform" else ""))  # fmt: skip
    row = ScaleRow(run["id"], run["source_key"], run["device"], run["gpus"], label, run["tokens_per_s_per_gpu"],
                   used_for_calibration=run.get("used_for_calibration", False), from_rule=from_rule(run))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        # the published configuration ran: its memory is checked against the device's whole memory, not the
        # planner's margin (the timing does not depend on the limit); the free search gets the same
        # inputs, so the two are compared on one memory limit
        model_arg, hw_arg = _inputs(run, Path(tmp), PUBLISHED_MEMORY_FRACTION)
        common = {"model_arg": model_arg, "hardware_arg": hw_arg, "pp": 1, "num_microbatches": 1,
                  "seq_len": run["seq_len"], "gpus": run["gpus"], "global_batch_size": run["global_batch_size"],
                  "hard_stop": False, **runtime(run)}  # fmt: skip
        t0 = time.perf_counter()
        try:
            out = make_plan_for(PlanRequest.of(**common, **cfg))
            row.predicted = out.cluster["tokens_per_s_per_gpu"]
        except AdaptisError as e:
            row.forced_error = str(e)
        row.forced_s = time.perf_counter() - t0
        if run["pp"] > 1 and "virtual_stages" in row.from_rule:
            _best_interleaved(run, row, common, cfg)
        if "micro_batch_size" in row.from_rule and row.predicted is not None:
            _best_micro_batch(run, row, common)
        for alt in run.get("alternatives", []):
            row.alternatives.append(_alternative(run, alt, Path(tmp)))
        t0 = time.perf_counter()
        try:
            out = make_plan_for(PlanRequest.of(**common, recompute="auto"))
            c = out.cluster
            row.free = c["tokens_per_s_per_gpu"]
            k = c["configuration"]
            row.free_configuration = (
                f"tp{k['tp']} pp{k['pp']} dp{k['dp']} cp{k['cp']} zero{k['zero']} mbs{k['micro_batch_size']}"
            )
            row.free_strategy = k["strategy"] + (f" x{k['stages_per_device']}" if k["stages_per_device"] > 1 else "")
            row.free_gap = c["configuration_gap"]
            classic = [b["step_time_s"] for b in out.json_summary()["baselines"].values()]
            if classic and k["strategy"] == "adaptive":
                row.free_codesign = min(classic) / out.result.step_time_s
        except AdaptisError as e:
            row.free_error = str(e)
        row.free_s = time.perf_counter() - t0
    return row


@dataclass
class WallRow:
    case: str
    model: str
    args: list[str]
    target_s: float
    wall_s: float | None = None
    configuration: str | None = None
    tokens_per_s_per_gpu: float | None = None
    error: str | None = None


def run_walls(quick: bool = False) -> list[WallRow]:
    """`WALL_CASES` through the command line, one at a time (quick: the first only)."""
    import subprocess
    import sys

    from bench.common import REPO

    runs = {r["id"]: r for r in load_runs()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, model, args, target in WALL_CASES[:1] if quick else WALL_CASES:
            row = WallRow(case, model, list(args), target)
            path = model
            if model in runs:
                path = str(Path(tmp) / f"{model}.json")
                Path(path).write_text(json.dumps(model_spec(runs[model]), indent=1))
            cmd = [sys.executable, "-m", "adaptis_plan.cli", "plan", "--model", path, *args, "--no-hard-stop",
                   "--json", "-o", str(Path(tmp) / "plan.json")]  # fmt: skip
            t0 = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            row.wall_s = time.perf_counter() - t0
            if r.returncode != 0:
                row.error = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
            else:
                out = json.loads(r.stdout)
                k = out["configuration"]
                row.configuration = (
                    f"tp{k['tp']} pp{k['pp']} dp{k['dp']} cp{k['cp']} M{k['num_microbatches']} {k['strategy']}"
                )
                row.tokens_per_s_per_gpu = out["tokens_per_s_per_gpu"]
            rows.append(row)
    return rows


def interleaving_degrees(run: dict) -> list[int]:
    """The Interleaved1F1B degrees the run's software allows: for Megatron-LM (`MEGATRON_LM`) every
    divisor > 1 of the layers per pipeline stage (none when pp does not divide the layers or the
    micro-batches), else
    those of VP_TRIED that leave each virtual stage a layer."""
    layers, pp = run["model"]["num_layers"], run["pp"]
    if run["source_key"] in MEGATRON_LM:
        # its interleaved schedule also refuses micro-batches that pp does not divide (schedules.py)
        m = run["global_batch_size"] // (run["dp"] * run["micro_batch_size"])
        per_stage = layers // pp if layers % pp == 0 and m % pp == 0 else 0
        return [vp for vp in range(2, per_stage + 1) if per_stage % vp == 0]
    return [vp for vp in VP_TRIED if pp * vp <= layers]


def _interleavings(run: dict, cfg: dict) -> list[dict]:
    """`cfg` with Interleaved1F1B at each degree of `interleaving_degrees(run)`."""
    return [{**cfg, "strategy": "Interleaved1F1B", "stages_per_device": vp} for vp in interleaving_degrees(run)]


def _fastest(common: dict, tries: list[dict]) -> tuple[float, dict] | None:
    """The first fastest of `tries` (request fields beside `common`) that plans, as (tokens/s per GPU, its
    fields); None when none does."""
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.errors import AdaptisError

    best: tuple[float, dict] | None = None
    for c in tries:
        try:
            got = make_plan_for(PlanRequest.of(**common, **c)).cluster["tokens_per_s_per_gpu"]
        except AdaptisError:
            continue
        if best is None or got > best[0]:
            best = (got, c)
    return best


def _best_interleaved(run: dict, row: ScaleRow, common: dict, cfg: dict) -> None:
    """The published configuration with Interleaved1F1B at each degree of `interleaving_degrees`; the
    fastest that fits goes into `row` (`ScaleRow.interleaved`)."""
    best = _fastest(common, _interleavings(run, cfg))
    if best is None:
        row.interleaved_note = "none fits"
    else:
        row.interleaved, row.interleaved_vp = best[0], best[1]["stages_per_device"]


def _best_micro_batch(run: dict, row: ScaleRow, common: dict) -> None:
    """The headline's configuration at each micro-batch size of `MBS_TRIED` dividing the batch per replica,
    the rest as the headline's; the fastest that fits goes into `row` (`ScaleRow.best_mbs`)."""
    per_replica = run["global_batch_size"] // run["dp"]
    for mbs in (b for b in MBS_TRIED if per_replica % b == 0):
        best = _fastest(common, [forced_request_args({**run, "micro_batch_size": mbs})])
        if best is not None and (row.best_mbs_predicted is None or best[0] > row.best_mbs_predicted):
            row.best_mbs, row.best_mbs_predicted = mbs, best[0]


def _alternative(run: dict, alt: dict, folder: Path) -> AltPrediction:
    """One of the run's `alternatives`, forced like the headline."""
    from adaptis_plan.app.plan import PlanRequest, make_plan_for
    from adaptis_plan.errors import AdaptisError

    other = {**with_alternative(run, alt), "id": f"{run['id']}.alt"}
    model_arg, hw_arg = _inputs(other, folder, PUBLISHED_MEMORY_FRACTION)
    common = {"model_arg": model_arg, "hardware_arg": hw_arg, "pp": 1, "num_microbatches": 1,
              "seq_len": run["seq_len"], "gpus": run["gpus"], "global_batch_size": run["global_batch_size"],
              "hard_stop": False, **runtime(other)}  # fmt: skip
    out = AltPrediction(alt["label"])
    try:
        out.predicted = make_plan_for(PlanRequest.of(**common, **forced_request_args(other))).cluster[
            "tokens_per_s_per_gpu"
        ]
    except AdaptisError as e:
        out.refused = str(e)
    return out


def run_rows(quick: bool = False, workers: int = 1, log=None) -> list[ScaleRow]:  # noqa: ANN001
    runs = [r for r in load_runs() if not quick or r["id"] in QUICK_IDS]
    if workers > 1:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            rows = list(pool.map(run_one, runs))
    else:
        rows = [run_one(r) for r in runs]
    if log is not None:
        for r in rows:
            log(f"{r.id}: predicted {r.predicted} measured {r.measured} free {r.free}")
    return rows


SUITE = "scale"


def run_suite(quick: bool, workers: int = 1, log=None) -> dict:  # noqa: ANN001
    """The suite's record: one row per published run (module docstring)."""
    from bench import records

    t0 = time.perf_counter()
    rows = run_rows(quick, workers, log)
    command = "python -m bench.run --suites scale" + (" --quick" if quick else "")
    settings = {
        "cost_model": "analytic",
        "hardware": sorted({h for h, _ in HARDWARE.values()}),
        "quick": quick,
        "workers": workers,
    }
    walls = run_walls(quick)  # after the runs above: one plan at a time on this machine
    data = {"rows": records.to_json(rows), "walls": records.to_json(walls)}
    return records.record(SUITE, settings, data, command, time.perf_counter() - t0)


def results_from_record(rec: Mapping) -> list[ScaleRow]:
    from bench.records import from_json

    return from_json(list[ScaleRow], rec["data"]["rows"])


def summary(rows: list[ScaleRow]) -> dict:
    """Median and worst |error| of the forced predictions over the counted runs (predicted, source not used
    for calibration); the same per source and device kind, counted and not; the counted runs' figures with
    each run's previous reading (its alternative labelled "previous") in place of the headline."""
    held = [r for r in rows if r.counted]
    errs = [abs(r.error) for r in held]
    gains = [r.gain for r in held if r.gain is not None]
    shown = [r for r in rows if r.error is not None and r.used_for_calibration]
    return {
        "runs": len(held),
        "sources": len({r.source_key for r in held}),
        "median_abs_error": statistics.median(errs) if errs else None,
        "worst_abs_error": max(errs) if errs else None,
        "not_counted": len(shown),
        "not_counted_sources": sorted({r.source_key for r in shown}),
        "free_slower": sum(1 for g in gains if g < 1 - 1e-9),
        "mean_gain": statistics.fmean(gains) if gains else None,
        "max_gpus": max((r.gpus for r in held), default=0),
        "min_gpus": min((r.gpus for r in held), default=0),
        "refused": sum(1 for r in rows if r.forced_error),
        "by_device": _spread(held, lambda r: r.device.split("-")[0]),
        "by_source": _spread(held, lambda r: r.source_key),
        "by_source_device": _by_source_device(rows),
        "previous": _previous(held),
        "codesign": sum(1 for r in rows if r.free_codesign is not None and r.free_codesign > 1.005),
        "free_s_upto_1024": max((r.free_s for r in rows if r.gpus <= 1024), default=0.0),
        "free_s_max": max((r.free_s for r in rows), default=0.0),
        "unstated_vp": _unstated_vp(held),
        "unstated_mbs": _unstated_mbs(held),
    }


def _previous_error(r: ScaleRow) -> float | None:
    """The run's error under the data set's previous reading: its alternative labelled "previous", else,
    where the rule gave the interleaving degree, the best degree that fits (the previous headline took the
    fastest degree where a source stated interleaving but not its degree); None where neither applies."""
    prev = r.alternative_error("previous")
    if prev is None and r.interleaved is not None and "virtual_stages" in r.from_rule:
        prev = r.interleaved_error
    return prev


def _previous(held: list[ScaleRow]) -> dict | None:
    """The counted runs' median and worst |error| with each run's previous reading (`_previous_error`) in
    place of its headline (the headline where it has none or it is refused)."""
    moved = {r.id: e for r in held if (e := _previous_error(r)) is not None}
    if not moved:
        return None
    every = [abs(moved.get(r.id, r.error)) for r in held]
    return {"runs": len(moved), "median": statistics.median(every), "worst": max(every)}


def _by_source_device(rows: list[ScaleRow]) -> list[tuple]:
    """(source, device kind, counted runs, their median |error|, worst |error|, runs not counted, their
    median and worst |error|, configurations refused), in source order; None where a group is empty."""
    groups: dict[tuple[str, str], list[ScaleRow]] = {}
    for r in rows:
        groups.setdefault((r.source_key, r.device.split("-")[0]), []).append(r)
    out = []
    for (src, dev), rs in groups.items():
        c = [abs(r.error) for r in rs if r.error is not None and not r.used_for_calibration]
        n = [abs(r.error) for r in rs if r.error is not None and r.used_for_calibration]
        out.append((src, dev, len(c), statistics.median(c) if c else None, max(c) if c else None,
                    len(n), statistics.median(n) if n else None, max(n) if n else None,
                    sum(1 for r in rs if r.forced_error)))  # fmt: skip
    return out


def _unstated_mbs(held: list[ScaleRow]) -> dict | None:
    """Over the counted runs whose micro-batch size the rule gave: their median and worst |error| with 1
    (the rule's) and with the best size that fits; and all counted runs' median and worst with those rows
    at their best size."""
    rows = [r for r in held if r.best_mbs is not None]
    if not rows:
        return None
    plain = [abs(r.error) for r in rows]
    best = [abs(r.best_mbs_error) for r in rows]
    every = [abs(r.best_mbs_error if r.best_mbs is not None else r.error) for r in held]
    return {"runs": len(rows), "moved": sum(1 for r in rows if r.best_mbs != 1),
            "plain": (statistics.median(plain), max(plain)), "best": (statistics.median(best), max(best)),
            "all": (statistics.median(every), max(every))}  # fmt: skip


def _unstated_vp(held: list[ScaleRow]) -> dict | None:
    """Over the counted runs whose interleaving degree the rule gave (pp > 1): their median and worst
    |error| with the rule's degree and with the best degree that fits (the rule's where none does)."""
    rows = [r for r in held if r.interleaved is not None or r.interleaved_note]
    if not rows:
        return None
    plain = [abs(r.error) for r in rows]
    best = [abs(r.interleaved_error if r.interleaved is not None else r.error) for r in rows]
    return {"runs": len(rows), "fits": sum(1 for r in rows if r.interleaved is not None),
            "plain": (statistics.median(plain), max(plain)), "best": (statistics.median(best), max(best))}  # fmt: skip


def _spread(rows: list[ScaleRow], key) -> dict[str, tuple[int, float, float]]:  # noqa: ANN001
    """(runs, median |error|, worst |error|) per group."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(abs(r.error))
    return {k: (len(v), statistics.median(v), max(v)) for k, v in sorted(groups.items())}


def _walls_section(rec: Mapping) -> list[str]:
    """The planning-time table (`WALL_CASES`), when the record has it."""
    from bench.records import from_json

    walls = from_json(list[WallRow], rec["data"].get("walls", []))
    if not walls:
        return []
    body = [
        [w.case, f"`adaptis plan --model {w.model} {' '.join(w.args)} --no-hard-stop`",
         "-" if w.wall_s is None else f"{w.wall_s:.1f}", f"{w.target_s:.0f}",
         "met" if w.error is None and w.wall_s is not None and w.wall_s <= w.target_s else "MISS",
         w.configuration or (w.error or "-")[:80],
         "-" if w.tokens_per_s_per_gpu is None else f"{w.tokens_per_s_per_gpu:,.1f}"]
        for w in walls
    ]  # fmt: skip
    return [
        "",
        "Planning time of the whole configuration: `adaptis plan` in a new process, one at a time on this"
        " machine, built-in profile and defaults (analytic costs, 90% of HBM, `--recompute auto`); a model named"
        " by a run id above is that run's `model_spec`.",
        "",
        table(["case", "command", "wall s", "target s", "verdict", "configuration", "tok/s/GPU"], body),
    ]


def _interleaved(r: ScaleRow) -> str:
    if r.interleaved is not None:
        return f"vp{r.interleaved_vp} {_pct(r.interleaved_error)}"
    return r.interleaved_note or "-"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _alternatives(r: ScaleRow) -> str:
    return (
        "; ".join(
            f"{a.label}: " + (_pct(a.predicted / r.measured - 1) if a.predicted is not None else "refused")
            for a in r.alternatives
        )
        or "-"
    )


def _group_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def render(rec: Mapping) -> str:
    from bench.published_runs import RULE

    rows = results_from_record(rec)
    s = summary(rows)
    prov = Provenance.of(rec)
    lines = [
        HEADING,
        "",
        "Every run below is a published, measured training run (bench/published_runs.json names each source, its"
        " table and its FLOP accounting); tokens/s per GPU are derived from the source's own accounting. Predicted:"
        " `adaptis plan --gpus N --global-batch-size B` with every dimension fixed to the run's (1F1B, or"
        " Interleaved1F1B with its virtual stages, on the published split of the layers where the source states"
        " one), analytic cost model, built-in `a100` / `h100` profiles; memory checked against the device's whole"
        " memory as its driver reports it (81,920 / 40,960 / 81,559 MiB for A100-80GB / A100-40GB / H100; the"
        " configuration ran); the runtime's own settings (`--attention`, data-parallel and tensor-parallel"
        " overlap; bench/scale.py `runtime`). Free: the same model, GPUs and batch with nothing fixed"
        " (`--recompute auto`), on the same memory limit.",
        "",
        f"Settings: each run uses every setting its source states, as stated; a setting the source does not state"
        f" comes from one rule for all sources, written down before any error was looked at: {RULE} Each run's"
        " `settings` in bench/published_runs.json says which of its settings are stated (and where) and which the"
        " rule gave (column from rule).",
        "",
        f"- Counted: {s['runs']} runs from {s['sources']} sources, {s['min_gpus']:,} to {s['max_gpus']:,} GPUs:"
        f" median |error| {_pct(s['median_abs_error'])}, worst {_pct(s['worst_abs_error'])} (targets"
        f" {MEDIAN_TARGET:.0%} / {WORST_TARGET:.0%}).",
        f"- Not counted: {s['not_counted']} runs (marked *) from {', '.join(s['not_counted_sources']) or 'no source'},"
        " whose source fed a cost-model coefficient (the profiles' calibration_source): shown, not an independent"
        " check.",
    ]
    p = s["previous"]
    if p is not None:
        lines.append(
            f"- Previous readings: with the data set's previous settings on the {p['runs']} counted runs that"
            " had other ones (their alternative labelled previous, or the best interleaving degree that fits where"
            " the rule now gives the degree), the counted median |error| would be"
            f" {p['median']:.1%} and the worst {p['worst']:.1%}."
        )
    lines += [
        f"- {s['refused']} configurations are refused by the memory model (listed below).",
        f"- Free search against the published configuration: mean predicted gain {s['mean_gain'] or 0:.2f}x,"
        f" slower on {s['free_slower']} runs; the schedule co-design (an adaptive plan faster than every classic"
        f" schedule at the chosen configuration) wins on {s['codesign']} runs (column co-design).",
        f"- Free search wall time (`--no-hard-stop`, {rec['settings'].get('workers', 1)} run(s) at a time on this"
        f" machine): at most {s['free_s_upto_1024']:.1f} s up to 1,024 GPUs, at most {s['free_s_max']:.1f} s over all"
        " runs (column search s).",
    ]
    u = s["unstated_vp"]
    if u is not None:
        lines.append(
            f"- Interleaving degree from the rule ({u['runs']} counted runs with pp > 1): with the best degree that"
            " fits memory of those the software allows (Megatron-LM: the divisors of the layers per stage;"
            f" otherwise {', '.join(map(str, VP_TRIED))}) (it does on {u['fits']} of them), their median |error|"
            f" moves from {u['plain'][0]:.1%} to {u['best'][0]:.1%} and their worst from {u['plain'][1]:.1%} to"
            f" {u['best'][1]:.1%} (column best interleaved); the headline keeps the rule's."
        )
    m = s["unstated_mbs"]
    if m is not None:
        lines.append(
            f"- Micro-batch size from the rule ({m['runs']} counted runs): the headline takes 1. With the best size"
            f" of {', '.join(map(str, MBS_TRIED))} that fits (the rest as the headline's), {m['moved']} of them move;"
            f" their median |error| goes from {m['plain'][0]:.1%} to {m['best'][0]:.1%} and their worst from"
            f" {m['plain'][1]:.1%} to {m['best'][1]:.1%}, and over all counted runs the median would be"
            f" {m['all'][0]:.1%} and the worst {m['all'][1]:.1%} (column best mbs). The headline keeps 1."
        )
    lines += ["", "By source and device kind (|error| of the forced prediction):", ""]
    lines.append(
        table(
            ["source", "device", "counted runs", "median", "worst", "not counted", "median", "worst", "refused"],
            [
                [
                    src,
                    dev,
                    str(n),
                    _group_pct(med),
                    _group_pct(worst),
                    str(nn),
                    _group_pct(nmed),
                    _group_pct(nworst),
                    str(refused),
                ]
                for src, dev, n, med, worst, nn, nmed, nworst, refused in s["by_source_device"]
            ],
        )  # fmt: skip
    )
    lines += ["", "Beside them, what the configuration-search anchors state of themselves (not re-run here; none"
              " ran on these inputs or settings, so this is context, not a comparison):", ""]  # fmt: skip
    lines += [f"- {a}" for a in ANCHORS]
    lines.append("")
    body = []
    for r in rows:
        body.append([
            r.id + ("*" if r.used_for_calibration else ""), r.device, f"{r.gpus:,}", r.configuration,
            ", ".join(r.from_rule) or "-",
            f"{r.measured:,.1f}", "-" if r.predicted is None else f"{r.predicted:,.1f}", _pct(r.error),
            _alternatives(r),
            "-" if r.free is None else f"{r.free:,.1f}", r.free_configuration or (r.free_error or "-")[:60],
            r.free_strategy or "-", "-" if r.gain is None else f"{r.gain:.2f}x",
            "-" if r.free_codesign is None else f"{r.free_codesign:.3f}x",
            "-" if r.free_gap is None else f"{r.free_gap * 100:.1f}%", f"{r.free_s:.1f}", _interleaved(r),
            "-" if r.best_mbs is None else f"mbs{r.best_mbs} {_pct(r.best_mbs_error)}",
        ])  # fmt: skip
    lines.append(
        table(
            [
                "run",
                "device",
                "GPUs",
                "configuration",
                "from rule",
                "measured tok/s/GPU",
                "predicted",
                "error",
                "alternatives (error)",
                "free search",
                "free configuration",
                "free schedule",
                "gain",
                "co-design",
                "gap to bound",
                "search s",
                "best interleaved",
                "best mbs",
            ],
            body,
        )  # fmt: skip
    )
    lines += _walls_section(rec)
    errors = [r for r in rows if r.forced_error]
    if errors:
        lines += ["", "Forced configurations the planner refused:", ""]
        lines += [f"- {r.id}: {r.forced_error}" for r in errors]
    lines += ["", prov.line()]
    return "\n".join(lines)
