"""``otel-coldstart demo``: trace a real checkpoint load with a cold first shard."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from .. import demo
from .errors import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint-dir", default=None,
                        help=f"where the checkpoint is cached (default {demo.default_cache_dir()})")
    parser.add_argument("--output-dir", default=None,
                        help="where the OTLP JSON trace is written (default ./otel-coldstart-traces)")
    parser.add_argument("--warm", action="store_true", help="keep every shard in the page cache")


def run(args: argparse.Namespace) -> int:
    directory = args.checkpoint_dir or demo.default_cache_dir()
    print(f"[demo] checkpoint: {directory}", file=sys.stderr)
    try:
        paths = demo.generate_checkpoint(directory)
    except OSError as exc:
        raise CliError(f"cannot write the demo checkpoint to {directory}: {exc.strerror or exc}", 3) from None
    evicted = demo.set_cache_state(paths, set() if args.warm else {0})
    if not args.warm:
        note = "evicted from the page cache" if evicted else "could not be evicted on this OS"
        print(f"[demo] first shard {os.path.basename(paths[0])}: {note}", file=sys.stderr)
    env = dict(os.environ)
    if args.output_dir:
        env["OTEL_COLDSTART_OUTPUT_DIR"] = args.output_dir
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        if name in env:
            print(f"[demo] exporting over OTLP to {env[name]} ({name})", file=sys.stderr)
    completed = subprocess.run([sys.executable, "-m", "otel_coldstart._demo_child", directory], env=env)
    return completed.returncode
