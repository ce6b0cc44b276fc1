#!/usr/bin/env bash
# Writes the schema of a fresh install of the current code, with the rows of the installers'
# ledgers, as tests/integration/schemas/<schema version>.sql: the starting point of the upgrade
# test (tests/integration/upgrade.rs). Run it when a version is released, and keep the file of
# every released version.
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
version=$(psql -qtA -d "$db_url" -c "select max(version) from pgflow.schema_migrations")
out="tests/integration/schemas/$version.sql"
{
  echo "-- A fresh install of pgflow schema version $version (PGMQ included), made by dump.sh:"
  echo "-- pg_dump --schema-only, then the rows of the installers' ledgers. Do not edit."
  pg_dump --schema-only --no-owner --no-privileges "$db_url"
  pg_dump --data-only --inserts --no-owner --no-privileges \
    -t pgflow.schema_migrations -t pgflow.schema_functions -t pgmq.__pgmq_migrations "$db_url"
} | grep -v -E '^\\(restrict|unrestrict) ' >"$out"
echo "wrote $out"
