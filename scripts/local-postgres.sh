#!/usr/bin/env bash
# A local PostgreSQL for the test suite's second pass and for `make bench`: installs the server when
# it is missing (root or sudo), starts the newest cluster, and makes the role smrweb/smrweb (CREATEDB)
# and its database smrweb. Safe to run again. Prints the DATABASE_URL to use.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  echo "local-postgres: installing postgresql" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
pg_version=$(ls /usr/lib/postgresql | sort -n | tail -1)
pg_lsclusters -h | grep -q "^$pg_version main" || as_root pg_createcluster "$pg_version" main >/dev/null
as_root pg_ctlcluster "$pg_version" main start >/dev/null 2>&1 || true
for _ in $(seq 1 30); do as_root su postgres -c "pg_isready -q" && break; sleep 1; done
as_root su postgres -c "psql -qtAc \"SELECT 1 FROM pg_roles WHERE rolname='smrweb'\"" | grep -q 1 ||
  as_root su postgres -c "psql -qc \"CREATE ROLE smrweb LOGIN PASSWORD 'smrweb' CREATEDB\""
as_root su postgres -c "psql -qtAc \"SELECT 1 FROM pg_database WHERE datname='smrweb'\"" | grep -q 1 ||
  as_root su postgres -c "createdb -O smrweb smrweb"
port=$(pg_lsclusters -h | awk -v v="$pg_version" '$1 == v && $2 == "main" {print $3}')
echo "postgres://smrweb:smrweb@127.0.0.1:${port:-5432}/smrweb"
