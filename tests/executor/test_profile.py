"""`adaptis profile`'s measurements: per-layer F / I / W, head chunks, the gloo link, the
runtime's time per action (its probe plan is built by the use case), recompute figures.

Run: `pytest tests/executor/test_profile.py`.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers_executor import (
    tiny_family,
)

from adaptis_plan.app.profile import ProfileRequest, _overhead_probe, measure_action_overhead, profile_for
from adaptis_plan.errors import AdaptisError
from adaptis_plan.executor.profile import distinct_layers, profile_model
from adaptis_plan.inputs.models.load import load_model
from adaptis_plan.inputs.models.transform import split_head
from adaptis_plan.judge.semantics import check_programs
from adaptis_plan.planfile.io import check_model_matches, plan_layout, plan_programs
from adaptis_plan.spec.cost_profile import CostProfile

M = 4  # micro-batches in the executor runs

# ---------------------------------------------------------------- profiling


def test_profile_groups_identical_layers_and_measures_every_op() -> None:
    model = tiny_family("nemotron")
    prof = profile_model(model, seq_len=16, micro_batch_size=1, repeats=2, warmup=1)
    assert [e.layers for e in prof.entries] == distinct_layers(model) == [[0], [1, 4], [2, 5], [3], [6]]
    for e in prof.entries:
        assert e.kind == model.layers[e.layers[0]].kind
        assert min(e.f_s, e.i_s, e.w_s, e.b_s) > 0
        assert 0 < e.act_w_bytes <= e.act_bytes
    assert prof.num_threads == 1 and prof.link is None
    assert CostProfile.model_validate_json(prof.model_dump_json()) == prof
    # with `keep`, a second call times the same layer modules again (none built anew)
    keep: dict = {}
    first = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, keep=keep)
    held = dict(keep)
    again = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, keep=keep)
    assert len(held) == len(prof.entries) and keep.keys() == held.keys()
    assert all(keep[k] is held[k] for k in keep)
    assert all(p.grad is None for layer in keep.values() for p in layer.parameters())
    assert [e.act_bytes for e in again.entries] == [e.act_bytes for e in first.entries]
    # the same dict also keeps the model with its head split apart (same fingerprint, other layers)
    split = split_head(model, 2)
    assert split.fingerprint() == model.fingerprint()
    chunks = profile_model(split, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, keep=keep)
    assert len(keep) == len(held) + len(chunks.entries)
    assert (first.model.head_chunks, chunks.model.head_chunks) == (1, 2)  # what tells the two profiles apart
    # measured last layer first, reported in model order, with the same memory
    back = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, reverse=True)
    assert [e.layers for e in back.entries] == [e.layers for e in prof.entries]
    assert [(e.kind, e.act_bytes, e.act_w_bytes) for e in back.entries] == [
        (e.kind, e.act_bytes, e.act_w_bytes) for e in prof.entries
    ]


def test_a_reversed_profile_measures_the_head_chunks_first_and_last_layer_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two copies profiling at once, one reversed, never time the same layer together: the reversed
    one walks the head's chunks (largest count, last chunk first) and then the layers last to
    first, and reports everything in the forward copy's order."""
    from adaptis_plan.executor import profile as prof

    measured: list[tuple[int, int]] = []  # (number of layers of the model measured, layer index), per round
    real = prof._LayerTimer.time

    def spy(self, repeats, warmup):  # noqa: ANN001, ANN202
        measured.append((self.model.num_layers, self.index))
        return real(self, repeats, warmup)

    monkeypatch.setattr(prof._LayerTimer, "time", spy)
    model = tiny_family("llama")
    n = model.num_layers
    kw = dict(seq_len=16, micro_batch_size=1, repeats=2, rounds=2, warmup=0, head_chunks=(2, 3))
    fwd = profile_model(model, **kw)
    forward_order, measured[:] = list(measured), []
    back = profile_model(model, reverse=True, **kw)
    # every round walks everything, the reversed profile each time the other way
    half = len(forward_order) // 2
    assert forward_order[:half] == forward_order[half:] and measured[:half] == measured[half:]
    assert measured[:half] == forward_order[:half][::-1]
    assert measured[0] == (n + 2, n + 1) and measured[half - 1] == (n, 0)  # the 3-way split's last chunk first
    assert [e.layers for e in back.entries] == [e.layers for e in fwd.entries]
    assert [(h.num_chunks, [e.layers for e in h.entries]) for h in back.head_chunks] == [
        (h.num_chunks, [e.layers for e in h.entries]) for h in fwd.head_chunks
    ]


def test_every_timed_forward_and_backward_has_other_micro_batches_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline stage forwards while earlier micro-batches' graphs are still alive (their
    activations take the memory the profile's back-to-back passes would reuse hot): F, I and B
    are timed in that steady state, with `IN_FLIGHT` other graphs held."""
    import weakref

    from torch import nn

    from adaptis_plan.executor import profile as prof

    monkeypatch.setattr(prof, "FAULT_RETRIES", 0)  # every repeat counts, whatever the allocator does

    class Probe(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.outputs: list[weakref.ref] = []
            self.alive: list[int] = []  # outputs of earlier forwards still alive, at each forward

        def forward(self, *args):  # noqa: ANN002, ANN201
            self.alive.append(sum(r() is not None for r in self.outputs))
            out = self.inner(*args)
            self.outputs.append(weakref.ref(out))
            return out

    model = tiny_family("llama")
    keep: dict = {}
    profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, keep=keep)
    key = next(k for k in keep if k[1] == 1)  # the first decoder block
    probe = keep[key] = Probe(keep[key])
    repeats, rounds, warmup = 3, 2, 1
    profile_model(model, seq_len=16, micro_batch_size=1, repeats=repeats, rounds=rounds, warmup=warmup, keep=keep)
    steady = warmup + prof.IN_FLIGHT + prof.W_DEFERRED
    # the memory pass (once), then per round the I / W pass, the hot W pass and the B pass, each
    # `steady` forwards and that round's timed repeats
    per_round = prof.spread_repeats(repeats, rounds)
    assert per_round == [1, 2]
    assert len(probe.alive) == 1 + sum(3 * (steady + n) for n in per_round)
    passes, at = [], 1
    for n in per_round:
        for _ in range(3):
            passes.append((probe.alive[at : at + steady + n], n))
            at += steady + n
    assert prof.IN_FLIGHT >= 1
    assert all(timed[steady:] == [prof.IN_FLIGHT] * n for timed, n in passes)
    assert max(probe.alive) == prof.IN_FLIGHT  # never more: the oldest is backpropagated and freed


def test_w_is_timed_deferred_and_right_after_its_own_i(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule that splits the backward runs W either after other actions, its stash out of
    cache, or right after its own I: the profiler times W both ways, in two passes: `w_s` after
    `W_DEFERRED` later micro-batches' I, `w_hot_s` right after its own I. Every stash is run once:
    nothing is left behind."""
    from contextlib import contextmanager

    from adaptis_plan.executor import profile as prof
    from adaptis_plan.executor.wgrad import WeightGradStore

    events: list[tuple[object, str, object]] = []  # (store, "I" / "W", key); holding the store keeps its id unique
    deferring, run = WeightGradStore.deferring, WeightGradStore.run

    @contextmanager
    def spy_deferring(self, key):  # noqa: ANN001, ANN202
        with deferring(self, key):
            yield
        events.append((self, "I", key))

    def spy_run(self, key):  # noqa: ANN001, ANN202
        events.append((self, "W", key))
        return run(self, key)

    monkeypatch.setattr(WeightGradStore, "deferring", spy_deferring)
    monkeypatch.setattr(WeightGradStore, "run", spy_run)
    assert prof.W_DEFERRED >= 1
    repeats, rounds, warmup = 4, 2, 1
    got = profile_model(
        tiny_family("llama"), seq_len=16, micro_batch_size=1, repeats=repeats, rounds=rounds, warmup=warmup
    )
    assert all(e.w_hot_s is not None for e in got.entries)
    stores = list({id(s): s for s, _, _ in events}.values())
    for store in stores:
        # the memory pass's stash (a str key) is measured, then dropped; the timed passes key by repeat,
        # from 0 again in each pass: per round the deferred pass, then the hot one
        seq = [(op, key) for s, op, key in events if s is store and isinstance(key, int)]
        starts = [n for n, ev in enumerate(seq) if ev == ("I", 0)]
        assert len(starts) == 2 * rounds, seq
        parts = [seq[a:b] for a, b in zip(starts, [*starts[1:], len(seq)], strict=True)]
        for part in parts:
            assert sorted(k for op, k in part if op == "W") == sorted(k for op, k in part if op == "I")
        for deferred, n in zip(parts[::2], prof.spread_repeats(repeats, rounds), strict=True):
            timed = 0
            for pos, (op, key) in enumerate(deferred):
                if op != "W" or pos == len(deferred) - 1 or deferred[pos + 1][0] == "W":
                    continue  # the untimed runs at the end of the pass
                later = [k for o, k in deferred[deferred.index(("I", key)) + 1 : pos] if o == "I"]
                assert len(later) == prof.W_DEFERRED, (key, deferred)
                timed += 1
            assert timed >= n
        for hot in parts[1::2]:
            assert all(hot[n - 1] == ("I", key) for n, (op, key) in enumerate(hot) if op == "W"), hot


@pytest.mark.parametrize("faulting", [False, True])
def test_a_repeat_that_page_faults_is_taken_again(monkeypatch: pytest.MonkeyPatch, faulting: bool) -> None:
    """A timed op that touched fresh memory (minor page faults over `FAULT_PAGES`) measured the
    allocator, not the layer: its repeat is not kept and another runs, at most `FAULT_RETRIES`
    times per pass, after which the repeats count as they come."""
    from adaptis_plan.executor import profile as prof

    # every call one more op's worth of faults, or none at all
    pages = itertools.count(0, prof.FAULT_PAGES + 1) if faulting else itertools.repeat(0)
    monkeypatch.setattr(prof, "_minor_faults", lambda: next(pages))
    forwards: list[int] = []
    real_forward = prof._LayerTimer.forward

    def counting(self):  # noqa: ANN001, ANN202
        forwards.append(self.index)
        return real_forward(self)

    monkeypatch.setattr(prof._LayerTimer, "forward", counting)
    model = tiny_family("llama")
    repeats, warmup = 2, 1
    got = profile_model(model, seq_len=16, micro_batch_size=1, repeats=repeats, rounds=1, warmup=warmup)
    steady = warmup + prof.IN_FLIGHT + prof.W_DEFERRED
    extra = prof.FAULT_RETRIES if faulting else 0
    for group in distinct_layers(model):
        # the memory pass, then the three passes of the one round
        assert forwards.count(group[0]) == 1 + 3 * (steady + repeats + extra), group
    assert all(e.f_s > 0 and e.b_s > 0 for e in got.entries)


def test_a_profile_in_rounds_pools_every_rounds_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every round times every distinct layer, its share of the repeats, in model order; each field is
    the median of all rounds' repeats pooled (not of one round's, nor of the rounds' medians); the
    layers are built, and their memory measured, once."""
    from adaptis_plan.executor import profile as prof

    calls: list[tuple[int, int]] = []  # (layer index, repeats) of each round of each layer
    built: list[int] = []
    real_init = prof._LayerTimer.__init__

    def init(self, model, index, **kw):  # noqa: ANN001, ANN003, ANN202
        built.append(index)
        real_init(self, model, index, **kw)

    def fake_time(self, repeats, warmup):  # noqa: ANN001, ANN202
        r = sum(i == self.index for i, _ in calls)  # this layer's round
        calls.append((self.index, repeats))
        # round r's samples, in ms: far apart from one round to the next, a different offset per op
        return {op: [(100.0 * r + j + 10 * k) * 1e-3 for j in range(repeats)] for k, op in enumerate(prof._OPS)}

    monkeypatch.setattr(prof._LayerTimer, "__init__", init)
    monkeypatch.setattr(prof._LayerTimer, "time", fake_time)
    model = tiny_family("llama")
    groups = distinct_layers(model)
    got = profile_model(model, seq_len=16, micro_batch_size=1, repeats=5, rounds=2, warmup=0)
    assert got.repeats == 5 and got.rounds == 2
    assert calls == [(g[0], n) for n in (2, 3) for g in groups]
    assert built == [g[0] for g in groups]
    # pooled: round 0 gave 0, 1 ms, round 1 100, 101, 102 ms (+ 10 ms per op): the median is 100 ms,
    # where the rounds' medians' median would be 50.75 ms and either round's own 0.5 or 101 ms
    for e in got.entries:
        for k, field in enumerate(("f_s", "i_s", "w_s", "w_hot_s", "b_s")):
            assert getattr(e, field) == pytest.approx((100 + 10 * k) * 1e-3), (e.layers, field)
        assert e.act_bytes > 0
    # the spread is the variation within a round only (the 100 ms from one round to the next is drift):
    # sd of log ms about each (layer, op, round)'s mean, pooled over 1 + 2 degrees of freedom per layer and op
    squares = sum(
        float(np.sum((np.log(v) - np.log(v).mean()) ** 2))
        for k in range(len(prof._OPS))
        for v in (np.array([10.0 * k, 1 + 10.0 * k]), 100 + 10.0 * k + np.arange(3.0))
        if v.min() > 0
    )
    dof = sum(1 + 2 if k else 2 for k in range(len(prof._OPS)))  # op 0's round 0 has a 0 ms sample, left out
    assert got.time_spread == pytest.approx(math.sqrt(squares / dof))
    assert got.time_spread < 0.1
    # never more rounds than repeats: each round times every op at least once
    calls.clear()
    one_each = profile_model(model, seq_len=16, micro_batch_size=1, repeats=2, rounds=5, warmup=0)
    assert one_each.rounds == 2 and one_each.time_spread is None  # one repeat per round: no spread within one
    assert calls == [(g[0], 1) for _ in range(2) for g in groups]
    with pytest.raises(AdaptisError, match="rounds"):
        profile_model(model, seq_len=16, micro_batch_size=1, repeats=2, rounds=0)


def test_measure_link_retries_larger_messages_and_never_reports_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    import adaptis_plan.executor.link as prof
    from adaptis_plan.errors import AdaptisError

    # the two ends try larger messages in the same processes, on rank 0's verdict: small round trip 0.2 ms,
    # the large one stands out only at 4x (0.2 ms + 4 MiB at 2 GB/s); a size is measured once
    sizes: list[int] = []

    def round_trip(size: int) -> float:
        sizes.append(size)
        return 1.9e-4 if len(sizes) == 1 else 2e-4 + size / 2e9

    assert prof.settle_large(2e-4, 2**20, round_trip, lambda verdict: verdict) == (
        4 * 2**20,
        2e-4 + 4 * 2**20 / 2e9,
        True,
    )
    assert sizes == [2**20, 4 * 2**20]
    sizes.clear()  # the other end follows rank 0's verdict, whatever its own round trips say
    assert prof.settle_large(2e-4, 2**20, round_trip, lambda verdict: True) == (2**20, 1.9e-4, True)
    sizes.clear()  # never: every size tried, the last one reported
    assert prof.settle_large(2e-4, 2**20, lambda n: sizes.append(n) or 2e-4, lambda v: v) == (16 * 2**20, 2e-4, False)
    assert sizes == [2**20, 4 * 2**20, 16 * 2**20]

    # cost per message end at the two probe sizes: 30 us + 1 ns per byte
    host = [30e-6 + n * 1e-9 for n in prof._HOST_SIZES]
    asked: list[bool] = []

    def pair(repeats: int, size: int, timeout_s: float, host_costs: bool = False) -> tuple[int, float, float, list]:
        asked.append(host_costs)
        return 4 * size, 2e-4, 2e-4 + 4 * size / 2e9, host if host_costs else []

    monkeypatch.setattr(prof, "_link_pair", pair)
    link = prof.measure_link(large_bytes=2**20)
    assert link.latency_s == pytest.approx(1e-4) and link.bandwidth_gbps == pytest.approx(2.0)
    assert link.host_s_per_message is None and link.host_s_per_byte is None  # asked for on CPU ranks only
    assert asked == [False]  # and only then measured: it takes seconds
    link = prof.measure_link(large_bytes=2**20, host_costs=True)
    assert link.host_s_per_message == pytest.approx(30e-6) and link.host_s_per_byte == pytest.approx(1e-9)
    monkeypatch.setattr(
        prof, "_link_pair", lambda repeats, size, timeout_s, host_costs=False: (16 * size, 2e-4, 2.5e-4, [])
    )
    with pytest.raises(AdaptisError, match="a 16777216 B message took no longer than a 4 B one .* too busy to measure"):
        prof.measure_link(large_bytes=2**20)


@pytest.mark.slow
def test_profile_measures_the_head_split_into_chunks() -> None:
    model = tiny_family("nemotron")
    prof = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0, head_chunks=(2, 3))
    assert [hp.num_chunks for hp in prof.head_chunks] == [2, 3]
    two, three = prof.head_chunks
    assert [e.layers for e in two.entries] == [[0], [1]] and [e.layers for e in three.entries] == [[0], [1], [2]]
    for hp in prof.head_chunks:
        assert all(e.kind == "head" and min(e.f_s, e.i_s, e.w_s) > 0 for e in hp.entries)
    assert profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0).head_chunks == []


# ---------------------------------------------------------------- the `adaptis profile` use case


@pytest.mark.parametrize("num_microbatches", [4, 16])
def test_overhead_probe_is_a_one_rank_plan_whose_critical_path_is_every_action(num_microbatches: int) -> None:
    plan, model, critical = _overhead_probe(num_microbatches)
    check_programs(plan_layout(plan), plan_programs(plan), num_microbatches)
    check_model_matches(plan, model, "probe")
    assert plan.strategy == "GPipe" and [len(d.actions) for d in plan.devices] == [2 * num_microbatches]
    # one stage on one rank, no P2P: the rank runs every F and B one after another
    assert critical == 2 * num_microbatches


def test_profile_command_writes_the_profile_and_reports_recompute(adaptis, tmp_path: Path) -> None:
    """(measured last layer first, `--reverse`: the file is in model order all the same)"""
    out = tmp_path / "p.json"
    r = adaptis(
        "profile", "--model", "tiny-llama", "--seq-len", "16", "--repeats", "1", "--no-runtime", "--recompute",
        "--reverse", "--json", "-o", out,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    shown = json.loads(r.stdout)
    written = CostProfile.model_validate_json(out.read_text())  # the file stays a plain profile
    assert (written.repeats, written.rounds) == (1, 1)  # by default as many rounds as repeats, up to 3
    assert "recompute" not in json.loads(out.read_text()) and written.link is None
    assert [e["layers"] for e in shown["entries"]] == [e.layers for e in written.entries]
    blocks = [e for e in written.entries if e.kind not in ("embedding", "head")]
    assert [e["layers"] for e in shown["recompute"]["full"]] == [e.layers for e in blocks]
    for e in shown["recompute"]["full"]:
        assert e["act_bytes"] == 16 * load_model("tiny-llama").hidden_size * 4  # the block input, fp32
    base = {tuple(e.layers): e.act_bytes for e in blocks}
    assert all(e["act_bytes"] < base[tuple(e["layers"])] for e in shown["recompute"]["selective"])


def test_profile_command_spreads_the_repeats_over_rounds(adaptis, tmp_path: Path) -> None:
    from adaptis_plan.executor.profile import ROUNDS

    base = ("profile", "--model", "tiny-llama", "--seq-len", "16", "--no-runtime", "--head-chunks", "none")
    out = tmp_path / "p.json"
    r = adaptis(*base, "--repeats", "4", "--rounds", "2", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert (json.loads(out.read_text())["repeats"], json.loads(out.read_text())["rounds"]) == (4, 2)
    r = adaptis(*base, "--repeats", "4", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert json.loads(out.read_text())["rounds"] == min(ROUNDS, 4) != 2


@pytest.mark.slow
def test_profile_with_runtime_measures_the_link_and_the_time_per_action(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adaptis_plan.executor.link as link_mod

    measure = link_mod.measure_link

    def patient(**kw: object) -> object:
        # the suite runs on every core, so a round trip can queue behind the other workers: measure the link
        # again (as a user would, "when it is quieter") before calling it unmeasurable
        for attempt in range(3):
            try:
                return measure(**kw)  # type: ignore[arg-type]
            except AdaptisError as e:
                if "too busy" not in str(e) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    monkeypatch.setattr(link_mod, "measure_link", patient)
    # the time per action over its default rounds: one round alone reads the load of a parallel suite
    # (`measure_action_overhead`; its rule has a test of its own below)
    got = profile_for(ProfileRequest(model_arg="tiny-llama", seq_len=16, repeats=1, runtime=True))
    link = got.profile.link
    assert link is not None and link.backend == "gloo" and link.latency_s > 0 and link.bandwidth_gbps > 0
    # between two local processes, a receive into a fresh buffer and a send cost host CPU
    # time on some end (`measure_link(host_costs=True)` on cpu)
    assert link.host_s_per_message is not None and link.host_s_per_byte is not None
    assert link.host_s_per_message + 2**20 * link.host_s_per_byte > 0
    # the runtime's own work per action beyond its layers' profiled time: at most a few hundred
    # microseconds on this CPU (0 when the noise hides it); the layers' dispatch is in their profile
    assert 0.0 <= got.profile.action_overhead_s < 1e-3


def test_time_per_action_is_the_quickest_step_over_the_quickest_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """`measure_action_overhead` over its rounds: the least step against the least profile (each round
    is a launch and a profile; another process only ever adds time to either), per action, at least 0."""
    import adaptis_plan.executor.launch as launch_mod
    import adaptis_plan.executor.profile as profile_mod

    steps = iter([[0.9, 0.5], [0.7, 0.4], [0.8, 0.6]])  # a burst of load in the first and third launch
    layer_f = iter([0.012, 0.011, 0.009])  # the profile's F per layer, round by round: quickest in another round
    calls = []

    def run_plan(plan: object, model: object, options: object, label: str) -> dict[str, object]:
        calls.append(label)
        return {"step_times_s": next(steps)}

    def profile_model(model: object, **kw: object) -> object:
        f = next(layer_f)
        entry = type("E", (), {"layers": [0, 1], "f_s": f, "b_s": 2 * f})  # two layers of F + B = 3 f each
        return type("P", (), {"entries": [entry]})

    monkeypatch.setattr(launch_mod, "run_plan", run_plan)
    monkeypatch.setattr(profile_mod, "profile_model", profile_model)
    _, _, actions = _overhead_probe(4)
    got = measure_action_overhead(num_microbatches=4, steps=2, rounds=3)
    assert calls == ["overhead probe"] * 3
    # the quickest step (0.4 s, round 2) less 4 micro-batches x 2 layers x (F + B) at the quickest F (0.009 s,
    # round 3); the least of each round's own difference would read round 2's 0.4 - 0.264
    assert got == pytest.approx((0.4 - 4 * 2 * 3 * 0.009) / actions)
    steps, layer_f = iter([[0.01]]), iter([0.012])  # the layers alone take longer than the step: noise
    assert measure_action_overhead(num_microbatches=4, steps=1, rounds=1) == 0.0


# ---------------------------------------------------------------- stage context


def test_stage_copies_fill_twice_the_cache_for_small_body_layers_only() -> None:
    from adaptis_plan.executor.profile import MAX_STAGE_COPIES, stage_copies

    model = load_model("tiny-llama")
    mib = 2**20
    assert stage_copies(model, 1, 800_000, 2 * mib) == 6  # ceil(4 MiB / 0.8 MB)
    assert stage_copies(model, 1, 1000, 2 * mib) == MAX_STAGE_COPIES
    assert stage_copies(model, 1, 3 * mib, 2 * mib) == 1  # alone over the cache: nothing stays cached
    assert stage_copies(model, 1, 800_000, 0) == 1  # cache unknown
    assert stage_copies(model, 0, 1000, 2 * mib) == 1  # the embedding
    assert stage_copies(model, model.num_layers - 1, 1000, 2 * mib) == 1  # the head


@pytest.mark.parametrize("cache", [0, 2**21])
def test_small_body_layers_are_timed_in_a_chain_per_copy(monkeypatch: pytest.MonkeyPatch, cache: int) -> None:
    import adaptis_plan.executor.profile as prof_mod

    monkeypatch.setattr(prof_mod, "cache_bytes", lambda device: cache)
    model = load_model("tiny-llama")
    prof = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0)
    by_kind = {e.kind: e for e in prof.entries}
    assert by_kind["embedding"].stage_copies is None and by_kind["head"].stage_copies is None
    assert by_kind["decoder"].stage_copies == (None if cache == 0 else 6)  # 0.77 MB of fp32 weights
    monkeypatch.setattr(prof_mod, "cache_bytes", lambda device: 0)
    alone = profile_model(model, seq_len=16, micro_batch_size=1, repeats=1, warmup=0)
    # per copy: the chain's bytes are the copies' sum, so one copy's are the layer's own
    assert by_kind["decoder"].act_bytes == pytest.approx(
        {e.kind: e for e in alone.entries}["decoder"].act_bytes, rel=0.01
    )


def test_a_long_or_oversized_profile_is_announced_before_it_starts() -> None:
    """`estimate_profile`: the profile's arithmetic and its memory from the analytic model, the device's
    GEMM rate and free memory measured; `profile_notes` says so when it is long or will not fit."""
    from adaptis_plan.app.profile import PROFILE_NOTE_S, profile_notes
    from adaptis_plan.cost.params import layer_params
    from adaptis_plan.executor.profile_estimate import ProfileEstimate, estimate_profile

    model = load_model("tiny-llama")
    est = estimate_profile(model, seq_len=16, micro_batch_size=1, repeats=3)
    weights = sum(4 * layer_params(model, model.layers[g[0]]).total for g in distinct_layers(model))
    assert est.distinct == len(distinct_layers(model)) and est.flops > 0 and est.rate > 1e8
    assert weights < est.need_bytes < 3 * weights  # + the largest layer's gradients and activations
    assert est.free_bytes is None or est.free_bytes > 0
    longer = estimate_profile(model, seq_len=16, micro_batch_size=1, repeats=6)
    assert longer.flops / est.flops == pytest.approx((6 + 3 * 2) / (3 + 3 * 2))  # repeats + 2 warm-ups per round
    chunks = estimate_profile(model, seq_len=16, micro_batch_size=1, repeats=3, head_chunks=(2, 3))
    assert chunks.distinct == est.distinct + 5 and chunks.flops > est.flops
    req = ProfileRequest(model_arg="tiny-llama", seq_len=16)
    assert profile_notes(model, req, est) == []
    big = ProfileEstimate(distinct=3, flops=1e15, rate=1e11, need_bytes=40 * 2**30, free_bytes=20 * 2**30)
    assert big.seconds == 1e4 > PROFILE_NOTE_S
    assert profile_notes(model, req, big) == [
        "note: profiling tiny-llama at seq 16 on cpu: 3 distinct layers, 1,000.0 TFLOP of arithmetic in all, at least"
        " 2.8 h at this device's 100 GFLOP/s (small layers take longer than their arithmetic); a shorter --seq-len or"
        " fewer --repeats shortens it",
        "note: profiling tiny-llama at seq 16 on cpu needs about 40.0 GiB (every distinct layer's weights, one"
        " layer's gradients and activations), and 20.0 GiB is free: it will likely run out of memory; a shorter"
        " --seq-len needs less",
    ]
