"""A start-up killed in the middle of a download (issue 37): SIGTERM ends the file's span
with the bytes it had received; after SIGKILL the analyzer rebuilds it from the last
progress record, with the partial file's bytes and which file it was. The real
huggingface_hub client against the test hub, throttled so the download is in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("huggingface_hub")

from _hub_server import HubServer, Repo  # noqa: E402
from framework_checks import clean_env, read_trace_dir  # noqa: E402
from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.analyze.breakdown import breakdowns  # noqa: E402
from otel_coldstart.analyze.downloads import downloads  # noqa: E402

pytestmark = pytest.mark.process

CHILD = os.path.join(os.path.dirname(__file__), "hub_child.py")
REPO_ID = "org/tiny-bert"  # hub_child.py's argument; any repo id
SIZE = 24 << 20


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_killed_mid_download_reports_the_partial_file(tmp_path, how):
    repo = Repo({"weights.bin": os.urandom(SIZE)})
    with HubServer({REPO_ID: repo}, bytes_per_s=3e6) as hub:  # 8 s for the file
        env = clean_env(HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"), OTEL_COLDSTART_SUMMARY="0",
                        OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "t"), OTEL_COLDSTART_PROGRESS_INTERVAL_S="0.2",
                        HF_HUB_DISABLE_PROGRESS_BARS="1")
        child = subprocess.Popen([sys.executable, CHILD, str(tmp_path / "out.json"), "hf_hub_download", REPO_ID,
                                  "weights.bin"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        hub.signal_mid_transfer(child, how, after_s=2.5)  # ~7 MB in
    spans = read_trace_dir(str(tmp_path / "t"))
    (startup,) = breakdowns(spans)
    assert startup.root.attributes.get(semconv.END_REASON) == ("sigterm" if how == signal.SIGTERM else "killed")
    found = downloads(startup)
    (item,) = found.items
    assert item.filename == "weights.bin" and item.repo == REPO_ID
    assert item.interrupted and not item.cached
    # The partial file's bytes: under the file, above a second's worth of the throttle; after
    # SIGKILL, as of the last progress record (at most ~0.5 s old).
    assert 3e6 <= item.bytes < SIZE, item.bytes
    assert item.expected_bytes == SIZE
