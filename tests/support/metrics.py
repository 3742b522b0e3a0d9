"""Reading a swarm's Prometheus endpoint (COGWORKER_METRICS_PORT) the way a scraper does: the page's
text, or its samples parsed by prometheus_client's own parser and keyed by name and labels."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

# (sample name, its labels as sorted (name, value) pairs) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_text(port: int, timeout: float = 5) -> str:
    """The /metrics page on 127.0.0.1:`port`; raises if nothing answers."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        assert response.status == 200
        return str(response.read().decode())


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int, timeout: float = 5) -> Samples:
    """Every sample on /metrics; {} while nothing listens yet (for waiting on a condition)."""
    try:
        return parse(scrape_text(port, timeout))
    except (urllib.error.URLError, ConnectionError):
        return {}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample `name` with exactly these labels; None when the scrape has no such sample."""
    return samples.get((name, tuple(sorted(labels.items()))))
