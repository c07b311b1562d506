-- wmoutbox migration 1: the outbox table and its indexes.
--
-- Written with the default table name; the Go migrator renders another
-- schema or table name in place of outbox_event. Any migration tool can run
-- this file as it is for the default name.

CREATE TABLE outbox_event (
    event_id       varchar(36)  PRIMARY KEY,
    event_type     varchar(128) NOT NULL,
    topic          varchar(255) NOT NULL,
    aggregate_type varchar(64)  NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   varchar(128),
    tenant_id      varchar(64),
    -- bytea, not jsonb: the payload is delivered byte for byte as written.
    payload        bytea        NOT NULL,
    payload_json   boolean      NOT NULL DEFAULT false,
    headers        jsonb,
    -- 0 NEW, 1 DONE, 2 RETRY, 3 DEAD
    status         smallint     NOT NULL DEFAULT 0 CHECK (status BETWEEN 0 AND 3),
    attempts       integer      NOT NULL DEFAULT 0,
    occurred_at    timestamptz  NOT NULL,
    available_at   timestamptz  NOT NULL,
    created_at     timestamptz  NOT NULL,
    updated_at     timestamptz  NOT NULL,
    done_at        timestamptz,
    last_error     text,
    locked_by      varchar(128),
    locked_at      timestamptz
);

-- The claim: due rows of a topic in due order. Partial, so it only holds
-- pending rows and stays small however many DONE rows the table keeps.
CREATE INDEX outbox_event_due_idx ON outbox_event (topic, available_at, event_id)
    WHERE status IN (0, 2);

-- Operators and purge: DEAD rows by when they died, terminal rows by age.
CREATE INDEX outbox_event_finished_idx ON outbox_event (status, updated_at)
    WHERE status IN (1, 3);
