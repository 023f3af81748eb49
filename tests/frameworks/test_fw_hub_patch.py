"""patches/huggingface_hub.py in this process: the real client against the test hub on
127.0.0.1 (``endpoint=`` and ``cache_dir=`` per call, so nothing global is changed), the
patch's surface (installed on import, originals restored exactly), and what it never records."""

from __future__ import annotations

import pytest

hub_client = pytest.importorskip("huggingface_hub")

from _hub_server import HubServer, Repo  # noqa: E402
from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.patches import huggingface_hub as hub_patch  # noqa: E402
from otel_coldstart.patches._wrapping import ColdstartWrapper  # noqa: E402

REPO_ID = "org/small"
FILES = {"config.json": b'{"a": 1}', "weights.bin": bytes(range(256)) * 4096}


def _attrs(span) -> dict:
    return dict(span.attributes)


def test_files_metadata_and_cache_hits_in_process(traced, tmp_path):
    from huggingface_hub import file_download, hf_hub_download

    assert isinstance(vars(file_download)["http_get"], ColdstartWrapper)
    with HubServer({REPO_ID: Repo(FILES)}) as hub:
        first = hf_hub_download(REPO_ID, "weights.bin", endpoint=hub.endpoint, cache_dir=str(tmp_path))
        again = hf_hub_download(REPO_ID, "weights.bin", endpoint=hub.endpoint, cache_dir=str(tmp_path))
        with pytest.raises(hub_client.errors.EntryNotFoundError):
            hf_hub_download(REPO_ID, "missing.json", endpoint=hub.endpoint, cache_dir=str(tmp_path))
        requests = hub.metadata_requests()
    assert first == again
    with open(first, "rb") as handle:
        assert handle.read() == FILES["weights.bin"]  # the host's result, untouched
    fetched, cached, missing = traced.named(semconv.SPAN_DOWNLOAD_FILE)
    a = _attrs(fetched)
    assert a[semconv.DOWNLOAD_BYTES] == len(FILES["weights.bin"]) and a[semconv.DOWNLOAD_CACHE_HIT] is False
    assert a[semconv.DOWNLOAD_PATH] == first and a[semconv.DOWNLOAD_HOST] == hub.endpoint.split("://")[1]
    assert a[semconv.DOWNLOAD_REPO] == REPO_ID and a[semconv.DOWNLOAD_FILENAME] == "weights.bin"
    assert a[semconv.PHASE] == semconv.PHASE_DOWNLOAD and a[semconv.THROUGHPUT] > 0
    b = _attrs(cached)
    assert b[semconv.DOWNLOAD_CACHE_HIT] is True and b[semconv.DOWNLOAD_BYTES] == 0
    assert b[semconv.DOWNLOAD_CACHED_BYTES] == len(FILES["weights.bin"])
    assert _attrs(missing)[semconv.DOWNLOAD_NOT_FOUND] is True
    assert missing.status.is_ok  # an optional file probed is no error of the start-up
    metadata = traced.named(semconv.SPAN_DOWNLOAD_METADATA)
    ours = [m for m in metadata if m.attributes[semconv.DOWNLOAD_HOST] == hub.endpoint.split("://")[1]]
    # Every request the hub saw that was not a file's bytes; the others went to the default
    # endpoint (huggingface_hub 2.4 asks huggingface.co's /api/agent-harnesses once per process,
    # whatever endpoint= says: unreachable here, recorded all the same).
    assert len(ours) == requests
    assert all(m.attributes[semconv.DOWNLOAD_HOST] == "huggingface.co" for m in metadata if m not in ours)
    heads = {m.parent.span_id for m in metadata if m.attributes[semconv.DOWNLOAD_METHOD] == "HEAD"}
    assert heads == {s.context.span_id for s in (fetched, cached, missing)}  # each under its file


def test_unpatch_restores_the_originals(traced):
    from huggingface_hub import file_download

    assert hub_patch.is_patched()
    hub_patch.unpatch()
    try:
        assert not isinstance(vars(file_download)["http_get"], ColdstartWrapper)
        assert not isinstance(vars(file_download)["_hf_hub_download_to_cache_dir"], ColdstartWrapper)
    finally:
        hub_patch.patch()


def test_endpoint_host_keeps_nothing_but_the_host():
    assert hub_patch.endpoint_host("https://user:secret@hub.example:8443/path?token=x") == "hub.example:8443"
    assert hub_patch.endpoint_host("https://cdn.example/blob?X-Amz-Signature=abc") == "cdn.example"
    assert hub_patch.endpoint_host(None) is None and hub_patch.endpoint_host("") is None


def test_without_a_start_up_nothing_is_recorded(tmp_path):
    from huggingface_hub import hf_hub_download

    import otel_coldstart

    otel_coldstart.uninstrument()
    with HubServer({REPO_ID: Repo(FILES)}) as hub:
        path = hf_hub_download(REPO_ID, "config.json", endpoint=hub.endpoint, cache_dir=str(tmp_path))
    with open(path, "rb") as handle:
        assert handle.read() == FILES["config.json"]
