"""S3 downloads (issue 37): the real boto3 against moto's S3 server on 127.0.0.1, in fresh
processes; each object fetched is a coldstart.download.file span with its bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
torch = pytest.importorskip("torch")

from framework_checks import assert_no_orphans, clean_env  # noqa: E402
from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.analyze.breakdown import breakdowns  # noqa: E402
from otel_coldstart.analyze.downloads import downloads  # noqa: E402
from otel_coldstart.analyze.readers import read_trace_file  # noqa: E402

pytestmark = pytest.mark.process

CHILD = os.path.join(os.path.dirname(__file__), "s3_child.py")
BUCKET = "weights"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-value",
               "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A moto S3 server holding 3 safetensors shards (one above s3transfer's 8 MiB multipart
    threshold, so it is fetched in ranged parts on several threads)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("shards")
    sizes = {}
    for index, rows in enumerate((2600, 300, 50)):
        path = folder / f"model-{index:05d}.safetensors"
        save_file({"w": torch.randn(rows, 1024)}, str(path))
        sizes[path.name] = path.stat().st_size
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import boto3

        old = {k: os.environ.get(k) for k in CREDENTIALS}
        os.environ.update(CREDENTIALS)
        try:
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            client.create_bucket(Bucket=BUCKET)
            for name in sizes:
                client.upload_file(str(folder / name), BUCKET, name)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        yield endpoint, sizes
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["download_file", "download_fileobj", "get_object"])
def test_s3_objects_are_download_spans_with_their_bytes(tmp_path, store, mode):
    endpoint, sizes = store
    out, target = tmp_path / "out.json", tmp_path / "local"
    target.mkdir()
    env = clean_env(OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "t"), OTEL_COLDSTART_SUMMARY="0", **CREDENTIALS)
    result = subprocess.run([sys.executable, CHILD, str(out), endpoint, BUCKET, mode, str(target)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr, result.stderr[-3000:]
    report = json.loads(out.read_text())
    spans = read_trace_file(report["trace"])
    assert_no_orphans(spans)
    (startup,) = breakdowns(spans)
    found = downloads(startup)
    assert {i.filename: i.bytes for i in found.items} == sizes  # every byte, once (within 5%: exactly)
    assert found.bytes == sum(sizes.values())
    for item in found.items:
        assert item.repo == BUCKET and item.source == semconv.DOWNLOAD_SOURCE_S3
        assert item.host == endpoint.split("://")[1]
        assert item.expected_bytes == sizes[item.filename]
        assert item.throughput and not item.cached
    with open(report["trace"], encoding="utf-8") as handle:
        assert "testing-secret-value" not in handle.read()
