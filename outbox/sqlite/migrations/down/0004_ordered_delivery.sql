-- Undoes wmoutbox migration 4: drops the aggregate index.

DROP INDEX outbox_event_aggregate_idx;
