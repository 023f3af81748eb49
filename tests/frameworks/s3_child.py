"""The child process of test_fw_s3_download.py: a start-up that fetches its weights from S3.

``python s3_child.py OUT ENDPOINT BUCKET MODE TARGET_DIR``: instrument, then with the real
boto3 fetch every ``*.safetensors`` object of BUCKET (``download_file``, ``download_fileobj``
or ``get_object`` with its body read to the end), load each with safetensors, ready().
"""

from __future__ import annotations

import json
import os
import sys

out, endpoint, bucket, mode, target = sys.argv[1:6]
import otel_coldstart  # noqa: E402

otel_coldstart.instrument(start_at="instrument")
import boto3  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"] if o["Key"].endswith(".safetensors"))
checksum = 0.0
for key in keys:
    path = os.path.join(target, key)
    if mode == "download_file":
        client.download_file(bucket, key, path)
    elif mode == "download_fileobj":
        with open(path, "wb") as handle:
            client.download_fileobj(bucket, key, handle)
    else:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        with open(path, "wb") as handle:
            for chunk in body.iter_chunks(1 << 20):
                handle.write(chunk)
    checksum += float(sum(t.double().sum() for t in load_file(path).values()))
otel_coldstart.ready()
with open(out, "w") as handle:
    json.dump({"trace": otel_coldstart.trace_file(), "checksum": checksum}, handle)
