#!/bin/bash
# Single-session SQL measurements of the engine with pgbench; see README.md here.
set -euo pipefail
scenario=${1:?usage: run.sh chain3|one}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sql=${PGFLOW_SQL:-$root/pgflow-sql}
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
psql_q() { psql -q -v ON_ERROR_STOP=1 "$@"; }
pgb() { pgbench -n -c 1 -r "$@"; }

# A template holding PGMQ only, made once with the pgflow installer.
if ! psql -Atc "select 1 from pg_database where datname = 'pgflow_pgbench_template'" | grep -q 1; then
  psql_q -c "create database pgflow_pgbench_template"
  "$root/target/release/pgflow" --database-url "postgres://$PGUSER@$PGHOST/pgflow_pgbench_template" install >/dev/null
  psql_q -d pgflow_pgbench_template -c "drop schema pgflow cascade" 2>/dev/null
fi
psql_q -c "drop database if exists pgflow_pgbench" -c "create database pgflow_pgbench template pgflow_pgbench_template"
# The installer's two ledger tables (pgflow-sql/src/ledger.rs), which the privileges file
# grants on; then the versioned migrations and the function files, in name order, in one
# transaction. (An SQL directory from before functions/ existed has migrations only.)
psql_q -d pgflow_pgbench -c "create schema pgflow;
  create table pgflow.schema_migrations (version bigint primary key, description text not null,
    checksum bytea not null, installed_at timestamptz not null default now());
  create table pgflow.schema_functions (singleton boolean primary key default true
    check (singleton), checksum bytea not null, applied_at timestamptz not null default now());"
files=(); shopt -s nullglob
for f in "$sql"/migrations/*.sql "$sql"/functions/*.sql; do files+=(-f "$f"); done
shopt -u nullglob
psql_q --single-transaction -d pgflow_pgbench -c "set client_min_messages = warning" "${files[@]}" >/dev/null
db=pgflow_pgbench
latencies() { grep -E '^ +[0-9.]+ +[0-9]+ +select' | awk '{print $1}' | tr '\n' ' '; }

case $scenario in
  chain3)
    psql_q -d $db -c "select pgflow.define_flow('chain3', 'chain', 1, '{\"max_attempts\":3,\"base_delay\":1,\"timeout\":60}', '[{\"slug\":\"a\",\"type\":\"single\",\"deps\":[],\"queue\":\"q\"},{\"slug\":\"b\",\"type\":\"single\",\"deps\":[\"a\"],\"queue\":\"q\"},{\"slug\":\"c\",\"type\":\"single\",\"deps\":[\"b\"],\"queue\":\"q\"}]')" >/dev/null
    pgb -t 2 -f "$here/chain3_start.sql" $db >/dev/null
    pgb -t 12 -f "$here/chain3_cycle.sql" $db >/dev/null
    psql_q -d $db -c "vacuum analyze"
    echo "claim 100 (ms), complete 100 (ms), per round:"
    for round in 1 2 3; do
      pgb -t 10 -f "$here/chain3_start.sql" $db >/dev/null
      pgb -t 60 -f "$here/chain3_cycle.sql" $db | latencies; echo
    done
    ;;
  one)
    psql_q -d $db -c "select pgflow.define_flow('one', 'one_alias', 1, '{\"max_attempts\":3,\"base_delay\":1,\"timeout\":60}', '[{\"slug\":\"a\",\"type\":\"single\",\"deps\":[],\"queue\":\"q\"}]')" >/dev/null
    pgb -t 200 -f "$here/one_cycle.sql" $db >/dev/null
    psql_q -d $db -c "vacuum analyze"
    pgb -t 50 -f "$here/one_cycle.sql" $db >/dev/null
    echo "start 1, claim 1, complete 1 (ms):"
    pgb -t 500 -f "$here/one_cycle.sql" $db | latencies; echo
    ;;
  *) echo "unknown scenario $scenario (chain3, one)" >&2; exit 2 ;;
esac
