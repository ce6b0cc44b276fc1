-- Callback tokens (issue 37): a token stands for one signal of one run, so that an external
-- system (a payment provider, a link in an approval e-mail) can send it with no credentials of
-- its own. A token carries a MAC of its run and signal under this install's secret, made here
-- once and never read outside the database (see signal_token in 18_signals.sql).

create table pgflow.signal_secret (
  singleton boolean primary key default true constraint signal_secret_singleton check (singleton),
  secret bytea not null
);

-- 244 random bits: two version-4 UUIDs (pg_strong_random behind gen_random_uuid).
insert into pgflow.signal_secret (secret)
values (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));
