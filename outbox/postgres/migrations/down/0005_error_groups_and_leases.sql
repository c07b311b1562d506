-- Undoes wmoutbox migration 5: drops the lease table, the DEAD-by-id
-- index and error_group, which takes the DEAD-by-group index with it.
--
-- Index names are rendered without the schema, so DROP INDEX by name
-- would look in the search path, not in the table's schema: the block
-- qualifies the index with the schema of the table, which is rendered
-- qualified.

DROP TABLE outbox_event_lease;

DO $$
BEGIN
    EXECUTE 'DROP INDEX IF EXISTS '
        || (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'outbox_event'::regclass)
        || '.' || 'outbox_event_dead_idx';
END
$$;

ALTER TABLE outbox_event DROP COLUMN error_group;
