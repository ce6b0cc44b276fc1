select count(*) from pgflow.start_flows('chain3', array(select to_jsonb(i) from generate_series(1, 200) i), null, false);
