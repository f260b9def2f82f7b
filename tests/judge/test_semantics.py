"""check_programs: every contract violation is caught with a one-line message and a marked grid."""

from __future__ import annotations

import pytest

from adaptis_plan.core import Action, Layout
from adaptis_plan.errors import InputError
from adaptis_plan.judge.semantics import ProgramError, check_programs, format_grid

pytestmark = pytest.mark.unit

A = Action.parse


def p(*texts: str) -> list[Action]:
    return [A(t) for t in texts]


LAYOUT2 = Layout(bounds=(0, 1, 2), stage_device=(0, 1), num_devices=2)


def good() -> list[list[Action]]:
    return [p("0F0", "0F1", "0B0", "0I1", "0W1"), p("1F0", "1B0", "1F1", "1I1", "1W1")]


def test_valid_programs_pass() -> None:
    check_programs(LAYOUT2, good(), 2)


def _err(programs, m: int = 2, layout: Layout = LAYOUT2) -> ProgramError:
    with pytest.raises(ProgramError) as info:
        check_programs(layout, programs, m)
    err = info.value
    assert isinstance(err, InputError)
    assert "\n" not in str(err)
    return err


def test_wrong_number_of_devices() -> None:
    err = _err(good()[:1])
    assert "1 device lists" in str(err) and "2 devices" in str(err)


def test_unknown_stage() -> None:
    progs = good()
    progs[1].append(A("5F0"))
    err = _err(progs)
    assert "device 1 step 5" in str(err) and "stage 5" in str(err) and "0..1" in str(err)
    assert err.device == 1 and err.step == 5
    assert "<-- ERROR device 1" in err.grid and "[5F0]" in err.grid


def test_microbatch_out_of_range() -> None:
    err = _err(good(), m=1)
    assert "micro-batch 1" in str(err) and "0..0" in str(err)


def test_action_on_wrong_device() -> None:
    progs = good()
    progs[0].insert(1, A("1F1"))
    progs[1].remove(A("1F1"))
    err = _err(progs)
    assert str(err).startswith("device 0 step 1: action 1F1 belongs to stage 1")
    assert "move 1F1 to device 1's program" in str(err)


def test_bad_op() -> None:
    progs = good()
    progs[0][0] = Action(0, "X", 0)
    err = _err(progs)
    assert "op 'X'" in str(err) and "F, B, I, W" in str(err)


def test_not_an_action() -> None:
    progs = good()
    progs[0][2] = "0B0"  # type: ignore[call-overload]
    with pytest.raises(InputError):
        check_programs(LAYOUT2, progs, 2)


def test_duplicate() -> None:
    progs = good()
    progs[0].insert(2, A("0F1"))
    err = _err(progs)
    assert str(err).startswith("device 0 step 2: action 0F1 appears again (first at step 1)")


def test_missing_forward() -> None:
    progs = good()
    progs[1].remove(A("1F1"))
    err = _err(progs)
    assert "1I1 has no forward 1F1" in str(err) and "device 1 step" in str(err)


def test_missing_backward() -> None:
    progs = good()
    progs[0].remove(A("0B0"))
    err = _err(progs)
    assert "0F0 is never backpropagated" in str(err)


def test_missing_everything() -> None:
    progs = good()
    progs[0] = p("0F0", "0B0")
    err = _err(progs)
    assert "stage 0 micro-batch 1 has no actions" in str(err)


def test_i_without_w() -> None:
    progs = good()
    progs[0].remove(A("0W1"))
    err = _err(progs)
    assert "0I1 has no matching 0W1" in str(err)


def test_b_and_i_both() -> None:
    progs = good()
    progs[0].append(A("0I0"))
    err = _err(progs)
    assert "0I0 and 0B0" in str(err) and "either one 0B0" in str(err)


def test_backward_before_forward() -> None:
    progs = [p("0B0", "0F0"), p("1F0", "1B0")]
    err = _err(progs, m=1)
    assert str(err).startswith("device 0 step 0: 0B0 runs before its forward 0F0 (step 1)")
    assert err.step == 0 and "[0B0]" in err.grid


def test_w_before_i() -> None:
    progs = [p("0F0", "0W0", "0I0"), p("1F0", "1B0")]
    err = _err(progs, m=1)
    assert str(err).startswith("device 0 step 1: 0W0 runs before 0I0 (step 2)")


def test_format_grid() -> None:
    grid = format_grid([p("0F0", "0B0"), p("1F0")], {1: {1}})
    lines = grid.splitlines()
    assert lines[0].split() == ["device", "0", "device", "1"]
    assert lines[1].split() == ["step", "0", "0F0", "1F0"]
    assert "[-]" in lines[2] and lines[2].endswith("<-- ERROR device 1")


def test_format_grid_window_elides_long_programs() -> None:
    progs = [[Action(0, "F", mb) for mb in range(200)]]
    grid = format_grid(progs, {0: {100}}, window=3)
    assert "..." in grid and len(grid.splitlines()) < 12 and "[0F100]" in grid


def test_replay_with_measured_action_durations() -> None:
    """`action_durations` (a run's own spans, device by device in program order) replace the stage
    costs; a list of the wrong length is refused."""
    import numpy as np

    from adaptis_plan.core import Action, Layout
    from adaptis_plan.judge.semantics import replay

    layout = Layout((0, 1, 2), (0, 1), 2)
    programs = [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "F", 0), Action(1, "B", 0)]]
    run = replay(layout, programs, 1, None, action_durations=np.array([1.0, 2.0, 3.0, 4.0]))
    # 0F0 [0,1]  1F0 [1,4]  1B0 [4,8]  0B0 [8,10]
    assert run.ends == [[1.0, 10.0], [4.0, 8.0]]
    with pytest.raises(ValueError, match="3 entries for 4 actions"):
        replay(layout, programs, 1, None, action_durations=np.array([1.0, 2.0, 3.0]))
