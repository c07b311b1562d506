-- Undoes wmoutbox migration 6: drops both indexes, then idempotency_key
-- (SQLite drops no column an index holds), and the relays' heartbeats.

DROP INDEX outbox_event_agg_time_idx;

DROP INDEX outbox_event_idem_key_idx;

ALTER TABLE outbox_event DROP COLUMN idempotency_key;

DELETE FROM outbox_event_lease WHERE name LIKE 'relay:%';
