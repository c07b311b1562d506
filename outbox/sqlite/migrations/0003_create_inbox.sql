-- wmoutbox migration 3: the inbox, the events consumers have processed,
-- for SQLite.
--
-- Written with the default table name, like migrations 1 and 2; the inbox
-- is named after the outbox table, with _inbox appended.
--
-- A consumer that deduplicates (middleware.Deduplicate) records each event
-- id here in the transaction of the handler's writes: an event delivered
-- again finds its id and is skipped. Rows are kept until purged
-- (Store.PurgeProcessed), which is how long duplicates are recognised.
-- processed_at is in unix microseconds, like the outbox table's times.

CREATE TABLE outbox_event_inbox (
    consumer     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
) STRICT, WITHOUT ROWID;

-- The purge: the oldest records first.
CREATE INDEX outbox_event_inbox_idx ON outbox_event_inbox (processed_at);
