"""One start-up, in a fresh process, that reads many small safetensors files.

    python benchmarks/_many_files_child.py SIDE API PATH_LIST_FILE

SIDE is ``plain`` (nothing of the plugin imported) or ``coldstart`` (``otel_coldstart``
imported and ``instrument()`` called as the first statements, the embedded default
exporter, ``ready()`` after the reads). API is ``load_file`` or ``safe_open`` (a with-block
and ``get_tensor`` of every tensor, as transformers reads a shard). PATH_LIST_FILE holds
one path a line. Prints one JSON line: the load's wall and thread-CPU seconds (the reads
alone), the process's wall from its first statement to after ready(), and on the
``coldstart`` side the ``own_cost_s`` the start-up reports about itself.
"""

import json
import sys
import time

SIDE, API, LIST = sys.argv[1], sys.argv[2], sys.argv[3]
began = time.perf_counter()
if SIDE == "coldstart":
    import otel_coldstart

    otel_coldstart.instrument()

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

torch.set_num_threads(1)
with open(LIST, encoding="utf-8") as listing:
    paths = [line.strip() for line in listing if line.strip()]

load_began, load_cpu = time.perf_counter(), time.thread_time()
total = 0
if API == "load_file":
    for path in paths:
        total += sum(t.nbytes for t in load_file(path).values())
else:
    for path in paths:
        with safe_open(path, framework="pt") as handle:
            for name in handle.keys():
                total += handle.get_tensor(name).nbytes
load_s, load_cpu_s = time.perf_counter() - load_began, time.thread_time() - load_cpu

own = None
if SIDE == "coldstart":
    from otel_coldstart import session as _session

    session = _session.ACTIVE
    otel_coldstart.ready()
    own = {k: v for k, v in session.root_attributes.items() if k.startswith("coldstart.own_cost")}
print(json.dumps({"side": SIDE, "api": API, "files": len(paths), "bytes": total, "load_s": load_s,
                  "load_cpu_s": load_cpu_s, "startup_s": time.perf_counter() - began, "own_cost": own}))
