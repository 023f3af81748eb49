"""Open a path only if it is a regular file.

Our probes (format sniffing, page-cache residency, safetensors headers, shard indexes) read
paths the host named. Opening a FIFO, even without reading it, can take the place of the
host's reader (its writer streams into us, or gets EPIPE when we close), and opening a
device or a FIFO with no writer can block forever. So the path is checked with ``stat``
first, opened non-blocking (a FIFO swapped in between cannot block the open), and checked
again on the open descriptor.
"""

from __future__ import annotations

import os
import stat


def is_regular_file(path: str) -> bool:
    return regular_file_stat(path) is not None


def regular_file_stat(path: str) -> os.stat_result | None:
    """``os.stat(path)`` if it is a regular file, else None (one stat for both questions)."""
    try:
        facts = os.stat(path)
    except (OSError, ValueError, TypeError):
        return None
    return facts if stat.S_ISREG(facts.st_mode) else None


def open_regular_fd(path: str) -> int:
    """A read-only descriptor of ``path``; OSError if it is not a regular file."""
    if not is_regular_file(path):
        raise OSError(f"not a regular file: {path}")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"not a regular file: {path}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str, mode: str = "rb", **kwargs):
    """Like ``open(path, mode)`` for reading, refusing (OSError) anything not a regular file."""
    if any(c in mode for c in "wax+"):
        raise ValueError("open_regular is for reading")
    return open(open_regular_fd(path), mode, **kwargs)
