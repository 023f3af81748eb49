#!/usr/bin/env bash
# GPU check of the device phases (docs/device-phases.md): one command, a verdict per check.
# Needs a CUDA GPU and a CUDA build of torch with safetensors and opentelemetry-sdk (vLLM for
# the vllm check, else SKIP); CI has no GPU and runs the CPU tests instead.
# Exit codes: 0 all passed, 1 a check failed, 2 bad arguments, 3 no CUDA device,
# 4 missing dependency, 5 inconclusive or skipped check(s), 124 over the time limit.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    PYTHON=.venv/bin/python
  else
    PYTHON=python3
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The checks are estimated at under 5 minutes on one H200 (printed at the start); 10 minutes
# is the limit, and checks that would run past --budget-s (540 s) are INCONCLUSIVE.
exec timeout "${GPU_CHECK_TIMEOUT_S:-600}" "$PYTHON" scripts/gpu_check.py "$@"
