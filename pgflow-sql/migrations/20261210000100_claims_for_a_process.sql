-- Claims at release for several workers: the workers of one process on one queue share their
-- completion calls, so one call may claim, for each of them, tasks its completions release.
-- A claimer now names a worker per slot it offers (the n-th task claimed goes to the n-th
-- slot's worker) instead of one worker and a quantity.
--
-- complete_and_claim_tasks takes the slots and returns each claimed task's worker, so its
-- argument list and return type change: the old one is dropped here (the function file
-- creates the new one). The functions that pass a claimer on keep their signatures.

alter type pgflow.task_claimer
  drop attribute worker_id,
  drop attribute quantity,
  add attribute slots uuid[];

drop function if exists pgflow.complete_and_claim_tasks(
  uuid[], text[], integer[], integer[], jsonb[], text, uuid, text[], text[], integer);
