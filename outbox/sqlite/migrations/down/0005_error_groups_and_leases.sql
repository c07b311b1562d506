-- Undoes wmoutbox migration 5: drops the DEAD indexes first (SQLite
-- cannot drop a column an index holds), then error_group (SQLite 3.35 or
-- later), then the lease table.

DROP INDEX outbox_event_dead_group_idx;

DROP INDEX outbox_event_dead_idx;

ALTER TABLE outbox_event DROP COLUMN error_group;

DROP TABLE outbox_event_lease;
