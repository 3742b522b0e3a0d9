#!/usr/bin/env bash
# Installs cogworker as systemd services on this host. Safe to run again: it upgrades the package and
# the unit files, and never touches an instance's env file once it exists.
#
# It ships in the package (cogworker/deploy_kit/), beside the unit files and the example env file it
# installs; `cogworker deploy print-install > install.sh` writes it anywhere, and a copy with nothing
# beside it takes those files from the cogworker it has just installed into the virtualenv.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: install.sh [options] SOURCE

Install cogworker for systemd (run as root):
  - system user and group `cogworker`
  - virtualenv /opt/cogworker/venv with SOURCE installed in it (pip install --upgrade SOURCE)
  - /etc/cogworker/<instance>.env from cogworker.env.example, only where it does not exist yet
  - cogworker@.service and cogworker.target in /etc/systemd/system, then `systemctl daemon-reload`

SOURCE is anything pip installs: a checkout (/srv/cogworker), a wheel or sdist, or a requirement
such as cogworker-redis==0.1.0. It is not needed with --no-venv.

options:
  -i, --instance NAME  create /etc/cogworker/NAME.env for cogworker@NAME (repeatable; default: app)
  --prefix DIR         install under DIR instead of / (DIR/opt/cogworker/venv, DIR/etc/cogworker, ...)
                       for staging and tests; the units still name /opt/cogworker and /etc/cogworker
  --unit-dir DIR       where the unit files go (default: PREFIX/etc/systemd/system)
  --python PATH        interpreter the virtualenv is made from (default: python3)
  --pip-arg ARG        pass ARG to `pip install` (repeatable), e.g. --pip-arg=--no-index
  --editable           install SOURCE in editable mode (development hosts only)
  --no-venv            do not create the virtualenv or install the package
  --no-user            do not create the user and group, nor give files to group cogworker
  --no-reload          do not run `systemctl daemon-reload`
  -h, --help           show this text

Then: edit /etc/cogworker/app.env and `systemctl enable --now cogworker.target cogworker@app`.
EOF
}

die() {
    echo "install.sh: $*" >&2
    exit 1
}

# A wrong command line exits 2, like other Unix tools; everything else that goes wrong exits 1.
usage_error() {
    echo "install.sh: $*" >&2
    echo "usage: install.sh [options] SOURCE (see --help)" >&2
    exit 2
}

say() {
    echo "install.sh: $*"
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

prefix=""
unit_dir=""
python=python3
source=""
editable=0
make_venv=1
make_user=1
reload=1
instances=()
pip_args=()

while [ $# -gt 0 ]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        -i | --instance) [ $# -ge 2 ] || usage_error "$1 needs a name"; instances+=("$2"); shift 2 ;;
        --instance=*) instances+=("${1#*=}"); shift ;;
        --prefix) [ $# -ge 2 ] || usage_error "$1 needs a directory"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#*=}; shift ;;
        --unit-dir) [ $# -ge 2 ] || usage_error "$1 needs a directory"; unit_dir=$2; shift 2 ;;
        --unit-dir=*) unit_dir=${1#*=}; shift ;;
        --python) [ $# -ge 2 ] || usage_error "$1 needs a path"; python=$2; shift 2 ;;
        --python=*) python=${1#*=}; shift ;;
        --pip-arg) [ $# -ge 2 ] || usage_error "$1 needs an argument"; pip_args+=("$2"); shift 2 ;;
        --pip-arg=*) pip_args+=("${1#*=}"); shift ;;
        --editable) editable=1; shift ;;
        --no-venv) make_venv=0; shift ;;
        --no-user) make_user=0; shift ;;
        --no-reload) reload=0; shift ;;
        --) shift; break ;;
        -*) usage_error "unknown option $1" ;;
        *) [ -z "$source" ] || usage_error "only one SOURCE, got '$source' and '$1'"; source=$1; shift ;;
    esac
done
if [ $# -gt 0 ]; then
    [ -z "$source" ] && [ $# -eq 1 ] || usage_error "only one SOURCE"
    source=$1
fi

[ ${#instances[@]} -gt 0 ] || instances=(app)
if [ "$make_venv" = 1 ] && [ -z "$source" ]; then
    usage_error "SOURCE is missing (or pass --no-venv)"
fi
# Creating users and writing under / needs root; a staging install into a prefix without users doesn't.
if [ "$(id -u)" != 0 ] && { [ "$make_user" = 1 ] || [ -z "$prefix" ]; }; then
    die "run as root (or stage into a directory with --prefix DIR --no-user)"
fi
for name in "${instances[@]}"; do
    # The name becomes a file name and a systemd instance name: keep it to characters both take as-is.
    [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || usage_error "instance name '$name' must be letters, digits, _ . -"
done

prefix=${prefix%/}
venv=$prefix/opt/cogworker/venv
conf_dir=$prefix/etc/cogworker
unit_dir=${unit_dir:-$prefix/etc/systemd/system}

if [ "$make_user" = 1 ]; then
    if ! getent group cogworker >/dev/null; then
        groupadd --system cogworker
        say "created group cogworker"
    fi
    if ! getent passwd cogworker >/dev/null; then
        # No login, no home of its own: the unit's StateDirectory= gives each instance its directory.
        useradd --system --gid cogworker --home-dir /var/lib/cogworker --no-create-home \
            --shell /usr/sbin/nologin --comment "cogworker job runner" cogworker
        say "created user cogworker"
    fi
fi

if [ "$make_venv" = 1 ]; then
    # The venv stays owned by root: the service user can run the code but never change it.
    if [ ! -x "$venv/bin/python" ]; then
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv"
        say "created virtualenv $venv"
    fi
    spec=("$source")
    [ "$editable" = 0 ] || spec=(-e "$source")
    # No pip self-update check: it would reach out to the index on every install for nothing.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade \
        ${pip_args[@]+"${pip_args[@]}"} "${spec[@]}"
    say "installed $source into $venv"
fi

# The deploy kit's files: those beside this script (the package's own copy, or a checkout's), else
# the ones the virtualenv's cogworker prints, so that a copy of this script saved alone still works.
kit=$(mktemp -d)
trap 'rm -rf "$kit"' EXIT
for pair in cogworker.env.example:env cogworker@.service:unit cogworker.target:target; do
    name=${pair%%:*}
    if [ -e "$HERE/$name" ]; then
        cp "$HERE/$name" "$kit/$name"
    elif [ -x "$venv/bin/cogworker" ]; then
        "$venv/bin/cogworker" deploy "print-${pair#*:}" >"$kit/$name"
    else
        die "$name is neither beside this script nor printed by $venv/bin/cogworker (install SOURCE first)"
    fi
done

# The env files may hold a Redis password: readable by root and the service's group only.
install -d -m 0750 "$conf_dir"
[ "$make_user" = 0 ] || chown root:cogworker "$conf_dir"
for name in "${instances[@]}"; do
    env_file=$conf_dir/$name.env
    if [ -e "$env_file" ]; then
        say "kept $env_file (never overwritten)"
        continue
    fi
    if [ "$make_user" = 1 ]; then
        install -m 0640 -o root -g cogworker "$kit/cogworker.env.example" "$env_file"
    else
        install -m 0640 "$kit/cogworker.env.example" "$env_file"
    fi
    say "created $env_file from the example: edit it before starting cogworker@$name"
done

# Unit files are ours, not the operator's (local changes belong in drop-ins): always refresh them.
install -d -m 0755 "$unit_dir"
for unit in cogworker@.service cogworker.target; do
    if cmp -s "$kit/$unit" "$unit_dir/$unit"; then
        say "unchanged $unit_dir/$unit"
    else
        install -m 0644 "$kit/$unit" "$unit_dir/$unit"
        say "installed $unit_dir/$unit"
    fi
done

if [ "$reload" = 1 ]; then
    # /run/systemd/system exists only when systemd is PID 1 (sd_booted()); elsewhere (a container,
    # a chroot) there is no manager to reload and systemctl would fail.
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload
        say "reloaded systemd"
    else
        say "systemd is not running here; skipped daemon-reload"
    fi
fi

say "done. Next: edit $conf_dir/${instances[0]}.env, then" \
    "systemctl enable --now cogworker.target cogworker@${instances[0]}"
