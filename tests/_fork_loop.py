"""The serving loop both fork servers of the tests share (tests/_forkserver_main.py and
tests/core/ending_zygote.py): read a request a line (JSON) on stdin, fork a child for it,
answer ``READY`` once, ``PID <id> <pid>`` per request and ``EXIT <pid> <exit code>`` when that
child has ended (tests/_forkserver.py ServerLink reads them).

The server writes with ``os.write`` only: the reaper thread may hold a Python-level stream lock
at the moment of a fork, which the child would inherit.
"""

import json
import os
import sys
import threading


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            threading.Event().wait(0.05)
            continue
        say(f"EXIT {pid} {os.waitstatus_to_exitcode(status)}")


def serve() -> dict:
    """Fork one child per request; return (in the child only) the request it must run. The
    server itself ends here, with exit status 0, when its stdin closes."""
    threading.Thread(target=_reap, daemon=True).start()
    say("READY")
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            os._exit(0)
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        say(f"PID {request['id']} {pid}")
