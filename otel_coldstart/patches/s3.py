"""S3 through boto3/botocore: each object downloaded for the start-up as a
``coldstart.download.file`` span (phase ``download``), like a hub file.

Two ways a server fetches weights from S3 (or any S3-compatible store):

- ``download_file`` / ``download_fileobj`` (client, Bucket, Object): boto3 hands them to
  s3transfer's ``TransferManager.download``, which returns a future while its threads fetch
  ranged parts. The span runs from that call to the future's end, through a subscriber of
  ours added to the transfer's list (a new list: the host's stays as given): its
  ``on_progress`` counts the bytes received, so a transfer cut short still has its figure;
- ``get_object`` with its ``Body`` read to the end: botocore's ``_make_api_call`` for a
  ``GetObject`` that s3transfer did not make (its own ranged parts are the transfer above)
  marks that response's body; the span ends when the body has been read to its
  ``Content-Length`` (or closed). Only that body instance is wrapped (its ``read``), never
  the class: other bodies and other API calls pass straight through.

Recorded: bucket (``coldstart.download.repo``), key (``.filename``), the endpoint's host
(never a credential, a signed URL or its query), network bytes, expected bytes, time and
throughput; ``transport`` is ``s3``. Kept after ``ready()`` (a model or adapter fetched later
is recorded, marked ``coldstart.after_ready``).
"""

from __future__ import annotations

import sys
from types import FrameType

from .. import semconv, session as _session
from .._errors import report_internal_error
from ._downloads import InFlight, open_download
from ._wrapping import PatchSet, installed_version
from .huggingface_hub import endpoint_host

TRANSFER_MANAGER = "s3transfer.manager"
BOTOCORE_CLIENT = "botocore.client"

TARGETS = (TRANSFER_MANAGER, BOTOCORE_CLIENT)
HOT_PATH = False  # one check per AWS API call (its operation name); nothing per byte

_patches = PatchSet()
is_patched, unpatch = _patches.is_patched, _patches.restore  # the patch module protocol (patches/__init__.py)


def get_version() -> str | None:
    return installed_version("boto3")


def patch() -> None:
    manager = sys.modules.get(TRANSFER_MANAGER)
    transfer_manager = getattr(manager, "TransferManager", None)
    if isinstance(transfer_manager, type):
        _patches.wrap(transfer_manager, "download", _transfer_download)
    client = sys.modules.get(BOTOCORE_CLIENT)
    base = getattr(client, "BaseClient", None)
    if isinstance(base, type):
        _patches.wrap(base, "_make_api_call", _api_call)


def _open(session, bucket, key, client) -> InFlight | None:
    attrs = {semconv.DOWNLOAD_SOURCE: semconv.DOWNLOAD_SOURCE_S3, semconv.DOWNLOAD_TRANSPORT: "s3"}
    if isinstance(bucket, str):
        attrs[semconv.DOWNLOAD_REPO] = bucket
    if isinstance(key, str):
        attrs[semconv.DOWNLOAD_FILENAME] = key
    try:
        host = endpoint_host(getattr(getattr(client, "meta", None), "endpoint_url", None))
    except Exception:
        report_internal_error("s3: endpoint")
        host = None
    if host is not None:
        attrs[semconv.DOWNLOAD_HOST] = host
    # Not current: the transfer runs on s3transfer's threads, and a body is read whenever.
    return open_download(session, attrs, "s3")


# --- download_file / download_fileobj: s3transfer's TransferManager.download ------------------------


def _transfer_download(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    if session is None:
        return wrapped(*args, **kwargs)
    named = dict(zip(("bucket", "key", "fileobj", "extra_args", "subscribers"), args))
    named.update(kwargs)
    found = _open(session, named.get("bucket"), named.get("key"), getattr(instance, "_client", None))
    if found is None:
        return wrapped(*args, **kwargs)
    try:
        subscriber = _subscriber_class()(found, named.get("fileobj"))
        named["subscribers"] = list(named.get("subscribers") or ()) + [subscriber]
    except Exception:
        report_internal_error("s3: subscriber")
        found.close()
        return wrapped(*args, **kwargs)
    try:
        return wrapped(**named)
    except BaseException as error:
        found.close(error)
        raise


_SUBSCRIBER = None


def _subscriber_class():
    """A s3transfer BaseSubscriber (made once: s3transfer checks the class it derives from)."""
    global _SUBSCRIBER
    if _SUBSCRIBER is None:
        from s3transfer.subscribers import BaseSubscriber

        class _Progress(BaseSubscriber):
            def __init__(self, found: InFlight, target) -> None:
                self.found = found
                self.path = target if isinstance(target, str) else None

            def on_queued(self, future, **kwargs):
                pass

            def on_progress(self, future, bytes_transferred, **kwargs):
                self.found.add(bytes_transferred)
                if self.found.expected is None:
                    size = getattr(getattr(future, "meta", None), "size", None)
                    if isinstance(size, int):
                        self.found.expected = size

            def on_done(self, future, **kwargs):
                error = None
                try:
                    future.result()
                except BaseException as failed:  # the host sees it from its own result()
                    error = failed
                size = getattr(getattr(future, "meta", None), "size", None)
                if isinstance(size, int):
                    self.found.expected = size
                self.found.close(error, self.path)

        _SUBSCRIBER = _Progress
    return _SUBSCRIBER


# --- get_object, its body read to the end ------------------------------------------------------------


def _api_call(wrapped, instance, args, kwargs):
    session = _session.ACTIVE
    operation = args[0] if args else kwargs.get("operation_name")
    if session is None or operation != "GetObject" or _from_s3transfer():
        return wrapped(*args, **kwargs)
    params = args[1] if len(args) > 1 else kwargs.get("api_params") or {}
    found = _open(session, params.get("Bucket"), params.get("Key"), instance)
    if found is None:
        return wrapped(*args, **kwargs)
    try:
        response = wrapped(*args, **kwargs)
    except BaseException as error:
        found.close(error)
        raise
    try:
        body = response.get("Body")
        length = response.get("ContentLength")
        found.expected = length if isinstance(length, int) else None
        if body is None or not callable(getattr(body, "read", None)):
            found.close()
        else:
            _follow_body(body, found)
    except Exception:
        report_internal_error("s3: get_object body")
        found.close()
    return response


def _from_s3transfer() -> bool:
    """Whether this GetObject is one of s3transfer's ranged parts (a transfer of ours already)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if str(frame.f_globals.get("__name__", "")).startswith("s3transfer"):
            return True
        frame = frame.f_back
    return False


def _follow_body(body, found: InFlight) -> None:
    """Wrap this body's read and close (the instance's, not the class's): the span ends at
    its end (Content-Length read, an empty read, or close)."""
    read, close = body.read, body.close

    def read_and_count(*args, **kwargs):
        chunk = read(*args, **kwargs)
        try:
            found.add(len(chunk))
            amt = args[0] if args else kwargs.get("amt")
            if (not chunk and (amt is None or amt > 0)) or amt is None or \
                    (found.expected is not None and found.received >= found.expected):
                found.close()
        except Exception:
            report_internal_error("s3: body read")
        return chunk

    def close_and_end(*args, **kwargs):
        found.close()  # never raises (reports its own errors)
        return close(*args, **kwargs)

    body.read = read_and_count
    body.close = close_and_end
