"""A job whose error has a cause (`raise X from exc`), for the backtrace tests: the cause is raised
inside the standard library (json), a few frames below the job, on a line Python marks with carets."""

from __future__ import annotations

import json
from typing import Any

from cogworker import job


def read_total(text: str) -> float:
    document: dict[str, Any] = json.loads(text)
    return 1.0 + float(document["total"]) * 2


def load_invoice(text: str) -> float:
    return read_total(text)


@job(retry=3)
def import_invoice(text: str) -> None:
    try:
        load_invoice(text)
    except ValueError as exc:
        raise RuntimeError(f"invoice {text!r} could not be imported") from exc
