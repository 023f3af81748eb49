"""Issue 28's follow-up cost: what one pass of the first-use follow-up (otel_coldstart/first_use.py)
costs the monitor thread, per followed file, in the states a file is in after ready().

A pass is one exact residency sample of each followed file (cachestat(2) per 8 MiB chunk,
only the chunks not yet found full) plus the records due. Measured in-process on files of
``--mib`` MiB written here, each in one state: ``evicted`` (all chunks asked), ``tail``
(its last third evicted), ``sparse`` (2 MiB out of every 8 MiB: every chunk asked, each
3/4 full: the costliest, as cachestat walks the resident pages). A resident file costs
nothing: its following ends at the first sample. The thread's CPU time per pass (``time.thread_time``) over ``--passes`` passes, for 1
and ``--files`` files; the follow-up's own budget (COST_SHARE, 1% of a core) then gives the
tick it would run at (0.25 s at least). Run on a quiet machine for the record (it writes
``--files`` x ``--mib`` MiB at once, 8 GiB with these, to a local disk: not tmpfs)::

    python benchmarks/first_use_cost.py --mib 512 --files 16 --passes 200 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import load_average  # noqa: E402
from otel_coldstart import first_use, probes  # noqa: E402

MIB = 1 << 20


class _Lazy:
    def __init__(self, path: str) -> None:
        self.path, self.size, self.identity, self.unread = path, os.path.getsize(path), None, 0

    def record(self, name: str, attrs: dict) -> None:
        pass


def _make(directory: str, index: int, mib: int, state: str) -> str:
    path = os.path.join(directory, f"f{index}.bin")
    with open(path, "wb") as handle:
        block = os.urandom(MIB)
        for _ in range(mib):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
    with open(path, "rb") as handle:
        while handle.read(16 * MIB):
            pass
    fd = os.open(path, os.O_RDONLY)
    try:
        if state == "evicted":
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        elif state == "tail":
            os.posix_fadvise(fd, (mib * MIB * 2 // 3) // 4096 * 4096, 0, os.POSIX_FADV_DONTNEED)
        else:  # sparse: 2 MiB out of every 8 MiB (the page cache's large folios here are up to
            #      2 MiB: a smaller range is not dropped), so every chunk stays open, 3/4 full
            for offset in range(0, mib * MIB, 8 * MIB):
                os.posix_fadvise(fd, offset, 2 * MIB, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path


def measure(directory: str, files: int, mib: int, state: str, passes: int) -> dict:
    paths = [_make(directory, i, mib, state) for i in range(files)]
    follow = first_use.FollowUp([_Lazy(p) for p in paths], time.time_ns(), bound_s=1e9)
    follow._pass(None)  # the baseline
    ratio = probes.resident_ratio(paths[0])
    costs = []
    for _ in range(passes):
        started = time.thread_time()
        follow._pass(None)
        costs.append(time.thread_time() - started)
    for path in paths:
        os.unlink(path)
    per_pass = statistics.median(costs)
    return {"state": state, "files": files, "mib": mib, "pass_ms": round(per_pass * 1e3, 4),
            "per_file_ms": round(per_pass * 1e3 / files, 4),
            "tick_s": round(max(first_use.TICK_S, per_pass / first_use.COST_SHARE), 3),
            "resident_ratio": round(ratio, 3) if ratio is not None else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--dir", default=None, help="where to write the files (a local disk, not tmpfs)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.dir is not None and not os.path.isdir(args.dir):
        parser.error(f"--dir {args.dir}: not a directory")
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for state in ("evicted", "tail", "sparse"):
            for files in (1, args.files):
                rows.append(measure(directory, files, args.mib, state, args.passes))
    print(f"load average {load_average()}; {args.mib} MiB files; median thread CPU per pass")
    print("| state | resident | files | pass | per file | tick at 1% of a core |\n|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['state']} | {row['resident_ratio']} | {row['files']} | {row['pass_ms']:.3f} ms | "
              f"{row['per_file_ms']:.3f} ms | {row['tick_s']:.2f} s |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"load_average": load_average(), "rows": rows}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
