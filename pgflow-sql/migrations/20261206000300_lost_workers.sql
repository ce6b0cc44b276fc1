-- Lost workers: a worker that stops sending heartbeats without stopping (SIGKILL, a lost host)
-- is declared lost by the workers' maintenance sweep once it has been silent for ten of its
-- heartbeat intervals, and at least 60 s (`mark_lost_workers`). Declaring it lost also stops
-- and deprecates it: everything that counts live workers stops counting it, a worker that
-- comes back is told to drain and stop, and retention prunes it like a stopped one.
--
-- Each worker records its heartbeat interval, so `register_worker` gains an argument; its old
-- signature is dropped here and the functions file creates the new one.

alter table pgflow.workers
  add column heartbeat_interval_ms integer
    constraint workers_heartbeat_interval_positive check (heartbeat_interval_ms >= 1),
  add column lost_at timestamptz,
  add constraint workers_lost_is_stopped check (lost_at is null or stopped_at is not null);

drop function if exists pgflow.register_worker(uuid, text, text, text[]);
