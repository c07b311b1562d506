-- wmoutbox migration 1: the outbox table and its indexes, for SQLite.
--
-- Written with the default table name; the Go migrator renders another
-- table name in place of outbox_event. Any migration tool can run this file
-- as it is for the default name. Needs SQLite 3.37 or later (STRICT).
--
-- Times are INTEGER unix microseconds (UTC), so that comparisons and
-- ordering are exact and match PostgreSQL's timestamptz resolution.

CREATE TABLE outbox_event (
    event_id       TEXT    NOT NULL PRIMARY KEY,
    event_type     TEXT    NOT NULL,
    topic          TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   TEXT,
    tenant_id      TEXT,
    -- BLOB: the payload is delivered byte for byte as written.
    payload        BLOB    NOT NULL,
    payload_json   INTEGER NOT NULL DEFAULT 0 CHECK (payload_json IN (0, 1)),
    -- A JSON object of strings, or NULL.
    headers        TEXT,
    -- 0 NEW, 1 DONE, 2 RETRY, 3 DEAD
    status         INTEGER NOT NULL DEFAULT 0 CHECK (status BETWEEN 0 AND 3),
    attempts       INTEGER NOT NULL DEFAULT 0,
    occurred_at    INTEGER NOT NULL,
    available_at   INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    done_at        INTEGER,
    last_error     TEXT,
    locked_by      TEXT,
    locked_at      INTEGER
) STRICT;

-- The claim: due rows of a topic in due order. Partial, so it only holds
-- pending rows and stays small however many DONE rows the table keeps.
CREATE INDEX outbox_event_due_idx ON outbox_event (topic, available_at, event_id)
    WHERE status IN (0, 2);

-- Operators and purge: DEAD rows by when they died, terminal rows by age.
CREATE INDEX outbox_event_finished_idx ON outbox_event (status, updated_at)
    WHERE status IN (1, 3);
