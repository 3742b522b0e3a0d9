#!/usr/bin/env bash
# Makes sure a chromium binary exists: the Web UI's browser tests (tests/e2e/web/) drive Debian's
# chromium through Playwright, which must never download a browser of its own.
# Installs Debian's package when we are root on a Debian-like machine; otherwise says how.
set -euo pipefail
if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium not found: installing Debian's chromium package" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The package lists are only refreshed when the install can't find the package with the ones
    # already there (a fresh container has none; a warm machine needn't wait for the network).
    if ! apt-get install -y -qq chromium >/dev/null 2>&1; then
        apt-get update -qq
        apt-get install -y -qq chromium >/dev/null
    fi
    exit 0
fi
echo "chromium not found (the browser tests need it): run 'sudo apt-get install chromium' and try again." >&2
exit 1
