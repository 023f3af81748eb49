#!/usr/bin/env bash
# The suite on another Python than the 3.11 of `make test` (issue 42: the package claims
# 3.10-3.13). Usage: scripts/test-python.sh /path/to/python
#
# Each version gets its own venv (.venv-py<X.Y>, kept between runs), with requirements-dev.txt
# and the package; requirements-dashboards.txt only where it installs (3.11+: on 3.10 the
# dashboard tests skip and say why). torch is what pip resolves there: the CPU wheel on this
# machine's disk is for 3.11 only, so the other versions get PyPI's CUDA build, which runs the
# suite without a GPU driver as users' CPU runners do.
#
# Then, with two workers: the fast set (`-m "not process"`), the ending matrix, and the exits'
# exports (OTLP/HTTP and gRPC to local receivers, file mode), the demo, fork and signals.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${1:?usage: scripts/test-python.sh /path/to/python}"
if [ ! -x "$python" ]; then
  echo "test-python: no interpreter at $python (CI expects pyenv's under /root/.pyenv/versions)" >&2
  exit 2
fi
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
venv=".venv-py$version"
started=$(date +%s)

if [ ! -f "$venv/.installed" ] || [ requirements-dev.txt -nt "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ]; then
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r requirements-dev.txt
  if "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    "$venv/bin/python" -m pip install -q -r requirements-dashboards.txt
  fi
  "$venv/bin/python" -m pip install -q -e .
  touch "$venv/.installed"
fi
installed=$(date +%s)
"$venv/bin/python" -c 'import sys, torch; print(f"test-python: Python {sys.version.split()[0]}, torch {torch.__version__}")'

XDIST="${XDIST:-2}"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$XDIST" -m "not process and not timing"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n "$XDIST" --dist loadfile -m "not timing" \
  tests/core/test_exit_export.py tests/core/test_ending_matrix.py tests/core/test_ending.py \
  tests/core/test_startup_process.py tests/core/test_fork.py tests/core/test_demo.py tests/core/test_otel_env.py \
  tests/core/test_python_versions.py
echo "test-python: Python $version: install $((installed - started)) s, tests $(( $(date +%s) - installed )) s"
