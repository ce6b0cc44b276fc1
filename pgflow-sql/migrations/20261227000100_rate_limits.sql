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
alter table pgflow.steps
  add column rate_limit integer
    constraint steps_rate_limit_positive check (rate_limit >= 1),
  add column rate_period_ms integer
    constraint steps_rate_period_positive check (rate_period_ms >= 1),
  add column rate_key_path text[],
  add constraint steps_rate_limit_whole
    check ((rate_limit is null) = (rate_period_ms is null)
           and (rate_key_path is null
                or (cardinality(rate_key_path) >= 1 and rate_limit is not null)));

-- Whether any step is limited: a claim asks once, and pays nothing more when none is.
create index steps_rate_limited_idx on pgflow.steps (flow_slug, step_slug)
  where rate_limit is not null;

-- Each limited step's keys that have met a task. next_wait_at is where the key's queue of
-- waiting tasks ends: a task that finds no token and is new to the wait is scheduled there,
-- and moves it one share of the period (period / limit) on, so waiting tasks come back spread
-- out at the rate they can start and in the order they came, not all at once.
create table pgflow.rate_keys (
  flow_slug text not null,
  step_slug text not null,
  rate_key text not null,
  next_wait_at timestamptz not null default '-infinity',
  primary key (flow_slug, step_slug, rate_key),
  foreign key (flow_slug, step_slug) references pgflow.steps (flow_slug, step_slug)
    on delete cascade
);

-- The tokens of each key, 1 to its limit (a limit lowered later leaves the rows above it
-- unused), each with the time it last let a task start (-infinity: never).
create table pgflow.rate_tokens (
  flow_slug text not null,
  step_slug text not null,
  rate_key text not null,
  token integer not null,
  last_start_at timestamptz not null default '-infinity',
  primary key (flow_slug, step_slug, rate_key, token),
  foreign key (flow_slug, step_slug, rate_key)
    references pgflow.rate_keys (flow_slug, step_slug, rate_key) on delete cascade
);

-- Tasks that met their key without a token, until they start: when their message is due, and
-- how many times they found no token.
create table pgflow.rate_waits (
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  flow_slug text not null,
  rate_key text not null,
  due_at timestamptz not null,
  waited_since timestamptz not null default now(),
  misses integer not null default 1,
  primary key (run_id, step_slug, task_index),
  foreign key (run_id, step_slug, task_index)
    references pgflow.step_tasks (run_id, step_slug, task_index) on delete cascade
);
create index rate_waits_key_idx on pgflow.rate_waits (flow_slug, step_slug, rate_key);
