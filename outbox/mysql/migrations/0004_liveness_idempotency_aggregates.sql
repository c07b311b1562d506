-- wmoutbox migration 4: relay heartbeats, idempotency keys, and an
-- aggregate's events newest first, for MariaDB 10.6+ and MySQL 8.0's
-- syntax, like migrations 1 to 3.
--
-- Written with the default table name, like migrations 1 to 3.
--
-- Relays record that they are alive as leases named "relay:" followed by
-- their owner (locked_by, up to 512 bytes): a relay renews its own every
-- few seconds, and the claims of one whose lease ran out are handed back
-- at once, rather than when each claim's lease ends.
ALTER TABLE outbox_event_lease MODIFY name varbinary(520) NOT NULL;

-- idempotency_key names a write of an event so that writing it again (a
-- command retried by its caller) stores nothing: unique per topic, NULL
-- (which a unique key never matches) for events written without one.
--
-- agg_time: an aggregate's events, whatever their status, newest first
-- (read backwards): what operators ask of one entity.
--
-- One statement, which MySQL applies whole or not at all; the migrator
-- takes a duplicate column or key (a run cut short after it) as applied.
ALTER TABLE outbox_event
    ADD COLUMN idempotency_key varbinary(1020),
    ADD UNIQUE KEY outbox_event_idem_key_idx (topic, idempotency_key),
    ADD KEY outbox_event_agg_time_idx (aggregate_id, aggregate_type, created_at, event_id);
