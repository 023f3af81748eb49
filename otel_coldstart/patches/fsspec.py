"""fsspec file systems: each remote file opened for reading during the start-up as a
``coldstart.download.file`` span (phase ``download``), like a hub file or an S3 object.

Weights reach some servers through fsspec (``fsspec.open("s3://…/model.pt")``, ``hf://``
paths through ``HfFileSystem``, ``gcs://``, ``abfs://``, ``http(s)://``): the bytes come over
the network inside the file object's ``read``, which the loader (``torch.load(f)``,
``safetensors.torch.load(f.read())``) calls. ``AbstractFileSystem.open`` (which the file
systems inherit; each implements ``_open``) is wrapped: for a remote file system and a
binary read, that one file object's ``read`` and ``close`` are wrapped (the instance's,
never the class's). The span runs from the open to the close, or to the read that reaches
the file's size, whichever comes first; a file still open when the start-up ends is closed
as interrupted with the bytes it had.

Bytes received: what the reads returned, or what the file's block cache fetched
(``cache.total_requested_bytes``) when that is more (read-ahead). They are counted as reads
return: a start-up killed inside one large read (the whole file at once, or a block as big as
the file) has the file in its report, interrupted, with the bytes of the reads that returned. Local and in-memory file
systems (``file``, ``local``, ``memory``) are not downloads: their reads are the loaders'.
``get``/``cat`` of asynchronous file systems (s3fs, gcsfs, HTTP) fetch without a file object
and are not followed; boto3's own transfers are (patches/s3.py).
"""

from __future__ import annotations

import sys

from .. import semconv, session as _session
from .._errors import internal_errors, report_internal_error
from ._downloads import InFlight, enter_followed_read, inside_followed_read, leave_followed_read, open_download
from ._wrapping import PatchSet, installed_version
from .huggingface_hub import endpoint_host

SPEC = "fsspec.spec"
TARGETS = (SPEC,)
HOT_PATH = False  # one check per open(); reads are wrapped only on the remote files opened for the start-up

LOCAL_PROTOCOLS = frozenset({"file", "local", "memory"})

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)


def get_version() -> str | None:
    return installed_version("fsspec")


def patch() -> None:
    spec = sys.modules.get(SPEC)
    base = getattr(spec, "AbstractFileSystem", None)
    if isinstance(base, type):
        _patches.wrap(base, "open", _open)


def _open(wrapped, instance, args, kwargs):
    opened = wrapped(*args, **kwargs)
    session = _session.ACTIVE
    if session is None or inside_followed_read():
        return opened
    mode = args[1] if len(args) > 1 else kwargs.get("mode", "rb")
    if not isinstance(mode, str) or "b" not in mode or "r" not in mode or "+" in mode:
        return opened  # text mode re-enters open() in binary; writes are not downloads
    with internal_errors("fsspec: open"):
        protocols = instance.protocol if isinstance(instance.protocol, (tuple, list)) else (instance.protocol,)
        if not protocols or any(protocol in LOCAL_PROTOCOLS for protocol in protocols):
            return opened
        found = open_download(session, _attributes(instance, protocols[0], args, kwargs), "fsspec")
        if found is not None:
            size = getattr(opened, "size", None)
            found.expected = size if isinstance(size, int) else None
            try:
                _follow(opened, found)
            except Exception:
                found.close()  # a file object that cannot be followed (slots, a C type): no open span left behind
                raise
    return opened


def _attributes(fs, protocol, args, kwargs) -> dict:
    path = args[0] if args else kwargs.get("path")
    attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_FSSPEC, semconv.DOWNLOAD_TRANSPORT: str(protocol)}
    if isinstance(path, str):
        attrs[semconv.DOWNLOAD_FILENAME] = fs._strip_protocol(path)
    # HfFileSystem's endpoint; s3fs's endpoint_url among its client arguments.
    client_kwargs = getattr(fs, "client_kwargs", None)
    host = endpoint_host(getattr(fs, "endpoint", None) or getattr(fs, "endpoint_url", None)
                         or (client_kwargs.get("endpoint_url") if isinstance(client_kwargs, dict) else None))
    if host is not None:
        attrs[semconv.DOWNLOAD_HOST] = host
    return attrs


def _follow(opened, found: InFlight) -> None:
    """Wrap this file object's read and close: bytes counted, the span ended once."""
    read, close = opened.read, opened.close

    def fetched() -> None:
        cache = getattr(opened, "cache", None)
        requested = getattr(cache, "total_requested_bytes", None)
        if isinstance(requested, int):
            found.raise_to(requested)  # read-ahead may have fetched more than was read

    def read_and_count(*args, **kwargs):
        outer = enter_followed_read()
        try:
            chunk = read(*args, **kwargs)
        finally:
            leave_followed_read(outer)
        try:
            found.add(len(chunk))
            if found.expected is not None and getattr(opened, "loc", 0) >= found.expected:
                fetched()
                found.close()
        except Exception:
            report_internal_error("fsspec: read")
        return chunk

    def close_and_end(*args, **kwargs):
        with internal_errors("fsspec: close"):
            fetched()
        found.close()  # never raises (reports its own errors)
        return close(*args, **kwargs)

    opened.read = read_and_count
    opened.close = close_and_end
