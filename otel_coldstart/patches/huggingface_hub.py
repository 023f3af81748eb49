"""huggingface_hub: every file fetched from (or found in the cache of) the Hub, and every
metadata request made on the way, as spans of phase ``download``.

Before this, a from_pretrained from an empty cache showed one ``download`` span and
nothing about what it fetched; a ``snapshot_download`` before ``load_file`` showed nothing
at all, and a cached start could not be told from a downloading one. The hook points
(huggingface_hub 2.x calls each through its module's globals, so wrapping the module-level
name changes only huggingface_hub's own call):

- ``file_download._hf_hub_download_to_cache_dir`` / ``_hf_hub_download_to_local_dir``: one
  ``coldstart.download.file`` span per file, whatever called ``hf_hub_download``
  (snapshot_download's workers, transformers, sentence-transformers). A file that needed no
  transfer is a cache hit with its size as cached bytes;
- ``file_download.http_get``: the transfer. Network bytes are what it wrote to the file
  (its position after minus before; a cut and resumed transfer counts each byte once).
  http_get retries itself by calling its module-level name from inside its ``except``
  block, so a nested call is a retry (the error being handled is its reason) and a
  ``resume_size`` above 0 is a resume;
- ``file_download.xet_get``: a Xet transfer (hf_xet, in Rust: its requests are not seen);
  its network bytes are the file's size (hf_xet's local chunk cache is not seen either);
- ``httpx2.Client.send`` of the hub's own session (``utils._http.get_session()``, by
  identity: other clients of the host pass straight through): every request that is not a
  file transfer is a ``coldstart.download.metadata`` span (a file's HEAD, repo info,
  revision resolution, a Xet token), so the round trips a cached start still makes show;
- ``_snapshot_download.snapshot_download``: a ``coldstart.download.snapshot`` span, parent
  of its repo-info request and its files (the thread pool carries the context, threads.py).

Not removed at ``ready()``: a server fetching an adapter or a second model later gets its
downloads too, marked ``coldstart.after_ready``; a handful of spans per file, nothing per
chunk. Never recorded: a token, a header, a URL's query (signed CDN URLs): the endpoint's
host only. huggingface_hub's exceptions pass through untouched (the span records them; a
file the hub does not have, which transformers probes for, is ``coldstart.download.not_found``
instead of an error).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

from .. import semconv, session as _session
from .._errors import internal_errors, report_internal_error
from ._downloads import inside_followed_read
from ._wrapping import PatchSet, installed_version

FILE_DOWNLOAD = "huggingface_hub.file_download"
SNAPSHOT_DOWNLOAD = "huggingface_hub._snapshot_download"
HTTP = "huggingface_hub.utils._http"
# transformers binds huggingface_hub's names in its own module at import: when that import
# came before ours, the names there are wrapped too (the same wrapper as in huggingface_hub).
TRANSFORMERS_HUB = "transformers.utils.hub"

TARGETS = (FILE_DOWNLOAD, SNAPSHOT_DOWNLOAD, HTTP, TRANSFORMERS_HUB)
HOT_PATH = False  # a few calls per file; downloads after ready() are recorded too

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)

# The error types huggingface_hub raises for a file or revision the hub does not have.
_NOT_FOUND = ("EntryNotFoundError", "RemoteEntryNotFoundError", "LocalEntryNotFoundError")
_SNAPSHOT_PATH = re.compile(r"[\\/]snapshots[\\/]([0-9a-f]{40})[\\/]")


def get_version() -> str | None:
    return installed_version("huggingface_hub")


def patch() -> None:
    # Each target arrives on its own (huggingface_hub imports its submodules lazily): wrap
    # what is there now; PatchSet skips what is wrapped already.
    file_download = sys.modules.get(FILE_DOWNLOAD)
    if file_download is not None:
        _patches.wrap(file_download, "_hf_hub_download_to_cache_dir", _download_file)
        _patches.wrap(file_download, "_hf_hub_download_to_local_dir", _download_file)
        _patches.wrap(file_download, "http_get", _http_get)
        _patches.wrap(file_download, "xet_get", _xet_get)
        _patches.wrap(file_download, "try_to_load_from_cache", _try_cache)
    snapshot = sys.modules.get(SNAPSHOT_DOWNLOAD)
    if snapshot is not None:
        _patches.wrap(snapshot, "snapshot_download", _snapshot_download)
    transformers_hub = sys.modules.get(TRANSFORMERS_HUB)
    if transformers_hub is not None:
        _patches.wrap(transformers_hub, "try_to_load_from_cache", _try_cache)
        _patches.wrap(transformers_hub, "snapshot_download", _snapshot_download)
    http = sys.modules.get(HTTP)
    client = getattr(getattr(http, "httpx2", None), "Client", None)
    if isinstance(client, type):
        _patches.wrap(client, "send", _send)


# --- per start-up, per thread -------------------------------------------------------------------


class _Here:
    """This thread's file download in this start-up, and how deep in http_get it is."""

    __slots__ = ("file", "transfer_depth")

    def __init__(self) -> None:
        self.file: _File | None = None
        self.transfer_depth = 0


class _Counts:
    """Per start-up: files ended so far (a snapshot's file count is the difference)."""

    __slots__ = ("files",)

    def __init__(self) -> None:
        self.files = 0


def _here(session) -> _Here:
    local = session.state(__name__, threading.local)
    here = getattr(local, "here", None)
    if here is None:
        here = local.here = _Here()
    return here


def endpoint_host(url: str | None) -> str | None:
    """``host[:port]`` of a URL: never its user, password, path or query."""
    if not isinstance(url, str) or not url:
        return None
    rest = url.split("://", 1)[-1]
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    return netloc.rsplit("@", 1)[-1] or None


def _default_endpoint() -> str | None:
    constants = sys.modules.get("huggingface_hub.constants")
    return getattr(constants, "ENDPOINT", None)


class _File:
    """One file's span and what its transfer did."""

    __slots__ = ("container", "network_bytes", "transfers", "resumed", "retry_reasons", "transfer_ns",
                 "expected", "transport", "live_file", "live_start", "failed_requests", "responses")

    def __init__(self, container) -> None:
        self.container = container
        self.network_bytes = 0
        self.transfers = 0
        self.resumed = False
        self.retry_reasons: list[str] = []
        self.transfer_ns = 0
        self.expected: int | None = None
        self.transport: str | None = None
        self.live_file = None  # the file http_get writes to, while it does
        self.live_start = 0
        self.failed_requests: list[str] = []  # metadata requests that failed (a 5xx retried)
        # The transfer's responses: httpx counts the bytes each received (num_bytes_downloaded),
        # also those of a cut transfer that the client dropped and fetched again.
        self.responses: list = []

    def received(self) -> int | None:
        """Bytes the transfer's responses received, None when no response was seen."""
        if not self.responses:
            return None
        total = 0
        for response in list(self.responses):
            count = getattr(response, "num_bytes_downloaded", None)
            if isinstance(count, int):
                total += count
        return total

    def live_bytes(self) -> int:
        """Network bytes so far, from any thread (the in-flight board, a SIGTERM)."""
        received = self.received()
        if received is not None:
            return received
        current = self.network_bytes
        handle = self.live_file
        if handle is not None:
            try:
                current += max(0, os.fstat(handle.fileno()).st_size - self.live_start)
            except (OSError, ValueError, AttributeError):
                pass
        return current


# --- one file -----------------------------------------------------------------------------------


def _download_file(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or kwargs.get("dry_run"):
        return wrapped(*args, **kwargs)
    here = _open_file(session, kwargs)
    if here is None:
        return wrapped(*args, **kwargs)
    return _call_then(lambda result, error: _close_file(session, here, result, error), wrapped, args, kwargs)


def _call_then(close, wrapped, args, kwargs):
    """The host's call, then ``close(result, error)``; its exception passes through as raised."""
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as error:
        close(None, error)
        raise
    close(result, None)
    return result


def _open_file(session, kwargs) -> _Here | None:
    try:
        here = _here(session)
        if here.file is not None:
            return None  # one download calling another: the outer one is the file
        attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_HF}
        for attribute, key in ((semconv.DOWNLOAD_REPO, "repo_id"), (semconv.DOWNLOAD_FILENAME, "filename"),
                               (semconv.DOWNLOAD_REVISION, "revision"), (semconv.DOWNLOAD_REPO_TYPE, "repo_type")):
            value = kwargs.get(key)
            if isinstance(value, str):
                attrs[attribute] = value
        host = endpoint_host(kwargs.get("endpoint") or _default_endpoint())
        if host is not None:
            attrs[semconv.DOWNLOAD_HOST] = host
        file = _File(session.start_container(semconv.PHASE_DOWNLOAD, attrs, name=semconv.SPAN_DOWNLOAD_FILE))
        file.container.on_interrupt = _interrupted(file)
        here.file = file
        opened = getattr(session.progress, "download_opened", None)
        if opened is not None:
            opened(file)  # the in-flight board counts its bytes while it runs
        return here
    except Exception:
        report_internal_error("huggingface_hub: file start")
        return None


def _interrupted(file: _File):
    """End a file cut short by the end of the start-up with the bytes it had received."""

    def interrupt(end_ns: int) -> None:
        attrs = {semconv.INTERRUPTED: True, semconv.DOWNLOAD_BYTES: file.live_bytes()}
        if file.expected is not None:
            attrs[semconv.DOWNLOAD_EXPECTED_BYTES] = file.expected
        file.container.finish(attrs, end_ns=end_ns, detach=False)

    return interrupt


def _close_file(session, here: _Here, result, error: BaseException | None) -> None:
    file, here.file = here.file, None
    if file is None:
        return
    with internal_errors("huggingface_hub: file end"):
        attrs = _file_attributes(file, result)
        if error is not None and type(error).__name__ in _NOT_FOUND:
            attrs[semconv.DOWNLOAD_NOT_FOUND] = True
            error = None  # an optional file probed: the host expects and catches it
        file.container.finish(attrs, error=error)
        session.state(__name__ + ".counts", _Counts).files += 1


def _file_attributes(file: _File, result) -> dict:
    attrs: dict = {}
    path = result if isinstance(result, str) else None
    if path is not None:
        attrs[semconv.DOWNLOAD_PATH] = path
        match = _SNAPSHOT_PATH.search(path)
        if match is not None:
            attrs[semconv.DOWNLOAD_COMMIT] = match.group(1)
    if file.expected is not None:
        attrs[semconv.DOWNLOAD_EXPECTED_BYTES] = file.expected
    if file.transfers:
        received = file.received()
        if received is not None:
            file.network_bytes = received  # what came over the wire, dropped bytes of a cut included
        attrs[semconv.DOWNLOAD_CACHE_HIT] = False
        attrs[semconv.DOWNLOAD_BYTES] = file.network_bytes
        attrs[semconv.DOWNLOAD_CACHED_BYTES] = 0
        attrs[semconv.DOWNLOAD_TRANSPORT] = file.transport or "http"
        seconds = file.transfer_ns / 1e9
        attrs[semconv.DOWNLOAD_TRANSFER_S] = seconds
        if seconds > 0 and file.network_bytes > 0:
            attrs[semconv.THROUGHPUT] = file.network_bytes / seconds
        if file.resumed:
            attrs[semconv.DOWNLOAD_RESUMED] = True
    elif path is not None:
        attrs[semconv.DOWNLOAD_CACHE_HIT] = True
        attrs[semconv.DOWNLOAD_BYTES] = 0
        try:
            attrs[semconv.DOWNLOAD_CACHED_BYTES] = os.path.getsize(path)
        except OSError:
            pass
    reasons = file.failed_requests + file.retry_reasons if path is not None else file.retry_reasons
    if reasons:
        attrs[semconv.DOWNLOAD_RETRIES] = len(reasons)
        attrs[semconv.DOWNLOAD_RETRY_REASONS] = list(reasons)
    return attrs


def _try_cache(wrapped, instance, args, kwargs):
    """``try_to_load_from_cache``: a file served from the cache without asking the hub
    (transformers' path once the revision resolved to a commit it has) is a file span too,
    a cache hit, written after the fact (a stat or two: no span while it runs)."""
    session = _session.ACTIVE
    if session is None:
        return wrapped(*args, **kwargs)
    start = time.time_ns()
    result = wrapped(*args, **kwargs)
    if isinstance(result, str):
        with internal_errors("huggingface_hub: cached file"):
            _cache_hit_span(session, start, result, args, kwargs)
    return result


def _cache_hit_span(session, start: int, path: str, args, kwargs) -> None:
    attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_HF, semconv.DOWNLOAD_CACHE_HIT: True,
             semconv.DOWNLOAD_BYTES: 0, semconv.DOWNLOAD_PATH: path}
    named = dict(zip(("repo_id", "filename", "cache_dir", "revision", "repo_type"), args))
    named.update(kwargs)
    for attribute, key in ((semconv.DOWNLOAD_REPO, "repo_id"), (semconv.DOWNLOAD_FILENAME, "filename"),
                           (semconv.DOWNLOAD_REVISION, "revision"), (semconv.DOWNLOAD_REPO_TYPE, "repo_type")):
        if isinstance(named.get(key), str):
            attrs[attribute] = named[key]
    match = _SNAPSHOT_PATH.search(path)
    if match is not None:
        attrs[semconv.DOWNLOAD_COMMIT] = match.group(1)
    try:
        attrs[semconv.DOWNLOAD_CACHED_BYTES] = os.path.getsize(path)
    except OSError:
        pass
    session.emit_span(semconv.SPAN_DOWNLOAD_FILE, semconv.PHASE_DOWNLOAD, session.parent_span_context(), start,
                      time.time_ns(), attrs)


# --- the transfer -------------------------------------------------------------------------------


def _http_get(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None:
        return wrapped(*args, **kwargs)
    try:
        here = _here(session)
        file = here.file
    except Exception:
        report_internal_error("huggingface_hub: http_get start")
        return wrapped(*args, **kwargs)
    if file is None:
        # HfFileSystem and others call http_get outside a file download: not a request
        # for metadata either (the transfer's own request is no round trip to count).
        here.transfer_depth += 1
        try:
            return wrapped(*args, **kwargs)
        finally:
            here.transfer_depth -= 1
    outermost = here.transfer_depth == 0
    if not outermost:
        # http_get calling itself from its except block: a retry, its reason the error in hand.
        handled = sys.exc_info()[1]
        file.retry_reasons.append(_qualified(handled) if handled is not None else "unknown")
    resume_size = kwargs.get("resume_size", 0)
    if isinstance(resume_size, int) and resume_size > 0:
        file.resumed = True
    expected = kwargs.get("expected_size")
    if isinstance(expected, int) and file.expected is None:
        file.expected = expected
    temp_file = args[1] if len(args) > 1 else kwargs.get("temp_file")
    start_pos = _position(temp_file) if outermost else None
    if outermost:
        file.transfers += 1
        file.transport = "http"
        file.live_file, file.live_start = temp_file, start_pos or 0
    here.transfer_depth += 1
    start = time.perf_counter_ns()
    try:
        return wrapped(*args, **kwargs)
    finally:
        here.transfer_depth -= 1
        if outermost:
            file.transfer_ns += time.perf_counter_ns() - start
            end_pos = _position(temp_file)
            if start_pos is not None and end_pos is not None:
                file.network_bytes += max(0, end_pos - start_pos)
            file.live_file = None


def _position(handle) -> int | None:
    try:
        position = handle.tell()
    except Exception:  # the host's file object, probed: unknown rather than raised
        return None
    return position if isinstance(position, int) else None


def _xet_get(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    file = None
    if session is not None:
        with internal_errors("huggingface_hub: xet_get start"):
            file = _here(session).file
    if file is None:
        return wrapped(*args, **kwargs)
    expected = kwargs.get("expected_size")
    if isinstance(expected, int) and file.expected is None:
        file.expected = expected
    file.transfers += 1
    file.transport = "xet"
    start = time.perf_counter_ns()
    try:
        return wrapped(*args, **kwargs)
    finally:
        file.transfer_ns += time.perf_counter_ns() - start
        try:
            file.network_bytes += os.path.getsize(kwargs["incomplete_path"])
        except Exception:  # no file left (the transfer failed) or no path given: bytes unknown
            pass


# --- metadata requests --------------------------------------------------------------------------


def _send(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or instance is not getattr(sys.modules.get(HTTP), "_GLOBAL_CLIENT", None):
        return wrapped(*args, **kwargs)
    try:
        here = _here(session)
        # A file's own bytes (its transfer, or a followed fsspec read): not a metadata request.
        transfer = here.transfer_depth > 0 or inside_followed_read()
    except Exception:
        report_internal_error("huggingface_hub: request start")
        return wrapped(*args, **kwargs)
    if transfer:
        response = wrapped(*args, **kwargs)
        if here.file is not None:
            here.file.responses.append(response)
        return response
    try:
        request = args[0] if args else kwargs.get("request")
        url = getattr(request, "url", None)
        attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_HF,
                 semconv.DOWNLOAD_METHOD: str(getattr(request, "method", "")),
                 semconv.DOWNLOAD_URL_PATH: str(getattr(url, "path", "")),
                 semconv.DOWNLOAD_HOST: endpoint_host(str(url)) or ""}
        container = session.start_container(semconv.PHASE_DOWNLOAD, attrs, name=semconv.SPAN_DOWNLOAD_METADATA,
                                            make_current=False)
        file = here.file
    except Exception:
        report_internal_error("huggingface_hub: request start")
        return wrapped(*args, **kwargs)
    return _call_then(lambda response, error: _close_request(container, file, response, error), wrapped, args,
                      kwargs)


def _close_request(container, file: _File | None, response, error: BaseException | None) -> None:
    with internal_errors("huggingface_hub: request end"):
        status = getattr(response, "status_code", None)
        attrs = {semconv.DOWNLOAD_STATUS: status} if isinstance(status, int) else {}
        if file is not None:
            if error is not None:
                file.failed_requests.append(_qualified(error))
            elif isinstance(status, int) and (status >= 500 or status in (408, 429)):
                file.failed_requests.append(f"HTTP {status}")
        container.finish(attrs, error=error)


def _qualified(error: BaseException) -> str:
    return f"{type(error).__module__}.{type(error).__qualname__}"


# --- snapshot_download --------------------------------------------------------------------------


def _snapshot_download(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None or kwargs.get("dry_run"):
        return wrapped(*args, **kwargs)
    try:
        repo = args[0] if args else kwargs.get("repo_id")
        attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_HF}
        if isinstance(repo, str):
            attrs[semconv.DOWNLOAD_REPO] = repo
        for attribute, key in ((semconv.DOWNLOAD_REVISION, "revision"), (semconv.DOWNLOAD_REPO_TYPE, "repo_type")):
            if isinstance(kwargs.get(key), str):
                attrs[attribute] = kwargs[key]
        host = endpoint_host(kwargs.get("endpoint") or _default_endpoint())
        if host is not None:
            attrs[semconv.DOWNLOAD_HOST] = host
        counts = session.state(__name__ + ".counts", _Counts)
        files_before = counts.files
        container = session.start_container(semconv.PHASE_DOWNLOAD, attrs, name=semconv.SPAN_DOWNLOAD_SNAPSHOT)
    except Exception:
        report_internal_error("huggingface_hub: snapshot start")
        return wrapped(*args, **kwargs)
    return _call_then(lambda result, error: _close_snapshot(container, counts, files_before, result, error),
                      wrapped, args, kwargs)


def _close_snapshot(container, counts: _Counts, files_before: int, result, error) -> None:
    with internal_errors("huggingface_hub: snapshot end"):
        attrs: dict = {semconv.DOWNLOAD_FILES: max(0, counts.files - files_before)}
        if isinstance(result, str):
            attrs[semconv.DOWNLOAD_PATH] = result
            match = _SNAPSHOT_PATH.search(result + os.sep)
            if match is not None:
                attrs[semconv.DOWNLOAD_COMMIT] = match.group(1)
        container.finish(attrs, error=error)
