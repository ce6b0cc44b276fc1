-- Live events only when someone follows them: a notification serializes its transaction's
-- commit with every other notifying commit of the server (Postgres holds one lock from the
-- notifying commit's pre-commit to its end), which cost starts about 15% of their throughput
-- with nobody listening. Followers say what they follow here, with a lease they renew; the
-- event triggers notify a flow's channel only while one of them holds a live lease on it.
create table pgflow.event_subscribers (
  subscriber_id uuid not null,
  flow_slug text not null,
  expires_at timestamptz not null,
  primary key (subscriber_id, flow_slug)
);

-- The triggers look for a live lease of a flow.
create index event_subscribers_flow_idx on pgflow.event_subscribers (flow_slug, expires_at);
