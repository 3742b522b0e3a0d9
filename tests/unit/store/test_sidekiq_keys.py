"""The Sidekiq mode's key split: Sidekiq's families take its names (bare, or a Sidekiq 6 namespace),
everything else stays under cogworker's prefix, and the settings Sidekiq could not run beside stop the
command with a clear error."""

from __future__ import annotations

import pytest

from cogworker.settings import ConfigError, load_settings
from cogworker.store import keys, shards, sidekiq_keys
from tests.support.key_names import every_name

SHARED = {
    "QUEUES": "queues",
    "SCHEDULE": "schedule",
    "RETRY": "retry",
    "DEAD": "dead",
    "PROCESSES": "processes",
    "STAT_PROCESSED": "stat:processed",
    "STAT_FAILED": "stat:failed",
}


@pytest.fixture(autouse=True)
def _back_to_default() -> object:
    yield None
    shards.use_settings(load_settings())


@pytest.mark.parametrize(
    ("compat", "namespace", "start"), [("6", "", ""), ("6", "rails", "rails:"), ("7", "", "")]
)
def test_sidekiq_families_take_sidekiqs_names(compat: str, namespace: str, start: str) -> None:
    shards.use_settings(load_settings(sidekiq_compat=compat, sidekiq_namespace=namespace, key_prefix="cw:"))
    for name, family in SHARED.items():
        assert getattr(keys, name) == start + family
    assert keys.queue("default") == start + "queue:default"
    assert keys.stat_day("processed", "2026-12-04") == start + "stat:processed:2026-12-04"
    assert keys.stat_failed_day("2026-12-04") == start + "stat:failed:2026-12-04"
    assert keys.job_sets() == {
        "retry": start + "retry",
        "scheduled": start + "schedule",
        "dead": start + "dead",
    }
    # Sidekiq's presence of a process, by identity alone.
    busy = ":workers" if compat == "6" else ":work"
    assert sidekiq_keys.presence("h:1:ab") == start + "h:1:ab"
    assert sidekiq_keys.busy_jobs("h:1:ab") == start + "h:1:ab" + busy
    assert sidekiq_keys.signals("h:1:ab") == start + "h:1:ab-signals"
    assert sidekiq_keys.enabled()
    # Every other name stays cogworker's own.
    shared = {start + family for family in SHARED.values()} | {start + "queue:", start + "stat:processed:"}
    shared |= {start + "stat:failed:", start + "queue:q", start + "stat:processed:2026-01-01"}
    shared |= {start + "stat:failed:2026-01-01", start + "stat:processed", start + "stat:failed"}
    own = [n for n in every_name() if n not in shared]
    assert len(own) > 50
    assert [n for n in own if not n.startswith("cw:")] == []
    assert keys.stat("expired") == "cw:stat:expired"
    assert keys.PAUSED == "cw:paused" and keys.process("h:1:ab") == "cw:process:h:1:ab"


def test_off_keeps_every_key_under_the_prefix() -> None:
    shards.use_settings(load_settings(key_prefix="cw:"))
    assert not sidekiq_keys.enabled()
    assert [n for n in every_name() if not n.startswith("cw:")] == []
    assert keys.SHARED_PREFIX == "cw:" and keys.stat("processed") == keys.STAT_PROCESSED


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"COGWORKER_SIDEKIQ_NAMESPACE": "rails"}, "set COGWORKER_SIDEKIQ_COMPAT=6 with it"),
        (
            {"COGWORKER_SIDEKIQ_COMPAT": "7", "COGWORKER_SIDEKIQ_NAMESPACE": "rails"},
            "Sidekiq 7 has no namespaces",
        ),
        ({"COGWORKER_SIDEKIQ_COMPAT": "6", "COGWORKER_SIDEKIQ_NAMESPACE": "rails:"}, "no colon at the end"),
        ({"COGWORKER_SIDEKIQ_COMPAT": "6", "COGWORKER_SIDEKIQ_NAMESPACE": "my app"}, "no whitespace"),
        (
            {
                "COGWORKER_SIDEKIQ_COMPAT": "7",
                "COGWORKER_REDIS_URL": "redis+cluster://a:1",
                "COGWORKER_KEY_PREFIX": "{c}:",
            },
            "doesn't run on a Redis Cluster",
        ),
        ({"COGWORKER_SIDEKIQ_COMPAT": "8"}, "COGWORKER_SIDEKIQ_COMPAT"),
    ],
)
def test_a_mode_sidekiq_could_not_share_is_named(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert expected in str(err.value)
    assert "\n" not in str(err.value)
