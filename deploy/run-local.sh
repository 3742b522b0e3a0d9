#!/usr/bin/env bash
# `make run`: the swarm with the demo app, against COGWORKER_REDIS_URL — or, when that is not set,
# against a private redis-server this script starts (and stops) in .run/.
# It also serves the Web UI (`cogworker web`) on COGWORKER_WEB_PORT (7433) unless WEB=0.
# Ctrl-C stops the swarm gracefully (it drains running jobs), then the producer, the UI and that Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p .run

cleanup() {
    [ -n "${PRODUCER:-}" ] && kill "$PRODUCER" 2>/dev/null || true
    [ -n "${WEB_PID:-}" ] && kill "$WEB_PID" 2>/dev/null || true
    if [ -n "${OWN_REDIS:-}" ]; then
        redis-cli -p "$OWN_REDIS" shutdown nosave >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

if [ -z "${COGWORKER_REDIS_URL:-}" ]; then
    deploy/ensure-redis-server.sh
    OWN_REDIS=$("$BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$OWN_REDIS" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
        --dir "$PWD/.run" --logfile "$PWD/.run/redis.log" --pidfile "$PWD/.run/redis.pid"
    for _ in $(seq 1 100); do redis-cli -p "$OWN_REDIS" ping >/dev/null 2>&1 && break; sleep 0.05; done
    export COGWORKER_REDIS_URL="redis://127.0.0.1:$OWN_REDIS/0"
    echo "make run: started a private Redis at $COGWORKER_REDIS_URL (stopped on exit)"
fi

export COGWORKER_REQUIRE="${COGWORKER_REQUIRE:-cogworker.demo}"
export COGWORKER_COUNT="${COGWORKER_COUNT:-2}"
export COGWORKER_CONCURRENCY="${COGWORKER_CONCURRENCY:-5}"

if [ "$COGWORKER_REQUIRE" = "cogworker.demo" ]; then
    "$BIN/python" -m cogworker.demo --rate "${DEMO_RATE:-2}" &
    PRODUCER=$!
fi
if [ "${WEB:-1}" != "0" ]; then
    # The UI is a separate process: if its port is taken it says so and the swarm runs on without it.
    "$BIN/cogworker" web &
    WEB_PID=$!
    echo "make run: the Web UI is at http://127.0.0.1:${COGWORKER_WEB_PORT:-7433}/ (WEB=0 to skip it)"
fi
echo "make run: in another shell: COGWORKER_REDIS_URL=$COGWORKER_REDIS_URL .venv/bin/cogworker status"
echo "make run: cogworker-swarm with $COGWORKER_COUNT children; 'cogworker status' in another shell; Ctrl-C stops"
"$BIN/cogworker-swarm"
