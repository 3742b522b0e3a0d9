"""Batch members and callbacks for the sharded layout's batch tests (tests/e2e/sharded/test_batches.py).
Each records in a file named by SHARDED_TEST_OUT (not Redis: the test's view of a run must not depend
on the cluster under test), one line per event, appended whole: `ran <tag> <pid>`, `cb <kind> <label>
<bid>`. A callback also records how many members its batch still had pending when it ran, read from
the batch's status (`early` when any: a callback must never run before every member ended)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import cogworker
from cogworker import job


def _out() -> Path:
    return Path(os.environ["SHARDED_TEST_OUT"])


def _note(line: str) -> None:
    with open(_out(), "a") as out:
        out.write(line + "\n")


def _release_file() -> Path:
    return _out().with_suffix(".release")


def _first_time(name: str) -> bool:
    """True for the first caller across processes (an O_EXCL file beside the events file)."""
    try:
        os.close(os.open(_out().with_suffix(f".{name}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@job(queue="bq", retry=False)
def ok(tag: str) -> None:
    _note(f"ran {tag} {os.getpid()}")


@job(queue="bq", retry=3, retry_in=lambda count, exc: 0)
def flaky(tag: str) -> None:
    """Fails on its first run, succeeds on its second."""
    if _first_time(f"try-{tag}"):
        raise ValueError(f"first try of {tag}")
    _note(f"ran {tag} {os.getpid()}")


@job(queue="bq", retry=False)
def dies(tag: str) -> None:
    raise RuntimeError(f"{tag} dies")


@job(queue="bq", retry=False)
def blocks(tag: str) -> None:
    """Records its start, then waits (up to two minutes) for the test's release file."""
    _note(f"started {tag} {os.getpid()}")
    deadline = time.monotonic() + 120
    while not _release_file().exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    _note(f"ran {tag} {os.getpid()}")


@job(queue="bq", retry=False)
def adds_then_blocks(tag: str) -> None:
    """Adds a member to its own batch; its first run then stays inside the block (up to two minutes,
    or until the release file) for a test to kill its worker there. A later run adds and ends."""
    current = cogworker.current_batch()
    assert current is not None
    first = _first_time(f"adder-{tag}")
    with current.jobs():
        current.add(ok, f"{tag}-child-{'1' if first else '2'}")
        _note(f"started {tag} {os.getpid()}")
        if first:
            deadline = time.monotonic() + 120
            while not _release_file().exists() and time.monotonic() < deadline:
                time.sleep(0.02)
    _note(f"ran {tag} {os.getpid()}")


def _callback(kind: str, bid: str, label: str) -> None:
    status = cogworker.batch_status(bid)
    pending = status.pending if status is not None else -1
    _note(f"cb {kind} {label} {bid} {'early' if kind != 'death' and pending else 'after'}")


@job(queue="cbq", retry=False)
def on_success(bid: str, label: str) -> None:
    _callback("success", bid, label)


@job(queue="cbq", retry=False)
def on_complete(bid: str, label: str) -> None:
    _callback("complete", bid, label)


@job(queue="cbq", retry=False)
def on_death(bid: str, label: str) -> None:
    _callback("death", bid, label)


def callbacks(label: str) -> dict[str, Any]:
    return {
        "on_success": on_success,
        "on_complete": on_complete,
        "on_death": on_death,
        "callback_args": (label,),
    }


@job(queue="bq", retry=False)
def kills_itself(tag: str) -> None:
    """A poison pill: SIGKILLs the process running it, every run."""
    _note(f"started {tag} {os.getpid()}")
    os.kill(os.getpid(), signal.SIGKILL)
