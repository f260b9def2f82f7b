"""bench.host_drift: the minutes-scale host probe's statistics, and one short real probe."""

from __future__ import annotations

import pytest

from bench import host_drift as hd


def test_sides_are_the_runs_of_windows_on_one_side_of_the_median() -> None:
    assert hd._sides([1.1, 1.2, 0.9, 0.8, 0.85, 1.05]) == [2, 3, 1]  # median 0.95
    assert hd._sides([1.0, 1.1, 1.0, 0.9, 0.8]) == [3, 2]  # a window at the median continues its run
    assert hd._sides([]) == []


def test_sd_of_means_over_consecutive_minutes() -> None:
    speeds = [1.0, 1.0, 2.0, 2.0]  # one window per minute
    assert hd._sd_of_means(speeds, 1, 1) == pytest.approx(0.5)
    assert hd._sd_of_means(speeds, 1, 2) == pytest.approx((1 / 6) ** 0.5)  # means 1, 1.5, 2
    assert hd._sd_of_means(speeds, 1, 4) is None  # no two stretches to compare


def _calls(phase_windows: int, windows: int, window_s: float) -> list[tuple[float, str, float]]:
    """Both cores, 10 calls per kernel per window; every kernel 1.2x slow in alternate phases of
    `phase_windows` windows, the Mamba block twice as far off as the others."""
    calls = []
    for w in range(windows + 1):  # one more, partial window: dropped
        slow = (w // phase_windows) % 2 == 1
        for i in range(10 if w < windows else 2):
            t = w * window_s + i * window_s / 10
            for k, base in zip(hd.KERNELS, (10e-3, 4e-3, 3e-3, 3e-3), strict=True):
                factor = (1.4 if k == "mamba" else 1.2) if slow else 1.0
                calls += [(t, k, base * factor), (t + 1e-3, k, base * factor)]
    return calls


def test_summarize_finds_the_phases_and_how_little_averaging_removes() -> None:
    res = hd.summarize(_calls(phase_windows=6, windows=24, window_s=30.0), 30.0)
    assert res.seconds == pytest.approx(24 * 30.0) and res.window_s == 30.0
    mamba, gemm = res.kernels["mamba"], res.kernels["gemm"]
    assert len(mamba.speeds) == 24
    # half the windows slow: the whole median falls between the modes' times
    assert max(mamba.speeds) / min(mamba.speeds) == pytest.approx(1.4)
    assert max(gemm.speeds) / min(gemm.speeds) == pytest.approx(1.2)
    assert mamba.phase_s == pytest.approx(6 * 30.0)
    assert mamba.lag1 > 0.5
    assert set(mamba.sd_by_minutes) == {1, 3, 5}
    # phases of 3 minutes: a 1-minute mean is one phase's speed; longer means average some of it away
    assert mamba.sd_by_minutes[1] <= mamba.sd
    assert mamba.sd_by_minutes[5] < mamba.sd_by_minutes[3] < mamba.sd_by_minutes[1]
    text = hd.section(res, "_Reproduce: `x`_")
    assert text.startswith(hd.HEADING)
    assert "| mamba | " in text and "| 180 |" in text and "for 12 minutes" in text
    assert "a mean over 5 consecutive minutes still varies 19% as much" in text  # 3-minute phases, 6-minute period


def test_the_averaging_sentence_follows_the_measured_ratio() -> None:
    def drift(sd1: float, sd5: float) -> hd.KernelDrift:
        return hd.KernelDrift(10.0, [1.0, 1.1], 0.0, 30.0, {1: sd1, 3: (sd1 + sd5) / 2, 5: sd5})

    assert "outlast a minute" in hd._averaging(drift(0.10, 0.08))
    assert "average the phases away" in hd._averaging(drift(0.10, 0.03))
    assert "last about a minute" in hd._averaging(drift(0.10, 0.045))
    assert hd._averaging(hd.KernelDrift(10.0, [1.0], 0.0, 30.0, {})) == ""


@pytest.mark.slow
def test_a_short_probe_runs_for_real() -> None:
    res = hd.measure(seconds=6.0, window_s=2.0)
    assert set(res.kernels) == set(hd.KERNELS)
    for k in res.kernels.values():
        assert k.median_ms > 0 and k.speeds and all(s > 0 for s in k.speeds)
    assert hd.section(res, "_x_").startswith(hd.HEADING)
