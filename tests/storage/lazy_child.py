"""A start-up that leaves weights mapped at ready(), then what its first requests do, in a fresh
instrumented process (run by test_lazy_weights.py). The trace goes to OTEL_COLDSTART_OUTPUT_DIR;
each step prints ``STEP <name> <time.time_ns()>`` so the test can place it against the trace.

    python lazy_child.py minilm MODEL_DIR [float16]
        from_pretrained (dtype float16 if given), ready(), 1 s with nothing read, a forward pass
        of one sentence, until a first-use record is on disk, then the embedding rows of every
        token (what the requests of a long day read), until the follow-up said "resident" (after
        5 s without, every page again about once a second).
    python lazy_child.py quiet MODEL_DIR [float16]
        from_pretrained, ready(), a forward pass; prints the threads still ours 1 s later.
    python lazy_child.py load_file PATH keep|copy|exit|kill
        safetensors.torch.load_file, the first tensor touched; ``copy`` clones it and drops the
        mapped dict, the others keep it; ready(); ``exit`` touches an eighth of the rest (in its middle:
        the readahead of the first read is past) and exits while followed, ``kill`` does the
        same, waits for its first-use record on disk and kills itself with SIGKILL.
"""

import glob
import os
import signal
import sys
import threading
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import otel_coldstart  # noqa: E402

READER = None
if os.environ.get("LAZY_CHILD_METRICS") == "1":  # metrics to a reader of ours, printed at the end
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    READER = InMemoryMetricReader()
    otel_coldstart.instrument(meter_provider=MeterProvider(metric_readers=[READER]))
else:
    otel_coldstart.instrument()

import torch  # noqa: E402

SCENARIO, PATH = sys.argv[1], sys.argv[2]
OPTION = sys.argv[3] if len(sys.argv) > 3 else None


def step(name: str) -> None:
    print(f"STEP {name} {time.time_ns()}", flush=True)


def first_use_bytes(line: str) -> int:
    """The most bytes any first-use record in one written line of the trace says were read."""
    import json

    seen = [0]
    for resource in json.loads(line).get("resourceSpans", ()):
        for scope in resource.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                for attr in span.get("attributes", ()) if span.get("name") == "coldstart.first_use" else ():
                    if attr["key"] == "coldstart.first_use.bytes":
                        seen.append(int(next(iter(attr["value"].values()))))
    return max(seen)


def wait_for_record(text: str, timeout_s: float = 60.0, meanwhile=None, min_bytes: int = 0) -> None:
    """Until a first-use record containing ``text`` (and, with ``min_bytes``, saying at least that
    much was read) is in the trace file (what a kill leaves); ``meanwhile()`` is called about once
    a second after the first 5 s of waiting."""
    deadline = time.monotonic() + timeout_s
    pattern = os.path.join(os.environ["OTEL_COLDSTART_OUTPUT_DIR"], "startup-*.otlp.jsonl")
    turns = 0
    while time.monotonic() < deadline:
        if meanwhile is not None and turns >= 50 and turns % 10 == 0:
            meanwhile()
        turns += 1
        for path in glob.glob(pattern):
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if '"coldstart.first_use"' in line and text in line and (
                            not min_bytes or first_use_bytes(line) >= min_bytes):
                        return
        time.sleep(0.1)
    raise SystemExit(f"no first-use record with {text!r} within {timeout_s} s")


def print_metrics() -> None:
    """``METRICS {name: value}`` of the lazy-weights counters, as a reader collects them now."""
    import json

    values = {}
    for resource_metrics in READER.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name.startswith(("model.startup.lazy", "model.startup.first_use")):
                    values[metric.name] = sum(point.value for point in metric.data.data_points)
    print("METRICS", json.dumps(values), flush=True)


def ours() -> list:
    """Our threads that could be following a file (the monitor, or the follow-up's own)."""
    return sorted(t.name for t in threading.enumerate()
                  if t.name in ("otel-coldstart-inflight", "otel-coldstart-first-use"))


if SCENARIO in ("minilm", "quiet"):
    import transformers  # noqa: E402

    kwargs = {"dtype": torch.float16} if OPTION == "float16" else {}
    model = transformers.AutoModel.from_pretrained(PATH, **kwargs)
    tokenizer = transformers.AutoTokenizer.from_pretrained(PATH)
    sentence = tokenizer(["the first request after a scale-up"], return_tensors="pt")
    otel_coldstart.ready()
    step("ready")
    if SCENARIO == "quiet":
        with torch.inference_mode():
            model(**sentence)
        time.sleep(1.0)
        print("THREADS", ",".join(ours()), flush=True)
    else:
        time.sleep(1.0)  # nothing reads the weights: the follow-up must see nothing
        step("forward")
        with torch.inference_mode():
            model(**sentence)
        wait_for_record("coldstart.first_use.bytes")
        step("all_rows")
        with torch.inference_mode():
            model.get_input_embeddings()(torch.arange(model.config.vocab_size))

        def every_page() -> None:
            """Every parameter, and the file's other pages (its header): on a shared machine
            under memory pressure a page seen in may be evicted while another of its 8 MiB
            chunk comes in, and "resident" needs every page in at once."""
            with torch.inference_mode():
                for parameter in model.parameters():
                    float(parameter.sum())
            with open(os.path.join(PATH, "model.safetensors"), "rb") as handle:
                while handle.read(8 << 20):
                    pass

        wait_for_record('"resident"', meanwhile=every_page)
        step("resident")
elif SCENARIO == "load_file":
    from safetensors.torch import load_file

    tensors = load_file(PATH)
    names = sorted(tensors)
    float(tensors[names[0]].sum())  # the first tensor read; the rest left mapped, untouched
    if OPTION == "copy":
        kept = tensors[names[0]].clone()
        del tensors  # the mapping goes with the last tensor backed by it
    otel_coldstart.ready()
    step("ready")
    if OPTION in ("exit", "kill"):
        time.sleep(0.5)
        step("touch")
        rest = tensors[names[-1]]
        middle = rest.numel() // 2
        float(rest[middle: middle + rest.numel() // 8].sum())  # an eighth of the rest, in its middle
        step("touched")
        if OPTION == "kill":
            # Not the first record: a tick can fall inside the read and write what it had seen
            # so far. The test asks that the eighth read before the kill is kept (0.9: its bound).
            wait_for_record("coldstart.first_use.bytes", min_bytes=int(0.9 * rest.numel() * rest.element_size() / 8))
            step("kill")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(1.5)  # one more tick sees it; the exit below ends the following
        if READER is not None:
            print_metrics()
    else:
        time.sleep(1.0)
    print("THREADS", ",".join(ours()), flush=True)
else:
    raise SystemExit(f"unknown scenario {SCENARIO}")
