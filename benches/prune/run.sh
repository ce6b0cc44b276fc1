#!/bin/bash
# How long `pgflow prune` takes: N single-step runs are started, claimed and completed in SQL,
# then pruned (everything older than one second), then N more are made and a prune with
# nothing old enough to delete is timed. Needs psql and the pgflow CLI (cargo build --release -p pgflow-cli).
# Usage: benches/prune/run.sh [runs]   (default 100000; database prune_bench, dropped after)
set -euo pipefail
runs=${1:-100000}
root=$(cd "$(dirname "$0")/../.." && pwd)
export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
url="postgres://$PGUSER@$PGHOST/prune_bench"
pgflow() { "$root/target/release/pgflow" --database-url "$url" "$@"; }

make_ended_runs() {
  psql -q -v ON_ERROR_STOP=1 -d prune_bench >/dev/null <<SQL
select count(*) from pgflow.start_flows('one',
  (select array_agg(jsonb_build_object('i', g)) from generate_series(1, $runs) g), null, false);
do \$\$
declare n int;
begin
  loop
    with c as (select * from pgflow.read_and_start_tasks('q', gen_random_uuid(), array['one'],
                                                         array['a'], 1000))
    select pgflow.complete_tasks(array_agg(run_id), array_agg(step_slug), array_agg(task_index),
                                 array_agg(attempt), array_agg('{}'::jsonb))
    into n from c;
    exit when n is null or n = 0;
  end loop;
end \$\$;
vacuum analyze;
SQL
}

psql -q -c "drop database if exists prune_bench" -c "create database prune_bench"
pgflow install >/dev/null
psql -q -d prune_bench -c "select pgflow.define_flow('one', 'one_alias', 1, '{\"max_attempts\":3,\"base_delay\":1,\"timeout\":60}', '[{\"slug\":\"a\",\"type\":\"single\",\"deps\":[],\"queue\":\"q\"}]')" >/dev/null
make_ended_runs
sleep 1.1
echo "prune of $runs ended runs (with their step states, tasks and archived messages):"
/usr/bin/time -f "  %e s (the whole command)" "$root/target/release/pgflow" --database-url "$url" prune --older-than 1s
make_ended_runs
echo "prune with nothing old enough, over $runs recent ended runs:"
/usr/bin/time -f "  %e s (the whole command)" "$root/target/release/pgflow" --database-url "$url" prune --older-than 1d
psql -q -c "drop database prune_bench"
