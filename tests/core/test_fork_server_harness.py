"""The tests' fork server (tests/_forkserver.py) answers as a fresh process would, also when the
test process's environment changed after the server started."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch

pytestmark = pytest.mark.process

CHILD = "import json, os, sys, torch; print(json.dumps([os.environ.get('PROBE'), sys.argv[1:], os.getpid()]))"


def test_a_child_gets_its_own_argv_env_and_pid(fork_server):
    done = fork_server.run(["-c", CHILD, "a", "b"], env=dict(os.environ, PROBE="x"))
    assert done.returncode == 0, done.stderr
    probe, argv, pid = json.loads(done.stdout)
    assert probe == "x" and argv == ["a", "b"] and pid != os.getpid()


def test_inductor_cache_dir_left_in_the_environment_is_no_reason_to_refuse(fork_server):
    # torch._inductor writes TORCHINDUCTOR_CACHE_DIR into os.environ when a test compiles
    # in-process; Inductor is not imported by the server, so the child reads it itself.
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR="/tmp/elsewhere")
    done = fork_server.run(["-c", "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR'], os.getppid())"], env=env)
    assert done.returncode == 0, done.stderr
    cache_dir, parent = done.stdout.split()
    assert cache_dir == "/tmp/elsewhere"
    assert int(parent) == fork_server.proc.pid  # forked, not refused (a fresh process's parent is this one)


def test_a_start_up_variable_that_differs_gets_a_fresh_process(fork_server):
    # OMP_NUM_THREADS is read when torch starts: the server cannot honour another value, so the
    # answer comes from a fresh interpreter (the same command line, run for real).
    threads = "1" if torch.get_num_threads() > 1 else "2"  # torch caps it at the cores there are
    code = "import torch; print(torch.get_num_threads())"
    done = fork_server.run(["-c", code], env=dict(os.environ, OMP_NUM_THREADS=threads))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == threads
    assert done.args == [sys.executable, "-c", code]
