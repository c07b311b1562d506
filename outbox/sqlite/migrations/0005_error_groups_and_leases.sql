-- wmoutbox migration 5: failure groups of DEAD events, and named leases,
-- for SQLite.
--
-- Written with the default table name, like migrations 1 to 4; the lease
-- table is named after the outbox table, with _lease appended.
--
-- error_group is the failure group of last_error, recorded with it: 16
-- hexadecimal characters naming the error once ids, numbers and addresses
-- are replaced by placeholders, so that operators see DEAD events by
-- reason (Store.DeadGroups). Rows that failed before this migration keep
-- NULL: the group "ungrouped".
ALTER TABLE outbox_event ADD COLUMN error_group TEXT CHECK (length(error_group) <= 16);

-- The DEAD events by group, then by when they died, with their topic: the
-- grouping reads this index alone, and each group's latest error is one
-- descent. Partial, so that it holds only DEAD rows; the statements spell
-- out its condition (status = 3), as SQLite's planner requires.
CREATE INDEX outbox_event_dead_group_idx ON outbox_event (error_group, updated_at, topic)
    WHERE status = 3;

-- The dead-letter page: DEAD events by id.
CREATE INDEX outbox_event_dead_idx ON outbox_event (event_id) WHERE status = 3;

-- Named leases: one process at a time runs what a lease guards (the
-- retention job, Store.Retain). until is in unix microseconds, like the
-- outbox table's times.
CREATE TABLE outbox_event_lease (
    name  TEXT    NOT NULL PRIMARY KEY,
    owner TEXT    NOT NULL,
    until INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
