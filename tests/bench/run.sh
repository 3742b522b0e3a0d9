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
        && "$VENV/bin/pip" install -q -e "$ROOT[web]"; } >"$LOG" 2>&1; then
        cat "$LOG" >&2
        rm -f "$LOG"
        echo "bench: building $VENV failed" >&2
        exit 1
    fi
    rm -f "$LOG"
    touch "$STAMP"
fi

if ! command -v redis-server >/dev/null 2>&1; then
    "$ROOT/deploy/ensure-redis-server.sh"
fi

# The venv's bin/ goes first on PATH so the worker commands (cogworker-swarm, dramatiq, rq, celery)
# are the ones installed beside the interpreter that runs the harness.
export PATH="$VENV/bin:$PATH"
exec "$VENV/bin/python" "$HERE/bench.py" "$@"
