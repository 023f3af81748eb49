"""The demo's start-up process. Instrumenting is the first thing it does, as it should be
in a model server, so the root span measures this process from its start."""

import otel_coldstart

otel_coldstart.instrument()

import sys  # noqa: E402

from otel_coldstart import demo  # noqa: E402

demo.load(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "float16")
