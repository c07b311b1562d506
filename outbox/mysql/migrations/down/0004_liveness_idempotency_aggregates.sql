-- Undoes wmoutbox migration 4: drops both keys and idempotency_key in one
-- statement, which MySQL applies whole or not at all, then narrows the
-- lease names back once the relays' heartbeats are gone.

ALTER TABLE outbox_event
    DROP KEY outbox_event_idem_key_idx,
    DROP KEY outbox_event_agg_time_idx,
    DROP COLUMN idempotency_key;

DELETE FROM outbox_event_lease WHERE name LIKE 'relay:%';

ALTER TABLE outbox_event_lease MODIFY name varbinary(256) NOT NULL;
