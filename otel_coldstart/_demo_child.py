"""The demo's start-up process. Instrumenting is the first thing it does, as it should be
in a model server, so the root span measures this process from its start.

The breakdown is the demo's result: it goes to stdout (``otel-coldstart demo > report.txt``
keeps it), while progress and diagnostics stay on stderr. So the summary that ``instrument()``
would print on stderr is off here, and the child prints the same report itself."""

import otel_coldstart

otel_coldstart.instrument(summary=False)

import sys  # noqa: E402

from otel_coldstart import demo  # noqa: E402

demo.load(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "float16")
demo.write_report(sys.stdout)
