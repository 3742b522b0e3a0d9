"""Zero-code tracing: cogworker's `opentelemetry_instrumentor` entry point (pyproject.toml).

`opentelemetry-instrument cogworker run` (or `... python app.py`) loads every instrumentor that an
installed distribution registers under that entry-point group and calls its `instrument()` before
the program's own code runs, after the SDK was set up from the OTEL_* environment. This one adds
cogworker.contrib.otel's push and perform middleware to the chains, exactly as calling
`otel.instrument()` in the app would; `uninstrument()` takes them out again.

It can also be used by hand, like any OpenTelemetry instrumentor:
`CogworkerInstrumentor().instrument(tracer_provider=provider)`.

`OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=cogworker` turns it off under `opentelemetry-instrument`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]


class CogworkerInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces every push (a PRODUCER span) and every job (a CONSUMER span, the push's child) of
    this process: see docs/integrations/otel.md."""

    def instrumentation_dependencies(self) -> Collection[str]:
        # What must be installed for this to work: the package that ships it, so nothing to check.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        # Imported here: loading the entry point (every `opentelemetry-instrument` run, whatever the
        # program) must not import the job API until the instrumentor is actually turned on.
        from cogworker.contrib import otel

        otel.instrument(tracer_provider=kwargs.get("tracer_provider"))

    def _uninstrument(self, **kwargs: Any) -> None:
        from cogworker.contrib import otel

        otel.uninstrument()
