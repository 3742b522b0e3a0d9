"""Immediate requeue, the supervisor's side: its bookkeeping of what is still to be requeued, with an
injected clock (the fork server's Redis side is tests/unit/supervisor/forkserver/test_redis_requeue.py)."""

from __future__ import annotations

from supervisor.restart_policy.requeue_requests import RETRY_FIRST_S, RequeueRequests


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeServer:
    """Stands in for the fork server's socket: records what was sent; `up` says whether it takes it."""

    def __init__(self) -> None:
        self.up = True
        self.sent: list[str] = []

    def __call__(self, identity: str) -> bool:
        if self.up:
            self.sent.append(identity)
        return self.up


def test_an_identity_stays_pending_until_answered_and_reports_latency() -> None:
    clock, server = Clock(), FakeServer()
    done: list[tuple[str, int, float]] = []
    requeuer = RequeueRequests(clock, on_done=lambda *a: done.append(a))

    requeuer.ask("h:1:dead", server)
    assert server.sent == ["h:1:dead"] and requeuer.pending == {"h:1:dead"}
    requeuer.retry_due(server, force=True)
    assert server.sent == ["h:1:dead"]  # in flight: not sent twice
    clock.now += 0.25
    requeuer.on_answer({"identity": "h:1:dead", "ok": True, "moved": 2})
    assert requeuer.pending == set() and requeuer.in_flight == set()
    assert done == [("h:1:dead", 2, 0.25)]


def test_failures_retry_with_growing_delays_and_a_lost_server_resends() -> None:
    clock, server = Clock(), FakeServer()
    done: list[tuple[str, int, float]] = []
    requeuer = RequeueRequests(clock, on_done=lambda *a: done.append(a))

    requeuer.ask("h:2:dead", server)
    requeuer.on_answer({"identity": "h:2:dead", "ok": False, "error": "Connection refused"})
    assert requeuer.pending == {"h:2:dead"} and requeuer.in_flight == set()
    clock.now += RETRY_FIRST_S / 2
    requeuer.retry_due(server)  # not due yet: nothing sent
    assert server.sent == ["h:2:dead"]
    clock.now += RETRY_FIRST_S / 2
    requeuer.retry_due(server)  # due: sent again, fails again, so the next wait doubles
    requeuer.on_answer({"identity": "h:2:dead", "ok": False, "error": "Connection refused"})
    assert server.sent == ["h:2:dead"] * 2
    clock.now += RETRY_FIRST_S
    requeuer.retry_due(server)
    assert len(server.sent) == 2  # only half of the doubled delay
    clock.now += RETRY_FIRST_S
    requeuer.retry_due(server)
    assert len(server.sent) == 3

    # The fork server dies with the request unanswered; none is up for a while, then the swarm
    # forces a retry the moment a new one is ready.
    requeuer.lost({"h:2:dead"})
    server.up = False
    requeuer.retry_due(server)
    assert requeuer.pending == {"h:2:dead"} and requeuer.in_flight == set()
    server.up = True
    requeuer.retry_due(server, force=True)
    assert len(server.sent) == 4
    requeuer.on_answer({"identity": "h:2:dead", "ok": True, "moved": 1})
    assert requeuer.pending == set() and done == [("h:2:dead", 1, 3 * RETRY_FIRST_S)]
