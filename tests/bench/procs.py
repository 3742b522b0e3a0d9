"""Starting, watching, measuring and ending the worker processes a benchmark run starts.

Every process the harness starts carries BENCH_RUN_ID in its environment. Process groups alone are not
enough to end them all: rq's work horses call setpgrp(), and a parent can die and leave orphans. So
besides stopping each group, the harness ends with a sweep that kills whatever still carries this
run's id, by pid, and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from supervisor.forkserver import TITLE as FORKSERVER_TITLE

# Worker commands run from the bench's own directory, not the checkout's root: cogworker's fork server
# puts its working directory first on sys.path (as `python -m` does), and from the root it would load
# cogworker from the source tree instead of the install run.sh made, as a user's service would.
WORKER_CWD = Path(__file__).resolve().parent

RUN_ID_VAR = "BENCH_RUN_ID"
MB = 1024 * 1024


def placement(one_session: bool) -> tuple[bool, int | None]:
    """Popen's start_new_session and process_group for a process the harness starts (and so for all
    it forks).

    By default, a session of its own, as a service started on its own would have (and as every run
    before `--one-session` existed measured). With `one_session` it stays in the harness's session, in
    a process group of its own, which the harness can end just the same. On the 2-vCPU VM the README
    reports from, that alone made every system's W1 drain 20-40 % faster. It is the kernel's autogroup
    (one per session) that does it: with autogroups off (kernel.sched_autogroup_enabled=0) one session
    drains as slowly as many, so Redis and the workers are scheduled best as one group, apart from
    the rest of the machine."""
    return (False, 0) if one_session else (True, None)


class NotRunnable(RuntimeError):
    """The worker command exited before it became ready: its system can't be measured in this run."""


# Direct children of a worker command that are not workers: cogworker's fork server, which holds the
# loaded code the workers are forked from. Counted apart, and in the totals.
HELPER_TITLES = (FORKSERVER_TITLE,)


@dataclass(frozen=True)
class MemoryFigures:
    parent_rss_mb: float
    children_uss_mb: list[float]
    children_pss_mb: list[float]
    parent_pss_mb: float
    helpers_rss_mb: float = 0.0
    helpers_pss_mb: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "parent_rss_mb": self.parent_rss_mb,
            "parent_pss_mb": self.parent_pss_mb,
            "helpers_rss_mb": self.helpers_rss_mb,
            "helpers_pss_mb": self.helpers_pss_mb,
            "children_uss_mb": self.children_uss_mb,
            "children_pss_mb": self.children_pss_mb,
            "children": len(self.children_uss_mb),
            "child_uss_mb_mean": _mean(self.children_uss_mb),
            "child_pss_mb_mean": _mean(self.children_pss_mb),
            "total_pss_mb": self.parent_pss_mb + self.helpers_pss_mb + sum(self.children_pss_mb),
        }


def is_helper(proc: psutil.Process) -> bool:
    try:
        return " ".join(proc.cmdline()).startswith(HELPER_TITLES)
    except psutil.Error:
        return False


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


class WorkerGroup:
    """One worker command (a parent and the children it forks), in a session or process group of
    its own (placement)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, one_session: bool) -> None:
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self._one_session = one_session
        self._popen: subprocess.Popen[bytes] | None = None
        self.parent: psutil.Process | None = None
        self.started_at = 0.0
        # Every descendant ever seen, so one whose parent already died can still be ended.
        self._seen: dict[int, psutil.Process] = {}
        self._killed = False
        self._reaped_at: float | None = None

    def start(self) -> None:
        new_session, group = placement(self._one_session)
        with open(self.log_path, "ab") as log:
            self.started_at = time.time()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=WORKER_CWD,
                start_new_session=new_session,
                process_group=group,
            )
        self.parent = psutil.Process(self._popen.pid)

    def exit_code(self) -> int | None:
        assert self._popen is not None
        code = self._popen.poll()
        if code is not None and self._reaped_at is None:
            self._reaped_at = time.monotonic()
        return code

    def children(self) -> list[psutil.Process]:
        """The parent's direct children that are workers (a worker's own forks are below them)."""
        return [p for p in self._direct() if not is_helper(p)]

    def helpers(self) -> list[psutil.Process]:
        """The parent's direct children that are not workers (HELPER_TITLES)."""
        return [p for p in self._direct() if is_helper(p)]

    def _direct(self) -> list[psutil.Process]:
        if self.parent is None or self.exit_code() is not None:
            return []
        try:
            direct = self.parent.children()
            self._remember(self.parent.children(recursive=True))
        except psutil.NoSuchProcess:
            return []
        return direct

    def subtree(self, proc: psutil.Process) -> list[psutil.Process]:
        try:
            below = proc.children(recursive=True)
        except psutil.NoSuchProcess:
            below = []
        self._remember(below)
        return [proc, *below]

    def _remember(self, procs: Iterable[psutil.Process]) -> None:
        for proc in procs:
            self._seen.setdefault(proc.pid, proc)

    def log_tail(self, chars: int = 600) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:].strip()

    def ensure_alive(self) -> None:
        code = self.exit_code()
        if code is not None:
            tail = self.log_tail()
            last = tail.splitlines()[-1] if tail else "(no output)"
            raise NotRunnable(f"`{' '.join(self.argv)}` exited with {code}: {last}")

    def stop(self, timeout_s: float) -> float:
        """SIGTERM to the parent (it relays to its children), then SIGKILL all that is left."""
        if self._popen is None:
            return 0.0
        self.children()
        began = time.monotonic()
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=timeout_s)
        self.exit_code()
        took = time.monotonic() - began
        self.kill()
        return took

    def kill(self) -> None:
        """SIGKILL the parent's session and every descendant seen; later calls do nothing."""
        if self._popen is None or self._killed:
            return
        self._killed = True
        self.children()
        self.exit_code()
        # The group is signalled only while its number can't have been handed to someone else: the
        # parent is alive, or was reaped moments ago. Descendants are killed by pid either way.
        if self._reaped_at is None or time.monotonic() - self._reaped_at < 5:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, signal.SIGKILL)
        for proc in self._seen.values():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=10)


def kill_tree(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def memory(group: WorkerGroup) -> MemoryFigures:
    """Parent RSS and PSS; each direct child's USS and PSS (what it costs beyond what it shares)."""
    assert group.parent is not None
    parent = group.parent.memory_full_info()
    uss: list[float] = []
    pss: list[float] = []
    for child in group.children():
        with contextlib.suppress(psutil.Error):
            info = child.memory_full_info()
            uss.append(info.uss / MB)
            pss.append(info.pss / MB)
    helpers_rss = helpers_pss = 0.0
    for helper in group.helpers():
        with contextlib.suppress(psutil.Error):
            info = helper.memory_full_info()
            helpers_rss += info.rss / MB
            helpers_pss += info.pss / MB
    return MemoryFigures(parent.rss / MB, uss, pss, parent.pss / MB, helpers_rss, helpers_pss)


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    group: WorkerGroup | None,
    step_s: float = 0.05,
) -> None:
    """Poll until `condition` holds; fail fast if the worker command died meanwhile."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if group is not None:
            group.ensure_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(step_s)


def sweep(run_id: str) -> list[int]:
    """SIGKILL every process that carries this run's id; returns their pids."""
    killed: list[int] = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(RUN_ID_VAR) == run_id:
                proc.kill()
                killed.append(proc.pid)
        except psutil.Error:
            continue
    return killed
