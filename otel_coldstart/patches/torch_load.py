"""``torch.load``: one ``deserialize`` span per checkpoint file.

Both ``torch.load`` and ``torch.serialization.load`` are patched: they are the same function
under two names, and callers use either. Inside a zip checkpoint, the time spent reading
storages (``PyTorchFileReader.get_storage_from_record``) is measured apart from unpickling,
so the span says whether the time went to the disk or to Python.
"""

from __future__ import annotations

import os
import threading
import time

from .. import semconv, session as _session
from ._files import FileRead, traced_read
from ._wrapping import PatchSet, installed_version

TARGETS = ("torch",)
HOT_PATH = False

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)
_local = threading.local()  # .storage_ns / .storage_reads while a torch.load runs here


def get_version() -> str | None:
    return installed_version("torch")


def patch() -> None:
    import torch
    import torch.serialization

    _patches.wrap(torch, "load", _load)
    _patches.wrap(torch.serialization, "load", _load)
    reader = getattr(torch._C, "PyTorchFileReader", None)
    if reader is not None and hasattr(reader, "get_storage_from_record"):
        _patches.wrap(reader, "get_storage_from_record", _storage_read)


def _path_of(f) -> str | None:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f) if not isinstance(f, bytes) else None
    name = getattr(f, "name", None)
    return name if isinstance(name, str) and os.path.isfile(name) else None


def _load(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or getattr(_local, "active", False):
        return wrapped(*args, **kwargs)
    source = args[0] if args else kwargs.get("f")
    mmap = bool(kwargs.get("mmap"))

    def open_read():
        _local.storage_ns = 0
        _local.storage_reads = 0
        return FileRead(session, _path_of(source), None, "torch.load")

    def finish(read):
        attrs = {semconv.TORCH_LOAD_MMAP: mmap}
        if getattr(_local, "storage_reads", 0):
            attrs[semconv.TORCH_LOAD_STORAGE_READ_S] = _local.storage_ns / 1e9
            attrs[semconv.TORCH_LOAD_STORAGE_READS] = _local.storage_reads
        return {"reads_deferred": mmap, "attributes": attrs}

    _local.active = True
    try:
        return traced_read(open_read, wrapped, args, kwargs, finish)
    finally:
        _local.active = False


def _storage_read(wrapped, instance, args, kwargs):
    if not getattr(_local, "active", False):
        return wrapped(*args, **kwargs)
    start = time.perf_counter_ns()
    try:
        return wrapped(*args, **kwargs)
    finally:
        _local.storage_ns = getattr(_local, "storage_ns", 0) + time.perf_counter_ns() - start
        _local.storage_reads = getattr(_local, "storage_reads", 0) + 1
