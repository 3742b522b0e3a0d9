#!/usr/bin/env bash
# `make bench`: builds .bench-venv/ (the peers + cogworker, apart from the project's .venv/) and runs
# bench.py with every argument passed through (e.g. --quick, --only dramatiq,rq).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$ROOT/.bench-venv"
STAMP="$VENV/.installed"
PYTHON="${PYTHON:-python3}"

# The peers pull their own versions of redis-py etc.; keeping them out of .venv/ means the project's
# tests never run against a dependency set that only the benchmark wanted.
if [ ! -f "$STAMP" ] || [ "$HERE/requirements.txt" -nt "$STAMP" ] || [ "$HERE/requirements-arq.txt" -nt "$STAMP" ] \
    || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
    echo "bench: building $VENV" >&2
    LOG="$(mktemp)"
    # pip's and setuptools' chatter goes to a log that is shown only when the install fails.
    if ! { "$PYTHON" -m venv "$VENV" \
        && "$VENV/bin/pip" install -q --upgrade pip \
        && "$VENV/bin/pip" install -q -r "$HERE/requirements.txt" \
        && "$VENV/bin/pip" install -q --no-deps -r "$HERE/requirements-arq.txt" \
        && "$VENV/bin/pip" install -q "$ROOT[web]"; } >"$LOG" 2>&1; then
        cat "$LOG" >&2
        rm -f "$LOG"
        echo "bench: building $VENV failed" >&2
        exit 1
    fi
    rm -f "$LOG"
    touch "$STAMP"
fi

# cogworker as a user's install has it: a regular install of the tree as it is now (a new build every
# run, so uncommitted work is measured too), its modules compiled by pip. An editable install's finder
# costs each interpreter ~15 ms at start (site imports it and pathlib), and both the supervisor and the
# fork server start one on the way to the first job. setuptools' build/ is removed first: a module
# deleted from the tree would otherwise stay in it and in the wheel.
rm -rf "$ROOT/build"
LOG="$(mktemp)"
if ! "$VENV/bin/pip" install -q --no-deps --force-reinstall "$ROOT" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    rm -f "$LOG"
    echo "bench: installing cogworker into $VENV failed" >&2
    exit 1
fi
rm -f "$LOG"
# The bench jobs of every system are compiled too (with PYTHONDONTWRITEBYTECODE set, as on some CI
# machines, each process would compile them again), so none pays for it.
"$VENV/bin/python" -m compileall -q "$HERE" >/dev/null

if ! command -v redis-server >/dev/null 2>&1; then
    "$ROOT/deploy/ensure-redis-server.sh"
fi

# Sidekiq, the Ruby original, is a peer: Debian's ruby-sidekiq (Sidekiq 6.4, Ruby 3.1 with YJIT).
# Installed as root when missing; otherwise its two columns say "not runnable" and why.
if ! command -v sidekiq >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bench: installing Debian's ruby-sidekiq for the Sidekiq columns" >&2
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq ruby-sidekiq >/dev/null \
            || echo "bench: ruby-sidekiq did not install; the Sidekiq columns will say not runnable" >&2
    else
        echo "bench: no sidekiq (Debian: apt-get install ruby-sidekiq); its columns will say not runnable" >&2
    fi
fi

# The venv's bin/ goes first on PATH so the worker commands (cogworker-swarm, dramatiq, rq, celery)
# are the ones installed beside the interpreter that runs the harness.
export PATH="$VENV/bin:$PATH"
exec "$VENV/bin/python" "$HERE/bench.py" "$@"
