"""The storage floor: how fast plain ``read(2)`` gets the same bytes a loader reads.

A loader that reads a checkpoint at 400 MB/s is slow on NVMe and at the limit on a network
disk; the number only means something next to what the storage itself delivers. This module
reads the files with nothing but ``read(2)`` into one reused buffer (no mmap, no parsing, no
Python objects per block), once with the files evicted from the page cache (``cold``: what a
fresh node pays) and once with them resident (``warm``: the kernel's copy speed, the best a
loader can hope for on a restart).

Cold reads evict each file with ``posix_fadvise(POSIX_FADV_DONTNEED)`` first. The kernel may
keep pages that are mapped or dirty elsewhere, and a network filesystem may cache on the
server; so each cold read also records how much of the data was still resident after
eviction, where the OS lets us know (``mincore``; ``None`` otherwise).

The result is plain data; :meth:`FloorResult.to_json` is the document ``otel-coldstart floor
--json`` writes, with ``"format": "otel-coldstart.floor"`` and ``"version": 1``::

    {"format": "otel-coldstart.floor", "version": 1, "block_size": 1048576,
     "total_bytes": 1083179008, "files": [{"path": "/abs/model-00001-of-00004.safetensors",
     "bytes": 270794752}, ...],
     "cold": {"runs": 3, "bytes_per_s": 5.1e8, "seconds": [2.1, 2.2, 2.1],
              "evicted": true, "resident_after_evict": [0.0, 0.0, 0.0]},
     "warm": {"runs": 3, "bytes_per_s": 6.3e9, "seconds": [0.17, 0.18, 0.17]}}

``bytes_per_s`` is ``total_bytes`` over the median of ``seconds``.

Files on a filesystem that lives in memory (tmpfs, ramfs: ``/dev/shm``, an ``emptyDir`` with
``medium: Memory``) have no storage behind them: eviction cannot drop their pages, and a
"cold" read is a memory copy. Their filesystem is told by ``statfs(2)``'s ``f_type``, and
listed under ``"memory_backed"``; when every file is such, no cold read is timed
(``"cold": {"runs": 0, "bytes_per_s": null, "skipped": "..."}``) instead of printing a cold
rate that is not one.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

from . import probes

FORMAT = "otel-coldstart.floor"
VERSION = 1
DEFAULT_BLOCK_SIZE = 1 << 20  # 1 MiB: large enough that syscall cost is noise, small enough to stay in cache
STATES = ("cold", "warm")


class FloorInputError(Exception):
    """A path that cannot be read; the message is one line."""


@dataclass
class StateRuns:
    """Every timed read of the whole file set in one cache state."""

    state: str
    seconds: list[float] = field(default_factory=list)
    evicted: bool | None = None  # cold only: every eviction request was accepted
    resident_after_evict: list[float | None] = field(default_factory=list)  # cold only

    def median_seconds(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


# statfs(2) f_type of the filesystems that live in memory (linux/magic.h): no storage behind
# them, so no cold read to time.
MEMORY_FS_MAGIC = {0x01021994: "tmpfs", 0x858458F6: "ramfs", 0x958458F6: "hugetlbfs"}
_MEMORY_FS_NAMES = frozenset(MEMORY_FS_MAGIC.values())


def _statfs_type(path: str) -> int | None:
    """``f_type`` of ``statfs(path)``, None where it cannot be asked (not Linux, no libc).
    Linux's struct statfs starts with ``f_type`` as a C long on every architecture."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buffer = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes on 64-bit Linux
        if libc.statfs(os.fsencode(path), buffer) != 0:
            return None
    except (OSError, AttributeError, ValueError, TypeError):
        return None
    return ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF


def memory_backed(path: str) -> str | None:
    """The name of the in-memory filesystem holding ``path`` (tmpfs, ramfs, hugetlbfs), or
    None for a filesystem with storage behind it (or one that cannot be told)."""
    magic = _statfs_type(path)
    if magic is not None:
        return MEMORY_FS_MAGIC.get(magic)
    fs_type = probes.filesystem_type(path)  # no statfs: /proc/self/mountinfo's name for it
    return fs_type if fs_type in _MEMORY_FS_NAMES else None


MEMORY_BACKED_COLD = "memory-backed ({fs}): no storage behind it, so no cold read; warm is the memory copy rate"


@dataclass
class FloorResult:
    files: list[tuple[str, int]]
    block_size: int
    states: dict[str, StateRuns]
    memory_backed: dict[str, str] = field(default_factory=dict)  # path -> tmpfs / ramfs / hugetlbfs

    @property
    def all_memory_backed(self) -> bool:
        return bool(self.files) and len(self.memory_backed) == len(self.files)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def bytes_per_s(self, state: str) -> float | None:
        runs = self.states.get(state)
        median = runs.median_seconds() if runs else None
        if not median:
            return None
        return self.total_bytes / median

    def to_json(self) -> dict:
        document: dict = {
            "format": FORMAT,
            "version": VERSION,
            "block_size": self.block_size,
            "total_bytes": self.total_bytes,
            "files": [{"path": path, "bytes": size} for path, size in self.files],
        }
        if self.memory_backed:
            document["memory_backed"] = [{"path": path, "filesystem": fs} for path, fs in self.memory_backed.items()]
        for state, runs in self.states.items():
            entry: dict = {"runs": len(runs.seconds), "bytes_per_s": self.bytes_per_s(state),
                           "seconds": list(runs.seconds)}
            if state == "cold":
                entry["evicted"] = runs.evicted
                entry["resident_after_evict"] = list(runs.resident_after_evict)
                if self.all_memory_backed:
                    entry["skipped"] = MEMORY_BACKED_COLD.format(fs=", ".join(sorted(set(self.memory_backed.values()))))
            document[state] = entry
        return document


def collect_files(paths: list[str]) -> list[tuple[str, int]]:
    """The regular files named, with directories standing for the regular files directly in
    them (a checkpoint directory), sorted; absolute paths and sizes."""
    files: list[tuple[str, int]] = []
    for path in paths:
        if os.path.isdir(path):
            try:
                names = sorted(os.listdir(path))
            except OSError as exc:
                raise FloorInputError(f"{path}: cannot list directory ({exc.strerror or exc})") from None
            inside = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
            if not inside:
                raise FloorInputError(f"{path}: directory holds no regular files")
            files.extend((os.path.abspath(p), os.path.getsize(p)) for p in inside)
        elif os.path.isfile(path):
            if not os.access(path, os.R_OK):
                raise FloorInputError(f"{path}: not readable")
            files.append((os.path.abspath(path), os.path.getsize(path)))
        elif os.path.exists(path):  # a device or FIFO: never opened (it would never end, or block)
            raise FloorInputError(f"{path}: not a regular file (a device, FIFO or socket)")
        else:
            raise FloorInputError(f"{path}: no such file or directory")
    if sum(size for _, size in files) == 0:
        raise FloorInputError("the files hold no bytes to read")
    return files


def read_files(paths: list[str], block_size: int = DEFAULT_BLOCK_SIZE) -> tuple[int, float]:
    """Read every byte of ``paths`` with read(2) into one reused buffer.

    Returns (bytes read, seconds). Unbuffered ``readinto`` is exactly one read(2) per call.
    """
    buffer = bytearray(block_size)
    view = memoryview(buffer)
    total = 0
    start = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while True:
                count = handle.readinto(view)
                if not count:
                    break
                total += count
    return total, time.perf_counter() - start


def evict(paths: list[str]) -> tuple[bool, float | None]:
    """Drop the files from the page cache. Returns (every request accepted, share of the
    pages still resident afterwards, or None where mincore cannot be trusted)."""
    accepted = all([probes.evict_from_page_cache(path) for path in paths])
    resident = [probes.resident_ratio(path) for path in paths]
    sizes = [os.path.getsize(path) for path in paths]
    known = [r for r in resident if r is not None]
    if len(known) < len(resident) or not sum(sizes):
        return accepted, None
    return accepted, sum(r * s for r, s in zip(known, sizes)) / sum(sizes)


def measure(paths: list[str], repeats: int = 3, states: tuple[str, ...] = STATES,
            block_size: int = DEFAULT_BLOCK_SIZE) -> FloorResult:
    """Time ``repeats`` reads of the files per cache state, alternating the states so that a
    change in machine load hits both alike."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    if block_size < 4096:
        raise ValueError("block_size must be at least 4096")
    unknown = set(states) - set(STATES)
    if unknown or not states:
        raise ValueError(f"states must be among {STATES}")
    files = collect_files(paths)
    names = [path for path, _ in files]
    in_memory = {path: fs for path in names if (fs := memory_backed(path)) is not None}
    runs = {state: StateRuns(state) for state in STATES if state in states}
    timed = [state for state in runs if not (state == "cold" and len(in_memory) == len(names))]
    if "cold" in timed:
        runs["cold"].evicted = True
    elif "warm" in timed:
        read_files(names, block_size)  # make them resident before the first timed warm read
    for _ in range(repeats):
        for state in timed:
            if state == "cold":
                accepted, resident = evict(names)
                runs["cold"].evicted = runs["cold"].evicted and accepted
                runs["cold"].resident_after_evict.append(resident)
            _, seconds = read_files(names, block_size)
            runs[state].seconds.append(seconds)
    return FloorResult(files, block_size, runs, in_memory)


def format_rate(bytes_per_s: float | None) -> str:
    if bytes_per_s is None:
        return "n/a"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.2f} {unit}"
    return f"{bytes_per_s:.0f} B/s"
