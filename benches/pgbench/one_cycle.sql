select count(*) from pgflow.start_flows('one', array['{"x": 1}'::jsonb], null, false);
select coalesce(array_agg(run_id), '{}') as r, coalesce(array_agg(step_slug), '{}') as s, coalesce(array_agg(task_index), '{}') as i, coalesce(array_agg(attempt), '{}') as a, coalesce(array_agg('{}'::jsonb), '{}') as o from pgflow.read_and_start_tasks('q', '00000000-0000-0000-0000-000000000001', array['one'], array['a'], 10) \gset
select pgflow.complete_tasks(':r'::uuid[], ':s'::text[], ':i'::int[], ':a'::int[], ':o'::jsonb[]);
