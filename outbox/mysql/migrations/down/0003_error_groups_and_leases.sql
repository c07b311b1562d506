-- Undoes wmoutbox migration 3: drops the lease table, then the DEAD
-- indexes and error_group in one statement, which MySQL applies whole or
-- not at all. Dropping the column alone would leave the group index on
-- its other columns. The lease table goes first, IF EXISTS: a down
-- migration cut short between the two can run again.

DROP TABLE IF EXISTS outbox_event_lease;

ALTER TABLE outbox_event
    DROP KEY outbox_event_dead_group_idx,
    DROP KEY outbox_event_dead_idx,
    DROP COLUMN error_group;
