"""Named process exit codes shared by `cogworker run` and `cogworker-swarm`.

78 is sysexits' EX_CONFIG: the systemd unit lists it in `RestartPreventExitStatus=` so a bad setting
stops the service instead of restart-looping it.
"""

OK = 0
FAILURE = 1  # stopped, but something did not stop cleanly (a child killed, jobs requeued by force)
USAGE = 2
BOOT_ERROR = 3  # the app (`COGWORKER_REQUIRE`) could not be imported
CONFIG_ERROR = 78
