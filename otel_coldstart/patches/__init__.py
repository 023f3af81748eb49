"""One module per patched library, each with the same small surface:

``TARGETS`` (the modules whose import triggers it), ``HOT_PATH`` (removed at ``ready()``),
``patch()``, ``unpatch()``, ``is_patched()`` and ``get_version()``; optionally
``end_of_startup()``, called when the start-up ends. Patching is idempotent and ``unpatch()``
puts back the exact original objects.
"""

from __future__ import annotations

from . import compile, cuda_graphs, pinning, runtime, safetensors, tensor_ops, threads, torch_load

ALL = (torch_load, safetensors, tensor_ops, threads, pinning, cuda_graphs, runtime, compile)
