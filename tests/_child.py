"""Fresh children for the tests that signal, kill or serve from them: ``python -c SCRIPT ARGS``
with its output on pipes, killed if it is still alive when the block ends (whatever the test
asserted), its pipes closed; and the end of a serving app told to stop by closing its stdin."""

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


def stop_app(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """End an app that serves until its stdin closes (its own way to stop, so it runs its exit
    as a real server would); killed if it has not stopped within ``timeout_s``."""
    if process.poll() is None:
        process.stdin.close()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)
