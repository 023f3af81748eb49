"""A launcher that starts a 2-rank torch.distributed start-up on CPU as one trace.

    python examples/multiprocess_launch.py [WORLD_SIZE]

The launcher opens a ``coldstart.launch`` span with :class:`otel_coldstart.launch.Launch`
and starts every rank with ``TRACEPARENT`` set to it; each rank prints its own breakdown at
``ready()``. Then the launcher reads the trace files back and prints the joined view: one
trace id, one ``model.startup`` per rank under the launcher's span.
"""

import os
import socket
import subprocess
import sys
import tempfile

from otel_coldstart.demo import LlamaShape, generate_checkpoint
from otel_coldstart.launch import Launch

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(world_size: int = 2) -> int:
    checkpoint = os.path.join(tempfile.gettempdir(), "otel-coldstart-multiprocess-example")
    generate_checkpoint(checkpoint, LlamaShape(vocab=4096, hidden=256, intermediate=688, layers=4, shards=4))
    output_dir = os.path.abspath(os.environ.get("OTEL_COLDSTART_OUTPUT_DIR", "otel-coldstart-traces"))
    init_method = f"tcp://127.0.0.1:{free_port()}"  # loopback only
    with Launch("launch 2-rank example", output_dir=output_dir) as launched:
        ranks = [
            subprocess.Popen([sys.executable, os.path.join(HERE, "multiprocess_rank.py"), checkpoint, str(rank),
                              str(world_size), init_method],
                             env={**launched.env(local_rank=rank), "OTEL_COLDSTART_OUTPUT_DIR": output_dir})
            for rank in range(world_size)
        ]
        codes = [rank.wait() for rank in ranks]
    print(f"\nlauncher: ranks exited {codes}; one trace: {launched.traceparent.split('-')[1]}")
    print(f"launcher: every rank's breakdown again: otel-coldstart analyze {output_dir}")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
