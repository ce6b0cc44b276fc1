-- Rate limits (issue 38): a step may limit how many of its tasks start per period across every
-- worker and process (rate_limit starts per rate_period_ms milliseconds), per key when
-- rate_key_path names where the key is read (as concurrency_key_path does).
--
-- Every attempt counts: a first start, a retry, a requeue after its worker died. The limit is
-- kept where every attempt passes, the claim: a claimed task of a limited step takes a token
-- of its key (a row of rate_tokens: a key has one row per unit of its limit, each holding the
-- time it last let a task start) whose last start is at least a period ago. A task that finds
-- none does not start and spends no attempt: it gets a new message, visible when the key is
-- due to have a token for it, and is listed in rate_waits until it starts. So each token lets
-- at most one start through per period, and a key at most rate_limit starts in any period.
--
-- A key belongs to the flow's alias (its scope, as a start guard's), not to one version: the
-- versions of a flow that run side by side during a rollout share the limit of a step of the
-- same name.
alter table pgflow.steps
  add column rate_limit integer
    constraint steps_rate_limit_range check (rate_limit between 1 and 10000),
  add column rate_period_ms integer
    constraint steps_rate_period_positive check (rate_period_ms >= 1),
  add column rate_key_path text[],
  add constraint steps_rate_limit_whole
    check ((rate_limit is null) = (rate_period_ms is null)
           and (rate_key_path is null
                or (cardinality(rate_key_path) >= 1 and rate_limit is not null)));

-- The limited steps by queue: a claim asks whether its queue has one, and pays nothing more when
-- it has none.
create index steps_rate_limited_queue_idx on pgflow.steps (queue_name)
  where rate_limit is not null;

-- Each limited step's keys that have met a task, with the limit and period its last claim
-- read (for what `pgflow status` shows and when an idle key is dropped).
create table pgflow.rate_keys (
  scope text not null,
  step_slug text not null,
  rate_key text not null,
  rate_limit integer not null,
  rate_period_ms integer not null,
  primary key (scope, step_slug, rate_key)
);

-- The tokens of each key, 1 to its limit, each with the time it last let a task start
-- (-infinity: never) and, when a waiting task was sent for it, when that task is due (it
-- comes when the token is free again). A lowered limit keeps the latest starts on the first
-- tokens and drops the rest.
create table pgflow.rate_tokens (
  scope text not null,
  step_slug text not null,
  rate_key text not null,
  token integer not null,
  last_start_at timestamptz not null default '-infinity',
  reserved_due timestamptz,
  primary key (scope, step_slug, rate_key, token),
  foreign key (scope, step_slug, rate_key)
    references pgflow.rate_keys (scope, step_slug, rate_key) on delete cascade
);
-- A key's free tokens with no task sent for them, the longest unused first.
create index rate_tokens_unreserved_idx
  on pgflow.rate_tokens (scope, step_slug, rate_key, last_start_at)
  where reserved_due is null;

-- Tasks that met their key without a token, until they start, in the order they came
-- (wait_seq). A task waits without a message (due_at null) until a token is reserved for it;
-- then it has a message, due when that token is free again (due_at, token).
create table pgflow.rate_waits (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  scope text not null,
  rate_key text not null,
  wait_seq bigint generated always as identity,
  due_at timestamptz,
  token integer,
  waited_since timestamptz not null default now(),
  misses integer not null default 1,
  primary key (run_id, step_slug, task_index),
  foreign key (run_id, step_slug, task_index)
    references pgflow.step_tasks (run_id, step_slug, task_index) on delete cascade,
  constraint rate_waits_sent_whole check ((due_at is null) = (token is null))
);
-- The line of each key: the tasks not sent yet, in the order they came.
create index rate_waits_line_idx on pgflow.rate_waits (scope, step_slug, rate_key, wait_seq)
  where due_at is null;
-- The task sent for a token, found from the token.
create index rate_waits_sent_idx on pgflow.rate_waits (scope, step_slug, rate_key, token)
  where token is not null;
