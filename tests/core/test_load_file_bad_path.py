"""A host passing safetensors a path that is not one (an int) gets safetensors' own error, the
same as without the plugin, and our hooks say nothing: the wrong input is the host's, not an
internal error of ours."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.process

CHILD = """
import sys
import otel_coldstart
if sys.argv[1] == "instrumented":
    otel_coldstart.instrument(summary=False)
from safetensors import safe_open
from safetensors.torch import load_file
for call in (lambda: load_file(12345), lambda: safe_open(12345, framework="pt")):
    try:
        call()
    except Exception as error:
        print(type(error).__name__)
    else:
        print("no error")
if sys.argv[1] == "instrumented":
    otel_coldstart.ready()
"""


def test_a_path_that_is_not_one_is_the_hosts_error_alone(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_COLDSTART_OUTPUT_DIR"] = str(tmp_path)
    plain, instrumented = (subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                                          timeout=120, env=env) for mode in ("plain", "instrumented"))
    assert instrumented.returncode == plain.returncode == 0, instrumented.stderr[-2000:]
    assert "internal error" not in instrumented.stderr, instrumented.stderr[-2000:]
    assert len(plain.stdout.split()) == 2 and instrumented.stdout == plain.stdout, (plain.stdout, instrumented.stdout)
