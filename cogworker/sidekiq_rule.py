"""The rules for COGWORKER_SIDEKIQ_COMPAT and COGWORKER_SIDEKIQ_NAMESPACE, and the start of the keys the
mode shares with Sidekiq (store/keys.py `use_prefix`).

Checked at start like every setting: a mode Sidekiq itself could not run beside (a Redis Cluster, a
namespace for Sidekiq 7) stops the command with exit 78 rather than writing keys no Ruby process reads.
"""

from __future__ import annotations

from typing import Protocol

from cogworker import cluster_url


class CompatSettings(cluster_url.ClusterSettings, Protocol):
    @property
    def sidekiq_compat(self) -> str: ...
    @property
    def sidekiq_namespace(self) -> str: ...
    @property
    def sidekiq_metrics(self) -> bool: ...
    @property
    def metrics(self) -> bool: ...


def check_settings(settings: CompatSettings) -> None:
    """ValueError saying what is wrong with the mode's settings; nothing when they hold together."""
    namespace = settings.sidekiq_namespace
    if namespace and settings.sidekiq_compat != "6":
        raise ValueError(
            "COGWORKER_SIDEKIQ_NAMESPACE is the redis-namespace of a Sidekiq 6 app: set "
            "COGWORKER_SIDEKIQ_COMPAT=6 with it (Sidekiq 7 has no namespaces, so its keys are bare)"
        )
    if any(c.isspace() or not c.isprintable() for c in namespace) or namespace.endswith(":"):
        raise ValueError(
            f"COGWORKER_SIDEKIQ_NAMESPACE={namespace!r}: give the namespace as the Sidekiq app sets it "
            '(`namespace: "myapp"`, no colon at the end, no whitespace)'
        )
    if settings.sidekiq_metrics and settings.sidekiq_compat != "7":
        raise ValueError(
            "COGWORKER_SIDEKIQ_METRICS writes the metrics keys of Sidekiq 7's Metrics tab: set "
            "COGWORKER_SIDEKIQ_COMPAT=7 with it (Sidekiq 6 has no such tab)"
        )
    if settings.sidekiq_metrics and not settings.metrics:
        raise ValueError(
            "COGWORKER_SIDEKIQ_METRICS is written by the per-class metrics flush: it needs "
            "COGWORKER_METRICS=on"
        )
    if settings.sidekiq_compat != "off" and cluster_url.is_cluster(settings):
        raise ValueError(
            "COGWORKER_SIDEKIQ_COMPAT shares keys with Sidekiq, which doesn't run on a Redis Cluster: "
            "use a single Redis (or Sentinel) for a deployment beside Sidekiq"
        )


def shared_prefix(compat: str, namespace: str) -> str | None:
    """The start of the keys shared with Sidekiq: `<namespace>:` or "" (bare keys); None when the mode is
    off (every key under cogworker's own prefix)."""
    if compat == "off":
        return None
    return f"{namespace}:" if namespace else ""
