-- The event triggers read the lease table directly now: the helper they called, a SQL function
-- Postgres planned on every call, is gone from the function files.
drop function if exists pgflow.events_followed(text[]);
