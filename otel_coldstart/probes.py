"""Facts from the operating system: process start time, storage reads, page-cache residency.

Every probe answers None where the OS cannot give a trustworthy answer, so that the span
attribute is absent rather than wrong. Every probe is optional: on a platform without it
(macOS has no ``RUSAGE_THREAD``, Windows no ``resource`` module and neither has /proc,
``posix_fadvise`` or cachestat), spans and timings still flow, that evidence is absent and
:func:`unavailable_evidence` says why (the root span carries it as
``coldstart.evidence.unavailable``). Nothing here raises into the host.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ._regular_files import open_regular, open_regular_fd

try:
    import resource
    _HAVE_RESOURCE = True
except ImportError:  # Windows
    _HAVE_RESOURCE = False


def _thread_usage_probe() -> tuple[Callable[[int], Any] | None, str | None]:
    """``(getrusage, None)`` if per-thread storage reads can be counted here, else
    ``(None, reason)``. ``ru_inblock`` of ``RUSAGE_THREAD`` is the kernel's per-task
    read_bytes in 512-byte units on Linux only (other systems count operations, not blocks)."""
    if not _HAVE_RESOURCE:
        return None, "the resource module is missing"
    if not hasattr(resource, "RUSAGE_THREAD"):
        return None, "resource.RUSAGE_THREAD is missing"
    if not sys.platform.startswith("linux"):
        return None, f"per-thread read_bytes is Linux-only (platform {sys.platform})"
    try:
        resource.getrusage(resource.RUSAGE_THREAD)
    except (OSError, ValueError) as error:
        return None, f"getrusage(RUSAGE_THREAD) failed: {error}"
    if not os.path.exists("/proc/thread-self/io"):  # a kernel without per-task I/O accounting
        return None, "no per-task I/O accounting (/proc/thread-self/io is missing)"
    return resource.getrusage, None


_getrusage, _THREAD_IO_MISSING = _thread_usage_probe()
_IO_ACCOUNTING = _getrusage is not None


def _proc_probe() -> str | None:
    """Why /proc cannot be read here, or None if it can."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            handle.read(1)
    except OSError as error:
        return f"/proc is not readable ({type(error).__name__})"
    return None


_PROC_MISSING = _proc_probe()


def unavailable_evidence() -> list[str]:
    """"probe: reason" for each piece of OS evidence this platform cannot give."""
    missing = []
    if _THREAD_IO_MISSING:
        missing.append(f"thread_io: {_THREAD_IO_MISSING}")
    if _PROC_MISSING:
        missing.append(f"process_start: {_PROC_MISSING}")
        missing.append(f"filesystem_type: {_PROC_MISSING}")
    if not hasattr(os, "posix_fadvise"):
        missing.append("evict_from_page_cache: os.posix_fadvise is missing")
    return missing


def process_start_time_ns() -> int | None:
    """Wall-clock time the process started, from /proc (Linux), to ~10 ms."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start_ticks = int(fields[19])  # field 22 (starttime) counted from field 3
        with open("/proc/uptime", "rb") as handle:
            uptime_s = float(handle.read().split()[0])
        hertz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc, no sysconf (Windows)
        return None
    age_s = uptime_s - start_ticks / hertz
    if age_s < 0:
        age_s = 0.0
    return time.time_ns() - int(age_s * 1e9)


def io_accounting_available() -> bool:
    return _IO_ACCOUNTING


class ThreadIO:
    """Bytes this thread has read from storage and major faults it has taken.

    ``getrusage(RUSAGE_THREAD).ru_inblock`` is the kernel's per-task ``read_bytes`` counter
    (the one /proc/thread-self/io shows) in 512-byte units, and it includes the bytes a mmap
    fault pulled in on first touch. It costs about 0.5 us against ~3 us for reading /proc,
    which matters because it is sampled around every intercepted tensor call.
    """

    __slots__ = ("read_bytes", "major_faults")

    def __init__(self, read_bytes: int, major_faults: int) -> None:
        self.read_bytes = read_bytes
        self.major_faults = major_faults


_NO_THREAD_IO = ThreadIO(0, 0)


def thread_io() -> ThreadIO:
    """This thread's counters now; zeros where they cannot be read (then
    :func:`io_accounting_available` is False and no span carries them)."""
    if _getrusage is None:
        return _NO_THREAD_IO
    try:
        usage = _getrusage(resource.RUSAGE_THREAD)
    except (OSError, ValueError):
        return _NO_THREAD_IO
    return ThreadIO(usage.ru_inblock * 512, usage.ru_majflt)


# Filesystems whose reads go through the block layer (so read_bytes counts them) or that
# live in memory (so zero read bytes is the truth). Network and FUSE filesystems read
# without block I/O: a zero there would claim "warm" for a cold read, so we say nothing.
_TRUSTED_FS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "overlay", "tmpfs", "ramfs", "jfs", "reiserfs", "vfat", "exfat", "ntfs3", "squashfs", "erofs"}
)


_fs_type_by_device: dict[int, str | None] = {}  # st_dev -> filesystem type (a new mount is a new device)


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding ``path``, from /proc/self/mountinfo (read once per
    device: ~60 us a read here, paid per checkpoint file otherwise)."""
    try:
        device = os.stat(path).st_dev
    except OSError:
        device = None
    if device is not None and device in _fs_type_by_device:
        return _fs_type_by_device[device]
    fs_type = _filesystem_type_from_mountinfo(path)
    if device is not None and fs_type is not None:
        _fs_type_by_device[device] = fs_type
    return fs_type


def filesystem_type_on(device: int, path: str) -> str | None:
    """:func:`filesystem_type` for a path whose ``st_dev`` the caller has (no second stat)."""
    if device in _fs_type_by_device:
        return _fs_type_by_device[device]
    return filesystem_type(path)


def filesystem_trusted(fs_type: str | None) -> bool:
    """Whether reads of this filesystem go through the block layer or live in memory."""
    return fs_type in _TRUSTED_FS


def _filesystem_type_from_mountinfo(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError:
        return None
    best_len, best_type = -1, None
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        mount_point = left.split()[4].replace("\\040", " ")
        fs_type = right.split()[0]
        if _path_within(real, mount_point) and len(mount_point) > best_len:
            best_len, best_type = len(mount_point), fs_type
    return best_type


def _path_within(path: str, mount_point: str) -> bool:
    if mount_point == "/":
        return True
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def read_bytes_trusted(path: str | None) -> bool:
    """Whether the thread read_bytes counter tells cold from warm for this file."""
    if not _IO_ACCOUNTING or path is None:
        return False
    return filesystem_type(path) in _TRUSTED_FS


_libc = None
_LOW_BIT = bytes(i & 1 for i in range(256))  # mincore: bit 0 = resident, others reserved


def _load_libc():
    """glibc's soname directly: ``ctypes.util.find_library`` spawns ``ldconfig`` (5-12 ms,
    during the first file read) and its import costs ~5 ms; it is only the fallback."""
    import ctypes  # first use, not at instrument() (_cachestat_structures)

    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        import ctypes.util as ctypes_util  # binds only ctypes_util: ctypes stays the module's

        return ctypes.CDLL(ctypes_util.find_library("c") or "libc.so.6", use_errno=True)


def _libc_handle():
    import ctypes  # first use, not at instrument() (_cachestat_structures)

    global _libc
    if _libc is None:
        _libc = _load_libc()
        _libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
        _libc.mincore.restype = ctypes.c_int
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _mincore():
    return _libc_handle().mincore


def resident_ratio(path: str) -> float | None:
    """Share of the file's pages in the page cache now, or None where it can't be trusted.

    Since Linux 5.2, mincore on a file the process could not open for writing reports
    every page resident (to close a side channel), so the answer is only used for files
    we may write. cachestat(2) (Linux 6.5+) answers the same question in one call without
    mapping the file, about 4x faster than mincore (2 ms against 8 ms per GiB-sized shard
    here, paid once per file read), and refuses rather than lies; mincore is the fallback.
    """
    try:
        if not os.access(path, os.W_OK):
            return None
        size = os.path.getsize(path)
        if size == 0:
            return None
    except OSError:
        return None
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    cached = _cachestat_pages(path)
    if cached is not None:
        return min(cached, pages) / pages
    return _mincore_ratio(path, size, pages)


# cachestat(2) has the same number in the generic syscall table and on x86-64.
_CACHESTAT_SYSCALL = 451 if getattr(os, "uname", None) and os.uname().machine in ("x86_64", "aarch64", "arm64", "riscv64") else None
_cachestat_works: bool | None = None  # None: not tried yet; False: this kernel lacks it


_cachestat_types: tuple | None = None  # (range, stats) ctypes structures, made at the first probe


def _cachestat_structures() -> tuple:
    """cachestat(2)'s argument structures. Made on first use, with ctypes imported then: a
    process that never reads a checkpoint file does not pay for ctypes at instrument()."""
    global _cachestat_types
    if _cachestat_types is None:
        import ctypes

        class CachestatRange(ctypes.Structure):
            _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

        class Cachestat(ctypes.Structure):
            _fields_ = [(name, ctypes.c_uint64) for name in
                        ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]

        _cachestat_types = (CachestatRange, Cachestat)
    return _cachestat_types


def _cachestat_pages(path: str) -> int | None:
    """Pages of the file in the page cache, from cachestat(2); None where unavailable."""
    import ctypes  # first use, not at instrument() (_cachestat_structures)

    global _cachestat_works
    if _CACHESTAT_SYSCALL is None or _cachestat_works is False or not sys.platform.startswith("linux"):
        return None
    try:
        libc = _libc_handle()
        fd = open_regular_fd(path)
    except (OSError, AttributeError):
        return None
    try:
        range_type, stats_type = _cachestat_structures()
        whole_file = range_type(0, 0)  # len 0: to the end of the file
        stats = stats_type()
        status = libc.syscall(ctypes.c_long(_CACHESTAT_SYSCALL), ctypes.c_int(fd), ctypes.byref(whole_file),
                              ctypes.byref(stats), ctypes.c_uint(0))
        if status != 0:
            if ctypes.get_errno() == errno.ENOSYS:
                _cachestat_works = False
            return None
        _cachestat_works = True
        return int(stats.nr_cache)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    finally:
        os.close(fd)


def _mincore_ratio(path: str, size: int, pages: int) -> float | None:
    resident = mincore_pages(path, size, pages)
    return None if resident is None else resident.count(1) / pages


def mincore_pages(path: str, size: int, pages: int) -> bytes | None:
    """Which of the file's ``pages`` are in the page cache now, one byte a page (1: resident),
    from mincore(2); None where it cannot say. (The same caveat as :func:`resident_ratio`: only
    true for a file the process may write.)"""
    import ctypes  # first use, not at instrument() (_cachestat_structures)

    try:
        with open_regular(path) as handle:
            # A private (copy-on-write) mapping that we never write: ctypes needs a
            # writable buffer to hand mincore an address, and no page is ever copied.
            mapped = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):
        return None
    try:
        vector = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(mapped)
        try:
            status = _mincore()(ctypes.addressof(anchor), size, vector)
        finally:
            del anchor
        if status != 0:
            return None
        return bytes(vector).translate(_LOW_BIT)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    finally:
        mapped.close()


def evict_from_page_cache(path: str) -> bool:
    """Ask the kernel to drop the file's clean pages (POSIX_FADV_DONTNEED). True if asked."""
    try:
        fd = open_regular_fd(path)
    except OSError:
        return False
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except (OSError, AttributeError):
        return False
    finally:
        os.close(fd)


# --- page-cache residency on a sample of a file's pages -------------------------------------

# Files up to this many pages are measured whole; larger ones on SAMPLE_RANGES ranges of
# SAMPLE_PAGES pages, one in each SAMPLE_RANGES-th of the file. cachestat(2) is not O(1): it
# walks the page cache of the range it is given, about 32 ns a page plus ~1-2 us a call
# (ctypes included) here: a whole 160 MiB shard costs ~1.3 ms, the 16 ranges ~0.05 ms. The
# same ranges are used for every measurement of a file, so a difference between two
# measurements compares like with like.
WHOLE_FILE_MAX_PAGES = 2048
SAMPLE_RANGES = 16
SAMPLE_PAGES = 32
# Where that first pass finds a real mix (between REFINE_WITHIN of resident and missing),
# REFINE_RANGES short ranges (REFINE_PAGES) measure it instead (stratified: a contiguous run
# of missing pages is then off by at most 1/192 of the file). A file almost all in (or all
# out) is not refined: its verdict and figure would change by a few percent at most.
REFINE_RANGES = 192
REFINE_PAGES = 4
REFINE_WITHIN = (0.05, 0.95)
_GOLDEN = 0.6180339887498949


class Residency:
    """How many of the looked-at pages of a file were in the page cache, and what they stand
    for: ``sampled`` of the file's ``pages`` were looked at (all of them when small)."""

    __slots__ = ("resident", "sampled", "pages", "ranges")

    def __init__(self, resident: int, sampled: int, pages: int, ranges: tuple) -> None:
        self.resident = resident
        self.sampled = sampled
        self.pages = pages
        self.ranges = ranges  # the (first page, page count) ranges looked at, for the next measurement

    @property
    def ratio(self) -> float:
        return self.resident / self.sampled if self.sampled else 0.0

    @property
    def missing_pages(self) -> float:
        """Estimated pages of the whole file not in the page cache."""
        return (self.sampled - self.resident) / self.sampled * self.pages if self.sampled else 0.0


def _sample_ranges(pages: int, count: int, seed: int = 0, length: int = SAMPLE_PAGES) -> list[tuple[int, int]]:
    """One range of ``length`` pages in each of ``count`` equal strata of the file, at a place
    that differs from stratum to stratum (a golden-ratio sequence: deterministic, cheap).
    Not at the stratum's start: evenly spaced samples alias with regular patterns (every
    other 192 KiB evicted read as 59% resident for 75%)."""
    if pages <= WHOLE_FILE_MAX_PAGES:
        return [(0, pages)]
    stride = pages / count
    room = max(0.0, stride - length)
    ranges = []
    for number in range(count):
        jitter = ((number + 1 + seed * 7919) * _GOLDEN) % 1.0
        first = int(stride * number + jitter * room)
        ranges.append((first, min(length, pages - first)))
    return ranges


def measure_residency(path: str, size: int | None = None, ranges: tuple | None = None) -> Residency | None:
    """Page-cache residency of ``path`` from cachestat(2) on the ranges given (or a fresh sample
    plan), or None where the kernel has no cachestat or refuses it (a file we may not write:
    it refuses rather than lies). mincore is not used here: it needs a mapping of the file and
    answers for every page (O(pages)); :func:`resident_ratio` still falls back to it."""
    if _CACHESTAT_SYSCALL is None or _cachestat_works is False or not sys.platform.startswith("linux"):
        return None
    try:
        if size is None:
            size = os.path.getsize(path)
        fd = open_regular_fd(path)  # never a FIFO or device: an open could block
    except OSError:
        return None
    try:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        if pages == 0:
            return None
        if ranges is None:
            plan = _sample_ranges(pages, SAMPLE_RANGES)
            counted = _cachestat_ranges(fd, plan)
            if counted is None:
                return None
            resident, sampled = counted
            if len(plan) > 1 and REFINE_WITHIN[0] < resident / sampled < REFINE_WITHIN[1]:
                # A mix: the 16 long ranges only detected it. Many short ranges estimate it
                # (16 long ranges are 16 draws, too few for a share: up to 10 points off).
                finer = _sample_ranges(pages, REFINE_RANGES, 1, REFINE_PAGES)
                counted = _cachestat_ranges(fd, finer)
                if counted is not None:
                    plan = finer
                    resident, sampled = counted
            return Residency(resident, sampled, pages, tuple(plan))
        counted = _cachestat_ranges(fd, ranges)
        if counted is None:
            return None
        return Residency(counted[0], counted[1], pages, ranges)
    finally:
        os.close(fd)


def _cachestat_ranges(fd: int, ranges) -> tuple[int, int] | None:
    """(resident pages, pages asked about) over ``ranges`` of (first page, count)."""
    import ctypes  # first use, not at instrument() (_cachestat_structures)

    global _cachestat_works
    if _CACHESTAT_SYSCALL is None:  # (the callers asked resident_pages_by_range's checks first)
        return None
    try:
        syscall = _libc_handle().syscall
        range_type, stats_type = _cachestat_structures()
        span = range_type()
        stats = stats_type()
        number = ctypes.c_long(_CACHESTAT_SYSCALL)
        span_ref, stats_ref = ctypes.byref(span), ctypes.byref(stats)  # made once, not per range
        page = mmap.PAGESIZE
        resident = asked = 0
        for first, count in ranges:
            span.off = first * page
            span.len = count * page
            if syscall(number, fd, span_ref, stats_ref, 0) != 0:
                if ctypes.get_errno() == errno.ENOSYS:
                    _cachestat_works = False
                return None
            resident += min(int(stats.nr_cache), count)
            asked += count
        _cachestat_works = True
        return resident, asked
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def resident_pages_by_range(fd: int, ranges) -> list[int] | None:
    """Exact resident pages of each (first page, page count) range of the open file ``fd``,
    from cachestat(2) (one call a range: ~2 us plus ~4 ns a resident page here); None where
    the kernel has no cachestat or refuses it. The first-use follow-up (first_use.py) counts
    the pages of a mapped file that came in after ready() with it."""
    if _CACHESTAT_SYSCALL is None or _cachestat_works is False or not sys.platform.startswith("linux"):
        return None
    counts = []
    for first, count in ranges:
        counted = _cachestat_ranges(fd, ((first, count),))
        if counted is None:
            return None
        counts.append(counted[0])
    return counts


def mapped_files() -> tuple[set, set] | None:
    """The regular files this process maps now: ({(st_dev, st_ino)}, {path}) from
    ``/proc/self/maps`` (~1 ms with torch imported), None where it cannot be read. Both, because
    an overlay filesystem shows the underlying file's device and inode there, and its own path."""
    identities: set = set()
    paths: set = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split(None, 5)
                if len(parts) < 6 or parts[4] == "0":
                    continue  # anonymous memory, the heap, the stack
                try:
                    major, minor = parts[3].split(":")
                    identities.add((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])))
                except ValueError:
                    pass
                paths.add(parts[5].rstrip("\n"))
    except OSError:
        return None
    return identities, paths


def file_residency(path: str, size: int | None = None, ranges: tuple | None = None) -> Residency | None:
    """Page-cache residency of a file: cachestat(2) on a sample of its pages, or, on kernels
    without cachestat (before 6.5), mincore over the whole file where its answer can be
    trusted (files the process may write). ``ranges``: those of an earlier measurement."""
    found = measure_residency(path, size, ranges)
    if found is not None or _cachestat_works is True:
        return found
    ratio = resident_ratio(path)  # the mincore fallback, with its own trust check
    if ratio is None:
        return None
    try:
        pages = (os.path.getsize(path) + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    except OSError:
        return None
    return Residency(round(ratio * pages), pages, pages, ((0, pages),))


def process_read_bytes() -> int | None:
    """Bytes the whole process has read from storage (``/proc/self/io`` read_bytes: every
    thread's, those of threads a native library started included, O_DIRECT reads too); None
    where it cannot be read. About 10 us: for readers whose own threads read (the Run:ai
    Model Streamer), never per call."""
    try:
        with open("/proc/self/io", "rb") as handle:
            for line in handle:
                if line.startswith(b"read_bytes:"):
                    return int(line.split(b":", 1)[1])
    except (OSError, ValueError):
        return None
    return None
