#!/usr/bin/env bash
# Makes sure a redis-server binary exists: tests and `make run` start their own private servers.
# Installs Debian's package when we are root on a Debian-like machine; otherwise says how.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "redis-server not found: installing Debian's redis-server package" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # The package starts a system service; ours are private, so that one is not needed.
    exit 0
fi
echo "redis-server not found. Install it (Debian/Ubuntu: 'sudo apt-get install redis-server'," >&2
echo "macOS: 'brew install redis') and run the command again." >&2
exit 1
