"""fsspec downloads (issue 37): a remote file opened through an fsspec file system is a
coldstart.download.file span with the bytes that came over the network. The real
``HfFileSystem`` (huggingface_hub's fsspec file system, ``hf://``) against the test hub on
127.0.0.1, in fresh processes; the bytes are checked against what the server sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("fsspec")
pytest.importorskip("huggingface_hub")
torch = pytest.importorskip("torch")

from _hub_server import HubServer, Repo  # noqa: E402
from framework_checks import clean_env, read_trace_dir  # noqa: E402
from otel_coldstart import semconv  # noqa: E402
from otel_coldstart.analyze.breakdown import breakdowns  # noqa: E402
from otel_coldstart.analyze.downloads import downloads  # noqa: E402

pytestmark = pytest.mark.process

CHILD = os.path.join(os.path.dirname(__file__), "fsspec_child.py")
REPO_ID = "org/weights"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A safetensors file (6 MiB) and a torch.save file (3 MiB), on disk and as a hub repo."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("weights")
    save_file({"w": torch.randn(1536, 1024), "b": torch.randn(1024)}, str(folder / "model.safetensors"))
    torch.save({"w": torch.randn(768, 1024)}, str(folder / "model.pt"))
    return {name: (folder / name).read_bytes() for name in ("model.safetensors", "model.pt")}, folder


def _env(tmp_path, hub, **extra) -> dict:
    return clean_env(HF_ENDPOINT=hub.endpoint, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"),
                     OTEL_COLDSTART_SUMMARY="0", OTEL_COLDSTART_OUTPUT_DIR=str(tmp_path / "t"),
                     HF_HUB_DISABLE_PROGRESS_BARS="1", **extra)


@pytest.mark.parametrize("mode, name", [("whole", "model.safetensors"), ("chunks", "model.safetensors"),
                                        ("torch_load", "model.pt")])
def test_a_file_read_through_fsspec_is_a_download_with_the_bytes_the_server_sent(tmp_path, files, mode, name):
    contents, folder = files
    with HubServer({REPO_ID: Repo(dict(contents))}) as hub:
        result = subprocess.run([sys.executable, CHILD, str(tmp_path / "out.json"), mode,
                                 f"hf://{REPO_ID}/{name}", str(folder / name)],
                                env=_env(tmp_path, hub), capture_output=True, text=True, timeout=300)
        sent = sum(count for path, _, count in hub.sent if path.endswith(name))
        metadata = [path for _, path in hub.log if "/resolve/" not in path]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "internal error" not in result.stderr, result.stderr[-3000:]
    assert json.loads((tmp_path / "out.json").read_text())["identical"]  # bit-identical to a plain load
    (startup,) = breakdowns(read_trace_dir(str(tmp_path / "t")))
    assert {phase.phase: phase.busy_ns for phase in startup.phases}.get("download", 0) > 0
    (item,) = downloads(startup).items
    assert item.source == semconv.DOWNLOAD_SOURCE_FSSPEC and item.transport == "hf"
    assert item.filename == f"{REPO_ID}/{name}" and not item.cached and not item.interrupted
    assert item.host == hub.endpoint.split("://", 1)[1]
    assert item.expected_bytes == len(contents[name])
    # The file's own GETs are its bytes; the repo info and listing are the metadata round trips.
    assert downloads(startup).metadata_requests == len(metadata), (downloads(startup), hub.log)
    # What came over the network, as the server counted it (a ranged re-read would be more than the file).
    assert sent >= len(contents[name])
    assert abs(item.bytes / sent - 1) <= 0.05, (item.bytes, sent, len(contents[name]))


def test_a_local_file_through_fsspec_is_no_download(tmp_path, files):
    contents, folder = files
    with HubServer({REPO_ID: Repo(dict(contents))}) as hub:
        path = folder / "model.safetensors"
        result = subprocess.run([sys.executable, CHILD, str(tmp_path / "out.json"), "whole", f"file://{path}",
                                 str(path)], env=_env(tmp_path, hub), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (startup,) = breakdowns(read_trace_dir(str(tmp_path / "t")))
    assert downloads(startup) is None and "download" not in {phase.phase for phase in startup.phases}


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_killed_mid_read_reports_the_partial_file(tmp_path, files, how):
    contents = {"big.safetensors": files[0]["model.safetensors"] * 3}  # 18 MiB, 6 s at the throttle
    size = len(contents["big.safetensors"])
    with HubServer({REPO_ID: Repo(contents)}, bytes_per_s=3e6) as hub:
        child = subprocess.Popen([sys.executable, CHILD, str(tmp_path / "out.json"), "chunks",
                                  f"hf://{REPO_ID}/big.safetensors", "unused"],
                                 env=_env(tmp_path, hub, OTEL_COLDSTART_PROGRESS_INTERVAL_S="0.2"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        hub.signal_mid_transfer(child, how, after_s=2.0)  # ~6 MB in
    (startup,) = breakdowns(read_trace_dir(str(tmp_path / "t")))
    assert startup.root.attributes.get(semconv.END_REASON) == ("sigterm" if how == signal.SIGTERM else "killed")
    (item,) = downloads(startup).items
    assert item.filename == f"{REPO_ID}/big.safetensors" and item.interrupted
    # The bytes read so far (1 MiB blocks: bytes are counted as reads return): above a second's
    # worth of the throttle, under the file; after SIGKILL as of the last progress record.
    assert 2e6 <= item.bytes < size, item.bytes
    assert item.expected_bytes == size
