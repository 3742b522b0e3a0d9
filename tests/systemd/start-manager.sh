#!/bin/bash
# Starts a private systemd *user* manager for a test, in the foreground: through an exec chain (no
# forks on the way), the PID of this script becomes the manager's PID, which stop-manager.sh needs.
#
# usage: start-manager.sh DIR CGNAME [RUNDIR]
#   DIR/units          unit files the manager loads (plus the stock user units, for basic.target etc.)
#   DIR/logs/manager.log  the manager's own log and every service's stdout/stderr (there is no journald)
#   CGNAME             a cgroup2 directory of that name holds the manager and everything it starts
#   RUNDIR             XDG_RUNTIME_DIR: the manager's private socket and the notify socket (default
#                      DIR/run). Keep it out of /tmp when units use PrivateTmp=: they could not see a
#                      notify socket there. Created afresh, removed by stop-manager.sh.
# env: SYSTEMD_BIN (default /lib/systemd/systemd), PYTHON (default python3), SYSTEMD_LOG_LEVEL (info)
#
# Root is needed. Nothing on the host changes but DIR and the cgroup CGNAME (see stop-manager.sh).
set -eu
D=$1
N=$2
RUN=${3:-$1/run}
case "${COGWORKER_SDM_STAGE:-0}" in
0)
    # A fresh runtime dir: a stale one would make the manager reload transient units of a past run.
    rm -rf "$RUN"
    mkdir -p "$RUN" "$D/home" "$D/logs" "$D/units"
    chmod 700 "$RUN"
    rm -f "$D/kmsg.fifo"
    mkfifo "$D/kmsg.fifo"
    : >"$D/logs/manager.log"
    export XDG_RUNTIME_DIR=$RUN HOME=$D/home XDG_CONFIG_HOME=$D/home/.config
    # The test's units, then the stock user units (basic.target, exit.target, ...), nothing of the host's.
    export SYSTEMD_UNIT_PATH=$D/units:/usr/lib/systemd/user
    export SYSTEMD_LOG_TARGET=kmsg SYSTEMD_LOG_LEVEL=${SYSTEMD_LOG_LEVEL:-info}
    exec </dev/null >>"$D/logs/manager.log" 2>&1
    COGWORKER_SDM_STAGE=1 exec unshare --mount --propagation private "$0" "$D" "$N" "$RUN"
    ;;
1)
    # In a private mount namespace. Without a cgroup subtree and cgroup namespace of its own, the
    # manager would move every process of its cgroup (here: the whole machine) into its init.scope.
    # Use the host's cgroup2 tree (unified or hybrid host), or mount one privately on a pure-v1 host.
    R=$(awk '$3=="cgroup2"{print $2; exit}' /proc/self/mounts)
    if [ -z "$R" ]; then
        R=$D/cg2
        mkdir -p "$R"
        mount -t cgroup2 cgroup2 "$R"
    fi
    mkdir -p "$R/$N"
    # On a booted host /run is always a tmpfs. Where it is a plain directory, systemd gives every
    # service with MountAPIVFS= (implied by ProtectKernelTunables=, ProtectControlGroups=,
    # ProtectProc=) a fresh empty /run, hiding the notify socket; a bind mount makes it a mount point.
    mountpoint -q /run || mount --bind /run /run
    # Only this process (and what it starts from now on) moves into the subtree.
    echo $$ >"$R/$N/cgroup.procs"
    # Log pump from the fake /dev/kmsg to the log file; it lives in the subtree, so teardown reaps it.
    cat <>"$D/kmsg.fifo" >>"$D/logs/manager.log" &
    COGWORKER_SDM_STAGE=2 exec unshare --cgroup "$0" "$D" "$N" "$RUN"
    ;;
2)
    # In a cgroup namespace rooted at /$N: the manager believes it owns the whole tree. A fresh cgroup2
    # mount (on a tmpfs: the kernel refuses cgroup2 directly on top of cgroup2) makes it run "unified"
    # and never touch the host's v1 hierarchies.
    mount -t tmpfs tmpfs /sys/fs/cgroup
    mount -t cgroup2 cgroup2 /sys/fs/cgroup
    # sd_booted() must be true for the manager only, or it exits at once ("system has not been booted
    # with systemd", said only on the console). Never create /run/systemd/system on the host itself.
    mount -t tmpfs -o mode=755 tmpfs /run/systemd
    mkdir -p /run/systemd/system /run/systemd/user.conf.d /run/systemd/inaccessible
    # The nodes ProtectHome=, InaccessiblePaths= and friends mount over what they hide.
    (
        cd /run/systemd/inaccessible
        mkdir -m0 dir
        install -m0 /dev/null reg
        mkfifo -m0 fifo
        mknod -m0 chr c 0 0
        mknod -m0 blk b 0 0
        "${PYTHON:-python3}" -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'
        chmod 0 sock
    )
    # Services' stdout/stderr go where the manager's go (manager.log); a short default stop timeout
    # keeps a misbehaving test unit from stalling teardown.
    printf '[Manager]\nDefaultStandardOutput=inherit\nDefaultStandardError=inherit\nDefaultTimeoutStopSec=5s\n' \
        >/run/systemd/user.conf.d/50-test.conf
    # The manager's own log goes to /dev/kmsg (SYSTEMD_LOG_TARGET=kmsg): here, the FIFO to manager.log.
    mount --bind "$D/kmsg.fifo" /dev/kmsg
    unset COGWORKER_SDM_STAGE
    exec "${SYSTEMD_BIN:-/lib/systemd/systemd}" --user --unit=basic.target
    ;;
esac
