"""The user guide's examples (docs/examples/<page>/, quoted by docs/guide/*.md) run for real: each
page's module pushed to from this process and run by a `cogworker run` worker on the session's Redis,
so what a page shows is what a reader gets."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

import cogworker
from cogworker.settings import Settings
from tests.support.paths import ROOT
from tests.support.redis_server import wait_until
from tests.support.workers import Worker, WorkerPool

EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pages' folders on this process's sys.path; their modules forgotten afterwards."""
    before = set(sys.modules)
    for page in (
        "jobs",
        "failures",
        "async-and-limits",
        "results-unique-periodic",
        "batches-chains-limiters",
    ):
        monkeypatch.syspath_prepend(str(EXAMPLES / page))
    monkeypatch.syspath_prepend(str(EXAMPLES / "testing"))
    yield
    for name in set(sys.modules) - before:
        if getattr(sys.modules[name], "__file__", "") and str(EXAMPLES) in str(sys.modules[name].__file__):
            del sys.modules[name]


def example(module: str) -> ModuleType:
    return importlib.import_module(module)


def start(workers: WorkerPool, page: str, module: str, queues: str) -> Worker:
    """A worker importing the page's module, its stdout line-buffered as on a terminal."""
    path = os.pathsep.join([str(EXAMPLES / page), os.environ["PYTHONPATH"]])
    return workers.start(
        PYTHONPATH=path, PYTHONUNBUFFERED="1", COGWORKER_REQUIRE=module, COGWORKER_QUEUES=queues
    )


def prints(worker: Worker, *lines: str) -> None:
    wait_until(
        lambda: all(line in worker.log_text() for line in lines),
        timeout=30,
        message=f"{lines} in the worker's output:\n{worker.log_text()[-3000:]}",
    )


@pytest.mark.usefixtures("examples")
def test_jobs_page(configured: Settings, workers: WorkerPool) -> None:
    jids = example("mailer").push_examples()
    assert len(set(jids)) == 6 and all(isinstance(jid, str) for jid in jids)
    worker = start(workers, "jobs", "mailer", "mailers,critical")
    prints(worker, "sent welcome to user 42", "sent x to user 7", "sent a to user 1", "sent b to user 2")
    assert worker.log_text().count("sent welcome to user 42") == 1  # the other two are for later


@pytest.mark.usefixtures("examples")
def test_failures_page(configured: Settings, workers: WorkerPool) -> None:
    billing = example("billing")
    closed = billing.sync_account.perform_async(-1)
    billing.sync_account.perform_async(5)
    worker = start(workers, "failures", "billing", "default")
    prints(worker, f"billing.sync_account {closed} died (failed): PermissionError: account -1 is closed")


@pytest.mark.usefixtures("examples")
def test_async_and_limits_page(configured: Settings, workers: WorkerPool) -> None:
    exports = example("exports")
    exports.deliver.perform_async(7)
    exports.render_report.set(timeout_s=300).perform_async(7)  # this push only
    exports.send_reminder.set(expires_in=60).perform_async(7)
    worker = start(workers, "async-and-limits", "exports", "webhooks,default")
    prints(worker, "delivered hook 7", "rendered report 7", "reminded user 7")
    jid = exports.export.perform_async(7)
    wait_until(lambda: any(e.get("jid") == jid for e in worker.events_named("job_start")), timeout=30)
    outcome = cogworker.cancel(jid)
    # Before the worker's next heartbeat lists the job as running, it is "not found" (in between
    # places); either way the cancel is kept and the worker ends the job at its next check.
    assert outcome.case in ("running", "not_found")
    wait_until(
        lambda: any(e.get("jid") == jid for e in worker.events_named("job_cancelled")),
        timeout=30,
        message=f"the export's run to end cancelled:\n{worker.log_text()[-3000:]}",
    )


@pytest.mark.usefixtures("examples")
def test_results_unique_periodic_page(configured: Settings, workers: WorkerPool) -> None:
    reports = example("reports")
    start(workers, "results-unique-periodic", "reports", "default,maintenance")
    jid = reports.render.perform_async(7)
    assert cogworker.result(jid, timeout=30) == {"url": "/reports/7.pdf", "pages": 12}
    with pytest.raises(cogworker.JobFailed) as failed:
        cogworker.result(reports.render_broken.perform_async(7), timeout=30)
    assert (failed.value.error_class, failed.value.error_message) == ("ValueError", "bad report")
    assert reports.rebuild_index.perform_in(600, 3) is not None
    assert reports.rebuild_index.perform_in(600, 3) is None  # a duplicate while the first waits
    exported = reports.export.perform_async(7)
    wait_until(lambda: cogworker.status(exported) == "complete", timeout=30)


@pytest.mark.usefixtures("examples")
def test_batches_chains_limiters_page(configured: Settings, workers: WorkerPool) -> None:
    imports = example("imports")
    worker = start(workers, "batches-chains-limiters", "imports", "imports,default,db")
    bid = imports.import_shop(42, 50)
    prints(worker, "shop 42: 50 rows imported, 0 failed")
    assert cogworker.batch_status(bid).complete
    pushed = imports.fetch_parse_store()
    prints(worker, "stored https://example.com")
    wait_until(lambda: (cogworker.chain_status(pushed.id) or {}).get("state") == "complete", timeout=30)
    grouped = imports.fetch_resize_publish()
    image = "<html>https://example.com/a.png</html>"
    prints(worker, f"published {image}@320, {image}@640, {image}@1280")
    assert cogworker.batch_status(grouped.jids[1]).complete  # a group's jid is its batch's id
    imports.charge.perform_async(1)
    imports.sync_repo.perform_async("cogworker-dev/cogworker")
    prints(worker, "charged order 1", "synced cogworker-dev/cogworker")


@pytest.mark.usefixtures("examples")
def test_testing_page() -> None:
    page = example("test_signup")
    page.test_the_welcome_email_is_queued()
    page.test_the_welcome_email_is_sent()
