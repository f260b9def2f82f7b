"""Hostile text in exports: a plan file or an option crafted to put code into the torchtitan
config module (which torchtitan imports) is refused or written as inert text, and a YAML plan
whose `schema_version` JSON cannot write gets one clear line."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cli import leftovers, one_line_error

from adaptis_plan.core import Layout
from adaptis_plan.errors import InputError
from adaptis_plan.planfile.export import TrainingShape
from adaptis_plan.planfile.export_torchtitan import torchtitan_base, torchtitan_config_module
from adaptis_plan.planfile.io import read_plan
from tests.conftest import run_adaptis

_BASE = "llama3:llama3_8b"
_KINDS = ["embedding"] + ["dense"] * 8 + ["head"]
_LAYOUT = Layout((0, 3, 5, 7, 10), (0, 1, 0, 1), 2)
_INJECT = 'x"""\nimport os; os.system("echo PWNED")\n"""'  # the review's model.name


def _module(title: str = "tiny-llama, adaptive plan", csv_name: str = "adaptis_pipeline.csv") -> str:
    return torchtitan_config_module(
        _LAYOUT,
        _KINDS,
        csv_name=csv_name,
        base=_BASE,
        training=TrainingShape(num_microbatches=4, micro_batch_size=1, seq_len=128),
        title=title,
    )


def _code_and_doc(source: str) -> tuple[str, str]:
    """The module's statements but its docstring (as an AST dump), and the docstring."""
    tree = ast.parse(source)
    doc = ast.get_docstring(tree, clean=False)
    assert doc is not None
    return ast.dump(ast.Module(body=tree.body[1:], type_ignores=[])), doc


# ---------------------------------------------------------------- plan text in the module
@pytest.mark.parametrize(
    "text",
    [
        _INJECT,
        "x'''\nimport os\n'''",
        'x"',
        "x\\",
        "x\\N{BULLET}\\u0041",
        "x\r\nimport os  # \x00 \x0c \x1b[31m",
        "x\u2028\u2029\x85import os",
        "x\ud800",
        "{title}{{}}%s",
        "x" * 10_000,
    ],
)
def test_torchtitan_module_holds_plan_text_as_inert_docstring(text: str) -> None:
    """Whatever the title or CSV name holds, the module is the template's code with a docstring of
    printable text: the same statements as for a plain name, nothing that ends the docstring."""
    code, plain_doc = _code_and_doc(_module())
    for source in (_module(title=text), _module(csv_name=text)):
        source.encode("utf-8")  # writable as a source file
        got_code, doc = _code_and_doc(source)
        assert '"' not in doc and "\\" not in doc
        assert all(c.isprintable() or c == "\n" for c in doc)
        assert doc.count("\n") == plain_doc.count("\n")
        assert len(doc) <= len(plain_doc) + 200
    assert _code_and_doc(_module(title=text))[0] == code
    # the exact CSV name is kept, as a string literal, where the code opens the CSV
    assert f"with_name({text!r})" in _module(csv_name=text)


def test_torchtitan_module_csv_name_is_a_literal() -> None:
    source = _module(csv_name=_INJECT)
    tree = ast.parse(source)
    names = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == _INJECT]
    assert names == [_INJECT]  # in the code, exactly as given, as one string constant
    assert [type(n).__name__ for n in tree.body] == [type(n).__name__ for n in ast.parse(_module()).body]


def test_torchtitan_module_keeps_plain_names() -> None:
    """Printable names other than backslashes and double quotes are shown as they are."""
    title = "Ünïcode model's v2 (tiny) — 1F1B, pp 2"
    doc = _code_and_doc(_module(title=title))[1]
    assert doc.startswith(f"torchtitan config: {title}.\n")
    assert "(adaptis_pipeline.csv)" in doc


# ---------------------------------------------------------------- --torchtitan-config
_BAD_BASES = [
    'x"""\nimport os;os.system("echo PWNED2")\n""".y:llama3_8b',  # the review's MODULE injection
    "import.x:llama3_8b",
    "a..b:cfg",
    ".a:cfg",
    "a.:cfg",
    "a b:cfg",
    "a-b:cfg",
    "a:class",
    "a:cfg:x",
    "a:",
    ":cfg",
    "llama3",
    "",
    "a:cfg()",
    "os;x:cfg",
]


@pytest.mark.parametrize("base", _BAD_BASES)
def test_torchtitan_base_refuses_all_but_names(base: str) -> None:
    with pytest.raises(InputError, match="--torchtitan-config") as info:
        torchtitan_base(base)
    assert "\n" not in str(info.value) and "llama3:llama3_8b" in str(info.value)


@pytest.mark.parametrize(
    ("base", "want"),
    [
        ("llama3:llama3_8b", ("torchtitan.models.llama3.config_registry", "llama3_8b")),
        ("my_pkg.sub.config_registry:cfg_1", ("my_pkg.sub.config_registry", "cfg_1")),
        ("_m:_c", ("torchtitan.models._m.config_registry", "_c")),
    ],
)
def test_torchtitan_base_takes_python_names(base: str, want: tuple[str, str]) -> None:
    assert torchtitan_base(base) == want


@pytest.mark.parametrize("base", [_BAD_BASES[0], "import.x:llama3_8b", "a:class", "x" * 500 + ":\n"])
def test_export_refuses_bad_torchtitan_config(tmp_path: Path, tiny_plan: Path, base: str) -> None:
    out = tmp_path / "tt"
    r = run_adaptis("export", tiny_plan, "--format", "torchtitan", "--torchtitan-config", base, "-o", out / "a.py")
    one_line_error(r, 2, "--torchtitan-config", "MODULE:CONFIG")
    assert not out.exists()


def test_export_refuses_bad_output_name_on_one_line(tmp_path: Path, tiny_plan: Path) -> None:
    out = tmp_path / "a\nb.py"
    r = run_adaptis("export", tiny_plan, "--format", "torchtitan", "--torchtitan-config", _BASE, "-o", out)
    one_line_error(r, 2, "-o", "adaptis_pipeline.py")
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------- a hostile plan file, end to end
@pytest.mark.parametrize("field", ["model.name", "strategy"])
def test_export_of_hostile_plan_runs_no_plan_text(tmp_path: Path, tiny_plan: Path, field: str) -> None:
    """The review's plan (`model.name` closing the docstring and calling os.system) and the same
    through `strategy`: refused, or a module with the benign plan's code that prints nothing."""
    data = json.loads(tiny_plan.read_text())
    section, _, key = field.rpartition(".")
    (data[section] if section else data)[key] = _INJECT
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    plain, crafted = tmp_path / "plain" / "adaptis_pipeline.py", tmp_path / "crafted" / "adaptis_pipeline.py"
    r = run_adaptis("export", tiny_plan, "--format", "torchtitan", "--torchtitan-config", _BASE, "-o", plain)
    assert r.exit_code == 0, r.stderr
    r = run_adaptis("export", hostile, "--format", "torchtitan", "--torchtitan-config", _BASE, "-o", crafted)
    if r.exit_code == 2:  # refused as a bad plan file: one line, nothing written
        one_line_error(r, 2, str(hostile))
        assert not crafted.parent.exists()
        return
    assert r.exit_code == 0, r.stderr
    assert crafted.with_suffix(".csv").read_text() == plain.with_suffix(".csv").read_text()
    source = crafted.read_text()
    assert [type(n).__name__ for n in ast.parse(source).body] == [
        type(n).__name__ for n in ast.parse(plain.read_text()).body
    ]
    assert _code_and_doc(source)[0] == _code_and_doc(plain.read_text())[0]
    run = subprocess.run([sys.executable, crafted.name], cwd=crafted.parent, capture_output=True, text=True, check=True)
    assert "PWNED" not in run.stdout + run.stderr


# ---------------------------------------------------------------- schema_version JSON cannot write
@pytest.mark.parametrize(
    ("value", "shown"),
    [("2001-12-14", "2001"), ("!!set {a}", "'a'"), ("!!binary aGVsbG8=", "hello")],
)
def test_yaml_schema_version_of_any_type_is_one_line(tmp_path: Path, tiny_plan: Path, value: str, shown: str) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text(f"schema_version: {value}\n")
    # the whole plan with only schema_version changed (JSON is YAML)
    lines = tiny_plan.read_text().splitlines()
    assert lines[1].startswith(' "schema_version": ')
    full = tmp_path / "full.yaml"
    full.write_text("\n".join([lines[0], f' "schema_version": {value},', *lines[2:]]) + "\n")
    for path in (bare, full):
        with pytest.raises(InputError, match="schema_version") as info:
            read_plan(path)
        assert "\n" not in str(info.value) and shown in str(info.value)
        one_line_error(run_adaptis("simulate", path), 2, path.name, "schema_version", shown, "must be 2")
        out = tmp_path / "x.csv"
        one_line_error(run_adaptis("export", path, "--format", "torch-csv", "-o", out), 2, "schema_version")
        assert not out.exists()


# ---------------------------------------------------------------- --torchtitan-version, megatron-launch
@pytest.mark.parametrize("version", ["0.4", "", "main\n", "0.3; rm -rf /", "x" * 500])
def test_export_refuses_an_unknown_torchtitan_version(tmp_path: Path, tiny_plan: Path, version: str) -> None:
    out = tmp_path / "tt"
    r = run_adaptis(
        "export", tiny_plan, "--format", "torchtitan", "--torchtitan-config", _BASE,
        "--torchtitan-version", version, "-o", out / "a.py",
    )  # fmt: skip
    one_line_error(r, 2, "--torchtitan-version", "0.3 and main")
    assert not out.exists()


def test_export_refuses_torchtitan_version_for_another_format(tmp_path: Path, tiny_plan: Path) -> None:
    out = tmp_path / "out.txt"
    r = run_adaptis("export", tiny_plan, "--format", "megatron-args", "--torchtitan-version", "0.3", "-o", out)
    one_line_error(r, 2, "--torchtitan-version", "--format torchtitan")
    assert leftovers(tmp_path) == []


def test_export_refuses_an_installed_torchtitan_it_does_not_know(
    tmp_path: Path, tiny_plan: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adaptis_plan.app.export as export

    monkeypatch.setattr(export, "_installed_version", lambda package: "0.2.2")
    out = tmp_path / "tt"
    r = run_adaptis("export", tiny_plan, "--format", "torchtitan", "--torchtitan-config", _BASE, "-o", out / "a.py")
    one_line_error(r, 2, "the installed torchtitan is '0.2.2'", "--torchtitan-version")
    assert not out.exists()
    r = run_adaptis(
        "export", tiny_plan, "--format", "torchtitan", "--torchtitan-config", _BASE,
        "--torchtitan-version", "main", "-o", out / "a.py",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert "'num_pp_microbatches'" in (out / "a.py").read_text()


def test_export_launch_refusals_leave_no_file(tmp_path: Path, tiny_plan: Path) -> None:
    """A plan Megatron cannot run as priced (here: stages with different recomputation) writes no script."""
    data = json.loads(tiny_plan.read_text())
    data["strategy"] = "1F1B"
    plan = tmp_path / "plan.json"
    r = run_adaptis(
        "plan", "--model", "tiny-llama", "--hardware", "cpu", "--pp", "2", "--microbatches", "4", "--seq-len", "64",
        "--strategy", "1F1B", "-o", plan,
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    data = json.loads(plan.read_text())
    data["stages"][0]["recompute"], data["stages"][1]["recompute"] = "full", "none"
    plan.write_text(json.dumps(data))
    out = tmp_path / "out"
    out.mkdir()
    for fmt in ("megatron-launch", "megatron-args"):
        r = run_adaptis("export", plan, "--format", fmt, "-o", out / "launch.sh")
        one_line_error(r, 2, "one recomputation mode", "stages", "--recompute")
        assert leftovers(out) == []
