-- wmoutbox migration 6: relay heartbeats, idempotency keys, and an
-- aggregate's events newest first.
--
-- Written with the default table name, like migrations 1 to 5.
--
-- Relays record that they are alive as leases named "relay:" followed by
-- their owner (locked_by): a relay renews its own every few seconds, and
-- the claims of one whose lease ran out are handed back at once, rather
-- than when each claim's lease ends. Owners are up to 128 characters:
-- widening a varchar rewrites nothing.
ALTER TABLE outbox_event_lease ALTER COLUMN name TYPE varchar(255);

-- idempotency_key names a write of an event so that writing it again (a
-- command retried by its caller) stores nothing: unique per topic, NULL
-- for events written without one. Adding a nullable column without a
-- default rewrites nothing, and the index holds only the rows with a key.
ALTER TABLE outbox_event ADD COLUMN idempotency_key varchar(255);

CREATE UNIQUE INDEX IF NOT EXISTS outbox_event_idem_key_idx ON outbox_event (topic, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- An aggregate's events, whatever their status, newest first (read
-- backwards): what operators ask of one entity. Partial, so that events
-- without an aggregate id cost nothing.
--
-- CREATE INDEX blocks writes to the table while it reads it. On a large
-- table, create both indexes beforehand with CREATE INDEX CONCURRENTLY,
-- with these names and definitions: IF NOT EXISTS then skips them.
CREATE INDEX IF NOT EXISTS outbox_event_agg_time_idx ON outbox_event
    (aggregate_id, aggregate_type, created_at, event_id)
    WHERE aggregate_id IS NOT NULL;
