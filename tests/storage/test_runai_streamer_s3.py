"""The Run:ai Model Streamer reading from S3 (issue 37): the real streamer with its own C++ S3
client (runai-model-streamer-s3) against moto's S3 server on 127.0.0.1, in a fresh process.
Each object it streams is a coldstart.download.file span under the stream, with the bytes it
delivered against the object's size; tensors bit-identical to safetensors' load_file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("runai_model_streamer")
pytest.importorskip("runai_model_streamer_s3", reason="runai-model-streamer-s3 (the streamer's S3 client) is not installed")
moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
torch = pytest.importorskip("torch")

from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.analyze.breakdown import breakdowns  # noqa: E402
from otel_coldstart.analyze.downloads import downloads  # noqa: E402
from otel_coldstart.analyze.readers import read_trace_file  # noqa: E402

pytestmark = pytest.mark.process

BUCKET = "weights"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-value",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
               "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}

CHILD = r"""
import json, sys
import otel_coldstart
otel_coldstart.instrument()
import torch
from runai_model_streamer import SafetensorsStreamer

urls, local = sys.argv[1:3], sys.argv[3:5]
streamed = {}
with otel_coldstart.phase("load"):
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(urls)
        for name, tensor in streamer.get_tensors():
            streamed[name] = tensor.clone()
otel_coldstart.ready()
from safetensors.torch import load_file
expected = {}
for path in local:
    expected.update(load_file(path))
identical = sorted(streamed) == sorted(expected) and all(torch.equal(streamed[k], expected[k]) for k in expected)
print(json.dumps({"trace": otel_coldstart.trace_file(), "identical": identical}))
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("shards")
    for index, rows in enumerate((1500, 400)):
        save_file({f"layer{index}.w": torch.randn(rows, 1024), f"layer{index}.b": torch.randn(1024)},
                  str(folder / f"model-{index:05d}.safetensors"))
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing-secret-value")
        client.create_bucket(Bucket=BUCKET)
        sizes = {}
        for path in sorted(folder.iterdir()):
            client.upload_file(str(path), BUCKET, path.name)
            sizes[path.name] = path.stat().st_size
        yield endpoint, folder, sizes
    finally:
        server.stop()


def test_objects_streamed_from_s3_are_downloads_with_their_bytes(tmp_path, store):
    endpoint, folder, sizes = store
    names = sorted(sizes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AWS_"))}
    env.update(CREDENTIALS, AWS_ENDPOINT_URL=endpoint, OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "t"),
               OTEL_COLDSTART_SUMMARY="0")
    result = subprocess.run([sys.executable, "-c", CHILD, *(f"s3://{BUCKET}/{name}" for name in names),
                             *(str(folder / name) for name in names)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["identical"]  # the streamer's tensors, unchanged by the patch
    spans = read_trace_file(report["trace"])
    (startup,) = breakdowns(spans)
    found = downloads(startup)
    assert found is not None and sorted(item.filename for item in found.items) == names
    stream = next(span for span in spans if span.name == semconv.SPAN_RUNAI_STREAM)
    for item in found.items:
        size = sizes[item.filename]
        assert item.source == semconv.DOWNLOAD_SOURCE_RUNAI and item.transport == "s3" and item.repo == BUCKET
        assert item.host == endpoint.split("://", 1)[1] and not item.cached and not item.interrupted
        assert abs(item.bytes / size - 1) <= 0.05, (item.bytes, size)  # tensor bytes of the object
        assert item.expected_bytes == item.bytes  # the header's tensor sizes, all delivered
    files = [span for span in spans if span.name == semconv.SPAN_DOWNLOAD_FILE]
    assert files and all(span.parent_id == stream.span_id for span in files)  # under the stream
    assert {phase.phase: phase.busy_ns for phase in startup.phases}.get("download", 0) > 0
