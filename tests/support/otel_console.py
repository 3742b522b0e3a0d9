"""Spans as OpenTelemetry's console exporter prints them (OTEL_TRACES_EXPORTER=console): each span an
indented JSON object from a line "{" to a line "}", between whatever else the process prints (a
cogworker log line is one line of JSON, so it never starts a span)."""

from __future__ import annotations

import json
from typing import Any


def console_spans(text: str) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line == "{" or current:
            current.append(line)
        if line == "}" and current:
            spans.append(json.loads("\n".join(current)))
            current = []
    return spans


def of_kind(spans: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The spans of one kind: "PRODUCER", "CONSUMER", ..."""
    return [span for span in spans if span["kind"] == f"SpanKind.{kind}"]
