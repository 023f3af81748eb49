# Two commands a newcomer needs: `make demo` and `make test`. Both create .venv on first use.
# `make test-fast` is the quick loop: every test but those that start fresh processes.
# `make validate` checks the projections against measured start-ups (the `timing` tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# Two workers: the suite's process tests mostly wait (on children, signals, exporters), and
# CI has 2 cores. XDIST=0 runs in one process.
XDIST ?= 2

.PHONY: demo test test-fast validate test-python install clean

$(BIN)/.installed: pyproject.toml requirements-dev.txt requirements-dashboards.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned to the CPU build for dev/CI; the package itself never installs torch.
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	# dashboards/generate.py needs Python 3.11+ (kept apart so that 3.10 installs the rest).
	$(BIN)/python -m pip install -q -r requirements-dashboards.txt
	$(BIN)/python -m pip install -q -e .
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/otel-coldstart demo

# Every test but the `timing` ones, which are `make validate` (CI runs both: .ci/run).
# loadgroup: a file's tests stay on one worker (its module fixtures set up once) unless the file
# spreads them (SPREAD_OVER_WORKERS) or names groups; --no-loadscope-reorder keeps the order
# tests/conftest.py gives, the longest groups first (pytest_collection_modifyitems says why).
test: install
	$(BIN)/python -m pytest -q -n $(XDIST) --dist loadgroup --no-loadscope-reorder -m "not timing"

# The projection validations (`timing`: a projection or estimate checked against the start-up
# it predicts, measured in fresh processes): one worker, alone, since with other tests'
# processes beside them the 2 cores measure noise. Minutes, not seconds: kept out of `make test`.
# A validation that misses is measured once more (--reruns 1): one measurement on a shared
# machine can catch a busy moment; a projection that is wrong misses twice (-rR names the rerun).
validate: install
	$(BIN)/python -m pytest -q -m timing --reruns 1 -rR

# The property tests with a fifth of their examples (the "quick" hypothesis profile,
# tests/conftest.py); `make test` runs them in full.
test-fast: install
	$(BIN)/python -m pytest -q -m "not process" -n $(XDIST) --hypothesis-profile quick

# ruff (the whole tree) and mypy (the package); the rules are in pyproject.toml, why in docs/decisions.md.
.PHONY: lint
lint: install
	$(BIN)/ruff check
	$(BIN)/mypy otel_coldstart

# The fast set, the ending matrix and the exits' exports on another Python, in its own venv
# (.venv-pyX.Y): make test-python PY=/root/.pyenv/versions/3.12.1/bin/python
test-python:
	scripts/test-python.sh $(PY)

clean:
	rm -rf $(VENV) .venv-py3.* otel-coldstart-traces
