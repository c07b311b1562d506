-- wmoutbox migration 6: idempotency keys and an aggregate's events newest
-- first, for SQLite.
--
-- Written with the default table name, like migrations 1 to 5. Relays
-- record that they are alive as leases named "relay:" followed by their
-- owner, in the lease table of migration 5, whose names have no length
-- limit here.
--
-- idempotency_key names a write of an event so that writing it again (a
-- command retried by its caller) stores nothing: unique per topic, NULL
-- for events written without one.
ALTER TABLE outbox_event ADD COLUMN idempotency_key TEXT CHECK (length(idempotency_key) <= 255);

-- Partial, so that it holds only the rows with a key; the statements
-- spell out its condition, as SQLite's planner requires.
CREATE UNIQUE INDEX outbox_event_idem_key_idx ON outbox_event (topic, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- An aggregate's events, whatever their status, newest first (read
-- backwards): what operators ask of one entity. Partial, so that events
-- without an aggregate id cost nothing.
CREATE INDEX outbox_event_agg_time_idx ON outbox_event
    (aggregate_id, aggregate_type, created_at, event_id)
    WHERE aggregate_id IS NOT NULL;
