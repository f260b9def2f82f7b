"""GPU readiness check (`make gpu-check`): profile the paper's small models on one GPU, run a plan for real,
and compare what was measured with the analytic model and with the paper's profile.

Run: `python -m bench.gpu_check [--out docs/gpu-check.md] [--out-dir bench/results] [--allow-dirty] [--device cuda]
[--models gemma-s,deepseek-s,nemotron-h-s] [--seqs 2048,4096] [--dtype bf16] [--hardware h200] [--repeats 5]
[--run-model tiny-llama] [--work DIR]`: writes the suite's record (`bench.records`, OUT_DIR/gpu_check.json)
and the page rendered from it (`render_page`, to `--out`); `render` is the record's BENCHMARKS.md section.
`make gpu-check` runs the defaults on `cuda` (one H200: a few minutes, well under 8); CI runs it on
`cpu` with a tiny model (tests/bench/test_gpu_check.py), so the path cannot rot without a GPU.

Steps, each through the command line a user would type:
1. `adaptis profile --model M --device D --seq-len S --dtype T --no-runtime --head-chunks none --repeats R
   -o WORK/M-S.json`
   for every model M and sequence length S, at TP 1 (one process per profile);
2. `adaptis plan --model RUN --hardware H --pp 1 --microbatches 2 --seq-len S0 -o WORK/plan.json`, then
   `adaptis run WORK/plan.json --verify --device D --steps 2 --json`: a one-device plan executed for real
   and checked against a single-process step (fp32, so the comparison is tight);
3. the record, then the page rendered from it (markdown, to `--out`).

Page format (`render_page`), in this order:
- a header: the reproduce line (command, commit, machine, date), the device name and torch version the
  profiles report, dtype;
- "Measured vs analytic": one row per (model, seq, layer kind): the measured F / I / W in ms (medians of
  `adaptis profile`), the analytic model's F / I / W on one device of `--hardware` at TP 1 in the same
  dtype, and measured / analytic for each op (1.00 = the model is exact; > 1 = the device is slower than
  modelled);
- "Against the paper's profile": for models the paper profiled (gemma-s|m|l, deepseek-s|m|l,
  nemotron-h-s|m|l at a profiled sequence length), the measured F / I / W of each layer kind over the
  measured forward of the paper's reference layer, beside the paper's row (tests/data/paper-profiled-ratios.csv;
  its B is our I), and "–" where the paper has no row;
- "Run": the `adaptis run --verify` result: verified, loss and gradient differences, measured and
  predicted step time;
- "Wall time" per step. The exit status is 0 when every step ran and the run verified, 1 otherwise.
Our executor's layers are plain PyTorch (scaled-dot-product attention, a chunked Mamba-2 scan in torch,
unfused cross-entropy), not Megatron's fused kernels: the ratios measure that executor on that device.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import REPO

DEFAULT_MODELS = ("gemma-s", "deepseek-s", "nemotron-h-s")
DEFAULT_SEQS = (2048, 4096)


@dataclass
class CheckResult:
    device: str = ""
    torch_version: str = ""
    profiles: dict[tuple[str, int], dict] = field(default_factory=dict)  # (model, seq) -> CostProfile JSON
    run: dict | None = None
    errors: list[str] = field(default_factory=list)
    walls: list[tuple[str, float]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and self.run is not None and bool(self.run.get("verified"))


def _adaptis(args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "adaptis_plan.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=REPO)


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {proc.returncode}"


def run_check(args: argparse.Namespace, log=print) -> CheckResult:  # noqa: ANN001
    res = CheckResult()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for seq in args.seqs:
            out = work / f"{model}-{seq}.json"
            t0 = time.perf_counter()
            proc = _adaptis(
                [
                    "profile", "--model", model, "--device", args.device, "--seq-len", seq, "--dtype", args.dtype,
                    "--no-runtime", "--head-chunks", "none", "--repeats", args.repeats, "-o", out,
                ],
                args.timeout,
            )  # fmt: skip
            wall = time.perf_counter() - t0
            res.walls.append((f"profile {model} seq {seq}", wall))
            if proc.returncode != 0:
                res.errors.append(f"adaptis profile --model {model} --seq-len {seq}: {_last_line(proc)}")
                continue
            prof = json.loads(out.read_text())
            res.profiles[(model, seq)] = prof
            res.device, res.torch_version = prof["device"], prof["torch_version"]
            log(f"profiled {model} seq {seq} in {wall:.1f} s")
    plan = work / "plan.json"
    t0 = time.perf_counter()
    proc = _adaptis(
        [
            "plan", "--model", args.run_model, "--hardware", args.hardware, "--pp", 1, "--microbatches", 2,
            "--seq-len", args.run_seq, "--time-limit", 1, "-o", plan,
        ],
        args.timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        res.errors.append(f"adaptis plan --model {args.run_model} --pp 1: {_last_line(proc)}")
        return res
    proc = _adaptis(["run", plan, "--verify", "--device", args.device, "--steps", 2, "--json"], args.timeout)
    res.walls.append((f"plan + run --verify {args.run_model}", time.perf_counter() - t0))
    try:
        res.run = json.loads(proc.stdout)
    except json.JSONDecodeError:
        res.errors.append(f"adaptis run --verify: {_last_line(proc)}")
    return res


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1e3:.3f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None or b <= 0 else f"{a / b:.2f}"


def measured_vs_analytic(res: CheckResult, hardware: str) -> list[list[str]]:
    """Rows (model, seq, kind, measured F / I / W, analytic F / I / W, measured / analytic)."""
    from adaptis_plan.cost.table import layer_cost_rows
    from adaptis_plan.inputs.hardware import load_hardware
    from adaptis_plan.inputs.models.load import load_model
    from adaptis_plan.spec.training import TrainingConfig

    hw = load_hardware(hardware)
    rows = []
    for (name, seq), prof in res.profiles.items():
        model = load_model(name)
        training = TrainingConfig(num_microbatches=1, pp=1, seq_len=seq, dtype=prof["dtype"])
        analytic = layer_cost_rows(model, hw, training)
        for e in prof["entries"]:
            a = analytic[e["layers"][0]]
            rows.append(
                [
                    name,
                    str(seq),
                    e["kind"],
                    " / ".join(_ms(e[k]) for k in ("f_s", "i_s", "w_s")),
                    " / ".join(_ms(a[k]) for k in ("f_s", "i_s", "w_s")),
                    " / ".join(_ratio(e[k], a[k]) for k in ("f_s", "i_s", "w_s")),
                ]
            )
    return rows


def against_paper(res: CheckResult) -> list[list[str]]:
    """Rows (model, seq, kind, measured F / I / W over the reference forward, the paper's)."""
    from adaptis_plan.cost.paper import paper_row
    from adaptis_plan.errors import InputError
    from adaptis_plan.inputs.models.load import load_model

    rows = []
    for (name, seq), prof in res.profiles.items():
        model = load_model(name)
        try:
            row = paper_row(model, seq)
        except InputError:
            rows.append([name, str(seq), "–", "–", "no row in the paper's profile"])
            continue
        by_kind = {e["kind"]: e for e in prof["entries"]}  # the first entry of a kind (one per kind here)
        ref = by_kind.get(row.reference_kind)
        for kind, ratios in row.ratios().items():
            e = by_kind.get(kind)
            measured = " / ".join(f"{e[k] / ref['f_s']:.2f}" for k in ("f_s", "i_s", "w_s")) if e and ref else "–"
            rows.append([name, str(seq), kind, measured, " / ".join(f"{x:.2f}" for x in ratios)])
    return rows


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


SUITE = "gpu_check"


def settings(args: argparse.Namespace) -> dict:
    """What the check ran: device, dtype, the analytic model's hardware, TP, the profiled cases, the run."""
    return {
        "device": args.device,
        "dtype": args.dtype,
        "hardware": args.hardware,
        "tp": 1,
        "models": list(args.models),
        "seqs": list(args.seqs),
        "repeats": args.repeats,
        "run_model": args.run_model,
        "run_seq": args.run_seq,
    }


def check_to_json(res: CheckResult) -> dict:
    """The record's data: the profiles as a list (JSON keys are strings, a (model, seq) key is not)."""
    return {
        "device": res.device,
        "torch_version": res.torch_version,
        "profiles": [{"model": m, "seq": q, "profile": p} for (m, q), p in res.profiles.items()],
        "run": res.run,
        "errors": list(res.errors),
        "walls": [[w, s] for w, s in res.walls],
    }


def results_from_record(rec: dict) -> CheckResult:
    d = rec["data"]
    return CheckResult(
        device=d["device"],
        torch_version=d["torch_version"],
        profiles={(p["model"], int(p["seq"])): p["profile"] for p in d["profiles"]},
        run=d["run"],
        errors=list(d["errors"]),
        walls=[(w, float(s)) for w, s in d["walls"]],
    )


def _body(rec: dict, level: str) -> list[str]:
    """The report's parts below its header, headings at `level` ("##" on the page, "###" in BENCHMARKS.md)."""
    res, st = results_from_record(rec), rec["settings"]
    out = [
        f"Result: {'PASS' if res.ok else 'FAIL'}" + (f" ({'; '.join(res.errors)})" if res.errors else ""),
        "",
        f"{level} Measured vs analytic ({st['hardware']} profile, TP 1)",
        "",
        "F / I / W per distinct layer kind, milliseconds; measured = `adaptis profile` medians of"
        f" {st['repeats']} repeats; measured / analytic > 1: the device ran slower than the model says.",
        "",
        *_table(
            ["model", "seq", "kind", "measured F / I / W ms", "analytic F / I / W ms", "measured / analytic"],
            measured_vs_analytic(res, st["hardware"]),
        ),
        "",
        f"{level} Against the paper's profile",
        "",
        "Each layer kind's F / I / W over the forward of the paper's reference layer (Gemma and DeepSeek: the dense"
        " transformer layer; Nemotron-H: the Mamba layer), measured here and in the paper's profile (its B is our I).",
        "",
        *_table(["model", "seq", "kind", "measured F / I / W", "paper F / B / W"], against_paper(res)),
        "",
        f"{level} Run",
        "",
    ]
    r = res.run
    if r is None:
        out.append("_not run_ (see the errors above)")
    else:
        out += _table(
            ["model", "verified", "loss diff", "max abs grad diff", "measured step ms", "predicted step ms"],
            [
                [
                    st["run_model"],
                    str(r.get("verified")),
                    f"{r.get('loss_diff', float('nan')):.2e}",
                    f"{r.get('max_abs_grad_diff', float('nan')):.2e}",
                    _ms(r.get("measured_step_time_s")),
                    _ms(r.get("predicted_step_time_s")),
                ]
            ],
        )
    out += ["", f"{level} Wall time", "", *_table(["step", "seconds"], [[w, f"{s:.1f}"] for w, s in res.walls]), ""]
    return out


def _device_line(rec: dict) -> str:
    d, st = rec["data"], rec["settings"]
    return f"Device: {d['device'] or st['device']} · torch {d['torch_version'] or '?'} · dtype {st['dtype']} · TP 1."


def render_page(rec: dict) -> str:
    """docs/gpu-check.md from the record."""
    from bench.records import reproduce_line

    return "\n".join(["# GPU check", "", reproduce_line(rec), "", _device_line(rec), "", *_body(rec, "##")])


def render(rec: dict) -> str:
    """The record's BENCHMARKS.md section."""
    from bench.records import reproduce_line

    return "\n".join(["## GPU check (one GPU)", "", reproduce_line(rec), "", _device_line(rec), "", *_body(rec, "###")])


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/gpu-check.md", help="markdown page to write (rendered from the record)")
    ap.add_argument("--out-dir", default=None, help="folder of the record (default bench/results: gpu_check.json)")
    ap.add_argument("--allow-dirty", action="store_true", help="write the record from a checkout with changes")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma list of models to profile")
    ap.add_argument("--seqs", default=",".join(map(str, DEFAULT_SEQS)), help="comma list of sequence lengths")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    ap.add_argument("--hardware", default="h200", help="hardware profile of the analytic figures and the plan")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--run-model", default="tiny-llama", help="model of the one-device plan run with --verify")
    ap.add_argument("--run-seq", type=int, default=128)
    ap.add_argument("--work", default="out/gpu-check", help="folder for the profiles and the plan")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per adaptis command")
    args = ap.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.seqs = _ints(args.seqs)
    if not args.models or not args.seqs:
        ap.error("--models and --seqs need at least one entry each")
    from bench import records

    if not args.allow_dirty and not records.checkout()[1]:  # refuse before the run, not after it
        print("error: the checkout has uncommitted changes; commit them first, or pass --allow-dirty", file=sys.stderr)
        return 2
    command = " ".join(["python -m bench.gpu_check", *(argv if argv is not None else sys.argv[1:])])
    t0 = time.perf_counter()
    res = run_check(args, log=lambda m: print(f"[gpu-check] {m}", file=sys.stderr, flush=True))
    wall = time.perf_counter() - t0
    res.walls.append(("total", wall))
    rec = records.record(SUITE, settings(args), check_to_json(res), command, wall)
    path = records.write(rec, Path(args.out_dir) if args.out_dir else records.RESULTS, allow_dirty=args.allow_dirty)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(rec))
    print(f"wrote {path} and {out} ({'PASS' if res.ok else 'FAIL'})", file=sys.stderr)
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
