-- wmoutbox migration 3: failure groups of DEAD events, and named leases,
-- for MariaDB 10.6+ and MySQL 8.0's syntax, like migrations 1 and 2.
--
-- Written with the default table name, like migrations 1 and 2; the lease
-- table is named after the outbox table, with _lease appended.
--
-- Named leases: one process at a time runs what a lease guards (the
-- retention job, Store.Retain). until is in unix microseconds, like the
-- outbox table's times.
CREATE TABLE IF NOT EXISTS outbox_event_lease (
    name  varbinary(256)  NOT NULL,
    owner varbinary(1020) NOT NULL,
    until bigint          NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- error_group is the failure group of last_error, recorded with it: 16
-- hexadecimal characters naming the error once ids, numbers and addresses
-- are replaced by placeholders, so that operators see DEAD events by
-- reason (Store.DeadGroups). Rows that failed before this migration keep
-- NULL: the group "ungrouped".
--
-- MySQL has no partial indexes: status leads both new keys, so that the
-- DEAD rows are one range of each. dead_group serves the grouping and
-- each group's latest error; dead the dead-letter page, by event id.
--
-- One statement, which MySQL applies whole or not at all; the migrator
-- takes a duplicate column or key (a run cut short after it) as applied.
ALTER TABLE outbox_event
    ADD COLUMN error_group varbinary(16),
    ADD KEY outbox_event_dead_group_idx (status, error_group, updated_at, topic),
    ADD KEY outbox_event_dead_idx (status, event_id);
