#!/usr/bin/env bash
# Makes sure redis-server and redis-sentinel binaries exist: tests and `make run` start their own
# private servers (the Sentinel tests their own sentinels). Installs Debian's packages when we are
# root on a Debian-like machine; otherwise says how.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
if [ ${#missing[@]} = 0 ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "${missing[*]} not found: installing Debian's package(s)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    # The packages start system services; ours are private, so those are not needed.
    exit 0
fi
echo "${missing[*]} not found. Install it (Debian/Ubuntu: 'sudo apt-get install ${missing[*]}'," >&2
echo "macOS: 'brew install redis', which has both) and run the command again." >&2
exit 1
