"""A fresh Python child for the tests that signal or kill it mid-start-up: ``python -c SCRIPT
ARGS`` with its output on pipes, killed if it is still alive when the block ends (whatever the
test asserted), its pipes closed."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def python_child(script: str, *args: str, env: dict, cwd: str | None = None) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        process.stdout.close()
        process.stderr.close()
