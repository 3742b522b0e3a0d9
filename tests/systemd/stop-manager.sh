#!/bin/bash
# Stops a manager started by start-manager.sh and removes every trace of it from the host's cgroups.
#
# usage: stop-manager.sh MANAGER_PID DIR CGNAME [RUNDIR]   (the arguments start-manager.sh was given)
# No `set -e`: teardown must go on through every step even when one of them fails.
set -u
M=$1
D=$2
N=$3
RUN=${4:-$2/run}
# For a user manager SIGTERM means "start exit.target": stop every unit, then exit.
kill -TERM "$M" 2>/dev/null
# The caller holds the manager as an unreaped child, so an exited manager is a zombie: alive() is false.
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
for _ in $(seq 1 200); do
    alive "$M" || break
    sleep 0.05
done
if alive "$M"; then
    echo "stop-manager.sh: manager $M did not exit within 10 s; SIGKILL" >&2
    kill -KILL "$M" 2>/dev/null
fi
# Kill what is left in the subtree (the log pump, any service process that escaped) and remove its
# cgroups. In a private mount namespace, because a pure-v1 host needs a cgroup2 mount of our own.
unshare --mount --propagation private /bin/bash -c '
    R=$(awk '\''$3=="cgroup2"{print $2; exit}'\'' /proc/self/mounts)
    if [ -z "$R" ]; then R=$2/cg2; mkdir -p "$R"; mount -t cgroup2 cgroup2 "$R"; fi
    cg=$R/$1
    [ -d "$cg" ] || exit 0
    echo 1 >"$cg/cgroup.kill"
    for _ in $(seq 1 100); do
        grep -q "populated 0" "$cg/cgroup.events" && break
        sleep 0.02
    done
    find "$cg" -depth -type d -exec rmdir {} +' _ "$N" "$D"
rm -f "$D/kmsg.fifo"
rm -rf "$RUN"
