"""bench.host_modes: the host-speed probe's statistics, and one short real probe."""

from __future__ import annotations

import re

import pytest

from bench import host_modes as hm


def test_stretches_are_the_runs_of_slow_calls() -> None:
    assert hm.stretches([False, True, True, False, True, False, False, True, True, True]) == [2, 1, 3]
    assert hm.stretches([False, False]) == []
    assert hm.stretches([True]) == [1]


def _times(stream: list[float]) -> dict[str, dict[str, list[float]]]:
    return {
        setting: {
            "stream": [v * scale for v in stream],
            "gemm": [4e-3 + 1e-5 * (i % 3) for i in range(len(stream))],
            "layer": [10 * v * scale for v in stream],
        }
        for setting, scale in zip(hm.SETTINGS, (1.0, 1.5), strict=True)
    }


def test_summarize_finds_the_slow_mode_its_stretches_and_what_the_layer_follows() -> None:
    # 20 calls: fast 1 ms, slow 2 ms, in runs of 4 slow calls every 10
    stream = [2e-3 if i % 10 < 4 else 1e-3 for i in range(20)]
    res = hm.summarize(_times(stream), 10)
    idle = res.stats[hm.SETTINGS[0]]
    assert idle["stream"].fast_s == pytest.approx(1e-3)
    assert idle["stream"].slow_s == pytest.approx(2e-3)
    assert idle["stream"].spread == pytest.approx(2.0)
    assert res.slow_share == pytest.approx(0.4)
    assert res.layer_vs_stream == pytest.approx(1.0)
    assert abs(res.gemm_vs_stream) < 0.5
    per_call = sum(stream) / len(stream) * 11 + 4e-3 + 1e-5 * sum(i % 3 for i in range(20)) / 20
    assert res.slow_stretch_s == pytest.approx(4 * per_call)
    busy = res.stats[hm.SETTINGS[1]]
    assert busy["layer"].median_s / idle["layer"].median_s == pytest.approx(1.5)
    text = hm.section(res, "_Reproduce: `x`_")
    assert text.startswith("## How steady is this machine? (CPU)")
    assert "Blocks of 10 calls alternate" in text and "20 calls per setting" in text
    assert text.count("\n| stream |") == 2 and text.count("\n| layer |") == 2
    assert "layer +50%" in text and "40% of the calls" in text and re.search(r"spreads 1\.0\d-2\.00x between", text)


@pytest.mark.slow
def test_a_short_probe_runs_for_real() -> None:
    res = hm.measure(blocks=2, calls=10)
    assert res.calls == 10
    for setting in hm.SETTINGS:
        for kernel in hm.KERNELS:
            s = res.stats[setting][kernel]
            assert 0 < s.fast_s <= s.median_s <= s.slow_s
    assert -1.0 <= res.layer_vs_stream <= 1.0 and 0.0 <= res.slow_share <= 1.0
