"""What the package is: its version and what it instruments. Imports nothing, so the
package face, the CLI and pyproject's dynamic version read it without loading the runtime."""

__version__ = "0.1.0"

# What otel-coldstart instruments, not what it installs (OTel contrib's convention): the
# user brings their own torch build, often a CUDA one, and installing the plugin must never
# replace it. opentelemetry-instrument skips the plugin where this is not satisfied.
_instruments = ("torch >= 2.1",)
