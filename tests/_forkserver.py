"""A fork server for process tests that are not about a fresh interpreter (issue 41 item 6).

Most of the suite's time was children each paying about a second of CPU to ``import torch``.
Where a test only needs *a* host process (its own environment, argv, output and exit code),
``ForkServer.run`` gives it one forked from a server that imported torch and safetensors once,
uninstrumented (tests/_forkserver_main.py says how the child becomes the process a command line
would have started, and where it differs). The ``fork_server`` fixture (tests/conftest.py) is
one server per pytest process: per xdist worker.

Tests about a fresh interpreter, import order or import timing, signals during start-up or the
process's exit keep ``subprocess`` (docs/decisions.md, "A fork server for process tests").
"""

from __future__ import annotations

import itertools
import json
import locale
import os
import signal
import subprocess
import sys
import threading

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_forkserver_main.py")
REFUSED = 97  # the server's child exits with it when the request needs a fresh interpreter


def server_env() -> dict:
    """The environment the server starts with: the tests' own, less what would send a child's
    trace elsewhere (each run passes its own environment; this one only has to agree on what
    the interpreter and torch read at start-up)."""
    env = dict(os.environ)
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "TRACEPARENT"):
        env.pop(name, None)
    return env


def _parse(args: list[str]) -> tuple[list[str], str | None, str | None, list[str]]:
    """``[-W FILTER]... (-c CODE | SCRIPT) ARG...`` -> (warnoptions, code, script, argv)."""
    warnoptions: list[str] = []
    rest = list(args)
    while rest and rest[0] == "-W":
        warnoptions.append(rest[1])
        rest = rest[2:]
    if rest and rest[0] == "-c":
        return warnoptions, rest[1], None, rest[2:]
    if not rest or rest[0].startswith("-"):
        raise ValueError(f"the fork server runs [-W F]... (-c CODE | SCRIPT) ARGS, not {args!r}")
    return warnoptions, None, rest[0], rest[1:]


class ServerLink:
    """A fork server process and what it says (tests/_fork_loop.py): ``READY`` once, ``PID <id>
    <pid>`` per request, ``EXIT <pid> <exit code>`` per child, kept in ``pids`` and ``exits``
    under ``changed``; ``gone`` once its output ends. Shared by ForkServer and the ending
    matrix's zygote."""

    def __init__(self, script: str, workdir: str, env: dict, err_name: str) -> None:
        self.err = os.path.join(workdir, err_name)
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=env, cwd=workdir)
        self.pids: dict[str, int] = {}
        self.exits: dict[int, int] = {}
        self.changed = threading.Condition()
        self.ready = self.gone = False
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        with self.changed:
            self.changed.wait_for(lambda: self.ready or self.gone, timeout=300)
        if not self.ready:
            self.close()
            raise RuntimeError(f"the fork server did not start: {self.server_err()}")

    def server_err(self) -> str:
        with open(self.err, errors="replace") as handle:
            return handle.read()[-3000:]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            words = raw.decode().split()
            with self.changed:
                if words[0] == "READY":
                    self.ready = True
                elif words[0] == "PID":
                    self.pids[words[1]] = int(words[2])
                elif words[0] == "EXIT":
                    self.exits[int(words[1])] = int(words[2])
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def send(self, request: dict) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ForkServer(ServerLink):
    def __init__(self, workdir: str, env: dict | None = None) -> None:
        self.workdir = workdir
        super().__init__(SERVER, workdir, server_env() if env is None else env, "server.err")
        self._ids = itertools.count()

    def run(self, args: list[str], *, env: dict | None = None, cwd: str | os.PathLike | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """What ``subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
        text=True, timeout=timeout)`` returns, from a forked child. ``args`` is
        ``[-W FILTER]... (-c CODE | SCRIPT) ARG...``."""
        warnoptions, code, script, argv = _parse(args)
        number = str(next(self._ids))
        directory = os.path.join(self.workdir, f"run-{number}")
        os.mkdir(directory)
        request = {"id": number, "dir": directory, "code": code, "script": script, "argv": argv,
                   "warnoptions": warnoptions, "env": dict(os.environ if env is None else env),
                   "cwd": os.fspath(cwd) if cwd is not None else os.getcwd()}
        self.send(request)
        command = [sys.executable, *args]
        with self.changed:
            self.changed.wait_for(lambda: number in self.pids or self.gone, timeout=60)
            if number not in self.pids:
                raise RuntimeError(f"the fork server did not fork: {self.server_err()}")
            pid = self.pids.pop(number)
            ended = self.changed.wait_for(lambda: pid in self.exits or self.gone, timeout=timeout)
            returncode = self.exits.pop(pid, None)
        if returncode is None:
            if ended:
                raise RuntimeError(f"the fork server ended before its child {pid}: {self.server_err()}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            stdout, stderr = self._output(directory)
            raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
        stdout, stderr = self._output(directory)
        if returncode == REFUSED and stderr.startswith("fork server:"):
            # The request differs from the server in what the interpreter or torch read at start
            # (an in-process test left a variable in os.environ): a fresh process gives the same
            # answer, a second later.
            return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    @staticmethod
    def _output(directory: str) -> tuple[str, str]:
        """As ``text=True`` reads a pipe: the locale's encoding, universal newlines."""
        encoding = locale.getpreferredencoding(False)
        texts = []
        for name in ("stdout", "stderr"):
            try:
                with open(os.path.join(directory, name), encoding=encoding) as handle:
                    texts.append(handle.read())
            except FileNotFoundError:
                texts.append("")
        return texts[0], texts[1]
