-- Durable sleep (issue 37): a step may sleep before it runs, once its dependencies are done,
-- for a fixed time (sleep_seconds) or until a time read from its run (sleep_until_path: the
-- flow input, `input`, or one of its dependencies, then field names; the value is an RFC 3339
-- time). A sleeping step is 'waiting' as one that waits for a signal is: no task, no message,
-- no worker, only its row in pgflow.waits, of kind 'sleep', whose deadline is its wake time.
-- A step sleeps or waits for a signal, not both (a sleep before a wait goes on a step of its
-- own).

alter table pgflow.steps
  add column sleep_seconds integer
    constraint steps_sleep_seconds_positive check (sleep_seconds >= 1),
  add column sleep_until_path text[]
    constraint steps_sleep_until_path_valid
      check (sleep_until_path is null or cardinality(sleep_until_path) >= 1),
  add constraint steps_waits_one_way
    check (num_nonnulls(sleep_seconds, sleep_until_path, signal_name) <= 1);

-- What a wait is for: a signal (by run id or key) or the end of a sleep (its deadline).
alter table pgflow.waits
  alter column signal_name drop not null,
  add column kind text not null default 'signal'
    constraint waits_kind_domain check (kind in ('signal', 'sleep')),
  add constraint waits_kind_fits
    check ((kind = 'signal') = (signal_name is not null)
           and (kind <> 'sleep' or deadline is not null));
