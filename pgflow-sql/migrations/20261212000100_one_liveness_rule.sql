-- One liveness rule: every reader of a worker's liveness calls pgflow.worker_is_live (in the
-- function files). rollout_progress loses its own staleness argument for it, which changes its
-- argument list: the old function is dropped here, and the function file creates the new one.

drop function if exists pgflow.rollout_progress(bigint, interval);
