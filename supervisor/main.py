"""`cogworker-swarm`: the supervisor's command line (settings, --help, exit codes)."""

from __future__ import annotations

import argparse
import gc
import os
import sys

import structlog

from cogworker import exitcodes, logs
from cogworker.settings import Settings, load_or_exit
from cogworker.worker import BootError, import_app
from supervisor import reexec, signals
from supervisor.hooks import SwarmHooks
from supervisor.swarm import Swarm

log = structlog.get_logger("cogworker.swarm")

DESCRIPTION = """\
Run a swarm of cogworker workers: one supervisor forks COGWORKER_COUNT children, each running what
`cogworker run` runs, keeps them alive, and replaces them on request. It takes supervisord's place:
don't install the two in one virtualenv (both are imported as `supervisor`)."""

EPILOG = f"""\
signals:
  TERM, INT    stop: relay TERM; children drain for COGWORKER_TIMEOUT_S, then requeue what is
               left; a child still alive after COGWORKER_GRACEFUL_STOP_TIMEOUT_S is killed and its
               jobs requeued
  USR1, TSTP   quiet: children finish running jobs and fetch no more (children forked later too);
               undo per child with `LPUSH cogworker:signals:<identity> resume`
  HUP, USR2    restart every child with the code on disk now: phased (a replacement reports ready
               before the old child stops, one slot at a time) unless COGWORKER_PHASED_RESTART=false;
               with COGWORKER_PRELOAD=true the supervisor first re-execs itself in place (same PID)
  TTIN         every child logs every thread's stack

variables (all COGWORKER_*; see DESIGN §7 for the full list):
  COUNT                      children (default: CPU count)
  REQUIRE                    modules to import so their jobs are known
  REDIS_URL, QUEUES, CONCURRENCY, TIMEOUT_S, LOG_FORMAT, LOG_LEVEL
  GRACEFUL_STOP_TIMEOUT_S    deadline before a stopping child is killed (default 35)
  PRELOAD                    import REQUIRE in the supervisor before forking (default false)
  PHASED_RESTART             HUP/USR2 replace children one at a time (default true)
  MAXMEM_MB                  restart a child whose RSS is above this (default off)
  MEMORY_CHECK_INTERVAL_S    how often RSS is checked (default 5)
  LIVENESS_TIMEOUT_S         a child silent this long is hung: killed, requeued, respawned (30)
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


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="cogworker-swarm",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_hooks(settings: Settings) -> SwarmHooks:
    """systemd notify (a no-op without NOTIFY_SOCKET) and, with COGWORKER_METRICS_PORT, Prometheus."""
    from supervisor.integrations import AllHooks, MetricsHooks, NotifyHooks
    from supervisor.metrics import SwarmMetrics
    from supervisor.notify import Notifier

    hooks: list[SwarmHooks] = [NotifyHooks(Notifier())]
    if settings.metrics_port is not None:
        metrics = SwarmMetrics(settings)
        port = metrics.start()
        log.info("metrics_serving", host=settings.metrics_host, port=port)
        hooks.append(MetricsHooks(metrics))
    return AllHooks(hooks)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    build_parser().parse_args(args)
    try:
        handover = reexec.take_handover(os.environ)
    except (ValueError, TypeError, KeyError) as exc:
        # Children were handed to us that we can't adopt; exiting takes them down (PDEATHSIG), which
        # beats running them unsupervised. Their jobs are recovered by heartbeat orphan recovery.
        print(f"cogworker-swarm: unreadable hand-over after re-exec: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    settings = load_or_exit()  # exits 78 on a bad setting, before anything is forked
    logs.configure(settings.log_level, settings.log_format, role="swarm")
    # Handlers before any fork; then let in whatever arrived while the mask was inherited from a
    # re-exec (a no-op on a first start).
    signal_pipe = signals.SignalPipe()
    signal_pipe.install()
    signals.unblock()
    app_loaded = False
    if settings.preload:
        try:
            import_app(settings.require_modules)
        except BootError as exc:
            if handover is None:
                log.error("boot_failed", error=str(exc))
                print(f"cogworker-swarm: {exc}", file=sys.stderr)
                return exitcodes.BOOT_ERROR
            log.error("preload_failed_after_reexec", error=str(exc))
        else:
            app_loaded = True
    # Keep what is imported by now (the app too, when preloaded) out of the collector's reach: a
    # collection in a child touching those objects would copy every page they live on (copy-on-write).
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
    swarm = Swarm(
        settings,
        signal_pipe,
        app_loaded=app_loaded,
        hooks=hooks,
        handover=handover,
        argv=args,
    )
    return swarm.run()


if __name__ == "__main__":
    sys.exit(main())
