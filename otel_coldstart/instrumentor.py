"""``ColdstartInstrumentor``: the OTel ``BaseInstrumentor`` for otel-coldstart.

``opentelemetry-instrument`` finds it through the ``opentelemetry_instrumentor`` entry
point. It is a thin adapter: the patches and the start-up session belong to
:mod:`otel_coldstart.controller`, which ``otel_coldstart.instrument()`` drives directly, so
both ways of enabling the plugin share one state.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from .controller import CONTROLLER
from .package import _instruments


class ColdstartInstrumentor(BaseInstrumentor):
    """Traces a model's start-up. See :func:`otel_coldstart.instrument` for the options."""

    # BaseInstrumentor keeps its own "instrumented" flag; here the controller's state is the
    # truth, so otel_coldstart.instrument() and this class never disagree.
    @property
    def _is_instrumented_by_opentelemetry(self) -> bool:
        return CONTROLLER.active

    @_is_instrumented_by_opentelemetry.setter
    def _is_instrumented_by_opentelemetry(self, value: bool) -> None:
        pass

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        # BaseInstrumentor's own option (opentelemetry-instrument passes it): not ours.
        kwargs.pop("skip_dep_check", None)
        CONTROLLER.start(**kwargs)

    def _uninstrument(self, **kwargs: Any) -> None:
        CONTROLLER.stop()

    @property
    def session(self):
        return CONTROLLER.session

    @property
    def trace_file(self) -> str | None:
        return CONTROLLER.trace_file
