-- wmoutbox migration 1: the outbox table and its indexes, for MariaDB 10.6+
-- (tested on 10.11), written to MySQL 8.0's syntax too.
--
-- Written with the default table name; the Go migrator renders another
-- table name in place of outbox_event. Any migration tool can run this file
-- as it is for the default name. IF NOT EXISTS: MySQL commits each DDL
-- statement on its own, so a migration cut short is run again from its
-- start.
--
-- Names and keys are VARBINARY, compared byte for byte: MySQL's _bin
-- collations pad with spaces, so that 'a' = 'a ' and two event ids or
-- topics that differ by trailing spaces would be one. Read them as text
-- with CAST(topic AS CHAR) (the mysql 8 client shows binary strings in hex
-- unless started with --skip-binary-as-hex). Their sizes are the
-- character limits of outbox.Envelope in UTF-8 bytes.
--
-- Times are BIGINT unix microseconds (UTC), as in the SQLite store: exact,
-- ordered, and free of the session time zone and of the driver's
-- parseTime; read them with FROM_UNIXTIME(created_at / 1000000).
--
-- seq numbers the events in the order their inserts ran, across processes
-- whatever their clocks say, for ordered delivery; as the primary key it
-- also keeps the rows in write order on disk.

CREATE TABLE IF NOT EXISTS outbox_event (
    seq            bigint          NOT NULL AUTO_INCREMENT,
    event_id       varbinary(144)  NOT NULL,
    event_type     varbinary(512)  NOT NULL,
    topic          varbinary(1020) NOT NULL,
    aggregate_type varbinary(256)  NOT NULL DEFAULT '__GLOBAL__',
    aggregate_id   varbinary(512),
    tenant_id      varbinary(256),
    -- A BLOB: the payload is delivered byte for byte as written.
    payload        mediumblob      NOT NULL,
    payload_json   boolean         NOT NULL DEFAULT false,
    -- A JSON object of strings, or NULL.
    headers        mediumtext      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    -- 0 NEW, 1 DONE, 2 RETRY, 3 DEAD
    status         tinyint         NOT NULL DEFAULT 0 CHECK (status BETWEEN 0 AND 3),
    -- 1 while the event waits for delivery (NEW or RETRY): the first column
    -- of the due index, so that a claim reads due rows in due order.
    pending        tinyint         AS (status IN (0, 2)) STORED,
    attempts       int             NOT NULL DEFAULT 0,
    occurred_at    bigint          NOT NULL,
    available_at   bigint          NOT NULL,
    created_at     bigint          NOT NULL,
    updated_at     bigint          NOT NULL,
    done_at        bigint,
    last_error     text            CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    locked_by      varbinary(512),
    locked_at      bigint,
    locked_until   bigint,
    PRIMARY KEY (seq),
    UNIQUE KEY outbox_event_id_idx (event_id),
    -- The claim: due rows of a topic in due order.
    KEY outbox_event_due_idx (pending, topic, available_at, event_id),
    -- Operators and purge: DEAD rows by when they died, terminal rows by age.
    KEY outbox_event_finished_idx (status, updated_at),
    -- Ordered claims: the earlier events of an aggregate that are not DONE,
    -- in write order (an index holds the primary key, seq, after its columns).
    KEY outbox_event_aggregate_idx (topic, aggregate_type, aggregate_id, status)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
