"""One module per patched library, each with the same small surface:

``TARGETS`` (the modules whose import triggers it), ``HOT_PATH`` (removed at ``ready()``),
``patch()``, ``unpatch()``, ``is_patched()`` and ``get_version()``; optionally
``end_of_startup(session)``, called when the start-up ends (``Startup._end``). Patching is
idempotent and ``unpatch()`` puts back the exact original objects.

Per-start-up state (open safe_open handles, graph captures, compilations, CUDA seen up, the
CUDA-event windows) lives on the session, ``session.state(__name__, Factory)``, never in a
module global: a fork, ``uninstrument()`` or a new start-up drops it with the session. The
storage ledger is the Startup's (``session.startup.storage``): its end settles it. Module
globals keep what is per process: the ``PatchSet`` of originals, caches of file facts,
constants, what the process saw once (CUDA initialised, the driver's start).

A patch module is imported when its library is (``load``), not with the package: a process
that never imports vLLM, transformers or torch._dynamo does not pay for their patch modules,
and one that has not imported torch yet at ``instrument()`` pays for torch's when torch
comes. ``TARGETS`` below is each module's own ``TARGETS``, written out so that nothing has
to be imported to know it (a test holds the two equal).
"""

from __future__ import annotations

import importlib
import sys

# In patching order: imports first, so the others' own imports at patch time are counted.
TARGETS: dict[str, tuple[str, ...]] = {
    "imports": ("_frozen_importlib",),
    "torch_load": ("torch",),
    "safetensors": ("safetensors", "safetensors.torch"),
    "tensor_ops": ("torch",),
    "threads": ("concurrent.futures",),
    "pinning": ("torch",),
    "cuda_graphs": ("torch",),
    "runtime": ("torch",),
    "compile": ("torch._dynamo",),
    "vllm": ("vllm.v1.worker.gpu_worker", "vllm.v1.worker.cpu_worker", "vllm.v1.engine.core",
             "vllm.v1.engine.llm_engine", "vllm.v1.engine.async_llm", "vllm.v1.engine.output_processor"),
    "runai_streamer": ("runai_model_streamer.safetensors_streamer.safetensors_streamer",),
    "transformers": ("transformers.modeling_utils", "transformers.models.auto.auto_factory",
                     "transformers.models.auto.modeling_auto"),
    "huggingface_hub": ("huggingface_hub.file_download", "huggingface_hub._snapshot_download",
                        "huggingface_hub.utils._http", "transformers.utils.hub"),
    "s3": ("s3transfer.manager", "botocore.client"),
    "fsspec": ("fsspec.spec",),
}
NAMES = tuple(TARGETS)


def load(name: str):
    """The patch module ``name`` (a key of TARGETS), imported on first use."""
    return importlib.import_module(f"{__name__}.{name}")


def loaded() -> list:
    """The patch modules imported so far, in patching order: the only ones that can have
    patched anything or hold per-start-up state."""
    return [module for module in (sys.modules.get(f"{__name__}.{name}") for name in NAMES) if module is not None]


def __getattr__(attribute: str):
    # ``patches.ALL``: every patch module, imported (tests and tools that want the whole set;
    # the runtime uses loaded()).
    if attribute == "ALL":
        return tuple(load(name) for name in NAMES)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
