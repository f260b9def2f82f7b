# adaptis — developer entry points. `make demo` and `make test` are the README's quick start.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_TORCH := torch==2.13.0

.PHONY: install interop demo test test-unit test-fast lint check format schemas bench bench-report gpu-check clean

# The virtual environment, and the constraint that keeps torch the CPU build named above: every pip run
# below installs under it, so nothing a package asks for can swap torch for another build.
# pip byte-compiles all it installs, one file after another (12,384 files with the interop extras, most of
# them never imported); every pip run below skips that, and Python writes each module's bytecode the first
# time something imports it: the recipes run with bytecode writing on, whatever the caller's environment
# says (PYTHONDONTWRITEBYTECODE would make every process of the suite, each torchrun rank, compile torch's
# modules again).
unexport PYTHONDONTWRITEBYTECODE
$(VENV)/constraints.txt:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	echo "$(PIP_TORCH)" > $@

$(BIN)/adaptis: pyproject.toml | $(VENV)/constraints.txt
	$(BIN)/pip install -q --no-compile -c $(VENV)/constraints.txt -e ".[dev,torch]"
	@touch $@

install: $(BIN)/adaptis  ## virtual environment with adaptis, torch (CPU) and the dev tools

# Test-only framework packages (megatron-core, torchtitan), installed with everything `install` installs in
# one pip run (a fresh clone's `make test` resolves and builds once), again only when pyproject.toml changes.
$(VENV)/.interop: pyproject.toml | $(VENV)/constraints.txt
	$(BIN)/pip install -q --no-compile -c $(VENV)/constraints.txt -e ".[dev,torch,interop]"
	@touch $@ $(BIN)/adaptis

interop: $(VENV)/.interop  ## install, and the test-only interop extras (megatron-core, torchtitan)

demo: install  ## plan a built-in model on a built-in profile and show the result
	$(BIN)/adaptis plan --model gemma-s --hardware h200 --pp 4 --microbatches 16 --seq-len 4096 -o out/demo-plan.json
	$(BIN)/adaptis simulate out/demo-plan.json --svg out/demo-timeline.svg

# the type check runs beside the suite; either failing fails the target, the suite's own exit status first
# (exit 5 = no tests collected: a failure). Three workers on two cores: a worker that waits (on torchrun's
# start, on a launch another worker runs for the session, on a rank's sleep) leaves its core to the others.
test: interop  ## the type check beside the whole test suite
	@echo "$(BIN)/mypy adaptis_plan (beside the suite; its report follows the suite's)"
	@$(BIN)/mypy adaptis_plan > $(VENV)/mypy.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -n 3 --dist worksteal -p no:cacheprovider tests; suite=$$?; \
	wait $$types; checked=$$?; echo "mypy adaptis_plan:"; cat $(VENV)/mypy.log; \
	[ $$suite -eq 0 ] && [ $$checked -eq 0 ]

test-unit: install  ## the tests marked unit: no subprocess, no search, no solver (< 30 s; one process: collection dominates)
	$(BIN)/python -m pytest -p no:cacheprovider -m unit tests

test-fast: install  ## everything but the tests marked slow (torchrun, the bench, long searches, most fuzz cases)
	$(BIN)/python -m pytest -n 2 --dist worksteal -p no:cacheprovider -m "not slow" tests

lint: install
	$(BIN)/ruff check adaptis_plan tests bench
	$(BIN)/ruff format --check adaptis_plan tests bench

check: install  ## lint, format check and the type check ([tool.mypy] in pyproject.toml)
	$(BIN)/ruff check adaptis_plan tests bench
	$(BIN)/ruff format --check adaptis_plan tests bench
	$(BIN)/mypy adaptis_plan

format: install
	$(BIN)/ruff format adaptis_plan tests bench
	$(BIN)/ruff check --fix adaptis_plan tests bench

schemas: install  ## regenerate schemas/ from the pydantic models
	$(BIN)/adaptis schema

bench: interop  ## run every suite into bench/results/*.json, then render BENCHMARKS.md (refuses a dirty tree)
	$(BIN)/python -m bench.run

bench-report: install  ## re-render BENCHMARKS.md, docs/img/*.svg and README's results block from bench/results/
	$(BIN)/python -m bench.report

gpu-check: install  ## on one GPU (< 8 min on an H200): profile the paper's small models, run a plan, compare (docs/gpu-check.md)
	$(BIN)/python -m bench.gpu_check --device cuda --out docs/gpu-check.md $(if $(ALLOW_DIRTY),--allow-dirty)

clean:
	rm -rf $(VENV) out .pytest_cache
