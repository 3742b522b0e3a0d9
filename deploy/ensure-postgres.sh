#!/usr/bin/env bash
# Makes sure a PostgreSQL server answers on 127.0.0.1:5432 for the user postgres without a password:
# the Django tests (tests/e2e/integrations/test_django*.py) make and drop their own databases there.
# Installs Debian's package and starts its cluster when we are root on a Debian-like machine;
# otherwise says how.
set -euo pipefail
ready() {
    command -v psql >/dev/null 2>&1 &&
        psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1
}
if ready; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "PostgreSQL does not answer on 127.0.0.1:5432 as user postgres (the Django tests need it):" >&2
    echo "install it ('sudo apt-get install postgresql'), let 127.0.0.1 connect as postgres" >&2
    echo "(pg_hba.conf: 'host all postgres 127.0.0.1/32 trust'), start it and try again." >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
    echo "PostgreSQL not found: installing Debian's postgresql package" >&2
    # The package lists are refreshed only when the install can't find the package (as for chromium).
    if ! apt-get install -y -qq postgresql >/dev/null 2>&1; then
        apt-get update -qq
        apt-get install -y -qq postgresql >/dev/null
    fi
fi
read -r version cluster _ < <(pg_lsclusters -h | head -n 1)
hba="/etc/postgresql/$version/$cluster/pg_hba.conf"
# A test machine's server: the tests connect over TCP as postgres with no password. The line goes
# first, since the first matching line of pg_hba.conf decides.
if ! grep -q '^host all postgres 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i host all postgres 127.0.0.1/32 trust' "$hba"
fi
# pg_ctlcluster, not systemd: a container has no init to start services.
pg_ctlcluster "$version" "$cluster" start 2>/dev/null || pg_ctlcluster "$version" "$cluster" reload
for _ in $(seq 1 50); do
    if ready; then
        exit 0
    fi
    sleep 0.2
done
echo "PostgreSQL $version/$cluster was started but does not answer on 127.0.0.1:5432" >&2
exit 1
