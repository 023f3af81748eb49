"""vLLM: end each vLLM process's start-up where vLLM's own start-up ends.

A vLLM deployment is several processes (front end, engine core, workers), none of which
calls ``ready()``. The calls whose return means "this process can serve" are wrapped, and
call ``otel_coldstart.ready()`` after the host's call returned:

- a worker: ``Worker.compile_or_warm_up_model`` (GPU) / ``CPUWorker.compile_or_warm_up_model``;
- the engine core: ``EngineCore.__init__``;
- the front end: ``LLMEngine.__init__`` / ``AsyncLLM.__init__``.

Several exist in one process (a single-process engine has a worker inside its engine
core): ``ready()`` is idempotent, the first one ends the start-up. A point missing from the
installed vLLM version is skipped. vLLM's exception passes through untouched.

Opt-in: only vLLM's general plugin (``otel_coldstart/vllm_plugin.py``, ``register()``)
arms this module, because ending the start-up there is a choice the plugin makes for a
deployment that cannot call ``ready()`` itself. A program that calls ``instrument()`` and
runs vLLM in-process keeps calling ``ready()`` where it decides. Once armed, it patches
like every other module (on import of the targets, or at once if they are imported) and
``uninstrument()`` puts the original methods back.
"""

from __future__ import annotations

import sys

from .._errors import report_internal_error
from ._wrapping import PatchSet, installed_version

# (module, attribute path) whose return means "this process can serve".
READY_POINTS = (
    ("vllm.v1.worker.gpu_worker", "Worker.compile_or_warm_up_model"),
    ("vllm.v1.worker.cpu_worker", "CPUWorker.compile_or_warm_up_model"),
    ("vllm.v1.engine.core", "EngineCore.__init__"),
    ("vllm.v1.engine.llm_engine", "LLMEngine.__init__"),
    ("vllm.v1.engine.async_llm", "AsyncLLM.__init__"),
)

TARGETS = tuple(dict.fromkeys(module for module, _ in READY_POINTS))
HOT_PATH = False  # each point is called once per process

_patches = PatchSet()
_armed = False  # the vLLM plugin is loaded in this process (per process, as the plugin is)


def get_version() -> str | None:
    return installed_version("vllm")


def is_patched() -> bool:
    return bool(_patches)


def arm() -> None:
    """Called by the vLLM plugin: from now on, patch() wraps the ready points."""
    global _armed
    _armed = True


def patch() -> None:
    if not _armed:
        return
    for module_name, attribute in READY_POINTS:
        module = sys.modules.get(module_name)
        if module is None:
            continue  # the post-import hook calls patch() again when it arrives
        owner_name, _, method = attribute.rpartition(".")
        owner = getattr(module, owner_name, None)
        if owner is None or getattr(owner, method, None) is None:
            continue  # another vLLM version: this point does not exist there
        _patches.wrap(owner, method, _ready_after)


def unpatch() -> None:
    _patches.restore()


def _ready_after(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)  # vLLM's exception passes through untouched
    try:
        from ..controller import CONTROLLER  # the runtime, never the package face

        CONTROLLER.ready()
    except Exception:
        report_internal_error("vllm: ready")
    return result
