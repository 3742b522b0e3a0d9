"""COGWORKER_REDIS_MIN_REPLICAS: a write that must survive a failover waits for replicas to have it.

Redis replicates asynchronously, so a master that dies can take with it writes it already answered:
a push the caller was told succeeded, an acknowledgement. `WAIT N timeout` returns once N replicas
have every write this connection sent before it, or at the timeout with how many did. It goes in the
same write as the command it guards (a pipeline, or call_many on the fetch loop's connection), so it
costs no extra round trip, only the replication delay.

Fewer than N within the timeout:
- a push raises NotReplicated naming the jids: the job IS on the master and will run unless the
  master dies before a replica has it; the caller decides (pushing again may run it twice).
- an acknowledgement (a finished job leaving the in-progress list) is only logged, once per outage:
  it can't be undone, and a lost one only makes the job run again after a failover, never lost.
WAIT itself is not a guarantee against every loss (a replica promoted may still lack a write WAIT
counted on another replica), but with one replica and sentinels promoting it, a push that returned
is on the replica that is promoted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import redis
import structlog

from cogworker.settings_fields import SettingsFields

log = structlog.get_logger("cogworker.replicas")

# While replicas fall short, the fetch loop asks whether they are back this often, waiting this long.
PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_MS = 10


class NotReplicated(redis.RedisError):
    """A push reached the master, but fewer replicas than COGWORKER_REDIS_MIN_REPLICAS confirmed it.

    The jobs ARE queued and will run unless the master fails before a replica has them. Pushing them
    again may run them twice: do so only for jobs safe to run twice, or log the jids and check them
    after a failover.

    Attributes:
        jids: The jids of the jobs pushed.
        confirmed: How many replicas confirmed them.
        wanted: COGWORKER_REDIS_MIN_REPLICAS.
    """

    def __init__(self, jids: Sequence[str], confirmed: int, wanted: int, timeout_s: float) -> None:
        self.jids = tuple(jids)
        self.confirmed = confirmed
        self.wanted = wanted
        shown = ", ".join(self.jids[:5]) + (f" and {len(self.jids) - 5} more" if len(self.jids) > 5 else "")
        super().__init__(
            f"job(s) {shown} pushed, but only {confirmed} of {wanted} replica(s) confirmed them within "
            f"{timeout_s:g}s (COGWORKER_REDIS_MIN_REPLICAS): they are on the master and run unless it "
            "fails before a replica has them; pushing again may run them twice"
        )


def wait_command(settings: SettingsFields) -> tuple[str, int, int] | None:
    """The WAIT to send after a guarded write; None when COGWORKER_REDIS_MIN_REPLICAS is 0."""
    if settings.redis_min_replicas <= 0:
        return None
    return ("WAIT", settings.redis_min_replicas, max(1, int(settings.redis_min_replicas_timeout_s * 1000)))


def check_push(settings: SettingsFields, reply: object, jids: Sequence[str]) -> None:
    """Raise NotReplicated when WAIT's `reply` counts fewer replicas than wanted."""
    if isinstance(reply, Exception):
        raise reply
    confirmed = int(reply)  # type: ignore[call-overload]
    if confirmed < settings.redis_min_replicas:
        raise NotReplicated(
            jids, confirmed, settings.redis_min_replicas, settings.redis_min_replicas_timeout_s
        )


def unconfirmed(settings: SettingsFields, jids: Sequence[str]) -> NotReplicated | None:
    """What a push that was written, but whose reply was lost, tells its caller: the WAIT's answer was
    lost with it, so when replicas are wanted none is known to hold the jobs."""
    if settings.redis_min_replicas <= 0:
        return None
    return NotReplicated(jids, 0, settings.redis_min_replicas, settings.redis_min_replicas_timeout_s)


def confirmed_enough(settings: SettingsFields, reply: object) -> bool:
    return not isinstance(reply, Exception) and int(reply) >= settings.redis_min_replicas  # type: ignore[call-overload]


class AckWait:
    """The fetch loop's WAIT after a round trip that carried acknowledgements, and its log: one line
    when replicas stop confirming them, one when they confirm again (not one per fetch).

    While too few replicas confirm (after a failover, until the old master rejoins as a replica: up
    to ~10 s, the sentinels' INFO period), a WAIT per fetch would stall the fetch loop for its whole
    timeout each time and the swarm would crawl. So acknowledgements then go unconfirmed (they were
    already best-effort), and a short WAIT once per PROBE_EVERY_S finds when replicas are back."""

    def __init__(self, settings: SettingsFields, command: tuple[str, int, int]) -> None:
        self._settings = settings
        self.command = command
        self._probe = (command[0], command[1], PROBE_TIMEOUT_MS)
        self._short_since: float | None = None
        self._next_probe = 0.0

    def command_now(self) -> tuple[str, int, int] | None:
        """The WAIT to send with this fetch's acknowledgements, or None (too few replicas: not now)."""
        if self._short_since is None:
            return self.command
        now = time.monotonic()
        if now < self._next_probe:
            return None
        self._next_probe = now + PROBE_EVERY_S
        return self._probe

    @classmethod
    def of(cls, settings: SettingsFields) -> AckWait | None:
        command = wait_command(settings)
        return cls(settings, command) if command is not None else None

    def observe(self, reply: object) -> None:
        if confirmed_enough(self._settings, reply):
            if self._short_since is not None:
                lasted = round(time.monotonic() - self._short_since, 2)
                log.warning("acks_replicated_again", lasted_s=lasted)
                self._short_since = None
            return
        if self._short_since is None:
            self._short_since = time.monotonic()
            self._next_probe = self._short_since + PROBE_EVERY_S
            log.warning(
                "acks_not_replicated",
                confirmed=str(reply),
                wanted=self._settings.redis_min_replicas,
                note="finished jobs acknowledged meanwhile may run again after a failover",
            )
