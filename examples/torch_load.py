"""Plain torch: a checkpoint saved with torch.save, loaded with torch.load, cast, warmed up.

    python examples/torch_load.py

The smallest complete start-up: ``instrument()`` first, ``phase()`` around the steps the
plugin cannot name by itself (building the model, warm-up), ``ready()`` when it can serve.
The breakdown is printed at ``ready()``; the trace is an OTLP JSON file.
"""

import otel_coldstart

otel_coldstart.instrument()  # first thing: the root span starts at the process start

import os  # noqa: E402
import tempfile  # noqa: E402

with otel_coldstart.phase("import_libraries"):
    import torch
    from torch import nn


def build_model() -> nn.Module:
    return nn.Sequential(*[nn.Linear(512, 512) for _ in range(8)])


def main() -> None:
    path = os.path.join(tempfile.gettempdir(), "otel-coldstart-torch-example.pt")
    if not os.path.exists(path):
        with otel_coldstart.phase("generate_checkpoint"):  # a one-off of the example
            torch.save(build_model().state_dict(), path)

    with otel_coldstart.phase("build_model"):  # construction and weight init: ours to name
        model = build_model()
    state = torch.load(path, map_location="cpu", weights_only=True)  # a deserialize span
    model.load_state_dict(state)  # copies into the parameters: h2h
    model.to(torch.bfloat16)  # a coldstart.module.to span over the summed casts
    with otel_coldstart.phase("warmup"):
        with torch.no_grad():
            model(torch.zeros(4, 512, dtype=torch.bfloat16))
    otel_coldstart.ready()
    print(f"served a warm-up batch; trace: {otel_coldstart.trace_file()}")


if __name__ == "__main__":
    main()
