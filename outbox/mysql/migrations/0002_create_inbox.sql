-- wmoutbox migration 2: the inbox, the events consumers have processed,
-- for MariaDB 10.6+ and MySQL 8.0's syntax, like migration 1.
--
-- Written with the default table name, like migration 1; the inbox is
-- named after the outbox table, with _inbox appended.
--
-- A consumer that deduplicates (middleware.Deduplicate) records each event
-- id here in the transaction of the handler's writes: an event delivered
-- again finds its id and is skipped. Rows are kept until purged
-- (Store.PurgeProcessed), which is how long duplicates are recognised.
-- processed_at is in unix microseconds, like the outbox table's times.

CREATE TABLE IF NOT EXISTS outbox_event_inbox (
    consumer     varbinary(512)  NOT NULL,
    event_id     varbinary(1020) NOT NULL,
    processed_at bigint          NOT NULL,
    PRIMARY KEY (consumer, event_id),
    -- The purge: the oldest records first.
    KEY outbox_event_inbox_idx (processed_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
