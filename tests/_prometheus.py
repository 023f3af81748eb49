"""A real Prometheus (Debian's binary) for the tests that check metrics and PromQL against one:
found, or the test skipped with how to install it; started on a free port with a one-second
scrape of the given targets; waited on until a query has what the test needs (the end of its
log in the failure if it exits first); stopped however the test ends."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest


def require_binary() -> str:
    """Debian's prometheus, or the test skipped with how to install it (call it before any costly set-up)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (Debian: apt-get install prometheus)")
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Prometheus:
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen
    log: Path

    def api(self, path: str, **params) -> dict:
        """``GET /api/v1/PATH?params`` as JSON; a PromQL error (400/422) comes back with its message."""
        url = f"{self.url}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def answer(self, expr: str) -> dict:
        """An instant query evaluated now, the whole answer (``status``, ``data`` or ``error``)."""
        return self.api("query", query=expr, time=f"{time.time():.3f}")

    def query(self, expr: str) -> list:
        """An instant query's result vector, evaluated now."""
        return self.answer(expr)["data"]["result"]

    def wait_for(self, expr: str, timeout_s: float, enough: Callable[[list], bool] = bool) -> list:
        """``query(expr)`` once its result is ``enough`` (not empty, unless said otherwise); the
        test fails if Prometheus exits (with the end of its log) or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited with {self.process.returncode} while waiting for {expr!r}: "
                            f"{self.log.read_text(encoding='utf-8', errors='replace')[-3000:]}")
            try:
                result = self.query(expr)
            except OSError:  # not listening yet
                result = []
            if enough(result):
                return result
            time.sleep(0.3)
        pytest.fail(f"Prometheus had no {expr!r} within {timeout_s} s")


@contextlib.contextmanager
def running(work: Path, targets: Sequence[str], job: str, *, extra_args: Sequence[str] = ()) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` (host:port) every second as ``job``, its configuration,
    data and log under ``work``. Yields at once (``wait_for`` what the test needs); terminated,
    or killed if it will not stop, when the block ends."""
    binary = require_binary()
    work.mkdir(parents=True, exist_ok=True)
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                      f"scrape_configs:\n  - job_name: {job}\n    static_configs:\n"
                      f"      - targets: {json.dumps(list(targets))}\n", encoding="utf-8")
    port = free_port()
    with open(work / "prometheus.log", "w", encoding="utf-8") as log:
        process = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
                                    f"--web.listen-address=127.0.0.1:{port}", *extra_args],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=str(work))
        try:
            yield Prometheus(f"http://127.0.0.1:{port}", process, work / "prometheus.log")
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
