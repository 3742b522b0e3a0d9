"""`cogworker-swarm`: the supervisor's command line (settings, --help, exit codes)."""

from __future__ import annotations

import ctypes
import gc
import os
import selectors
import sys
import time
from typing import TYPE_CHECKING

from cogworker import __version__, exitcodes
from supervisor import signals
from supervisor.forkserver_client.handle import ForkServerHandle

# Everything else, structlog included (~0.1 s), is imported in main() once the fork server has been
# started: the fork server's imports (the worker code, the settings) are the long part of start-up,
# and this process's imports then run beside them on another core instead of before them (issue 18).
if TYPE_CHECKING:
    import argparse

    from supervisor.config import SwarmConfig
    from supervisor.integrations.hooks import SwarmHooks

DESCRIPTION = """\
Run a swarm of cogworker workers: one supervisor keeps COGWORKER_COUNT children alive, each running
what `cogworker run` runs, and replaces them on request. The children are forked by a fork server
process that holds the loaded code (and the app, with preload); they are the supervisor's children all
the same. It takes supervisord's place: don't install the two in one virtualenv (both are imported as
`supervisor`)."""

EPILOG = f"""\
signals:
  TERM, INT    stop: relay TERM; children drain for COGWORKER_TIMEOUT_S, then requeue what is
               left; a child still alive after COGWORKER_GRACEFUL_STOP_TIMEOUT_S is killed and its
               jobs requeued
  USR1, TSTP   quiet: children finish running jobs and fetch no more (children forked later too);
               undo per child with `cogworker resume --identity <identity>`
  HUP, USR2    restart every child with the code on disk now: a new fork server loads it, then
               children are replaced, phased (a replacement reports ready before the old child
               stops, one slot at a time) unless COGWORKER_PHASED_RESTART=false
  TTIN         every child logs every thread's stack

variables (all COGWORKER_*; cogworker.env.example, which `cogworker deploy print-env` prints, lists all):
  COUNT                      children (default: the CPUs it may run on, at most the cgroup's
                             CPU quota rounded up)
  REQUIRE                    modules to import so their jobs are known
  REDIS_URL, QUEUES, CONCURRENCY, TIMEOUT_S, LOG_FORMAT, LOG_LEVEL
  GRACEFUL_STOP_TIMEOUT_S    deadline before a stopping child is killed (default 35)
  PRELOAD                    import REQUIRE in the fork server, so children share it (default false)
  PHASED_RESTART             HUP/USR2 replace children one at a time (default true)
  MAXMEM_MB                  restart a child whose RSS is above this (default off)
  MEMORY_CHECK_INTERVAL_S    how often RSS is checked (default 5)
  LIVENESS_TIMEOUT_S         a child silent this long (counted from its first line) is hung:
                             killed, requeued, respawned; the fork server gets this plus
                             REDIS_TIMEOUT_S to answer a request, or is killed and replaced (30)
  BOOT_TIMEOUT_S             a new child's first line (it imports the app first, without preload)
                             and a new fork server's `ready` must come within this (120)
  HEALTHY_UPTIME_S, RESPAWN_BASE_DELAY_S, RESPAWN_MAX_DELAY_S
                             respawn backoff: none for the first crash after HEALTHY_UPTIME_S up,
                             then BASE doubling to MAX while a slot keeps dying young (30, 1, 60)
  RESTART_READY_TIMEOUT_S    a replacement must report ready within this, or the restart fails and
                             the old child keeps running (default 60)

exit codes:
  {exitcodes.OK}   OK            stopped, every child stopped cleanly
  {exitcodes.FAILURE}   FAILURE       stopped, but a child had to be killed or died while stopping
  {exitcodes.USAGE}   USAGE         bad command line
  {exitcodes.BOOT_ERROR}   BOOT_ERROR    the app (COGWORKER_REQUIRE) can't be imported; nothing is respawned
  {exitcodes.CONFIG_ERROR}  CONFIG_ERROR  a bad setting; no child was started
"""


PROG = "cogworker-swarm"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


PR_SET_CHILD_SUBREAPER = 36


def build_hooks(settings: SwarmConfig) -> SwarmHooks:
    """systemd notify (a no-op without NOTIFY_SOCKET) and, with COGWORKER_METRICS_PORT, Prometheus."""
    import structlog

    from supervisor.integrations.hooks import AllHooks
    from supervisor.integrations.notify import Notifier
    from supervisor.integrations.systemd import NotifyHooks

    hooks: list[SwarmHooks] = [NotifyHooks(Notifier())]
    if settings.metrics_port is not None:
        # Only here: metrics scrape Redis, and the client and prometheus_client cost ~15 MB.
        from supervisor.integrations.metrics import MetricsHooks, SwarmMetrics

        metrics = SwarmMetrics(settings)
        port = metrics.start()
        structlog.get_logger("cogworker.swarm").info("metrics_serving", host=settings.metrics_host, port=port)
        hooks.append(MetricsHooks(metrics))
    return AllHooks(hooks)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """The swarm until it stops; its exit code. `prog` names the command in --help, --version and
    usage errors (`cogworker swarm` runs this too, cogworker/cli/swarm.py)."""
    args = sys.argv[1:] if argv is None else argv
    if args:  # the command takes no arguments, so only --help or a mistake loads argparse (~8 ms)
        try:
            build_parser(prog).parse_args(args)
        except SystemExit as exc:  # 0 after --help or --version, 2 after a usage error
            return exc.code if isinstance(exc.code, int) else exitcodes.USAGE
    # Workers are forked by the fork server's short-lived intermediate process; as a subreaper we
    # become their parent, so we reap them, see how they died, and PDEATHSIG ties them to us.
    if not become_subreaper():
        print("cogworker-swarm: can't become a child subreaper (Linux only)", file=sys.stderr)
        return exitcodes.FAILURE
    signal_pipe = signals.SignalPipe()
    signal_pipe.install()
    server = ForkServerHandle(generation=0)
    try:
        # A fork of this process, not a new interpreter: nothing heavy is imported yet and no thread
        # runs (forkserver_client/first_forkserver.py). A restart's fork servers are new interpreters.
        server.start(time.monotonic(), fork_closing=signal_pipe.fds)
    except OSError as exc:
        print(f"cogworker-swarm: can't start the fork server: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    # structlog imports rich wherever it is installed (twine and many other tools bring it) for pretty
    # tracebacks this process never prints (its renderers are JSON or plain): about 3 MB of the
    # supervisor's 30 MB. It runs no user code, so rich is kept out of it; the fork server, forked
    # above, and the workers it forks are left alone.
    if "rich" not in sys.modules:
        # None is the import system's "not importable" mark, which typeshed's type of sys.modules
        # can't express.
        sys.modules["rich"] = None  # type: ignore[assignment]
    # All of these, build_hooks's modules included, while the fork server still imports: imported
    # after its "ready", they would hold back the first spawn request.
    from cogworker import logs
    from supervisor.config import SwarmConfig
    from supervisor.forkserver_client.keeper import keeper_for
    from supervisor.integrations import hooks as hooks_module  # noqa: F401
    from supervisor.integrations import notify, systemd  # noqa: F401
    from supervisor.swarm import Swarm

    logs.configure("info", "auto", role="swarm")  # until the fork server has read the settings
    code = await_forkserver(server, signal_pipe)
    if code is not None:
        return code
    settings = SwarmConfig.from_dict(server.settings)
    logs.configure(settings.log_level, settings.log_format, role="swarm")
    # Long-lived from here on, so later collections skip it; not collected first: that found ~15
    # objects and cost ~10 ms before the first child could be asked for.
    gc.freeze()
    try:
        hooks = build_hooks(settings)
    except OSError as exc:
        # Most likely the metrics port is taken (an old supervisor still exiting): worth a retry by
        # systemd, so FAILURE rather than CONFIG_ERROR.
        print(
            f"cogworker-swarm: can't serve metrics on {settings.metrics_host}:{settings.metrics_port}: {exc}",
            file=sys.stderr,
        )
        return exitcodes.FAILURE
    return Swarm(settings, signal_pipe, keeper_for(server, settings), hooks=hooks).run()


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def await_forkserver(server: ForkServerHandle, signal_pipe: signals.SignalPipe) -> int | None:
    """Wait for the first fork server to load the settings and the code: None once it is ready, else
    the exit code to stop with. Its own exit code is passed on (78 for a bad setting, BOOT_ERROR for an
    app that won't import with preload): it has printed why."""
    with selectors.DefaultSelector() as selector:
        selector.register(signal_pipe.fileno, selectors.EVENT_READ, None)
        selector.register(server.fileno(), selectors.EVENT_READ, server)
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    if any(signals.ACTIONS.get(s) == "stop" for s in signal_pipe.drain()):
                        server.kill()
                        os.waitpid(server.pid, 0)
                        return exitcodes.OK
                    continue
                for message in server.read(time.monotonic()):
                    if message.get("op") == "ready":
                        return None
                if server.gone:
                    server.close()
                    _, status = os.waitpid(server.pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                    if code in (exitcodes.CONFIG_ERROR, exitcodes.BOOT_ERROR, exitcodes.USAGE):
                        return code
                    print(
                        f"cogworker-swarm: the fork server exited {code} before it was ready", file=sys.stderr
                    )
                    return exitcodes.FAILURE


if __name__ == "__main__":
    sys.exit(main())
