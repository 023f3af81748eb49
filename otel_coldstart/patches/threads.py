"""Thread pools: carry the submitter's trace context into ``ThreadPoolExecutor`` work.

transformers 5 materialises weights on a 4-thread pool and vLLM has a multi-thread loader;
without this, the shard spans those threads create would have no parent (orphan roots in
Jaeger). Only during start-up: removed at ``ready()``.
"""

from __future__ import annotations

import functools

from opentelemetry import context as otel_context

from .. import session as _session
from ._wrapping import PatchSet

TARGETS = ("concurrent.futures",)
HOT_PATH = True

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)


def get_version() -> str | None:
    return None  # part of the standard library


def patch() -> None:
    from concurrent.futures import ThreadPoolExecutor

    _patches.wrap(ThreadPoolExecutor, "submit", _submit)


def _submit(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or session.ended or not args:
        return wrapped(*args, **kwargs)
    fn, rest = args[0], args[1:]
    submitted_from = otel_context.get_current()

    @functools.wraps(fn)
    def run_in_submitters_context(*call_args, **call_kwargs):
        token = otel_context.attach(submitted_from)
        try:
            return fn(*call_args, **call_kwargs)
        finally:
            otel_context.detach(token)

    return wrapped(run_in_submitters_context, *rest, **kwargs)
