"""The Run:ai Model Streamer (``runai-model-streamer``, vLLM's ``--load-format runai_streamer``):
one ``deserialize`` span per safetensors file it streams from local storage.

The streamer parses the files' headers and then reads every tensor with its own native
threads (O_DIRECT where the filesystem allows it: the page cache is bypassed), handing
ready tensors to the caller through ``SafetensorsStreamer.get_tensors()``. None of
safetensors' loaders runs, so the safetensors patches see nothing. Patched here:

- ``SafetensorsStreamer.stream_files`` (``stream_file`` calls it): the stream begins; the
  residency of each local file is measured before the streamer opens it (the storage ledger,
  patches/_storage.py), and the process's storage read counter is read.
- ``SafetensorsStreamer.get_tensors``: the generator the caller consumes is passed through
  unchanged (the same names and tensor objects, in the same order, its exceptions as they
  are); ours only notes which file each tensor came from.

**One span per file, under one span per stream.** ``coldstart.runai_streamer.stream`` (phase
``runai_streamer``: its own time is the streamer's set-up, reading the files' headers, and
waiting) runs from the ``stream_files`` call to the end of the tensors, on the caller's
thread. Under it, each file's ``coldstart.deserialize`` span starts at the call too (the
streamer reads every file at once) and ends when the caller asks for the tensor after the
file's last one: the files' spans overlap, as their reads do, and the breakdown reports the
parallelism that implies. The caller's work on each tensor (a copy to the device, a cast)
nests under that tensor's file span, as under a ``safe_open`` handle (an ambient parent: no
span of ours is made current), so nothing is counted twice; a file's bytes are its tensor
bytes.

**Storage evidence.** With O_DIRECT no page enters the page cache and a resident file is
read from storage all the same: the residency of the file cannot see those reads, and no
per-thread counter of ours can (the streamer's threads are native). The process's own
counter (``/proc/self/io`` read_bytes) does: its growth since ``stream_files`` is charged to
the files in the order they completed, each at most its bytes, as that file's read bytes
(``coldstart.io.read_bytes``); the page-cache residency before and after is used as for every
file read, and the larger of the two figures holds (patches/_storage.py). A buffered read of
resident files thus reads as warm; O_DIRECT reads as cold, resident or not, which is what the
stream paid. Reads by other threads of the process during the stream are counted too.

**Object-store paths** (``s3://``, ``gs://``, ``az://``: the streamer's own S3/GCS/Azure
clients, in C++): each file is a ``coldstart.download.file`` span under the stream (source
``runai_streamer``, transport the scheme, bucket and key, the endpoint's host from
``AWS_ENDPOINT_URL`` where set), its bytes the tensor bytes delivered so far (the progress
board sees them grow), its expected bytes the tensors' sizes from the file's header; it ends
with the file's last tensor, like a local file's span.
"""

from __future__ import annotations

import os
import sys
import time
import weakref

from .. import probes, semconv, session as _session
from .._errors import internal_errors
from ._downloads import InFlight, open_download
from ._files import FileRead
from ._wrapping import PatchSet, installed_version
from .huggingface_hub import endpoint_host

TARGETS = ("runai_model_streamer.safetensors_streamer.safetensors_streamer",)
HOT_PATH = False  # one call per load: a load after ready() is recorded, marked after-ready

API = "runai_model_streamer.SafetensorsStreamer"
_OBJECT_STORE = ("s3://", "gs://", "az://")
_STATE = __name__

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)


def get_version() -> str | None:
    return installed_version("runai-model-streamer")


def patch() -> None:
    module = sys.modules.get(TARGETS[0])
    streamer = getattr(module, "SafetensorsStreamer", None) if module is not None else None
    if streamer is None or not hasattr(streamer, "stream_files") or not hasattr(streamer, "get_tensors"):
        return  # another version of the streamer: nothing of it is patched
    _patches.wrap(streamer, "stream_files", _stream_files)
    _patches.wrap(streamer, "get_tensors", _get_tensors)


class _Stream:
    """One ``stream_files`` call: its span, its local files' reads, what was delivered."""

    __slots__ = ("session", "container", "reads", "downloads", "names", "remaining", "bytes", "read_before",
                 "charged", "ambient", "ambient_index")

    def __init__(self, session, container, reads: dict, downloads: dict, read_before: int | None) -> None:
        self.session = session
        self.container = container  # coldstart.runai_streamer.stream
        self.reads = reads  # file index -> FileRead (local files only), until it ends
        self.downloads: dict[int, InFlight] = downloads  # file index -> object-store file, until it ends
        self.names: dict[str | None, int] | None = None  # tensor name -> file index (the streamer's metadata)
        self.remaining: dict[int, int] = {}  # file index -> tensors still to come
        self.bytes: dict[int, int] = {}
        self.read_before = read_before
        self.charged = 0  # process read bytes already charged to files
        self.ambient: _session.AmbientParent | None = None  # the ambient parent of the tensor being handled now
        self.ambient_index: int | None = None


def _streams(session) -> weakref.WeakKeyDictionary:
    return session.state(_STATE, weakref.WeakKeyDictionary)


def _stream_files(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    stream = None
    if session is not None and session.pid == os.getpid():
        with internal_errors("runai stream start"):
            stream = _start_stream(session, args[0] if args else kwargs.get("paths"))
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:  # the streamer's exception passes through untouched
        if stream is not None:
            with internal_errors("runai stream failed"):
                _end_stream(stream, exc)
        raise
    if stream is not None:
        with internal_errors("runai stream started"):
            _streams(session)[instance] = stream
    return result


def _start_stream(session, paths) -> _Stream | None:
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
        return None
    local = {i: p for i, p in enumerate(paths) if not p.startswith(_OBJECT_STORE)}
    start_ns = time.time_ns()
    read_before = probes.process_read_bytes()
    container = session.start_container(semconv.PHASE_RUNAI_STREAMER, {semconv.FILE_API: API},
                                        name=semconv.SPAN_RUNAI_STREAM, start_ns=start_ns, make_current=False)
    # Each file's residency is measured here, before the streamer opens it.
    reads = {i: FileRead(session, path, semconv.FORMAT_SAFETENSORS, API, make_current=False, start_ns=start_ns,
                         parent=container.span_context) for i, path in local.items()}
    downloads = {}
    for index, path in enumerate(paths):
        if path.startswith(_OBJECT_STORE):
            found = open_download(session, _object_attributes(path), "runai_streamer", start_ns=start_ns,
                                  parent=container.span_context)
            if found is not None:
                downloads[index] = found
    return _Stream(session, container, reads, downloads, read_before)


def _object_attributes(path: str) -> dict:
    scheme, _, rest = path.partition("://")
    bucket, _, key = rest.partition("/")
    attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_RUNAI, semconv.DOWNLOAD_TRANSPORT: scheme,
             semconv.DOWNLOAD_REPO: bucket, semconv.DOWNLOAD_FILENAME: key}
    host = endpoint_host(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")) \
        if scheme == "s3" else None
    if host is not None:
        attrs[semconv.DOWNLOAD_HOST] = host
    return attrs


def _get_tensors(wrapped, instance, args, kwargs):
    tensors = wrapped(*args, **kwargs)
    session = _session.ACTIVE
    stream = None
    if session is not None:
        with internal_errors("runai stream tensors"):
            stream = _streams(session).pop(instance, None)
    if stream is None:
        return tensors
    return _passed_through(tensors, stream, instance)


def _passed_through(tensors, stream: _Stream, instance):
    """The streamer's tensors, unchanged; each file's span ends when the caller asks for the
    tensor after the file's last one (or the stream ends, or the caller stops)."""
    error = None
    try:
        for item in tensors:
            with internal_errors("runai tensor"):
                _arrived(stream, instance, item)
            yield item
            with internal_errors("runai file end"):
                _handled(stream)
    except BaseException as exc:  # GeneratorExit (the caller stopped) or the streamer's own error
        error = None if isinstance(exc, GeneratorExit) else exc
        raise
    finally:
        with internal_errors("runai stream end"):
            _end_stream(stream, error)


def _arrived(stream: _Stream, instance, item) -> None:
    if stream.names is None:
        metadata = getattr(instance, "files_to_tensors_metadata", None) or {}
        stream.names = {}
        for index, tensors in metadata.items():
            stream.remaining[index] = len(tensors)
            for tensor_metadata in tensors:
                stream.names[getattr(tensor_metadata, "name", None)] = index
            if index in stream.downloads:
                stream.downloads[index].expected = _tensor_bytes(tensors)
    name, tensor = item
    index = stream.names.get(name)
    if index is None:
        return
    found = stream.downloads.get(index)
    if found is not None:
        found.add(tensor.numel() * tensor.element_size())
        stream.remaining[index] = stream.remaining.get(index, 1) - 1
        if stream.remaining[index] <= 0:  # its last tensor is here: the transfer is done
            stream.downloads.pop(index).close()
        return
    read = stream.reads.get(index)
    if read is None:
        return
    stream.bytes[index] = stream.bytes.get(index, 0) + tensor.numel() * tensor.element_size()
    stream.remaining[index] = stream.remaining.get(index, 1) - 1
    if stream.ambient_index != index:  # the caller's work on this tensor nests under its file
        if stream.ambient is not None:
            stream.ambient.open = False
        stream.ambient = _session.push_ambient_parent(_session.current_span_id(), read.span_context, stream.session)
        stream.ambient_index = index


def _tensor_bytes(tensors) -> int | None:
    """A file's tensor bytes from the streamer's metadata, None when it does not say."""
    total = 0
    for tensor_metadata in tensors:
        size = getattr(tensor_metadata, "get_bytesize", None)
        if not callable(size):
            return None
        total += int(size())
    return total


def _handled(stream: _Stream) -> None:
    """The caller asks for the next tensor: a file whose last tensor it has handled ends."""
    index = stream.ambient_index
    if index is not None and index in stream.reads and stream.remaining.get(index, 1) <= 0:
        if stream.ambient is not None:  # (set with ambient_index)
            stream.ambient.open = False
        stream.ambient = stream.ambient_index = None
        _end_file(stream, index, None)


def _end_file(stream: _Stream, index: int, error) -> None:
    read = stream.reads.pop(index)
    nbytes = stream.bytes.get(index, 0)
    now = probes.process_read_bytes()
    charge = 0
    if now is not None and stream.read_before is not None:
        charge = min(nbytes, max(0, now - stream.read_before - stream.charged))
        stream.charged += charge
    read.bytes = nbytes
    read.add_io(charge, 0)
    read.finish(error, detach=False)


def _end_stream(stream: _Stream, error) -> None:
    if stream.ambient is not None:
        stream.ambient.open = False
        stream.ambient = None
    for index in sorted(stream.reads):  # files not all delivered: the stream failed, or the caller stopped
        _end_file(stream, index, error)
    for found in stream.downloads.values():
        found.close(error)
    stream.downloads.clear()
    stream.container.finish(error=error, detach=False)


def end_of_startup(session) -> None:
    """Streams started and never consumed: their spans end with the start-up."""
    with internal_errors("runai end of start-up"):
        streams = _streams(session)
        for stream in list(streams.values()):
            _end_stream(stream, None)
        streams.clear()
