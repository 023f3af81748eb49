# Two commands a newcomer needs: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test install clean

$(BIN)/.installed: pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned to the CPU build for dev/CI; the package itself never installs torch.
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	$(BIN)/python -m pip install -q -e .
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/otel-coldstart demo

test: install
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) otel-coldstart-traces
