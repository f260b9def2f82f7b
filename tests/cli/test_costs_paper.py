"""`--costs paper`: the paper's profiled layer costs as a built-in cost profile, through the command line."""

from __future__ import annotations

import json

PAPER_CASE = ("--model", "deepseek-s", "--hardware", "h200", "--pp", "4", "--microbatches", "16", "--seq-len", "4096")


def test_plan_and_simulate_with_the_paper_costs(adaptis, tmp_path) -> None:  # noqa: ANN001
    plan = tmp_path / "plan.json"
    r = adaptis("plan", *PAPER_CASE, "--tp", "2", "--costs", "paper", "--strategy", "1F1B", "-o", plan, "--json")
    assert r.exit_code == 0, r.stderr
    out = r.json()
    assert out["search"]["costs"] == "paper"
    analytic = adaptis("plan", *PAPER_CASE, "--tp", "2", "--strategy", "1F1B", "-o", tmp_path / "a.json", "--json")
    assert analytic.json()["search"]["costs"] == "analytic"
    assert analytic.json()["step_time_s"] != out["step_time_s"]
    # simulate judges a paper plan on the paper's costs unless told otherwise
    sim = adaptis("simulate", plan, "--json").json()
    assert sim["step_time_s"] == out["step_time_s"] and not sim["stored_differs"]
    assert adaptis("simulate", plan, "--costs", "paper", "--json").json()["step_time_s"] == out["step_time_s"]
    assert json.loads(plan.read_text())["search"]["costs"] == "paper"


def test_a_model_outside_the_profile_is_one_line_exit_2(adaptis, tmp_path) -> None:  # noqa: ANN001
    out = tmp_path / "plan.json"
    r = adaptis(
        "plan", "--model", "llama-2-s", "--hardware", "h200", "--pp", "4", "--microbatches", "8",
        "--costs", "paper", "-o", out,
    )  # fmt: skip
    assert (r.exit_code, r.stdout) == (2, "") and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --costs paper:"), r.stderr
    assert "llama-2-s" in lines[0] and "omit --costs" in lines[0]
    assert not out.exists()


def test_help_says_what_the_paper_costs_are_for(adaptis) -> None:  # noqa: ANN001
    text = " ".join(adaptis("plan", "--help").stdout.split())
    assert "`paper`" in text and "comparability with the paper" in text and "not accuracy" in text
