-- Undoes wmoutbox migration 6: drops the aggregate index and
-- idempotency_key, which takes its unique index with it, and narrows the
-- lease names back once the relays' heartbeats are gone.
--
-- Index names are rendered without the schema: the block qualifies the
-- index with the schema of the table, as the down of migration 5 does.

DO $$
BEGIN
    EXECUTE 'DROP INDEX IF EXISTS '
        || (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'outbox_event'::regclass)
        || '.' || 'outbox_event_agg_time_idx';
END
$$;

ALTER TABLE outbox_event DROP COLUMN idempotency_key;

DELETE FROM outbox_event_lease WHERE name LIKE 'relay:%';

ALTER TABLE outbox_event_lease ALTER COLUMN name TYPE varchar(64);
