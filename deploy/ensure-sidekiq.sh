#!/usr/bin/env bash
# Makes sure Sidekiq 6, redis-namespace and a Rack server exist: the Sidekiq compatibility tests run
# Debian's `sidekiq`, its Ruby API and its Web UI (under `rackup` with WEBrick) beside cogworker.
# Installs Debian's packages when we are root on a Debian-like machine; otherwise says how.
set -euo pipefail
if command -v sidekiq >/dev/null 2>&1 && command -v rackup >/dev/null 2>&1 &&
    ruby -e 'require "sidekiq"; require "redis-namespace"; require "sidekiq/web"; require "webrick"' 2>/dev/null; then
    exit 0
fi
packages=(ruby-sidekiq ruby-redis-namespace ruby-rack ruby-webrick)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Sidekiq or redis-namespace not found: installing Debian's ${packages[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The package lists are only refreshed when the install can't find the packages with the ones
    # already there (a fresh container has none; a warm machine needn't wait for the network).
    if ! apt-get install -y -qq "${packages[@]}" >/dev/null 2>&1; then
        apt-get update -qq
        apt-get install -y -qq "${packages[@]}" >/dev/null
    fi
    exit 0
fi
echo "Sidekiq or its Web UI's Rack server not found (the Sidekiq compatibility tests need it): run" >&2
echo "'sudo apt-get install ${packages[*]}' and try again." >&2
exit 1
