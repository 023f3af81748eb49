"""One module per patched library, each with the same small surface:

``TARGETS`` (the modules whose import triggers it), ``HOT_PATH`` (removed at ``ready()``),
``patch()``, ``unpatch()``, ``is_patched()`` and ``get_version()``; optionally
``end_of_startup(session)``, called when the start-up ends. Patching is idempotent and
``unpatch()`` puts back the exact original objects.

Per-start-up state (open safe_open handles, graph captures, compilations, CUDA init seen)
lives on the session, ``session.state(__name__, Factory)``, never in a module global: a
fork, ``uninstrument()`` or a new start-up drops it with the session. Module globals keep
what is per process: the ``PatchSet`` of originals, caches of file facts, constants.
"""

from __future__ import annotations

from . import compile, cuda_graphs, imports, pinning, runtime, safetensors, tensor_ops, threads, torch_load, vllm
from . import transformers

# imports first: patched before the others, so their own imports at patch time are counted.
ALL = (imports, torch_load, safetensors, tensor_ops, threads, pinning, cuda_graphs, runtime, compile, vllm,
       transformers)
