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

The first request (otel_coldstart/first_token.py) is marked in the process that turns the
engine's outputs into responses (the front end: ``AsyncLLM`` / ``LLMEngine``), on its
``OutputProcessor``: it begins at the first ``add_request`` and ends when the first
``process_outputs`` that carries a finished request returns (the first request the engine
finishes; with several in flight, whichever finishes first). Both wrappers are removed then:
steady-state serving calls vLLM's own methods again. Until then each ``process_outputs``
call looks at its outputs' ``finish_reason`` once (the steps of the first request only).

Opt-in: only vLLM's general plugin (``otel_coldstart/vllm_plugin.py``, ``register()``)
arms this module, because ending the start-up there is a choice the plugin makes for a
deployment that cannot call ``ready()`` itself. A program that calls ``instrument()`` and
runs vLLM in-process keeps calling ``ready()`` where it decides. Once armed, it patches
like every other module (on import of the targets, or at once if they are imported) and
``uninstrument()`` puts the original methods back.
"""

from __future__ import annotations

import sys

from .._errors import internal_errors
from ._wrapping import PatchSet, installed_version

# (module, attribute path) whose return means "this process can serve".
READY_POINTS = (
    ("vllm.v1.worker.gpu_worker", "Worker.compile_or_warm_up_model"),
    ("vllm.v1.worker.cpu_worker", "CPUWorker.compile_or_warm_up_model"),
    ("vllm.v1.engine.core", "EngineCore.__init__"),
    ("vllm.v1.engine.llm_engine", "LLMEngine.__init__"),
    ("vllm.v1.engine.async_llm", "AsyncLLM.__init__"),
)

# The front end's output processor: where the first request begins and ends (see above).
OUTPUT_PROCESSOR = ("vllm.v1.engine.output_processor", "OutputProcessor")

TARGETS = tuple(dict.fromkeys([module for module, _ in READY_POINTS] + [OUTPUT_PROCESSOR[0]]))
HOT_PATH = False  # each point is called once per process

_patches = PatchSet()
is_patched = _patches.is_patched  # the patch module protocol (patches/__init__.py)
_first_request_patches = PatchSet()  # removed once the first request ended (or at unpatch)
_first_request = None  # first_request.FirstRequest while the first request runs
_first_request_done = False  # per process: the first request was marked (or could not be)
_armed = False  # the vLLM plugin is loaded in this process (per process, as the plugin is)


def get_version() -> str | None:
    return installed_version("vllm")


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
    module = sys.modules.get(OUTPUT_PROCESSOR[0])
    processor = getattr(module, OUTPUT_PROCESSOR[1], None) if module is not None else None
    if processor is not None and not _first_request_done:
        if getattr(processor, "add_request", None) is not None and getattr(processor, "process_outputs", None):
            _first_request_patches.wrap(processor, "add_request", _first_request_begins)
            _first_request_patches.wrap(processor, "process_outputs", _first_request_ends)


def unpatch() -> None:
    _patches.restore()
    _first_request_patches.restore()


def _ready_after(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)  # vLLM's exception passes through untouched
    with internal_errors("vllm: ready"):
        from ..controller import CONTROLLER  # the runtime, never the package face

        CONTROLLER.ready()
    return result


def _first_request_begins(wrapped, instance, args, kwargs):
    """``OutputProcessor.add_request``: the first request after ready() begins (its own time
    included: it tokenizes, as the request does)."""
    global _first_request, _first_request_done
    if _first_request is None and not _first_request_done:
        with internal_errors("vllm: first request begins"):
            from .. import session as _session
            from ..first_token import SOURCE_VLLM, begin

            active = _session.ACTIVE
            if active is not None and active.ended:  # only after this process's ready()
                _first_request_done = True
                _first_request = begin(active, SOURCE_VLLM)
                if _first_request is None:
                    _first_request_patches.restore()
    return wrapped(*args, **kwargs)  # vLLM's exception passes through untouched


def _first_request_ends(wrapped, instance, args, kwargs):
    """``OutputProcessor.process_outputs``: the first call that carries a finished request ends
    the first request once it returned, and the wrappers go."""
    global _first_request
    result = wrapped(*args, **kwargs)
    request = _first_request
    if request is not None:
        with internal_errors("vllm: first request ends"):
            outputs = args[0] if args else kwargs.get("engine_core_outputs", ())
            if any(getattr(output, "finish_reason", None) is not None for output in outputs or ()):
                _first_request = None
                _first_request_patches.restore()  # steady-state serving: vLLM's own methods again
                request.end()
    return result
