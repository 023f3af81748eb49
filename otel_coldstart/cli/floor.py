"""``otel-coldstart floor PATH...``: what plain read(2) gets from the storage, cold and warm."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .. import floor
from .errors import EXIT_INPUT_UNREADABLE, EXIT_USAGE, EXIT_WOULD_OVERWRITE, CliError

MAX_BLOCK_SIZE = 1 << 30  # one read(2) buffer is allocated at this size


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="checkpoint files or directories")
    parser.add_argument("--repeat", type=_positive_int, default=3,
                        help="timed reads per cache state; the median is reported (default 3)")
    parser.add_argument("--block-size", type=_positive_int, default=floor.DEFAULT_BLOCK_SIZE,
                        help=f"bytes per read(2) (default {floor.DEFAULT_BLOCK_SIZE})")
    parser.add_argument("--only", choices=floor.STATES, default=None,
                        help="measure one cache state only")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="also write the JSON result to FILE (never overwritten)")


def run(args: argparse.Namespace) -> int:
    if not 4096 <= args.block_size <= MAX_BLOCK_SIZE:
        raise CliError(f"--block-size must be between 4096 and {MAX_BLOCK_SIZE} (1 GiB), not {args.block_size}",
                       EXIT_USAGE)
    if args.output and os.path.exists(args.output):
        raise CliError(f"{args.output} exists; not overwriting it", EXIT_WOULD_OVERWRITE)
    states = (args.only,) if args.only else floor.STATES
    try:
        result = floor.measure(args.paths, repeats=args.repeat, states=states, block_size=args.block_size)
    except floor.FloorInputError as exc:
        raise CliError(str(exc), EXIT_INPUT_UNREADABLE) from None
    except OSError as exc:
        raise CliError(f"{exc.filename or 'read'}: {exc.strerror or exc}", EXIT_INPUT_UNREADABLE) from None
    document = result.to_json()
    if args.output:
        try:
            with open(args.output, "x", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1)
                handle.write("\n")
        except FileExistsError:
            raise CliError(f"{args.output} exists; not overwriting it", EXIT_WOULD_OVERWRITE) from None
        except OSError as exc:
            raise CliError(f"{args.output}: cannot write ({exc.strerror or exc})", EXIT_INPUT_UNREADABLE) from None
    if args.json:
        json.dump(document, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        render_text(result, sys.stdout)
    return 0


def render_text(result: floor.FloorResult, out) -> None:
    size_gib = result.total_bytes / (1 << 30)
    out.write(f"read(2) floor: {len(result.files)} file(s), {size_gib:.2f} GiB, "
              f"{result.block_size} bytes per read\n")
    kinds = ", ".join(sorted(set(result.memory_backed.values())))
    if result.memory_backed and not result.all_memory_backed:
        out.write(f"  note: {len(result.memory_backed)} of {len(result.files)} file(s) are on {kinds}, held in "
                  "memory with no storage behind it: their cold reads are memory copies\n")
    for state, runs in result.states.items():
        if state == "cold" and result.all_memory_backed:
            out.write(f"  cold  none: {floor.MEMORY_BACKED_COLD.format(fs=kinds)}\n")
            continue
        seconds = runs.seconds
        line = (f"  {state:<4}  {floor.format_rate(result.bytes_per_s(state)):>11}"
                f"   median of {len(seconds)}: {runs.median_seconds():.3f} s"
                f" (range {min(seconds):.3f}-{max(seconds):.3f} s)")
        if state == "cold":
            if not runs.evicted:
                line += "; the OS refused eviction: this is not a cold read"
            else:
                resident = [r for r in runs.resident_after_evict if r is not None]
                if resident and max(resident) > 0.01:
                    line += f"; up to {max(resident):.0%} stayed resident after eviction"
        out.write(line + "\n")
