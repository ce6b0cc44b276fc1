#!/usr/bin/env bash
# Writes the schema of a fresh install of the current code, with the rows of the installers'
# ledgers and runs in flight, as tests/integration/schemas/<schema version>.sql: the starting
# point of the upgrade test (tests/integration/upgrade.rs). Run it when a version is released,
# and keep the file of every released version.
#
# The runs in flight are made with this version's own SQL: three runs of a two-step flow,
# `upgrade_relay`, the first with its first task claimed by a worker that will be gone. The
# upgrade test installs today's code over them and runs them to their end.
#
#   tests/integration/schemas/dump.sh        # needs DATABASE_URL's server and pg_dump
set -euo pipefail
cd "$(dirname "$0")/../../.."
url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db="pgflow_schema_dump_$$"
psql -q -d "$url" -c "create database $db"
trap 'psql -q -d "$url" -c "drop database if exists $db with (force)"' EXIT
db_url="${url%/*}/$db"
cargo run -q -p pgflow-cli -- install --database-url "$db_url" >/dev/null
psql -q -v ON_ERROR_STOP=1 -d "$db_url" >/dev/null <<'SQL'
select pgflow.define_flow('upgrade_relay', 'upgrade_relay', 1, '{}',
                          '[{"slug": "first"}, {"slug": "second", "deps": ["first"]}]');
select pgflow.activate_flow('upgrade_relay');
select pgflow.start_flow('upgrade_relay', to_jsonb(n)) from generate_series(1, 3) n;
select pgflow.read_and_start_tasks('upgrade_relay', '00000000-0000-4000-8000-000000000001',
                                   array['upgrade_relay'], array['first'], 1);
SQL
version=$(psql -qtA -d "$db_url" -c "select max(version) from pgflow.schema_migrations")
out="tests/integration/schemas/$version.sql"
{
  echo "-- A fresh install of pgflow schema version $version (PGMQ included), made by dump.sh:"
  echo "-- pg_dump --schema-only, then the rows of pgflow's and PGMQ's tables (the installers'"
  echo "-- ledgers, and runs in flight). Do not edit."
  pg_dump --schema-only --no-owner --no-privileges "$db_url"
  pg_dump --data-only --inserts --disable-triggers --no-owner --no-privileges \
    -n pgflow -n pgmq "$db_url"
} | grep -v -E '^\\(restrict|unrestrict) ' >"$out"
echo "wrote $out"
