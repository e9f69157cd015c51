#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, pg_ctl, postgres) are
# installed, because braid's tests and demo start a private cluster from them.
# As root on Debian/Ubuntu it installs them with apt-get; otherwise it says
# exactly what to install.
set -euo pipefail

have_server() {
  if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    return 0
  fi
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && return 0
  done
  return 1
}

if have_server; then
  exit 0
fi

# With an existing server named, the private cluster is not needed.
if [ -n "${TEST_DATABASE_URL:-}" ] && [ "${1:-}" = "test" ]; then
  exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing the PostgreSQL server with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  have_server && exit 0
  echo "setup: apt-get install postgresql finished but initdb is still missing" >&2
  exit 1
fi

cat >&2 <<'MSG'
setup: the PostgreSQL server binaries (initdb, pg_ctl, postgres) are missing.
Install them, then run make again:
  Debian/Ubuntu:  sudo apt-get install -y postgresql
  Fedora:         sudo dnf install -y postgresql-server
  macOS:          brew install postgresql@15
or put initdb and postgres on PATH, or set TEST_DATABASE_URL to an existing server.
MSG
exit 1
