-- wmoutbox migration 5: failure groups of DEAD events, and named leases.
--
-- Written with the default table name, like migrations 1 to 4; the lease
-- table is named after the outbox table, with _lease appended.
--
-- error_group is the failure group of last_error, recorded with it: 16
-- hexadecimal characters naming the error once ids, numbers and addresses
-- are replaced by placeholders, so that operators see DEAD events by
-- reason (Store.DeadGroups) and act on one reason at a time. Rows that
-- failed before this migration keep NULL: the group "ungrouped". Adding a
-- nullable column without a default rewrites nothing.
ALTER TABLE outbox_event ADD COLUMN error_group varchar(16);

-- The DEAD events by group, then by when they died: the grouping reads
-- this index alone (topic is carried for the groups' topics), and each
-- group's latest error is one descent. Partial, so that it holds only DEAD
-- rows.
--
-- CREATE INDEX blocks writes to the table while it reads it. On a large
-- table, create both indexes beforehand with CREATE INDEX CONCURRENTLY,
-- with these names and definitions: IF NOT EXISTS then skips them.
CREATE INDEX IF NOT EXISTS outbox_event_dead_group_idx ON outbox_event (error_group, updated_at)
    INCLUDE (topic) WHERE status = 3;

-- The dead-letter page: DEAD events by id, without walking the primary
-- key through every delivered event.
CREATE INDEX IF NOT EXISTS outbox_event_dead_idx ON outbox_event (event_id) WHERE status = 3;

-- Named leases: one process at a time runs what a lease guards (the
-- retention job, Store.Retain), across processes and hosts. A holder
-- renews its lease before until; once until has passed, anyone may take
-- it.
CREATE TABLE outbox_event_lease (
    name  varchar(64)  PRIMARY KEY,
    owner varchar(255) NOT NULL,
    until timestamptz  NOT NULL
);
